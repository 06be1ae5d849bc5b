"""Journal entries: phases, the entry record, and the hash-chain rule that seals an entry.

The rule (docs/architecture.md, "The journal"): an entry's canonical bytes are the
RFC 8785 encoding of ``{saga_id, seq, phase, tool, call_id, write_key, payload, recorded_at,
prev_hash}``; its hash is SHA-256 of exactly those bytes, as lowercase hex. ``prev_hash`` is the
previous entry's hash in the same saga, and 64 zeros for the first. A third party can re-verify
an export with nothing but SHA-256 and an RFC 8785 encoder.
"""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass
from typing import Any

import orjson

from .canonical import encode_canonical, format_timestamp, parse_json, sha256_hex, to_canonical_value

__all__ = ["ACCESS_PHASES", "ACCESS_SAGA", "CHAIN_COLUMNS", "GENESIS_HASH", "HASHED_FIELDS", "STORED_COLUMNS", "EntryFields", "EntryLike", "JournalEntry", "Phase", "seal_entry", "stored_payload"]

GENESIS_HASH = "0" * 64
"""``prev_hash`` of the first entry of every saga."""

HASHED_FIELDS = (
    "saga_id",
    "seq",
    "phase",
    "tool",
    "call_id",
    "write_key",
    "payload",
    "recorded_at",
    "prev_hash",
)
"""The keys of the hashed object, in no particular order (RFC 8785 sorts them)."""


