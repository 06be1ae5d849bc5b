"""The keys that commit, seal and shred a saga's sensitive values (crypto-shredding).

The hierarchy (docs/sensitive-data.md):

* the **master key**: 32 bytes the application configures (``SAGACITY_DATA_KEY``), never stored
  by this library and never one of the Ed25519 signing keys. Its only job is to wrap data keys
  (HKDF-SHA256, info ``sagacity.v1.wrap``); older master keys listed in
  ``SAGACITY_DATA_KEY_PREVIOUS`` still unwrap (rotation);
* one **data key** per saga (and generation): 32 random bytes, stored only wrapped (AES-GCM,
  associated data = journal id, saga id, generation) in the journal's data-key store. Destroying
  the wrapped copy (:meth:`DataKeyStore.erase_data_keys`) makes every sealed value of the saga
  unrecoverable, master key or not, while the hash chain and the tags (which cover only
  commitments) still verify;
* per-purpose keys derived from the data key by HKDF-SHA256 (RFC 5869): ``commit`` (HMAC-SHA256
  commitments in the hashed bytes), ``values`` (AES-GCM of each value, bound to journal id, saga
  id, the entry's write key, the value's path and its commitment), ``snapshot`` (stored RunState
  snapshots), ``approval-args`` (an approval request's clear arguments).

With no master key, a saga's data key lives only in this process's memory: values are committed
and masked, never stored (``SagaSecrets.stored`` is false).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ..errors import ConfigurationError, DataErasedError, DataKeyError
from .canonical import encode_canonical, to_canonical_value
from .identity import journal_id_of
from .sensitive import (
    MIN_KNOWN_LENGTH, SENSITIVE_KEY, Found, Sensitivity, has_committed, is_committed, pointer,
    redact,
)

__all__ = [
    "DATA_KEY_ENVVAR", "PREVIOUS_DATA_KEYS_ENVVAR", "DataKeyStore", "DataKeys", "MasterKey",
    "SNAPSHOT_ENVELOPE_KEY", "SagaSecrets", "StoredDataKey", "is_sealed_text", "master_key_configured",
    "parse_master_key",
]

DATA_KEY_ENVVAR = "SAGACITY_DATA_KEY"
"""Environment variable holding the master key: base64 (standard or URL-safe) of 32 bytes, or
64 hex digits."""

PREVIOUS_DATA_KEYS_ENVVAR = "SAGACITY_DATA_KEY_PREVIOUS"
"""Environment variable listing older master keys (comma-separated), used only to unwrap data
keys wrapped before a rotation (``sagacity journal rewrap-keys``)."""

_KEY_BYTES = 32
_NONCE_BYTES = 12  # AES-GCM's standard nonce (NIST SP 800-38D, 8.2.2: random 96-bit nonces)
_SEALED_VERSION = 1
SNAPSHOT_ENVELOPE_KEY = "sagacity.sealed_snapshot"


def _hkdf(secret: bytes, info: bytes) -> bytes:
    """A 32-byte key for one purpose (HKDF-SHA256, RFC 5869; no salt: ``secret`` is uniform)."""
    return HKDF(algorithm=hashes.SHA256(), length=_KEY_BYTES, salt=None, info=info).derive(secret)


def _aad(*parts: Any) -> bytes:
    """Associated data: the RFC 8785 bytes of ``parts`` as a JSON array."""
    return encode_canonical(to_canonical_value(list(parts)))


def parse_master_key(text: str) -> bytes:
    """The 32 bytes a master key's text stands for (64 hex digits, or base64 / URL-safe base64).

    Raises:
        ConfigurationError: any other text, or a length other than 32 bytes.
    """
    text = text.strip()
    raw: bytes | None = None
    if len(text) == 64:
        try:
            raw = bytes.fromhex(text)
        except ValueError:
            raw = None
    if raw is None:
        try:
            raw = base64.b64decode(text.replace("-", "+").replace("_", "/") + "=" * (-len(text) % 4),
                                   validate=True)
        except (binascii.Error, ValueError):
            raw = None
    if raw is None or len(raw) != _KEY_BYTES:
        raise ConfigurationError(
            f"{DATA_KEY_ENVVAR} must be 32 random bytes as base64 or 64 hex digits "
            "(e.g. python -c \"import os,base64;print(base64.b64encode(os.urandom(32)).decode())\")")
    return raw


class MasterKey:
    """The application's master key: wraps and unwraps data keys, nothing else.

    Args:
        secret: 32 bytes (``parse_master_key`` reads them from text).

    Raises:
        ConfigurationError: ``secret`` is not 32 bytes.
    """

    __slots__ = ("_wrap", "key_id")

    def __init__(self, secret: bytes) -> None:
        if not isinstance(secret, bytes) or len(secret) != _KEY_BYTES:
            raise ConfigurationError("a master data key is exactly 32 bytes")
        self._wrap = AESGCM(_hkdf(secret, b"sagacity.v1.wrap"))
        self.key_id: str = _hkdf(secret, b"sagacity.v1.key-id")[:8].hex()
        """16 hex digits naming this master key (stored beside each data key it wrapped)."""

    def __repr__(self) -> str:
        return f"MasterKey(key_id={self.key_id!r})"

    @classmethod
    def from_text(cls, text: str) -> MasterKey:
        """The master key ``text`` names (:func:`parse_master_key`)."""
        return cls(parse_master_key(text))

    def wrap(self, journal_id: str, saga_id: str, generation: int, data_key: bytes,
             nonce: bytes) -> bytes:
        """``nonce || AES-GCM(data_key)``, bound to the journal, saga and generation."""
        return nonce + self._wrap.encrypt(
            nonce, data_key, _aad("sagacity.data-key.v1", journal_id, saga_id, generation))

    def unwrap(self, journal_id: str, saga_id: str, generation: int, wrapped: bytes) -> bytes:
        """The data key ``wrapped`` holds.

        Raises:
            DataKeyError: ``WRONG_MASTER_KEY``: not wrapped by this key for this journal, saga and
                generation (or edited).
        """
        try:
            return self._wrap.decrypt(wrapped[:_NONCE_BYTES], wrapped[_NONCE_BYTES:],
                                      _aad("sagacity.data-key.v1", journal_id, saga_id, generation))
        except (InvalidTag, ValueError) as exc:
            raise DataKeyError(
                f"saga {saga_id!r}: its data key (generation {generation}) does not open under "
                f"master key {self.key_id}", code="WRONG_MASTER_KEY") from exc


def _env_keys(environ: Mapping[str, str]) -> tuple[MasterKey | None, tuple[MasterKey, ...]]:
    current = environ.get(DATA_KEY_ENVVAR, "").strip()
    previous = [p for p in environ.get(PREVIOUS_DATA_KEYS_ENVVAR, "").split(",") if p.strip()]
    return (MasterKey.from_text(current) if current else None,
            tuple(MasterKey.from_text(p) for p in previous))


def master_key_configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``SAGACITY_DATA_KEY`` is set (not checked for validity: :class:`DataKeys` does)."""
    return bool((os.environ if environ is None else environ).get(DATA_KEY_ENVVAR, "").strip())


