"""Ed25519 signatures (library ``cryptography``) over canonical statements, and the keyring.

A *statement* is a small JSON object with a ``type`` (``"sagacity.checkpoint.v1"``,
``"sagacity.decision.v1"``) and named fields; the signed bytes are its RFC 8785 canonical
encoding (the same encoder as the journal), so anyone can rebuild them from an export.

Keys live in files the operator configures, never in the journal database: a keyring directory
holds ``KEY_ID.pub`` (PEM SubjectPublicKeyInfo: verify) and, on a host that signs,
``KEY_ID.key`` (PEM PKCS#8, unencrypted: sign). The key id travels with every signature, so keys
rotate: make a new pair (:func:`generate_key`, ``sagacity audit keygen``), move the old private
key away, and keep the old public key to verify what it signed.

An optional ``ADMINS`` file in the directory names, one per line (``#`` starts a comment), the
keyring-admin keys (``core.key_roles``): the only keys whose keyring events (roles,
revocations) count. Naming them out of band is what keeps a journal entry from making its own
signer an admin. Their private keys belong offline.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, SignatureError
from .canonical import encode_canonical, to_canonical_value

__all__ = ["ADMINS_FILE", "Keyring", "generate_key", "read_admins", "signed_record_problem", "statement_bytes"]

ADMINS_FILE = "ADMINS"
"""The keyring directory's file naming its keyring-admin keys, one key id per line."""

_KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _crypto() -> Any:
    # Imported when keys are used: the journal alone does not need the library loaded.
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ed25519  # noqa: PLC0415

    return serialization, ed25519


def statement_bytes(kind: str, fields: Mapping[str, Any]) -> bytes:
    """The bytes a signature covers: RFC 8785 JSON of ``{"type": kind, **fields}``.

    Raises:
        EncodingError: a field has no canonical encoding.
    """
    return encode_canonical(to_canonical_value({"type": kind, **fields}))


class Keyring:
    """Verify keys by key id, and at most one signing key.

    Args:
        verify_keys: key id -> Ed25519 public key (``cryptography`` object).
        signing_key: ``(key_id, Ed25519 private key)`` for a host that signs, else ``None``. Its
            public key is added to the verify keys.
        admin_keys: the keyring-admin key ids (:data:`ADMINS_FILE`); keys of the keyring.

    Raises:
        ConfigurationError: a key id is not 1-64 of ``A-Za-z0-9._-`` (starting alphanumeric),
            or an admin key is not a verify key.
    """

    def __init__(self, verify_keys: Mapping[str, Any] | None = None,
                 signing_key: tuple[str, Any] | None = None, admin_keys: Iterable[str] = ()) -> None:
        self.verify_keys: dict[str, Any] = dict(verify_keys or {})
        self.signing_key = signing_key
        if signing_key is not None:
            self.verify_keys.setdefault(signing_key[0], signing_key[1].public_key())
        for key_id in self.verify_keys:
            if not _KEY_ID.fullmatch(key_id):
                raise ConfigurationError(f"bad key id {key_id!r}: 1-64 of A-Za-z0-9._- expected")
        self.admin_keys: frozenset[str] = frozenset(admin_keys)
        unknown = sorted(self.admin_keys - set(self.verify_keys))
        if unknown:
            raise ConfigurationError(f"admin key(s) {', '.join(map(repr, unknown))} have no public key in the keyring")

    @classmethod
    def load(cls, directory: str | Path, *, signing_key_id: str | None = None) -> Keyring:
        """Load every ``*.pub`` of ``directory`` as a verify key and one ``*.key`` to sign with.

        Args:
            directory: the keyring directory.
            signing_key_id: which ``KEY_ID.key`` signs; ``None``: the only ``*.key`` there, if
                exactly one (none: this host verifies only).

        Raises:
            ConfigurationError: the directory does not exist, a file is not an Ed25519 key in PEM,
                several ``*.key`` files and no ``signing_key_id``, that key is missing, the
                signing key's ``.pub`` file holds another public key, or :data:`ADMINS_FILE`
                names a key without a ``.pub``.
        """
        serialization, ed25519 = _crypto()
        root = Path(directory)
        if not root.is_dir():
            raise ConfigurationError(f"keyring {str(root)!r} is not a directory")

        def read(path: Path, private: bool) -> Any:
            try:
                data = path.read_bytes()
                key = (serialization.load_pem_private_key(data, password=None) if private
                       else serialization.load_pem_public_key(data))
            except (OSError, ValueError, TypeError) as exc:
                raise ConfigurationError(f"cannot read key {str(path)!r}: {exc}") from exc
            wanted = ed25519.Ed25519PrivateKey if private else ed25519.Ed25519PublicKey
            if not isinstance(key, wanted):
                raise ConfigurationError(f"{str(path)!r} is not an Ed25519 key")
            return key

        verify = {p.stem: read(p, False) for p in sorted(root.glob("*.pub"))}
        private = sorted(root.glob("*.key"))
        if signing_key_id is None and len(private) > 1:
            raise ConfigurationError(
                f"keyring {str(root)!r} holds several private keys "
                f"({', '.join(p.stem for p in private)}): name the one to sign with"
            )
        signing = None
        if signing_key_id is not None:
            path = root / f"{signing_key_id}.key"
            if not path.exists():
                raise ConfigurationError(f"no private key {signing_key_id!r} in keyring {str(root)!r}")
            signing = (signing_key_id, read(path, True))
        elif private:
            signing = (private[0].stem, read(private[0], True))
        if signing is not None and signing[0] in verify:
            raw = serialization.Encoding.Raw, serialization.PublicFormat.Raw
            if verify[signing[0]].public_bytes(*raw) != signing[1].public_key().public_bytes(*raw):
                # Everything this host signed would then fail to verify, and every saga it
                # checkpointed would be refused from then on.
                raise ConfigurationError(
                    f"keyring {str(root)!r}: {signing[0]}.pub is not the public key of "
                    f"{signing[0]}.key; restore the matching pair"
                )
        return cls(verify, signing, read_admins(root))

    @property
    def can_sign(self) -> bool:
        """Whether this keyring holds a signing key."""
        return self.signing_key is not None

    def sign(self, kind: str, fields: Mapping[str, Any]) -> tuple[str, str]:
        """Sign the statement ``kind`` with ``fields`` (which must include ``key_id``).

        Returns:
            ``(key_id, signature)``, the signature base64 (standard alphabet, padded).

        Raises:
            ConfigurationError: no signing key, or ``fields["key_id"]`` is not its id.
        """
        if self.signing_key is None:
            raise ConfigurationError("this keyring has no signing key")
        key_id, key = self.signing_key
        if fields.get("key_id") != key_id:
            raise ConfigurationError(f"statement names key {fields.get('key_id')!r}, signing key is {key_id!r}")
        return key_id, base64.b64encode(key.sign(statement_bytes(kind, fields))).decode("ascii")

    def verify(self, kind: str, fields: Mapping[str, Any], signature: str) -> None:
        """Check ``signature`` over the statement, with the key named by ``fields["key_id"]``.

        Raises:
            SignatureError: unknown key id, malformed signature, or the signature does not verify.
        """
        from cryptography.exceptions import InvalidSignature  # noqa: PLC0415

        key_id = fields.get("key_id")
        key = self.verify_keys.get(key_id) if isinstance(key_id, str) else None
        if key is None:
            raise SignatureError(f"signed with unknown key {key_id!r}")
        try:
            key.verify(base64.b64decode(signature, validate=True), statement_bytes(kind, fields))
        except (InvalidSignature, ValueError, TypeError) as exc:
            raise SignatureError(f"signature by key {key_id!r} does not verify") from exc


