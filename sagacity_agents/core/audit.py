"""Audit export: a saga journal as JSON Lines anyone can re-verify without this library.

One line per record, in this order per saga: its entries (ascending ``seq``), its head, its
signed checkpoints; a header line first. The format is specified in docs/audit-format.md, which
also gives a stand-alone verifier using only the Python standard library::

    {"type": "sagacity.audit.v1", "exported_at": T, "sagas": N, "journal_id": J}
    {"type": "key", "key_id": K, "public_key": BASE64 (raw 32 bytes), "admin": bool}
                                                (exported with a keyring: its public keys)
    {"type": "entry", "saga_id": S, "seq": N, "hash": H, "prev_hash": P, "canonical": BASE64,
     "tag_key": K, "tag": SIG}                  (the tag fields only on a tagged entry)
    {"type": "head", "saga_id": S, "seq": N, "hash": H}
    {"type": "checkpoint", "saga_id": S, "seq": N, "hash": H, "time": T, "key_id": K, "signature": SIG}

``canonical`` is the entry's stored bytes exactly as they were hashed (never re-serialized):
``hash == SHA-256(bytes)``, and the bytes are the RFC 8785 JSON of the entry, whose
``prev_hash`` is the previous entry's hash (64 zeros for ``seq`` 1). ``journal_id`` is the
exported journal's id (``core.identity``; absent from exports of a journal without one): a saga
of derivation 2 names it in its SAGA_OPENED, and its tags bind it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ..errors import ConfigurationError
from .authenticity import ADOPTION_SAGA, read_adoption, read_key_roles
from .chain import ChainFault, ChainHead, VerifyResult
from .checkpoints import Checkpoint, CheckpointStore
from .entries import JournalEntry
from .canonical import parse_json
from .evidence import Evidence, checkpoint_problem
from .identity import journal_id_of
from .journal import Journal, utc_stamp
from .signing import Keyring

__all__ = ["AUDIT_FORMAT", "AuditExport", "export_audit", "export_key_ids", "read_export", "verify_export"]

AUDIT_FORMAT = "sagacity.audit.v1"
"""The header line's ``type``."""


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, ensure_ascii=True) + "\n"


def _public_raw(key: Any) -> str:
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415 - only with keys

    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode("ascii")


async def export_audit(
    journal: Journal, out: TextIO, saga_ids: Sequence[str] | None = None,
    checkpoints: CheckpointStore | None = None, keyring: Keyring | None = None,
) -> int:
    """Write the sagas' entries, heads and checkpoints to ``out`` as JSON Lines; with
    ``keyring``, its public keys first (``key`` records: a verifier then checks every
    signature by default) and the reserved saga (keyring adoption, roles, revocations) too.

    Entries are exported as stored, whether or not they verify (an export is evidence, not a
    judgement; ``verify_export`` judges).

    Args:
        journal: the journal to read.
        out: a text stream opened for writing.
        saga_ids: the sagas to export; ``None`` for every saga of the journal, and every saga
            with checkpoints in ``checkpoints`` (one whose entries were all deleted is exported
            as its checkpoints alone: the verifier reports it missing).
        checkpoints: where signed checkpoints are kept, to export them too.
        keyring: the keyring whose public keys the export carries (``None``: none).

    Returns:
        How many entries were written.

    Raises:
        JournalError: the journal could not be read.
    """
    ids = list(saga_ids) if saga_ids is not None else await journal.saga_ids()
    if saga_ids is None and checkpoints is not None:
        # A checkpointed saga the journal no longer lists (all of its entries deleted) is
        # exported as its checkpoints alone, so that the verifier reports it missing.
        known = set(ids)
        ids += [sid for sid in await checkpoints.saga_ids() if sid not in known]
    if keyring is not None and ADOPTION_SAGA not in ids and await journal.entries(ADOPTION_SAGA):
        ids.append(ADOPTION_SAGA)  # the roles and revocations the signatures are judged under
    header: dict[str, Any] = {"type": AUDIT_FORMAT, "exported_at": utc_stamp(), "sagas": len(ids)}
    journal_id = await journal_id_of(journal)
    if journal_id is not None:
        header["journal_id"] = journal_id
    out.write(_line(header))
    for key_id, key in sorted((keyring.verify_keys if keyring is not None else {}).items()):
        out.write(_line({"type": "key", "key_id": key_id, "public_key": _public_raw(key),
                         "admin": key_id in keyring.admin_keys}))  # type: ignore[union-attr]
    count = 0
    for sid in ids:
        entries = await journal.entries(sid)
        for e in entries:
            record = {"type": "entry", "saga_id": sid, "seq": e.seq, "hash": e.hash,
                      "prev_hash": e.prev_hash,
                      "canonical": base64.b64encode(e.canonical).decode("ascii")}
            if e.tag is not None:  # the entry's tag, beside the bytes it covers
                record.update(tag_key=e.tag_key, tag=e.tag)
            out.write(_line(record))
            count += 1
        if entries:
            out.write(_line({"type": "head", "saga_id": sid, "seq": entries[-1].seq, "hash": entries[-1].hash}))
        for checkpoint in (await checkpoints.list(sid)) if checkpoints is not None else []:
            out.write(_line({"type": "checkpoint", **checkpoint.to_json()}))
    return count


