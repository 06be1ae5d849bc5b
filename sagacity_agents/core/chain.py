"""Hash-chain verification: re-hash the stored bytes and check every link and column.

Verification never re-serializes an entry from its columns: it hashes the stored canonical bytes,
then checks that each indexed column (saga id, seq, phase, tool, call id, write key, recorded-at,
prev hash) equals the value inside those bytes, so an edited column cannot fool a reader that
trusts columns.

What the chain alone detects: an edited, inserted or reordered entry, an entry removed from
the middle (a gap), and an entry after the saga's SAGA_CLOSED (a closed saga is terminal but
for the late outcome of a call under its INTENT's fence, which reopens it until its next
SAGA_CLOSED: ``core.append_rule.reopens``). An entry edited *and* given its recomputed hash is reported at the next
``seq``, the first entry whose stored link (``prev_hash``) disagrees. What it cannot detect:
the removal of a saga's last entries (or of all of them), or a tail rewritten consistently from
some entry onwards, because what remains is a valid, shorter or different, chain. The chain is
evidence, not prevention. Anchors close that gap: export each chain's head (:func:`heads_of`,
``sagacity journal heads``) somewhere the journal's writer cannot change, and verify against it
later (``heads=`` of :func:`verify_journal`, ``sagacity journal verify --heads``): a saga that
no longer has an entry at the anchored ``seq`` with exactly the anchored hash fails.
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from .canonical import parse_json
from .entries import _PHASES, GENESIS_HASH, HASHED_FIELDS, EntryFields, EntryLike, JournalEntry, Phase
from .journal import Journal, capabilities_of, reopens
from .reads import read_saga_rows, read_sagas

__all__ = [
    "ChainFault",
    "ChainHead",
    "VerifyResult",
    "entries_from_rows",
    "heads_from_json",
    "heads_of",
    "heads_to_json",
    "rows_verdict",
    "sagas_to_verify",
    "verify_entries",
    "verify_journal",
    "verify_rows",
]

_HEX64 = re.compile(r"[0-9a-f]{64}")


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
    TRUNCATED = "truncated"
    """The chain ends before the anchored head's ``seq``: its last entries were removed."""
    HEAD_MISMATCH = "head mismatch"
    """The entry at the anchored head's ``seq`` has another hash: the chain was rewritten at or
    before that entry."""
    MISSING_SAGA = "missing saga"
    """An anchored saga has no entries left at all."""
    BAD_SIGNATURE = "bad signature"
    """A signed checkpoint or a decision's signature is missing, made with an unknown key, or
    does not verify (see ``core.evidence``)."""
    UNAUTHENTICATED = "unauthenticated"
    """Under a keyring, an entry carries no tag and is not among the entries a signed keyring
    adoption lists as written before the keyring (``core.authenticity``)."""
    STRUCTURE = "structure no run writes"
    """Entries the library never writes, whatever the keys: a fence that names no RUN_STARTED,
    an entry under a lease that was no longer the saga's (not late), an outcome of another call
    or written under another lease than its INTENT, an access-log entry outside the access log
    or another entry in it (``core.structure``)."""
    APPROVAL = "approval trail broken"
    """Whatever the keys, an execution its approval does not cover: an irreversible INTENT that
    names no request, runs before its request's APPROVED + CONSUMED, under a REJECTED, voided or
    expired request, with arguments other than the approved ones, or reuses a request; or a
    request decided or consumed twice (``core.approval_rule``)."""
    AFTER_CLOSE = "entry after close"
    """An entry follows the saga's SAGA_CLOSED and is not the one entry a closed saga accepts
    (a late outcome of a call of the run that wrote its INTENT, under that INTENT's fence:
    ``core.append_rule.reopens``), so it was not written through the journal's append rule
    (design.md, "Runs, leases and the end of a saga"). After such a late outcome the saga is
    reopened: entries follow (a recovery's) up to its next SAGA_CLOSED."""
    OTHER_JOURNAL = "other journal"
    """The saga's SAGA_OPENED records another journal id than the journal it is read from: a
    copy of another journal's saga, or this journal got a new id since (``core.identity``)."""