@dataclass(frozen=True, slots=True)
class StoredDataKey:
    """One saga's data key as its store holds it (wrapped; ``wrapped`` is ``None`` once erased)."""

    saga_id: str
    generation: int
    master_key_id: str | None
    wrapped: bytes | None
    created_at: str
    erased_at: str | None = None
    erased_by: str | None = None
    reason: str | None = None


@runtime_checkable
class DataKeyStore(Protocol):
    """Where a journal keeps its sagas' wrapped data keys (memory, SQLite, PostgreSQL)."""

    async def data_keys(self, saga_id: str) -> list[StoredDataKey]:
        """Every generation of ``saga_id``'s key, oldest first (erased ones included)."""
        ...

    async def add_data_key(self, saga_id: str, generation: int, master_key_id: str,
                           wrapped: bytes) -> StoredDataKey:
        """Store a wrapped key unless that generation exists; return the stored row (ours or a
        concurrent writer's), durable before returning."""
        ...

    async def erase_data_keys(self, saga_id: str, *, by: str, reason: str) -> int:
        """Destroy every wrapped key of ``saga_id`` (tombstones stay); the number erased."""
        ...

    async def may_erase_data_keys(self) -> bool:
        """Whether this connection may erase (PostgreSQL: the eraser role's DELETE privilege),
        asked before the erasure is logged, so the access log never names one refused."""
        ...