class Phase(str, enum.Enum):
    """What a journal entry records. Stored as its name."""

    SAGA_OPENED = "SAGA_OPENED"
    """A saga was opened; payload: ``{"metadata": {...}}``."""
    RUN_STARTED = "RUN_STARTED"
    """A run (segment), resume or recovery of the saga took the saga's run lease; payload:
    ``{"agent", "holder", "lease_seconds", "took_over"}`` (``took_over``: the expired lease it
    replaced, or ``None``). See ``core.lease``."""
    LEASE_RENEWED = "LEASE_RENEWED"
    """The lease holder renewed its lease while writing nothing else (a long tool body or model
    call); payload: ``{"holder"}``. Every entry written under a lease renews it as well."""
    RUN_ENDED = "RUN_ENDED"
    """The run that held the lease ended and released it; payload: ``{"holder", "status"}`` (the
    saga's status then: OPEN, AWAITING_APPROVAL, IN_DOUBT, COMPENSATION_FAILED, ...)."""
    INTENT = "INTENT"
    """Written and committed before a tool body runs; payload holds the validated arguments."""
    EXECUTED = "EXECUTED"
    """The body returned a value that had an effect; payload holds result and undo data."""
    REFUSED = "REFUSED"
    """The body returned a value its classifier marks as refused: no effect, saga goes on."""
    FAILED = "FAILED"
    """The body raised, was cancelled, or returned a value classified as failed."""
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    """An irreversible call paused for a human decision."""
    APPROVED = "APPROVED"
    """A human approved a request; payload names the approver and the argument hash."""
    REJECTED = "REJECTED"
    """A human (or a rule) rejected a request."""
    CONSUMED = "CONSUMED"
    """A resume consumed the decision on a request (after the store's atomic consume, before the
    run goes on); payload: ``{"request_id", "args_hash", "decision"}``. An irreversible body runs
    only on an APPROVED + CONSUMED pair for its call and hash not used by an earlier INTENT."""
    REQUEST_VOIDED = "REQUEST_VOIDED"
    """A recovery voided an approval request still open (pending, or decided and never
    consumed by a resume): nothing runs on it any more; payload: ``{"request_id", "reason"}``
    (``"decision"``: ``"approved"`` / ``"rejected"`` when it had one). Written by the recovery
    under its lease, after the store consumed the request (``core.recovery``)."""
    SAGA_FAILED = "SAGA_FAILED"
    """The run layer decided the saga failed; payload says why."""
    COMPENSATING = "COMPENSATING"
    """Written before an undo runs; payload names the entry being undone and the idempotency key."""
    COMPENSATED = "COMPENSATED"
    """The undo returned."""
    COMPENSATION_FAILED = "COMPENSATION_FAILED"
    """The undo raised; the effect is still there."""
    RESOLVED = "RESOLVED"
    """A human answered an in-doubt entry (``sagacity saga resolve``); payload: ``{"target_seq",
    "target" ("call": an INTENT without outcome, "undo": a COMPENSATING without outcome),
    "answer" ("ran" | "not_run"), "resolver", "reason"}``, optionally ``"undo_data"`` (JSON,
    with "ran": what the call's undo is given, result ``None``) and ``"forced"``
    (``{"reason"}``: an operator overrode the checks). It stands as that entry's outcome until
    the call's own outcome lands: a call that ran is undone by the next recovery (when
    compensatable), one that did not is dropped; an undo that ran counts as COMPENSATED, one
    that did not is retried. An EXECUTED of the call after a "not_run" answer outranks it
    (``core.ledger``: the contradiction is read, never written)."""
    CHECKED = "CHECKED"
    """A far-side check's verdict on an in-doubt call, written by a recovery under its lease
    (fenced, signed by the run writer); payload: ``{"target_seq"`` (the INTENT's seq),
    ``"verdict"`` (``"ran"`` | ``"not_run"`` | ``"unknown"``), ``"saw"`` (JSON: what the check
    saw), ``"undo_data"`` (JSON, optional, with ``"ran"``), ``"checker"`` (str)``}``. The ledger
    (``core.ledger``) reads ``"ran"`` as the call's outcome with an effect (its undo gets
    ``undo_data``, result ``None``), ``"not_run"`` as a RESOLVED "not run" (an outcome of the
    call's own holder still outranks it), and ``"unknown"`` as no answer: the call stays in
    doubt."""
    KEYRING_ADOPTED = "KEYRING_ADOPTED"
    """An operator adopted a keyring on a journal that already held entries: written in the
    reserved saga ``core.authenticity.ADOPTION_SAGA``, tagged by the adopting key; payload:
    ``{"adoption", "part", "parts", "heads": {saga_id: {"seq", "hash"}}}``.
    Untagged entries up to the heads it lists are "before the keyring"; any other untagged
    entry is refused under a keyring."""
    KEY_ROLES = "KEY_ROLES"
    """A keyring admin gave a key its roles (``core.key_roles``): written in the reserved saga
    ``core.authenticity.ADOPTION_SAGA``, tagged by a keyring-admin key (refused otherwise);
    payload: ``{"key_id", "roles": ["run_writer" | "decision_maker" | "checkpoint_signer" |
    "keyring_admin", ...], "valid_from": UTC stamp, "reason"}``. The key's newest KEY_ROLES
    replaces its roles; once any is journaled, a key none names has no role."""
    KEY_REVOKED = "KEY_REVOKED"
    """A keyring admin revoked a key (``sagacity audit keys revoke``): written in the reserved
    saga, tagged by a keyring-admin key; payload: ``{"key_id", "revoked_at": UTC stamp,
    "reason"}``. The key's tags and signatures on a saga's entries after that saga's newest
    signed checkpoint dated before ``revoked_at`` are refused; what it signed before stays valid."""
    DATA_REVEALED = "DATA_REVEALED"
    """A sensitive value was shown in clear (``--reveal``, with the master key): written only in
    the reserved saga :data:`ACCESS_SAGA` (``core.access_log``), before anything is shown,
    tagged by the host's key (under key roles, a ``checkpoint_signer``'s); payload:
    ``{"saga_id", "by", "reason", "paths": [RFC 6901 pointers], "tool"?}``."""
    DATA_ERASED = "DATA_ERASED"
    """A saga's data key was erased (its sensitive values are unrecoverable from then on):
    written only in :data:`ACCESS_SAGA`, tagged as DATA_REVEALED is; payload: ``{"saga_id",
    "by", "reason", "forced": bool, "generations": [int, ...]}``."""
    SAGA_CLOSED = "SAGA_CLOSED"
    """The saga ended (COMPLETED or COMPENSATED); payload holds the final status. Terminal but
    for one entry: the late outcome of a call, written under its INTENT's own fence by the
    call's holder (``core.append_rule``), which *reopens* the saga (``SagaStatus.REOPENED``)
    until a recovery undoes it and closes the saga again (a second SAGA_CLOSED). ``verify``
    reports any other entry after a close."""


ACCESS_SAGA = "sagacity.access"
"""The reserved saga of the access log: DATA_REVEALED and DATA_ERASED entries, and nothing else
(``core.access_log``; no run opens a saga whose id starts with ``sagacity.``)."""

ACCESS_PHASES = frozenset({Phase.DATA_REVEALED, Phase.DATA_ERASED})
"""The phases only :data:`ACCESS_SAGA` holds (``core.append_rule`` refuses them elsewhere,
``core.structure`` reports them)."""

_PHASES: dict[Any, Phase | str] = {p.value: p for p in Phase}
"""A stored phase name to its :class:`Phase` (an unknown name stays a string)."""

STORED_COLUMNS = ("saga_id", "seq", "phase", "tool", "call_id", "write_key", "recorded_at",
                  "prev_hash", "hash", "canonical", "tag_key", "tag", "sealed")
"""The columns every SQL backend stores an entry in, in the order :meth:`JournalEntry.from_row`
reads them."""

CHAIN_COLUMNS = STORED_COLUMNS[:10]
"""The stored columns without the tags: what the chain covers (every hashed field, the hash and
the bytes). ``verify`` without a keyring reads these only (``core.chain.verify_rows``)."""