def read_admins(directory: str | Path) -> frozenset[str]:
    """The key ids :data:`ADMINS_FILE` of ``directory`` names (none: no file).

    Raises:
        ConfigurationError: the file cannot be read, or a line is not a key id.
    """
    path = Path(directory) / ADMINS_FILE
    if not path.exists():
        return frozenset()
    try:
        lines = path.read_text("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"cannot read {str(path)!r}: {exc}") from exc
    names = [line.split("#", 1)[0].strip() for line in lines]
    bad = [n for n in names if n and not _KEY_ID.fullmatch(n)]
    if bad:
        raise ConfigurationError(f"{str(path)!r}: {bad[0]!r} is not a key id")
    return frozenset(n for n in names if n)


def generate_key(directory: str | Path, key_id: str) -> tuple[Path, Path]:
    """Make a new Ed25519 key pair ``KEY_ID.key`` (mode 0600) and ``KEY_ID.pub`` in ``directory``.

    Returns:
        The private and public key paths.

    Raises:
        ConfigurationError: a bad key id, or a key with that id exists already.
    """
    serialization, ed25519 = _crypto()
    if not _KEY_ID.fullmatch(key_id):
        raise ConfigurationError(f"bad key id {key_id!r}: 1-64 of A-Za-z0-9._- expected")
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    private_path, public_path = root / f"{key_id}.key", root / f"{key_id}.pub"
    if private_path.exists() or public_path.exists():
        raise ConfigurationError(f"key {key_id!r} exists already in {str(root)!r}")
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    public_path.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return private_path, public_path


def signed_record_problem(
    keyring: Keyring, kind: str, what: str, signed: Any,
    fields: Callable[[str, str], Mapping[str, Any]], allowed: frozenset[str] | None,
) -> str | None:
    """Why a journaled signature record ``{"key_id", "time", "signature"}`` does not verify, or
    ``None`` (a human's signed decision or answer: ``core.evidence``, ``core.authenticity``).

    Args:
        keyring: the verify keys.
        kind: the statement type the signature covers.
        what: how the record is named in the problem ("decision", "resolution").
        signed: the record as journaled (anything: it is checked).
        fields: ``fields(time, key_id)``: the statement's fields, rebuilt from the entry.
        allowed: key ids that may sign such records (``None``: any key of the keyring).
    """
    if not isinstance(signed, dict) or not all(isinstance(signed.get(k), str)
                                               for k in ("key_id", "time", "signature")):
        return f"malformed {what} signature"
    if allowed is not None and signed["key_id"] not in allowed:
        return f"{what} signed with key {signed['key_id']!r}, which may not sign decisions"
    try:
        keyring.verify(kind, fields(signed["time"], signed["key_id"]), signed["signature"])
    except SignatureError as exc:
        return f"{what}: {exc}"
    return None