class _Secrets:
    """One data key's per-purpose keys (commit, values, snapshot, approval args), each derived
    on first use: an HKDF and an AES-GCM object cost tens of microseconds, and a saga without a
    master key only ever commits. Indexed like a tuple; two threads deriving at once compute
    the same key."""

    __slots__ = ("_data_key", "_keys")
    _INFOS = (b"sagacity.v1.commit", b"sagacity.v1.values", b"sagacity.v1.snapshot",
              b"sagacity.v1.approval-args")

    def __init__(self, data_key: bytes) -> None:
        self._data_key = data_key
        self._keys: list[Any] = [None] * len(self._INFOS)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self._INFOS))))
        key = self._keys[index]
        if key is None:
            raw = _hkdf(self._data_key, self._INFOS[index])
            key = self._keys[index] = raw if index == 0 else AESGCM(raw)
        return key


def _derive(data_key: bytes) -> _Secrets:
    return _Secrets(data_key)


@dataclass(eq=False)
class SagaSecrets:
    """One saga's keys in this process: commits, seals and opens its sensitive values.

    Built by :meth:`DataKeys.secrets_for`; thread-safe (a sync tool's appends run in a worker
    thread).
    """

    journal_id: str
    saga_id: str
    generation: int
    """The generation new values are committed and sealed under."""
    stored: bool
    """Values are sealed and stored (a master key is configured and the journal stores keys)."""
    random_bytes: Callable[[int], bytes] = os.urandom
    keys: dict[int, _Secrets] = field(default_factory=dict)
    """Derived keys by generation (the ones this process could open)."""
    erased: frozenset[int] = frozenset()
    """Generations whose data key was erased."""
    known: set[str] = field(default_factory=set)
    """Clear sensitive strings this saga has found, searched for inside later free text."""
    after_erasure: bool = False
    """The current generation was made after an erasure (a late outcome's): reported."""

    def _secrets(self, generation: int) -> _Secrets:
        if generation in self.erased:
            raise DataErasedError(f"saga {self.saga_id!r}: its sensitive values were erased")
        try:
            return self.keys[generation]
        except KeyError:
            raise DataKeyError(
                f"saga {self.saga_id!r}: no data key of generation {generation} in this process "
                f"(set {DATA_KEY_ENVVAR})", code="NO_MASTER_KEY") from None

    def commit(self, value: Any) -> str:
        """HMAC-SHA256 of ``value``'s RFC 8785 bytes under the current commit key (64 hex)."""
        return hmac.digest(self._secrets(self.generation)[0], encode_canonical(value),
                           "sha256").hex()

    def learn(self, found: Iterable[Found]) -> None:
        """Remember the clear strings of ``found`` taken whole (at least
        ``core.sensitive.MIN_KNOWN_LENGTH`` characters): later free text of the saga masks them
        (an exception quoting the password). A text masked only in part is not remembered, or a
        later text quoting it would be masked whole."""
        for item in found:
            if item.whole and type(item.value) is str and len(item.value) >= MIN_KNOWN_LENGTH:
                self.known.add(item.value)

    def protect(self, payload: Any, spec: Sensitivity, write_key: str) -> tuple[Any, bytes | None]:
        """``payload`` (canonical form) with its sensitive values committed, and the sealed
        bytes holding them (``None`` when none was found or values are not stored).

        Raises:
            DataKeyError: the current generation's key is not in this process.
        """
        commitments: dict[bytes, str] = {}

        def commit(value: Any) -> str:
            data = encode_canonical(value)
            if data not in commitments:
                commitments[data] = hmac.digest(self._secrets(self.generation)[0], data,
                                                "sha256").hex()
            return commitments[data]

        new, found = redact(payload, spec, commit, known=tuple(self.known) if self.known else (),
                            generation=self.generation)
        if not found:
            return payload, None
        self.learn(found)
        if not self.stored:
            return new, None
        values_key = self._secrets(self.generation)[1]
        sealed: dict[str, str] = {}
        for item in found:
            path = pointer(item.path)
            data = encode_canonical(item.value)
            nonce = self.random_bytes(_NONCE_BYTES)
            aad = _aad("sagacity.value.v1", self.journal_id, self.saga_id, write_key, path,
                       commitments[data])
            sealed[path] = base64.b64encode(nonce + values_key.encrypt(nonce, data, aad)).decode()
        return new, encode_canonical({"v": _SEALED_VERSION, "key": self.generation, "values": sealed})

    def reveal(self, payload: Any, sealed: bytes | None, write_key: str) -> Any:
        """``payload`` with each committed value whose sealed value is stored put back in clear.

        Committed values with nothing sealed (written without a master key) stay committed: see
        ``core.sensitive.masked``.

        Raises:
            DataErasedError: the payload holds committed values of an erased generation.
            DataKeyError: ``NO_MASTER_KEY`` (the key is not in this process),
                ``SEALED_MISMATCH`` (sealed bytes that do not open at their place, or whose
                value does not match its commitment: edited or moved).
        """
        if sealed is None:
            if has_committed(payload) and self.erased:
                self._secrets(min(self.erased))  # raises DataErasedError
            return payload
        try:
            blob = json.loads(sealed)
            generation, values = int(blob["key"]), dict(blob["values"])
        except (ValueError, KeyError, TypeError) as exc:
            raise DataKeyError(f"saga {self.saga_id!r}: unreadable sealed values under "
                               f"write key {write_key!r}", code="SEALED_MISMATCH") from exc
        commit_key, values_key = self._secrets(generation)[:2]
        out = payload
        for path, text in values.items():
            out = _put(out, path, self._open(commit_key, values_key, write_key, out, path, text))
        return out

    def _open(self, commit_key: bytes, values_key: AESGCM, write_key: str, payload: Any,
              path: str, text: str) -> Any:
        committed = _get(payload, path)
        if not is_committed(committed):
            raise DataKeyError(f"saga {self.saga_id!r}: a sealed value at {path} under write key "
                               f"{write_key!r} has no commitment there", code="SEALED_MISMATCH")
        raw = base64.b64decode(text)
        aad = _aad("sagacity.value.v1", self.journal_id, self.saga_id, write_key, path,
                   committed[SENSITIVE_KEY])
        try:
            data = values_key.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], aad)
        except (InvalidTag, ValueError) as exc:
            raise DataKeyError(f"saga {self.saga_id!r}: the sealed value at {path} under write "
                               f"key {write_key!r} does not open there", code="SEALED_MISMATCH") from exc
        if not hmac.compare_digest(hmac.digest(commit_key, data, "sha256").hex(),
                                   committed[SENSITIVE_KEY]):
            raise DataKeyError(f"saga {self.saga_id!r}: the value at {path} does not match its "
                               "commitment", code="SEALED_MISMATCH")
        return json.loads(data)

    def seal_text(self, purpose: str, text: str) -> str:
        """``text`` encrypted for ``purpose`` (``"snapshot"`` or ``"approval-args"``), as a JSON
        envelope bound to the journal, saga and purpose.

        Raises:
            DataKeyError: ``NOT_STORED``: values are not stored (no master key).
        """
        if not self.stored:
            raise DataKeyError(f"saga {self.saga_id!r}: nothing can be stored encrypted without "
                               f"{DATA_KEY_ENVVAR}", code="NOT_STORED")
        box = self._box(purpose, self.generation)
        nonce = self.random_bytes(_NONCE_BYTES)
        ct = box.encrypt(nonce, text.encode("utf-8"),
                         _aad("sagacity.text.v1", purpose, self.journal_id, self.saga_id))
        return json.dumps({SNAPSHOT_ENVELOPE_KEY: 1, "purpose": purpose, "key": self.generation,
                           "nonce": base64.b64encode(nonce).decode(),
                           "ct": base64.b64encode(ct).decode()}, sort_keys=True)

    def open_text(self, purpose: str, envelope: str) -> str:
        """The text :meth:`seal_text` sealed.

        Raises:
            DataErasedError, DataKeyError: as :meth:`reveal` (``SEALED_MISMATCH``: not an
                envelope of this journal, saga and purpose).
        """
        try:
            box_doc = json.loads(envelope)
            generation = int(box_doc["key"])
            nonce, ct = base64.b64decode(box_doc["nonce"]), base64.b64decode(box_doc["ct"])
        except (ValueError, KeyError, TypeError) as exc:
            raise DataKeyError("not a sealed text", code="SEALED_MISMATCH") from exc
        box = self._box(purpose, generation)
        try:
            return box.decrypt(nonce, ct, _aad("sagacity.text.v1", purpose, self.journal_id,
                                               self.saga_id)).decode("utf-8")
        except InvalidTag as exc:
            raise DataKeyError(f"saga {self.saga_id!r}: the sealed {purpose} does not open here",
                               code="SEALED_MISMATCH") from exc

    def _box(self, purpose: str, generation: int) -> AESGCM:
        secrets = self._secrets(generation)
        if purpose == "snapshot":
            return secrets[2]
        if purpose == "approval-args":
            return secrets[3]
        raise ValueError(f"unknown purpose {purpose!r}")