@dataclass
class AuditExport:
    """An export read back: per saga, its entries, head and checkpoints."""

    entries: dict[str, list[JournalEntry]] = field(default_factory=dict)
    """Entries by saga id, in file order."""
    heads: dict[str, ChainHead] = field(default_factory=dict)
    """The head each saga had when exported."""
    checkpoints: dict[str, list[Checkpoint]] = field(default_factory=dict)
    """Signed checkpoints by saga id."""
    journal_id: str | None = None
    """The exported journal's id (``None``: the header names none)."""
    keys: dict[str, tuple[bytes, bool]] = field(default_factory=dict)
    """The public keys the export carries: key id -> (raw Ed25519 public key, admin?)."""

    def keyring(self) -> Keyring | None:
        """A verify keyring of the keys the export carries (``None``: it carries none).

        Raises:
            ValueError: a key record does not hold an Ed25519 public key.
        """
        if not self.keys:
            return None
        from cryptography.hazmat.primitives.asymmetric import ed25519  # noqa: PLC0415

        try:
            return Keyring({k: ed25519.Ed25519PublicKey.from_public_bytes(raw) for k, (raw, _) in self.keys.items()},
                           admin_keys=[k for k, (_, admin) in self.keys.items() if admin])
        except ConfigurationError as exc:  # a key id that is not one
            raise ValueError(f"key record: {exc}") from exc


def _entry(record: dict[str, Any]) -> JournalEntry:
    data = base64.b64decode(record["canonical"], validate=True)
    try:
        obj = parse_json(data)
        if not isinstance(obj, dict):
            obj = {}
    except Exception:  # noqa: BLE001 - verification reports the bad bytes
        obj = {}
    return JournalEntry.from_stored(
        saga_id=record["saga_id"], seq=record["seq"], phase=str(obj.get("phase", "")),
        tool=obj.get("tool"), call_id=obj.get("call_id"), write_key=str(obj.get("write_key", "")),
        recorded_at=str(obj.get("recorded_at", "")), prev_hash=record["prev_hash"],
        hash=record["hash"], canonical=data, tag_key=record.get("tag_key"), tag=record.get("tag"),
    )