@dataclass(frozen=True, slots=True)
class ChainHead:
    """An anchor: the last entry of a saga's chain at some moment, exported elsewhere."""

    seq: int
    """Sequence number of that entry (the chain's length then)."""
    hash: str
    """Its hash (64 lowercase hex digits)."""


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """Outcome of verifying one saga's chain."""

    saga_id: str
    """The saga checked."""
    ok: bool
    """True when every entry verified (and the anchored head, if any, is still there)."""
    entries: int
    """How many entries were read."""
    head: str | None
    """Hash of the last entry (export it elsewhere to detect a rewritten chain); ``None`` if empty
    or broken."""
    bad_seq: int | None = None
    """Sequence number of the first bad entry (the expected one for a gap, the first missing one
    for a truncated chain, the anchored one for a head mismatch)."""
    fault: ChainFault | None = None
    """Why the first bad entry is bad."""
    detail: str = ""
    """Human-readable explanation."""
    anchor: ChainHead | None = None
    """The anchored head this chain was checked against, if one was given."""
    unauthenticated: int = 0
    """Under a keyring: how many entries carry no tag but were written before the keyring was
    adopted (listed by its signed marker, ``core.authenticity``); reported, not a fault."""

    def __str__(self) -> str:
        if self.ok:
            anchored = f", anchored seq {self.anchor.seq} matches" if self.anchor else ""
            before = (f", {self.unauthenticated} unauthenticated, before the keyring"
                      if self.unauthenticated else "")
            return f"{self.saga_id}: ok ({self.entries} entries, head {self.head}{anchored}{before})"
        return f"{self.saga_id}: BROKEN at seq {self.bad_seq}: {self.fault.value if self.fault else ''}: {self.detail}"


def check_anchor(saga_id: str, entries: Sequence[EntryLike], anchor: ChainHead) -> VerifyResult | None:
    """The fault of ``entries`` (entries, or the fields of verified rows) against ``anchor``
    (``None`` if the anchored entry is there)."""

    def bad(seq: int, fault: ChainFault, detail: str) -> VerifyResult:
        return VerifyResult(saga_id, False, len(entries), None, seq, fault, detail, anchor)

    wanted = f"anchored head is seq {anchor.seq} hash {anchor.hash}"
    if not entries:
        return bad(1, ChainFault.MISSING_SAGA, f"no entries left; {wanted}")
    at = next((e for e in entries if e.seq == anchor.seq), None)
    if at is None:
        last = max(e.seq for e in entries)
        if last < anchor.seq:
            return bad(last + 1, ChainFault.TRUNCATED, f"chain ends at seq {last}; {wanted}")
        return bad(anchor.seq, ChainFault.TRUNCATED, f"no entry at seq {anchor.seq}; {wanted}")
    if at.hash != anchor.hash:
        return bad(
            anchor.seq,
            ChainFault.HEAD_MISMATCH,
            f"entry at seq {anchor.seq} has hash {at.hash}; {wanted} "
            f"(rewritten at or before seq {anchor.seq})",
        )
    return None


def verify_entries(
    saga_id: str, entries: Sequence[JournalEntry], anchor: ChainHead | None = None, *,
    chain: VerifyResult | None = None, known: int = 0,
) -> VerifyResult:
    """Verify one saga's entries, given in storage order (ascending ``seq``).

    Args:
        saga_id: the saga the entries must belong to.
        entries: the stored entries.
        anchor: a head exported earlier; when given, the chain must still hold an entry at
            ``anchor.seq`` with exactly ``anchor.hash`` (else :attr:`ChainFault.MISSING_SAGA`,
            :attr:`ChainFault.TRUNCATED` or :attr:`ChainFault.HEAD_MISMATCH`). A fault inside
            the chain is reported first (it names a precise entry); a disagreeing anchor is then
            added to its detail.
        chain: this function's result for the same entries without an anchor, when the caller
            has it already (the chain is then not checked again).
        known: how many leading entries the caller found identical, column for column and byte
            for byte, to entries this process verified before (``core.evidence.VerifiedHeads``:
            a saga reopened for its next run); they are not hashed again, only the entries after
            them and their link to the last of them. Ignored when one of them is a SAGA_CLOSED
            (what may follow a close depends on it).
    Returns:
        A :class:`VerifyResult` naming the first bad sequence number and the fault, if any.
    """
    result = chain if chain is not None else _verify_chain(saga_id, entries, _known_start(entries, known))
    if anchor is None:
        return result
    anchor_fault = check_anchor(saga_id, entries, anchor)
    if not result.ok:
        detail = result.detail
        if anchor_fault is not None and anchor_fault.fault is not None:
            detail += f"; also {anchor_fault.fault.value} at seq {anchor_fault.bad_seq}: {anchor_fault.detail}"
        return VerifyResult(saga_id, False, result.entries, None, result.bad_seq, result.fault, detail, anchor)
    if anchor_fault is not None:
        return anchor_fault
    return VerifyResult(saga_id, True, result.entries, result.head, anchor=anchor)