def stored_payload(canonical: bytes) -> Any:
    """The payload inside an entry's stored bytes, ``None`` when they hold none (never raises:
    verification names the problem). orjson reads them (~5x the stdlib's speed); what it
    refuses (an integer beyond 64 bits, say) goes to the strict stdlib reader, whose refusals
    (duplicate keys, ``NaN``) leave ``None``. orjson keeps the last of duplicate keys: such bytes
    never pass ``verify`` (``core.chain``), so nothing acts on the payload read here."""
    try:
        obj = orjson.loads(canonical)
    except orjson.JSONDecodeError:
        try:
            obj = parse_json(canonical)
        except Exception:  # noqa: BLE001 - verification names the problem
            return None
    return obj.get("payload") if type(obj) is dict else None


@dataclass(slots=True, eq=False)
class EntryFields:
    """The fields of a stored entry that ``verify`` reads past the chain, each as the
    :class:`JournalEntry` of the same row would hold it (the phase a :class:`Phase`, the payload
    read from the stored bytes): what the structure rule (``core.structure``), the ledger it
    consults (``core.ledger``) and an anchored head (``core.chain.check_anchor``) look at.

    Built by ``core.chain.verify_rows`` for a row whose columns and payload it found equal to
    the stored bytes, one per row of a journal verified at read speed: not frozen, since a
    frozen dataclass sets its fields one call at a time (a :class:`JournalEntry` costs ~4x as
    much to build); nothing changes them after.
    """

    seq: int
    phase: Phase | str
    tool: str | None
    call_id: str | None
    write_key: str
    payload: Any
    hash: str


OUTCOME_PHASES = frozenset({Phase.EXECUTED, Phase.REFUSED, Phase.FAILED})
"""Phases that close an INTENT."""


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One sealed journal entry, as stored.

    Entries read back from a backend carry the stored columns and the stored canonical bytes
    unchanged; :func:`sagacity_agents.core.chain.verify_entries` checks that they agree.
    """

    saga_id: str
    """The saga this entry belongs to."""
    seq: int
    """Position in the saga's chain: 1, 2, 3... with no gaps."""
    phase: Phase | str
    """What the entry records (a :class:`Phase`; a raw string if storage holds an unknown one)."""
    tool: str | None
    """Tool name, or ``None`` for saga-level entries."""
    call_id: str | None
    """The model's call id for tool entries (not unique: models reuse call ids)."""
    write_key: str
    """Writer-chosen key, unique per saga and per logical write; retries reuse it."""
    payload: Any
    """Phase-specific JSON data (already in canonical form)."""
    recorded_at: str
    """UTC timestamp, fixed width ``YYYY-MM-DDTHH:MM:SS.ffffffZ``. Order is by ``seq``, never time."""
    prev_hash: str
    """The previous entry's ``hash`` (64 zeros for ``seq`` 1)."""
    hash: str
    """SHA-256 of ``canonical``, lowercase hex."""
    canonical: bytes
    """The exact RFC 8785 bytes that were hashed and stored."""
    tag_key: str | None = None
    """Id of the key whose tag authenticates the entry (``core.authenticity``); ``None``:
    untagged (written without a keyring). Stored in a column of its own, outside the hash."""
    tag: str | None = None
    """The entry's tag: an Ed25519 signature (base64) over the entry's content without its
    chain links (``core.authenticity.tag_statement``); ``None``: untagged."""
    sealed: bytes | None = None
    """The entry's sensitive values, encrypted (RFC 8785 JSON bytes of ``{"v", "key",
    "values"}``; ``core.sensitive``), stored in a column of its own outside the hash and the
    tag; ``None``: the entry holds no stored sensitive value."""

    def hashed_object(self) -> dict[str, Any]:
        """Return the object whose canonical encoding is hashed, built from the columns."""
        return _hashed_object(
            saga_id=self.saga_id, seq=self.seq,
            phase=self.phase.value if isinstance(self.phase, Phase) else self.phase,
            tool=self.tool, call_id=self.call_id, write_key=self.write_key, payload=self.payload,
            recorded_at=self.recorded_at, prev_hash=self.prev_hash,
        )

    @classmethod
    def from_stored(
        cls,
        *,
        saga_id: str,
        seq: int,
        phase: str,
        tool: str | None,
        call_id: str | None,
        write_key: str,
        recorded_at: str,
        prev_hash: str,
        hash: str,
        canonical: bytes,
        tag_key: str | None = None,
        tag: str | None = None,
        sealed: bytes | None = None,
    ) -> JournalEntry:
        """Rebuild an entry from stored columns; the payload is read from the stored bytes.

        Never raises on bad bytes: the payload is then ``None`` and verification reports it.
        """
        return cls.from_row((saga_id, seq, phase, tool, call_id, write_key, recorded_at, prev_hash,
                             hash, canonical, tag_key, tag, sealed))

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> JournalEntry:
        """:meth:`from_stored` from a row in :data:`STORED_COLUMNS` order (how the backends
        select it: no keyword mapping built per row, the hot path of a read and of ``verify``).
        A row of twelve (a chain row and two tags, without ``sealed``) is read as unsealed.

        Never raises on bad bytes: the payload is then ``None`` and verification reports it.
        """
        if len(row) == 13:
            saga_id, seq, phase, tool, call_id, write_key, recorded_at, prev_hash, hash_, \
                canonical, tag_key, tag, sealed = row
            if sealed is not None and type(sealed) is not bytes:
                sealed = bytes(sealed)  # a driver's memoryview or bytearray
        else:
            saga_id, seq, phase, tool, call_id, write_key, recorded_at, prev_hash, hash_, \
                canonical, tag_key, tag = row
            sealed = None
        # Storage may hand back text where bytes were stored (e.g. an SQL ``replace()`` on the
        # BLOB column returns TEXT): keep it as UTF-8 bytes so verification, not this, reports it.
        if isinstance(canonical, str):
            canonical = canonical.encode("utf-8", "surrogatepass")
        elif type(canonical) is not bytes:
            canonical = bytes(canonical)
        return cls(saga_id, seq, _PHASES.get(phase, phase), tool, call_id, write_key,
                   stored_payload(canonical), recorded_at, prev_hash, hash_, canonical, tag_key, tag,
                   sealed)