def read_export(lines: Iterable[str]) -> AuditExport:
    """Parse an export.

    Raises:
        ValueError: not an export of this format (the message names the line).
    """
    export = AuditExport()
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            record = json.loads(text)
            kind = record["type"]
            if number == 1:
                if kind != AUDIT_FORMAT:
                    raise ValueError(f"first line is not a {AUDIT_FORMAT} header")
                found = record.get("journal_id")
                export.journal_id = found if isinstance(found, str) and found else None
                continue
            if kind == "entry":
                export.entries.setdefault(record["saga_id"], []).append(_entry(record))
            elif kind == "head":
                export.heads[record["saga_id"]] = ChainHead(record["seq"], record["hash"])
            elif kind == "checkpoint":
                cp = Checkpoint.from_json({k: v for k, v in record.items() if k != "type"})
                export.checkpoints.setdefault(cp.saga_id, []).append(cp)
            elif kind == "key":
                export.keys[str(record["key_id"])] = (base64.b64decode(record["public_key"], validate=True),
                                                      record.get("admin") is True)
            else:
                raise ValueError(f"unknown record type {kind!r}")
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"line {number}: {exc}") from exc
    return export


def verify_export(path: str | Path, keyring: Keyring | None = None,
                  decision_keys: Iterable[str] | None = None) -> list[VerifyResult]:
    """Verify an export: every chain, against its exported head and every checkpoint; with
    keys, also each checkpoint's signature and its key's role, each decision's and resolution's
    signature, every entry's tag and its key's role and validity (the roles and revocations the
    export's reserved saga records, ``core.key_roles``; decisions by one of ``decision_keys``
    when given), and an untagged entry passes only where a signed keyring adoption in the
    export lists it as written before the keyring. The structure no run writes
    (``core.structure``) is checked always.

    **Signatures are checked by default when the export carries keys** (``key`` records, written
    by ``export_audit`` with a keyring): an export edited and re-sealed without the private keys
    (hashes recomputed, tags stale or stripped) then fails. ``keyring`` pins the keys instead
    (the export's are ignored): keys carried by the export prove only that it is consistent
    with them, since whoever re-seals it can replace them too (docs/audit-format.md).

    Args:
        path: the export file.
        keyring: the verify keys to pin; ``None``: the keys the export carries, if any.
        decision_keys: the ``decision_keys`` setting (``None``: absent).

    Returns:
        One :class:`VerifyResult` per saga (sagas with only a head or checkpoints: missing saga).

    Raises:
        ValueError: the file is not an export (see :func:`read_export`), or a key record holds
            no Ed25519 public key.
        OSError: it cannot be read.
    """
    with open(path, encoding="utf-8") as fh:
        export = read_export(fh)
    keyring = keyring if keyring is not None else export.keyring()
    evidence = Evidence(keyring=keyring,
                        decision_keys=frozenset(decision_keys) if decision_keys is not None else None)
    reserved = export.entries.get(ADOPTION_SAGA, [])
    adoption = read_adoption(reserved, keyring, evidence.tags) if keyring is not None else None
    roles = read_key_roles(reserved, keyring, evidence.tags, evidence.decision_keys) if keyring is not None else None
    results = []
    ids = list(dict.fromkeys([*export.entries, *export.heads, *export.checkpoints]))
    for sid in ids:
        checkpoints = export.checkpoints.get(sid, [])
        bad = None
        for cp in checkpoints:
            problem = checkpoint_problem(cp, keyring, roles) if keyring is not None else None
            if problem is not None:
                bad = VerifyResult(sid, False, 0, None, cp.seq, ChainFault.BAD_SIGNATURE,
                                   f"checkpoint of seq {cp.seq}: {problem}")
                break
        entries = export.entries.get(sid, [])
        anchor = export.heads.get(sid)
        if anchor is None and checkpoints:
            newest = max(checkpoints, key=lambda c: c.seq)
            anchor = ChainHead(newest.seq, newest.hash)
        results.append(bad or evidence.check(sid, entries, anchor, checkpoints, adoption, roles=roles,
                                             journal_id=export.journal_id))
    return results


def export_key_ids(path: str | Path) -> list[str]:
    """The key ids an export carries (``key`` records), in file order.

    Raises:
        ValueError: the file is not an export.
        OSError: it cannot be read.
    """
    with open(path, encoding="utf-8") as fh:
        return list(read_export(fh).keys)