def _known_start(entries: Sequence[JournalEntry], known: int) -> int:
    """Where the walk starts, given ``known`` (see :func:`verify_entries`): 0 to walk them all."""
    if not 0 < known <= len(entries) or entries[known - 1].seq != known:
        return 0
    if any(entry.phase == "SAGA_CLOSED" for entry in entries[:known]):
        return 0
    return known


def _verify_chain(saga_id: str, entries: Sequence[JournalEntry], start: int = 0) -> VerifyResult:
    def bad(seq: int, fault: ChainFault, detail: str) -> VerifyResult:
        return VerifyResult(saga_id, False, len(entries), None, seq, fault, detail)

    prev = entries[start - 1].hash if start else GENESIS_HASH
    closed_at: int | None = None
    sha256 = hashlib.sha256
    for position, entry in enumerate(entries[start:] if start else entries, start=start + 1):
        if entry.seq != position:
            if entry.seq > position:
                if any(later.seq == position for later in entries[position:]):
                    return bad(
                        position, ChainFault.REORDERED, f"seq {position} found after seq {entry.seq}"
                    )
                return bad(position, ChainFault.GAP, f"expected seq {position}, found {entry.seq}")
            # A seq seen again (a duplicated export line): the first bad entry is the one at
            # this position; the earlier entry under that seq may be sound.
            return bad(position, ChainFault.REORDERED, f"seq {entry.seq!r} found at position {position}")
        canonical = entry.canonical
        digest = sha256(canonical).hexdigest()
        if digest != entry.hash:
            return bad(entry.seq, ChainFault.HASH_MISMATCH, f"stored {entry.hash}, bytes hash to {digest}")
        if _encodes_to(entry, canonical):
            # The columns and the payload are exactly what the bytes say (see _encodes_to).
            if entry.saga_id != saga_id:
                return bad(entry.seq, ChainFault.COLUMN_MISMATCH, f"entry belongs to saga {entry.saga_id!r}")
            phase, link = entry.phase, entry.prev_hash
        else:
            fault = _parsed_fault(saga_id, entry, position)
            if fault is not None:
                return bad(entry.seq, fault[0], fault[1])
            phase, link = entry.phase, entry.prev_hash  # equal to the bytes' (checked)
        if link != prev:
            return bad(entry.seq, ChainFault.BROKEN_LINK, f"prev_hash {link} != {prev}")
        if closed_at is not None:
            named = entry.payload.get("intent_seq") if isinstance(entry.payload, dict) else None
            intent = entries[named - 1] if type(named) is int and 0 < named < entry.seq else None
            if not reopens(phase, entry.payload, intent):
                return bad(entry.seq, ChainFault.AFTER_CLOSE,
                           f"{_name(phase)} after SAGA_CLOSED at seq {closed_at} (only a late "
                           "outcome of a call under its INTENT's fence may follow a close)")
            closed_at = None  # reopened: its recovery's entries follow, then a close again
        if phase == "SAGA_CLOSED":
            closed_at = entry.seq
        prev = entry.hash
    return VerifyResult(saga_id, True, len(entries), prev if entries else None)


def _name(phase: Any) -> str:
    return phase.value if isinstance(phase, enum.Enum) else str(phase)