def is_sealed_text(text: str) -> bool:
    """Whether ``text`` is a :meth:`SagaSecrets.seal_text` envelope (a JSON object whose top
    level carries the envelope's marker, nonce and ciphertext; the marker is not at the start of
    the sorted text, and a prompt may quote it)."""
    if not text.startswith("{") or SNAPSHOT_ENVELOPE_KEY not in text:
        return False
    try:
        doc = json.loads(text)
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get(SNAPSHOT_ENVELOPE_KEY) == 1 and {"nonce", "ct"} <= doc.keys()


def _steps(path: str) -> list[str | int]:
    parts: list[str | int] = []
    for raw in path.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        parts.append(int(part) if part.isdigit() else part)
    return parts


def _get(value: Any, path: str) -> Any:
    for part in _steps(path):
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            return None
    return value


def _put(value: Any, path: str, new: Any) -> Any:
    """A copy of ``value`` with ``new`` at ``path`` (only the containers on the way copied)."""
    steps = _steps(path)
    if not steps:
        return new
    head, rest = steps[0], "".join("/" + str(s).replace("~", "~0").replace("/", "~1")
                                   for s in steps[1:])
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    copy[head] = _put(copy[head], rest, new)
    return copy


class DataKeys:
    """An application's data keys: the master key (if any) and each saga's secrets.

    Args:
        master: the master key; ``None``: values are committed and masked, never stored.
        previous: older master keys, which still unwrap (rotation).
        random_bytes: source of data keys and nonces (tests inject a deterministic one so that
            one saga gives the same bytes on every backend).
    """

    def __init__(self, master: MasterKey | None = None, previous: Iterable[MasterKey] = (), *,
                 random_bytes: Callable[[int], bytes] = os.urandom) -> None:
        self.master = master
        self.previous = tuple(previous)
        self.random_bytes = random_bytes
        self._cache: dict[tuple[str, str], SagaSecrets] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> DataKeys:
        """The keys ``SAGACITY_DATA_KEY`` and ``SAGACITY_DATA_KEY_PREVIOUS`` name.

        Raises:
            ConfigurationError: a key that is not 32 bytes of base64 or hex.
        """
        master, previous = _env_keys(os.environ if environ is None else environ)
        return cls(master, previous)

    def forget(self, saga_id: str) -> None:
        """Drop this process's copy of ``saga_id``'s keys (after an erasure)."""
        with self._lock:
            for key in [k for k in self._cache if k[1] == saga_id]:
                del self._cache[key]

    async def secrets_for(self, journal: Any, saga_id: str, *, journal_id: str,
                          create: bool = True) -> SagaSecrets:
        """``saga_id``'s secrets: loaded from ``journal``'s data-key store, or made (and stored
        wrapped, durable before this returns) when ``create`` and it has none usable.

        Args:
            journal: the saga's journal (a :class:`DataKeyStore`, else values are not stored).
            journal_id: the journal's id (``core.identity``; ``""`` when it has none).
            create: make a key when none is usable (a writer); ``False`` for a reader.

        Raises:
            DataKeyError: ``WRONG_MASTER_KEY``: the stored key was wrapped by a master key this
                process does not hold.
        """
        cached = self._cache.get((journal_id, saga_id))
        if cached is not None:
            return cached
        if self.master is None or not isinstance(journal, DataKeyStore):
            secrets = self._ephemeral(journal_id, saga_id)
        else:
            secrets = await self._stored(journal, journal_id, saga_id, create)
            if not secrets.stored:
                # A reader's view of a saga with no usable key: never cached, or a writer of the
                # same saga would get it and commit under a key nobody stored.
                return secrets
        with self._lock:
            return self._cache.setdefault((journal_id, saga_id), secrets)

    async def reload(self, journal: Any, saga_id: str) -> SagaSecrets:
        """``saga_id``'s secrets read again from ``journal``'s store (this process's copy
        dropped first): after an erasure elsewhere, a fresh generation is made and stored
        (``create``), so a late outcome is never sealed under an erased key.

        Raises:
            JournalError, DataKeyError: as :meth:`for_saga`.
        """
        self.forget(saga_id)
        return await self.for_saga(journal, saga_id, create=True)

    async def for_saga(self, journal: Any, saga_id: str, *, create: bool = True) -> SagaSecrets:
        """:meth:`secrets_for` with the journal's own id (``core.identity.journal_id_of``; ``""``
        for a journal without one). ``journal`` may be a view: its backend stores the keys.

        Raises:
            JournalError: the journal could not be read; DataKeyError: as :meth:`secrets_for`.
        """
        backend = getattr(journal, "backend", journal)
        return await self.secrets_for(backend, saga_id, journal_id=await journal_id_of(backend) or "",
                                      create=create)

    def _ephemeral(self, journal_id: str, saga_id: str) -> SagaSecrets:
        return SagaSecrets(journal_id, saga_id, 1, False, self.random_bytes,
                           {1: _derive(self.random_bytes(_KEY_BYTES))})

    async def _stored(self, journal: DataKeyStore, journal_id: str, saga_id: str,
                      create: bool) -> SagaSecrets:
        rows = await journal.data_keys(saga_id)
        keys = {row.generation: _derive(self._unwrap(journal_id, row))
                for row in rows if row.wrapped is not None}
        erased = frozenset(row.generation for row in rows if row.wrapped is None)
        live = max(keys) if keys else None
        after_erasure = False
        if (live is None or (erased and live < max(erased))) and create:
            generation = max([*keys, *erased], default=0) + 1
            data_key = self.random_bytes(_KEY_BYTES)
            assert self.master is not None
            wrapped = self.master.wrap(journal_id, saga_id, generation, data_key,
                                       self.random_bytes(_NONCE_BYTES))
            stored = await journal.add_data_key(saga_id, generation, self.master.key_id, wrapped)
            keys[generation] = _derive(self._unwrap(journal_id, stored))
            live, after_erasure = generation, bool(erased)
        return SagaSecrets(journal_id, saga_id, live or max(erased, default=1), live is not None,
                           self.random_bytes, keys, erased, after_erasure=after_erasure)

    def _unwrap(self, journal_id: str, row: StoredDataKey) -> bytes:
        assert row.wrapped is not None
        for master in (self.master, *self.previous):
            if master is not None and master.key_id == row.master_key_id:
                return master.unwrap(journal_id, row.saga_id, row.generation, row.wrapped)
        raise DataKeyError(
            f"saga {row.saga_id!r}: its data key was wrapped by master key {row.master_key_id}, "
            f"which is neither {DATA_KEY_ENVVAR} nor in {PREVIOUS_DATA_KEYS_ENVVAR}",
            code="WRONG_MASTER_KEY")

    def rewrapped(self, journal_id: str, row: StoredDataKey) -> tuple[str, bytes]:
        """``row``'s data key wrapped by the current master key: ``(key id, wrapped)`` (rotation).

        Raises:
            DataKeyError: no current master key, or ``row`` opens under none of the keys.
        """
        if self.master is None:
            raise DataKeyError(f"no {DATA_KEY_ENVVAR} to rewrap under", code="NO_MASTER_KEY")
        data_key = self._unwrap(journal_id, row)
        return self.master.key_id, self.master.wrap(journal_id, row.saga_id, row.generation,
                                                    data_key, self.random_bytes(_NONCE_BYTES))