EntryLike = JournalEntry | EntryFields
"""What the checks after the chain read: an entry, or the fields of a verified stored row."""


def entry_bytes(
    *,
    saga_id: str,
    seq: int,
    phase: Phase,
    tool: str | None,
    call_id: str | None,
    write_key: str,
    payload: Any,
    recorded_at: str,
    prev_hash: str,
    stdlib_safe: bool | None = None,
) -> bytes:
    """The canonical bytes an entry is hashed and stored as: the RFC 8785 encoding of
    :meth:`JournalEntry.hashed_object`'s fields (what :func:`seal_entry` seals).

    Args:
        payload: already converted by ``canonical.to_canonical_value``.
        recorded_at: the fixed-width UTC text.
        stdlib_safe: the conversion's finding (see ``canonical.encode_canonical``).

    Raises:
        EncodingError: a field has no canonical encoding.
    """
    obj = _hashed_object(saga_id=saga_id, seq=seq, phase=phase.value, tool=tool, call_id=call_id,
                         write_key=write_key, payload=payload, recorded_at=recorded_at,
                         prev_hash=prev_hash)
    return encode_canonical(obj, stdlib_safe=stdlib_safe)


def _hashed_object(**fields: Any) -> dict[str, Any]:
    """The fields an entry's hash covers, in one place (the chain's definition)."""
    return {name: fields[name] for name in _HASHED_FIELDS}


_HASHED_FIELDS = ("saga_id", "seq", "phase", "tool", "call_id", "write_key", "payload",
                  "recorded_at", "prev_hash")


def seal_entry(
    *,
    saga_id: str,
    seq: int,
    phase: Phase,
    tool: str | None,
    call_id: str | None,
    write_key: str,
    payload: Any,
    recorded_at: dt.datetime | str,
    prev_hash: str,
    converted: bool = False,
    stdlib_safe: bool | None = None,
    sealed: bytes | None = None,
) -> JournalEntry:
    """Build an entry: convert the payload, encode canonically, hash.

    Args:
        recorded_at: an aware datetime (truncated to microseconds, converted to UTC) or the
            already formatted fixed-width string.
        converted: the payload already went through ``to_canonical_value`` (skip that pass).
        stdlib_safe: that conversion's finding (see ``canonical.encode_canonical``); ``None``
            checks again.
        sealed: the entry's encrypted sensitive values (outside the hash), or ``None``.

    Raises:
        EncodingError: the payload (or a field) has no canonical encoding.
    """
    stamp = recorded_at if isinstance(recorded_at, str) else format_timestamp(recorded_at)
    if not converted:
        flags = [False]
        payload = to_canonical_value(payload, flags=flags)
        stdlib_safe = not flags[0]
    data = entry_bytes(saga_id=saga_id, seq=seq, phase=phase, tool=tool, call_id=call_id,
                       write_key=write_key, payload=payload, recorded_at=stamp,
                       prev_hash=prev_hash, stdlib_safe=stdlib_safe)
    return JournalEntry(
        saga_id=saga_id,
        seq=seq,
        phase=phase,
        tool=tool,
        call_id=call_id,
        write_key=write_key,
        payload=payload,
        recorded_at=stamp,
        prev_hash=prev_hash,
        hash=sha256_hex(data),
        canonical=data,
        sealed=sealed,
    )