def _encodes_to(entry: JournalEntry, canonical: bytes) -> bool:
    """Whether the entry's columns and payload, encoded by orjson, are exactly the stored bytes:
    then the bytes are one JSON object with exactly the hashed fields, no key twice, and each
    field's value is the column's (and the payload the one the entry carries). The read speed
    path of :func:`_verify_chain`; any difference (a tampered column, bytes that are not
    canonical, a number orjson writes otherwise than RFC 8785) sends the entry to the strict
    reader, :func:`_parsed_fault`, which names the fault if there is one.

    The fields are given in RFC 8785's order, and a payload read from the stored bytes keeps
    theirs (sorted), so the encoding is tried as it is first; a payload built in memory (the
    in-memory journal's) is tried again with its keys sorted."""
    fields = {
        "call_id": entry.call_id, "payload": entry.payload, "phase": entry.phase,
        "prev_hash": entry.prev_hash, "recorded_at": entry.recorded_at, "saga_id": entry.saga_id,
        "seq": entry.seq, "tool": entry.tool, "write_key": entry.write_key,
    }
    try:
        return (orjson.dumps(fields) == canonical
                or orjson.dumps(fields, option=orjson.OPT_SORT_KEYS) == canonical)
    except (TypeError, orjson.JSONEncodeError):
        return False


def verify_rows(saga_id: str, rows: Sequence[Sequence[Any]]) -> tuple[VerifyResult, list[EntryFields]] | None:
    """Verify one saga's chain straight from its stored rows, at read speed: the sound case only.

    Each row is hashed (SHA-256 of the stored bytes against the stored hash), its link and
    ``seq`` checked, and its columns and payload encoded by orjson and compared with the stored
    bytes, exactly as :func:`_verify_chain`'s read-speed path (:func:`_encodes_to`) does for an
    entry read from the same row, without building the :class:`JournalEntry` (the fields the
    later checks read, :class:`EntryFields`, instead). It accepts only what
    :func:`verify_entries` accepts: the encoding of the columns and of the payload orjson reads
    from the bytes equals the bytes, so the entry built from the row passes :func:`_encodes_to`.

    Args:
        saga_id: the saga the rows must belong to.
        rows: its stored rows in ``seq`` order, each a tuple of ``entries.CHAIN_COLUMNS`` (how
            the SQL backends select them for ``core.journal.read_saga_rows``).

    Returns:
        ``(result, fields)``: the chain verifies (``result`` as :func:`verify_entries` gives it
        without an anchor) and ``fields`` are its entries' :class:`EntryFields`, in order.
        ``None`` when any row is not plainly sound (a fault, or bytes only the strict reader
        can judge): the caller then verifies the entries built from the rows
        (:func:`verify_entries`), which names the fault exactly as it always has.
    """
    prev = GENESIS_HASH
    closed = False
    sha256, dumps, loads, phases, make = hashlib.sha256, orjson.dumps, orjson.loads, _PHASES, EntryFields
    saga_closed = Phase.SAGA_CLOSED  # a local: Phase.X goes through the enum's metaclass
    fields: list[EntryFields] = []
    append = fields.append
    position = 0
    for sid, seq, phase, tool, call_id, write_key, recorded_at, link, digest, canonical in rows:
        position += 1
        if (closed or seq != position or sid != saga_id or link != prev
                or type(canonical) is not bytes or sha256(canonical).hexdigest() != digest):
            return None
        try:
            payload = loads(canonical)["payload"]
            if dumps({"call_id": call_id, "payload": payload, "phase": phase, "prev_hash": link,
                      "recorded_at": recorded_at, "saga_id": sid, "seq": seq, "tool": tool,
                      "write_key": write_key}) != canonical:
                return None
        except (TypeError, KeyError, orjson.JSONDecodeError, orjson.JSONEncodeError):
            return None
        kind = phases.get(phase, phase)
        closed = kind is saga_closed
        append(make(seq, kind, tool, call_id, write_key, payload, digest))
        prev = digest
    return VerifyResult(saga_id, True, len(rows), prev if rows else None), fields


