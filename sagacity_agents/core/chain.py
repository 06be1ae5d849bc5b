"""Hash-chain verification: re-hash the stored bytes and check every link and column.

Verification never re-serializes an entry from its columns: it hashes the stored canonical bytes,
then checks that each indexed column (saga id, seq, phase, tool, call id, write key, recorded-at,
prev hash) equals the value inside those bytes, so an edited column cannot fool a reader that
trusts columns. The chain detects edits; it does not prevent them (evidence, not prevention): a
writer with storage access can rewrite a whole chain from the edit onwards, which only an
exported head hash kept elsewhere (``VerifyResult.head``) reveals.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from .canonical import parse_json, sha256_hex
from .entries import GENESIS_HASH, HASHED_FIELDS, JournalEntry
from .journal import Journal

__all__ = ["ChainFault", "VerifyResult", "verify_entries", "verify_journal"]


class ChainFault(str, enum.Enum):
    """Why a chain failed to verify."""

    HASH_MISMATCH = "hash mismatch"
    """The stored hash is not SHA-256 of the stored bytes."""
    GAP = "gap"
    """A sequence number is missing."""
    REORDERED = "reordered"
    """A sequence number appears twice or goes backwards."""
    BROKEN_LINK = "broken link"
    """``prev_hash`` is not the previous entry's hash."""
    COLUMN_MISMATCH = "column mismatch"
    """A stored column disagrees with the value inside the hashed bytes."""
    MALFORMED = "malformed"
    """The stored bytes are not a canonical journal entry."""


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """Outcome of verifying one saga's chain."""

    saga_id: str
    """The saga checked."""
    ok: bool
    """True when every entry verified."""
    entries: int
    """How many entries were read."""
    head: str | None
    """Hash of the last entry (export it elsewhere to detect a rewritten chain); ``None`` if empty."""
    bad_seq: int | None = None
    """Sequence number of the first bad entry (the expected one for a gap)."""
    fault: ChainFault | None = None
    """Why the first bad entry is bad."""
    detail: str = ""
    """Human-readable explanation."""

    def __str__(self) -> str:
        if self.ok:
            return f"{self.saga_id}: ok ({self.entries} entries, head {self.head})"
        return f"{self.saga_id}: BROKEN at seq {self.bad_seq}: {self.fault.value if self.fault else ''}: {self.detail}"


def verify_entries(saga_id: str, entries: Sequence[JournalEntry]) -> VerifyResult:
    """Verify one saga's entries, given in storage order (ascending ``seq``).

    Args:
        saga_id: the saga the entries must belong to.
        entries: the stored entries.

    Returns:
        A :class:`VerifyResult` naming the first bad sequence number and the fault, if any.
    """

    def bad(seq: int, fault: ChainFault, detail: str) -> VerifyResult:
        return VerifyResult(saga_id, False, len(entries), None, seq, fault, detail)

    prev = GENESIS_HASH
    for position, entry in enumerate(entries, start=1):
        if entry.seq != position:
            if entry.seq > position:
                if any(later.seq == position for later in entries[position:]):
                    return bad(
                        position, ChainFault.REORDERED, f"seq {position} found after seq {entry.seq}"
                    )
                return bad(position, ChainFault.GAP, f"expected seq {position}, found {entry.seq}")
            return bad(entry.seq, ChainFault.REORDERED, f"seq {entry.seq} found at position {position}")
        digest = sha256_hex(entry.canonical)
        if digest != entry.hash:
            return bad(entry.seq, ChainFault.HASH_MISMATCH, f"stored {entry.hash}, bytes hash to {digest}")
        try:
            obj = parse_json(entry.canonical)
            if not isinstance(obj, dict) or set(obj) != set(HASHED_FIELDS):
                raise ValueError("not a journal entry object")
        except Exception as exc:  # noqa: BLE001
            return bad(entry.seq, ChainFault.MALFORMED, str(exc))
        if obj["seq"] != position:
            fault = ChainFault.REORDERED if obj["seq"] != entry.seq else ChainFault.COLUMN_MISMATCH
            return bad(entry.seq, fault, f"hashed bytes say seq {obj['seq']}")
        columns = entry.hashed_object()
        for name in HASHED_FIELDS:
            if name != "payload" and columns[name] != obj[name]:
                return bad(
                    entry.seq,
                    ChainFault.COLUMN_MISMATCH,
                    f"column {name}={columns[name]!r} but hashed bytes say {obj[name]!r}",
                )
        if obj["saga_id"] != saga_id:
            return bad(entry.seq, ChainFault.COLUMN_MISMATCH, f"entry belongs to saga {obj['saga_id']!r}")
        if obj["prev_hash"] != prev:
            return bad(entry.seq, ChainFault.BROKEN_LINK, f"prev_hash {obj['prev_hash']} != {prev}")
        prev = entry.hash
    return VerifyResult(saga_id, True, len(entries), prev if entries else None)


async def verify_journal(journal: Journal, saga_id: str | None = None) -> list[VerifyResult]:
    """Verify one saga (``saga_id``) or every saga in ``journal``.

    Raises:
        JournalError: the journal could not be read.
    """
    ids = [saga_id] if saga_id is not None else await journal.saga_ids()
    return [verify_entries(sid, await journal.entries(sid)) for sid in ids]