def _parsed_fault(saga_id: str, entry: JournalEntry, position: int) -> tuple[ChainFault, str] | None:
    """The fault of one entry whose stored hash matches its bytes, found by parsing the bytes
    strictly (``canonical.parse_json``) and comparing each column with the value inside them;
    ``None``: the columns agree with the bytes."""
    try:
        obj = parse_json(entry.canonical)
        if not isinstance(obj, dict) or set(obj) != set(HASHED_FIELDS):
            raise ValueError("not a journal entry object")
    except Exception as exc:  # noqa: BLE001
        return ChainFault.MALFORMED, str(exc)
    if obj["seq"] != position:
        fault = ChainFault.REORDERED if obj["seq"] != entry.seq else ChainFault.COLUMN_MISMATCH
        return fault, f"hashed bytes say seq {obj['seq']}"
    columns = entry.hashed_object()
    for name in HASHED_FIELDS:
        if name != "payload" and columns[name] != obj[name]:
            return (ChainFault.COLUMN_MISMATCH,
                    f"column {name}={columns[name]!r} but hashed bytes say {obj[name]!r}")
    if obj["saga_id"] != saga_id:
        return ChainFault.COLUMN_MISMATCH, f"entry belongs to saga {obj['saga_id']!r}"
    return None


def entries_from_rows(rows: Iterable[Sequence[Any]]) -> list[JournalEntry]:
    """The entries of stored rows read without their tags (tuples of ``entries.CHAIN_COLUMNS``,
    as ``core.reads.read_saga_rows`` yields them): what the strict reader judges when a saga's
    rows do not pass :func:`verify_rows` plainly. The one place such a row becomes an entry."""
    return [JournalEntry.from_row((*row, None, None)) for row in rows]


def rows_verdict(saga_id: str, rows: Sequence[Sequence[Any]], anchor: ChainHead | None,
                 ) -> tuple[VerifyResult, list[EntryFields]] | None:
    """The chain's verdict on one saga's stored rows at read speed, with its anchor: the sound
    case only (:func:`verify_rows`, then :func:`check_anchor` on the verified fields).

    Args:
        saga_id: the saga the rows must belong to.
        rows: its stored rows in ``seq`` order (tuples of ``entries.CHAIN_COLUMNS``).
        anchor: the head exported for it, or ``None``.

    Returns:
        ``(result, fields)``: ``result`` is exactly what :func:`verify_entries` gives for the
        entries of these rows and ``anchor`` (ok); ``fields`` the rows' :class:`EntryFields`.
        ``None``: a row is not plainly sound or the anchor disagrees: the caller judges the
        entries (:func:`entries_from_rows`) with :func:`verify_entries`, which names the fault.
    """
    verified = verify_rows(saga_id, rows)
    if verified is None:
        return None
    chain, fields = verified
    if anchor is None:
        return chain, fields
    if check_anchor(saga_id, fields, anchor) is not None:
        return None
    return VerifyResult(saga_id, True, chain.entries, chain.head, anchor=anchor), fields


async def sagas_to_verify(journal: Journal, saga_id: str | None, also: Iterable[Iterable[str]] = ()) -> list[str]:
    """The sagas a verify reads: ``[saga_id]``, or every saga of ``journal`` (oldest first),
    then those of each of ``also`` (checkpointed sagas, anchored sagas) not listed before.

    Raises:
        JournalError: the journal could not be read.
    """
    if saga_id is not None:
        return [saga_id]
    ids = await journal.saga_ids()
    known = set(ids)
    for more in also:
        for sid in more:
            if sid not in known:
                known.add(sid)
                ids.append(sid)
    return ids


async def verify_journal(
    journal: Journal,
    saga_id: str | None = None,
    *,
    heads: Mapping[str, ChainHead] | None = None,
) -> list[VerifyResult]:
    """Verify one saga (``saga_id``) or every saga in ``journal``, optionally against anchors.

    The chain and the anchors only (``sagacity journal verify`` and ``Sagacity.verify`` also
    check the structure and, with a keyring, the tags: ``core.evidence.verify_sagas``). Read as
    they do: many sagas per read where the backend can (``core.reads``), and on a backend with
    ``rows_many`` (SQLite, PostgreSQL) each saga checked from its stored rows
    (:func:`rows_verdict`); a saga that does not pass plainly is judged entry by entry
    (:func:`verify_entries`): the results are those of :func:`verify_entries` on the entries
    :meth:`Journal.entries` reads, faster.

    Args:
        journal: the journal to read.
        saga_id: verify only this saga; ``None`` for every saga in the journal.
        heads: anchored heads by saga id (see :func:`heads_of`, :func:`heads_from_json`). Each
            verified saga listed there is also checked against its anchor (see
            :func:`verify_entries`). Without ``saga_id``, every saga listed in ``heads`` is
            verified even when the journal no longer knows it (all of its entries removed:
            :attr:`ChainFault.MISSING_SAGA`); sagas of the journal that ``heads`` does not list
            are verified without an anchor.

    Returns:
        One :class:`VerifyResult` per saga: the journal's sagas oldest first, then anchored
        sagas the journal no longer lists, in ``heads`` order.

    Raises:
        JournalError: the journal could not be read.
    """
    heads = heads or {}
    ids = await sagas_to_verify(journal, saga_id, [heads])
    results: list[VerifyResult] = []
    if capabilities_of(journal).rows_read:
        async for sid, rows in read_saga_rows(journal, ids):
            quick = rows_verdict(sid, rows, heads.get(sid))
            results.append(quick[0] if quick is not None
                           else verify_entries(sid, entries_from_rows(rows), heads.get(sid)))
        return results
    async for sid, entries in read_sagas(journal, ids):
        results.append(verify_entries(sid, entries, heads.get(sid)))
    return results


def heads_of(results: Iterable[VerifyResult]) -> dict[str, ChainHead]:
    """The head of every verified, non-empty chain in ``results``, to export as anchors.

    Args:
        results: results of :func:`verify_journal` (or :func:`verify_entries`).

    Returns:
        ``{saga_id: ChainHead(seq, hash)}`` in the order of ``results``; empty chains are left out.

    Raises:
        ValueError: a result is broken (anchoring a broken chain would vouch for it).
    """
    heads: dict[str, ChainHead] = {}
    for result in results:
        if not result.ok:
            raise ValueError(f"saga {result.saga_id!r} does not verify: {result}")
        if result.head is not None:
            heads[result.saga_id] = ChainHead(result.entries, result.head)
    return heads


def heads_to_json(heads: Mapping[str, ChainHead]) -> dict[str, dict[str, Any]]:
    """The JSON form of anchored heads: ``{saga_id: {"seq": N, "hash": H}}``.

    Args:
        heads: anchored heads by saga id.

    Returns:
        A plain dict, ready for :func:`json.dumps`.
    """
    return {sid: {"seq": head.seq, "hash": head.hash} for sid, head in heads.items()}


def heads_from_json(data: Any) -> dict[str, ChainHead]:
    """Parse and check the JSON form of anchored heads (see :func:`heads_to_json`).

    Args:
        data: the decoded JSON: an object mapping each saga id to ``{"seq": N, "hash": H}``,
            ``N`` an integer >= 1 and ``H`` 64 hex digits (case-insensitive); nothing else.

    Returns:
        ``{saga_id: ChainHead}`` in the order of ``data``, hashes in lowercase.

    Raises:
        ValueError: ``data`` does not have that shape (the message names the offending saga).
    """
    if not isinstance(data, dict):
        raise ValueError('heads must be a JSON object {saga_id: {"seq": N, "hash": H}}')  # noqa: TRY004 - one error type for a bad file
    heads: dict[str, ChainHead] = {}
    for sid, value in data.items():
        if not isinstance(sid, str) or not sid:
            raise ValueError(f"saga id {sid!r} is not a non-empty string")
        if not isinstance(value, dict) or set(value) != {"seq", "hash"}:
            raise ValueError(f'head of saga {sid!r} must be {{"seq": N, "hash": H}}, got {value!r}')
        seq, digest = value["seq"], value["hash"]
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
            raise ValueError(f"head of saga {sid!r}: seq must be an integer >= 1, got {seq!r}")
        if not isinstance(digest, str) or not _HEX64.fullmatch(digest.lower()):
            raise ValueError(f"head of saga {sid!r}: hash must be 64 hex digits, got {digest!r}")
        heads[sid] = ChainHead(seq, digest.lower())
    return heads
