"""The append rule, in one place: what every backend applies to an append, atomically with it.

A journal is append-only and keeps one hash chain per saga. Appends to one saga are totally
ordered with no gaps, whatever the concurrency (tasks, threads, processes on one SQLite file).
Every append carries a *write key* chosen by the writer, unique per logical write and reused by
every retry of it: appending an entry whose key already exists returns the stored entry when it is
the same write, and raises when the key was used for something else (design.md, "Writes and keys").

Two more rules every backend applies through :func:`next_entry`, atomically with the append:

* SAGA_CLOSED is terminal but for one entry: an append to a saga whose last entry is
  SAGA_CLOSED is refused (:class:`~sagacity_agents.errors.JournalClosedError`) unless it is a
  late outcome of a call (:data:`~.entries.OUTCOME_PHASES`, ``late``) under the fence its
  INTENT carries (:func:`reopens`): the call's own holder, which stalled past its lease while
  the saga was recovered and closed, journals what happened (an effect is a fact). That entry
  *reopens* the saga (``SagaStatus.REOPENED``): it accepts appends again (a recovery's) until
  its next SAGA_CLOSED. A retry of the close itself still returns the stored entry (the
  write-key rule comes first).
* A conditional append (``expected_seq=n``) is written only while the saga's last entry is ``n``
  (0: the saga has no entry), else :class:`~sagacity_agents.errors.JournalConflictError`: how a
  run takes the saga's lease without a race (``core.lease``).
* Claims (:data:`CLAIM_PHASES`: COMPENSATING, CONSUMED) start an action two writers could both
  start. Their payload must carry the writer's nonce under :data:`CLAIMANT_KEY`; an append whose
  write key is already taken by a claim of the same phase with *another* nonce is refused with
  :class:`~sagacity_agents.errors.ClaimTakenError` (never the other writer's entry returned as
  its own); the same writer's retry (same key, same payload, same nonce) returns the stored entry.
  Applied by :func:`replay_of`, which every backend calls when the write key exists.

* Fencing (design.md, "Fencing"): an append with ``fence=n`` is written only while the saga's
  newest RUN_STARTED is entry ``n``, the lease its writer holds; else
  :class:`~sagacity_agents.errors.LeaseLostError` and nothing is written. The check is made
  under the same lock, in the same transaction, as the insert. The token is stored in the entry
  (:data:`FENCE_KEY` in its payload), inside the hash chain. An append with ``late=True`` is the
  exception: the outcome of a call (or of an undo) whose writer lost its lease while the body
  ran, written without the check and marked late (:data:`LATE_KEY`) so that recovery pairs it
  with its INTENT (or its COMPENSATING) and a reader sees who wrote it. Only
  :data:`LATE_PHASES` may be late.

A backend runs the rule's steps through :func:`append_locked` under its append lock, supplying
only its dialect pieces (:class:`AppendDialect`); PostgreSQL runs them in one SQL function and
applies the rule's errors with :func:`next_entry` and :func:`replay_of`. Everything here is
re-exported by ``core.journal``.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ..errors import (
    ClaimTakenError, JournalClosedError, JournalConflictError, JournalWriteError, LeaseLostError,
)
from .canonical import canonical_bytes, format_timestamp, to_canonical_value
from .entries import (
    ACCESS_PHASES, ACCESS_SAGA, GENESIS_HASH, OUTCOME_PHASES, JournalEntry, Phase, seal_entry,
)
from .observe import TRACE_KEY, trace_link, without_trace
from .sensitive import DEFAULT_SENSITIVITY, Sensitivity

__all__ = [
    "CLAIMANT_KEY", "CLAIM_PHASES", "FENCE_KEY", "LATE_KEY", "LATE_PHASES", "AppendDialect",
    "AppendRequest", "Clock", "EntryTagger", "SensitiveProtector", "Tail", "append_locked",
    "as_request", "as_requests",
    "claimant_of", "late_start", "new_claimant", "next_entry", "reopens", "replay_of", "seal",
    "stamp_from", "utc_now", "utc_stamp",
]

CLAIM_PHASES = frozenset({Phase.COMPENSATING, Phase.CONSUMED})
"""Phases whose entries are claims: each starts an action (an undo, the use of a decision) that
two writers could both start. Their payload carries the writer's nonce (:data:`CLAIMANT_KEY`)."""

CLAIMANT_KEY = "claimant"
"""Payload key of a claim's writer nonce (:func:`new_claimant`)."""


FENCE_KEY = "fence"
"""Payload key of an entry's fence token: the seq of the RUN_STARTED whose lease its writer held
(set by the journal from ``append(..., fence=n)``; never written by a caller)."""

LATE_KEY = "late"
"""Payload key marking a late entry (``true``): an outcome written after its writer's lease was
lost, under the lost lease's token (``append(..., late=True)``)."""

LATE_PHASES = OUTCOME_PHASES | {Phase.COMPENSATED, Phase.COMPENSATION_FAILED}
"""Phases an append may write late: the outcome of a call or of an undo that was running when
its writer lost the lease. An effect that happened is a fact; it is journaled, never dropped."""



def new_claimant() -> str:
    """A fresh claimant nonce (32 random hex digits): one per writer, i.e. per compensation pass
    or per resume, reused by that writer's retries of the same claim."""
    return uuid.uuid4().hex


def claimant_of(payload: Any) -> str | None:
    """The claimant nonce in a claim's payload (``None`` when it carries none)."""
    value = payload.get(CLAIMANT_KEY) if isinstance(payload, dict) else None
    return value if isinstance(value, str) and value else None

Clock = Callable[[], dt.datetime]
"""Returns the current time as an aware datetime (truncated to microseconds when recorded)."""


def utc_now() -> dt.datetime:
    """The default :data:`Clock`: the system time in UTC."""
    return dt.datetime.now(dt.timezone.utc)


_stamp_cache: tuple[int, str] = (-1, "")  # (second, its "YYYY-MM-DDTHH:MM:SS." prefix)


def utc_stamp() -> str:
    """The system time in UTC, already in the journal's fixed-width form
    (``2026-01-01T00:00:00.000000Z``): what :func:`utc_now` + ``format_timestamp`` give, without
    building a datetime per entry (the date-and-seconds prefix is cached per second; the cache
    is one tuple, replaced whole, so threads never see a half-updated one)."""
    global _stamp_cache
    seconds, micros = divmod(time.time_ns() // 1000, 1_000_000)
    cached_second, prefix = _stamp_cache
    if cached_second != seconds:
        prefix = dt.datetime.fromtimestamp(seconds, dt.timezone.utc).isoformat()[:-6] + "."
        _stamp_cache = (seconds, prefix)
    return f"{prefix}{micros:06d}Z"


def stamp_from(clock: Clock) -> str:
    """The fixed-width UTC text of ``clock()``; the fast path for the default clock."""
    return utc_stamp() if clock is utc_now else format_timestamp(clock())


class SensitiveProtector(Protocol):
    """Commits and seals a saga's sensitive values (``core.data_keys.SagaSecrets``)."""

    def protect(self, payload: Any, spec: Sensitivity, write_key: str) -> tuple[Any, bytes | None]:
        """``(payload with sensitive values committed, sealed bytes or None)``."""
        ...


class EntryTagger(Protocol):
    """Signs entries for one writer (``core.authenticity.EntryTagger``): carried by each of the
    writer's requests, never held by a backend, so writers with different keyrings can share
    one journal object."""

    @property
    def key_id(self) -> str | None:
        """The signing key's id (``None``: a tagger that refuses every append)."""
        ...

    def tag(self, unlinked: bytes) -> tuple[str, str]:
        """``(key_id, tag)`` over an entry's content without its chain links."""
        ...

    def tag_entry(self, entry: JournalEntry) -> JournalEntry:
        """``entry`` (sealed) with its tag."""
        ...


@dataclass(slots=True)
class AppendRequest:
    """What a writer asks to append; the backend adds ``seq``, ``prev_hash`` and the time.

    Not frozen on purpose: one is built per append on the hot path; nothing mutates it."""

    saga_id: str
    """Saga to append to."""
    phase: Phase
    """Entry phase."""
    write_key: str
    """Unique per logical write within the saga; reused by retries of that write."""
    tool: str | None = None
    """Tool name for tool entries."""
    call_id: str | None = None
    """The model's call id for tool entries."""
    payload: Any = None
    """Phase data, already converted by :func:`~sagacity_agents.core.canonical.to_canonical_value`."""
    stdlib_safe: bool = True
    """The converted payload holds no float and no key above U+FFFF (fast encoder applies)."""
    expected_seq: int | None = None
    """Append only while the saga's last entry has this ``seq`` (0: no entry); ``None``: always."""
    fence: int | None = None
    """Append only while the saga's newest RUN_STARTED has this ``seq``; ``None``: unfenced."""
    late: bool = False
    """A late outcome under ``fence``: recorded, not checked (see the module notes)."""
    tagger: EntryTagger | None = None
    """Signs the entry when it is sealed (the writer's keyring); ``None``: untagged."""
    sealed: bytes | None = None
    """The entry's sensitive values, encrypted (``core.data_keys``), stored beside the entry
    outside its hashed bytes and its tag (``JournalEntry.sealed``); ``None``: it has none stored."""

    @property
    def checks_fence(self) -> bool:
        """Whether the backend must check the saga's lease before inserting (read the saga's
        newest RUN_STARTED under its append lock and pass it to :func:`next_entry`)."""
        return self.fence is not None and not self.late

    @classmethod
    def build(
        cls,
        saga_id: str,
        phase: Phase,
        *,
        write_key: str,
        tool: str | None = None,
        call_id: str | None = None,
        payload: Any = None,
        expected_seq: int | None = None,
        fence: int | None = None,
        late: bool = False,
        tagger: EntryTagger | None = None,
        protect: SensitiveProtector | None = None,
        sensitive: Sensitivity | None = None,
        sealed: bytes | None = None,
    ) -> AppendRequest:
        """Validate and convert the arguments of a keyword append; with ``fence``, the
        token goes into the converted payload (:data:`FENCE_KEY`, and :data:`LATE_KEY` when
        ``late``); with ``protect`` (the saga's ``core.data_keys.SagaSecrets``), every sensitive
        value (``sensitive``: the tool's :class:`~.sensitive.Sensitivity`, else the defaults) is
        committed in the payload and sealed into :attr:`sealed` before the entry is hashed or
        tagged; and the trace current in this context (``core.observe.trace_link``: every
        backend stores the same bytes) under ``"trace"`` when the payload is a mapping.
        The sealed bytes (``protect``'s, else ``sealed`` as given: already sealed values) are
        stored with the entry outside its hashed bytes; a retry of the write returns the
        stored entry's.

        Raises:
            EncodingError: the payload has no canonical encoding.
            TypeError: a saga id or write key that is not a ``str``, or a tool or call id that is
                neither a ``str`` nor ``None`` (a ``uuid.UUID`` saga id: pass ``str(uuid)``).
                Refused here, before any backend sees it, so that it is this caller's error
                alone on every backend (SQLite would fail its binding inside a shared commit).
            ValueError: an empty saga id or write key, a negative ``expected_seq``, a claim
                (:data:`CLAIM_PHASES`) whose payload has no claimant nonce, a fenced payload
                that is not a mapping (or already holds the fence's keys), a fence below 1, or
                ``late`` without a fence or on a phase not in :data:`LATE_PHASES`, or an
                access-log phase (``entries.ACCESS_PHASES``) outside ``entries.ACCESS_SAGA``.
        """
        if not isinstance(saga_id, str) or not isinstance(write_key, str):
            raise TypeError(f"saga_id and write_key must be str, not {type(saga_id).__name__} "
                            f"and {type(write_key).__name__}")
        if not saga_id or not write_key:
            raise ValueError("saga_id and write_key must be non-empty strings")
        if tool is not None and not isinstance(tool, str):
            raise TypeError(f"tool must be a str or None, not {type(tool).__name__}")
        if call_id is not None and not isinstance(call_id, str):
            raise TypeError(f"call_id must be a str or None, not {type(call_id).__name__}")
        if expected_seq is not None and expected_seq < 0:
            raise ValueError("expected_seq must be >= 0 (0: the saga has no entry yet)")
        flags = [False]
        converted = to_canonical_value(payload, flags=flags)
        phase = phase if type(phase) is Phase else Phase(phase)
        if phase in ACCESS_PHASES and saga_id != ACCESS_SAGA:
            raise ValueError(f"a {phase.value} entry is written only in the access log, saga "
                             f"{ACCESS_SAGA!r} (core.access_log), not in {saga_id!r}")
        if phase in CLAIM_PHASES and claimant_of(converted) is None:
            raise ValueError(
                f"a {phase.value} entry is a claim: its payload must carry the writer's nonce "
                f"under {CLAIMANT_KEY!r} (core.journal.new_claimant())"
            )
        if sealed is not None and type(sealed) is not bytes:
            raise TypeError(f"sealed must be bytes or None, not {type(sealed).__name__}")
        if protect is not None:
            converted, sealed = protect.protect(converted, sensitive or DEFAULT_SENSITIVITY,
                                                write_key)
        if fence is not None or late:
            converted = _fenced_payload(phase, converted, fence, late)
        link = trace_link()
        if link is not None and isinstance(converted, dict) and TRACE_KEY not in converted:
            converted = {**converted, TRACE_KEY: link}  # the entry's trace (core.observe: why here)
        return cls(saga_id, phase, write_key, tool, call_id, converted, not flags[0], expected_seq,
                   fence, late, tagger, sealed)


def _fenced_payload(phase: Phase, converted: Any, fence: int | None, late: bool) -> dict[str, Any]:
    """``converted`` with the fence token (and the late mark) added; see :meth:`AppendRequest.build`."""
    if fence is None or isinstance(fence, bool) or not isinstance(fence, int) or fence < 1:
        raise ValueError(f"fence must be the seq (>= 1) of a RUN_STARTED entry, not {fence!r}"
                         + (" (a late entry needs its lost lease's fence)" if late else ""))
    if late and phase not in LATE_PHASES:
        raise ValueError(
            f"only the outcome of a call or of an undo may be written late, not {phase.value}"
        )
    if converted is None:
        converted = {}
    if not isinstance(converted, dict) or FENCE_KEY in converted or LATE_KEY in converted:
        raise ValueError(
            f"a fenced entry's payload must be a mapping without {FENCE_KEY!r} or {LATE_KEY!r} "
            "keys (the journal adds them)"
        )
    marked = {**converted, FENCE_KEY: fence}
    if late:
        marked[LATE_KEY] = True
    return marked


Tail = tuple[int, str, str]
"""The saga's last entry as a backend reads it under its append lock: (seq, hash, phase name)."""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def late_start(phase: Any, payload: Any) -> int | None:
    """The seq of the INTENT that a late outcome of a call names (``intent_seq``); ``None`` for
    any other entry (not late, not a call's outcome, or naming no INTENT by seq)."""
    if phase not in OUTCOME_PHASES or not isinstance(payload, Mapping) \
            or payload.get(LATE_KEY) is not True:
        return None
    return _int(payload.get("intent_seq"))


def reopens(phase: Any, payload: Any, intent: Any) -> bool:
    """Whether an entry may follow a SAGA_CLOSED: a late outcome of a call
    (:func:`late_start`) whose fence is the fence of ``intent``, the INTENT it names (an
    entry, or the fields of a stored row; ``None``: not found). The one entry a closed saga
    accepts (the module's rules), the shape ``verify`` accepts after a close (``core.chain``).

    Args:
        phase: the entry's phase; payload: its payload (with the fence the journal added).
        intent: the entry at the seq :func:`late_start` names.
    """
    named = late_start(phase, payload)
    if named is None or intent is None or intent.seq != named or intent.phase is not Phase.INTENT:
        return False
    started = intent.payload if isinstance(intent.payload, Mapping) else {}
    fence = _int(payload.get(FENCE_KEY))
    return fence is not None and fence == _int(started.get(FENCE_KEY))


def next_entry(
    request: AppendRequest, tail: Tail | None, now: dt.datetime | str, *, lease: int | None = None,
    start: Any = None,
) -> JournalEntry:
    """Seal ``request`` as the entry that follows ``tail`` (``None``: the saga's first entry).

    The shared append rule: backends call it with the tail read under their append lock, after
    the write-key check (so a retried write still returns its stored entry).

    Args:
        lease: the seq of the saga's newest RUN_STARTED, read under the same lock (``None``: it
            has none). Read only when ``request.checks_fence``; ignored otherwise.
        start: the entry at the seq :func:`late_start` names, read under the same lock, when
            the tail is SAGA_CLOSED and the request is a late outcome (``None``: not read, or
            no such entry).

    Raises:
        JournalClosedError: the saga's last entry is SAGA_CLOSED and the request is not a late
            outcome under its INTENT's fence (:func:`reopens`, given ``start``).
        JournalConflictError: ``request.expected_seq`` is set and is not the tail's ``seq``.
        LeaseLostError: ``request.fence`` is not ``lease``. Checked before the close rule: a
            holder whose lease another run took (and perhaps closed the saga with) learns that.
    """
    if request.checks_fence and request.fence != lease:
        raise LeaseLostError(
            f"saga {request.saga_id!r}: {request.phase.value} written under the run lease of "
            f"RUN_STARTED seq {request.fence}, but the saga's lease is now "
            + (f"RUN_STARTED seq {lease}" if lease is not None else "no run's")
            + ": another run took it over (this one stalled past its expiry); not written",
            saga_id=request.saga_id, fence=request.fence, current=lease,
        )
    if tail is not None and tail[2] == Phase.SAGA_CLOSED.value \
            and not reopens(request.phase, request.payload, start):
        raise JournalClosedError(
            f"saga {request.saga_id!r} is closed (SAGA_CLOSED at seq {tail[0]}); nothing is "
            f"appended after a close but the late outcome of a call under its INTENT's own "
            f"fence ({request.phase.value} refused)"
        )
    if request.expected_seq is not None and request.expected_seq != (0 if tail is None else tail[0]):
        raise JournalConflictError(
            f"saga {request.saga_id!r} ends at seq {0 if tail is None else tail[0]}, not "
            f"{request.expected_seq}: another writer appended first ({request.phase.value} not written)"
        )
    return seal_entry(
        saga_id=request.saga_id,
        seq=1 if tail is None else tail[0] + 1,
        phase=request.phase,
        tool=request.tool,
        call_id=request.call_id,
        write_key=request.write_key,
        payload=request.payload,
        recorded_at=now,
        prev_hash=GENESIS_HASH if tail is None else tail[1],
        converted=True,
        stdlib_safe=request.stdlib_safe,
        sealed=request.sealed,
    )


def replay_of(existing: JournalEntry, request: AppendRequest) -> JournalEntry:
    """Return ``existing`` when ``request`` is a retry of the same write (the shared rule every
    backend applies when ``request.write_key`` is already stored for the saga).

    The payloads are compared without their trace link (``core.observe.TRACE_KEY``): a retry
    written from another span (``settle`` after the call's span ended) is the same write.

    Raises:
        ClaimTakenError: ``request`` is a claim and the key holds a claim of the same phase by
            another writer (another claimant nonce, or none): refused, nothing written.
        JournalWriteError: the write key was already used for a different entry.
    """
    if request.phase in CLAIM_PHASES and existing.phase == request.phase:
        theirs = claimant_of(existing.payload)
        if theirs != claimant_of(request.payload):
            raise ClaimTakenError(
                f"{request.phase.value} {request.write_key!r} of saga {request.saga_id!r} is "
                f"already claimed by another writer (entry {existing.seq}, claimant {theirs}); "
                "the action is theirs: it is not started again",
                saga_id=request.saga_id, write_key=request.write_key, seq=existing.seq,
                claimant=theirs,
            )
    same = (
        existing.phase == request.phase
        and existing.tool == request.tool
        and existing.call_id == request.call_id
        # Compare encodings, not Python values: True == 1 and {"a": 1} == {"a": True}.
        and canonical_bytes(without_trace(existing.payload)) == canonical_bytes(without_trace(request.payload))
    )
    if not same:
        raise JournalWriteError(
            f"write key {request.write_key!r} of saga {request.saga_id!r} is already used by "
            f"entry {existing.seq} ({existing.phase}); a write key names one logical write"
        )
    return existing


def seal(request: AppendRequest, tail: Tail | None, now: dt.datetime | str, *,
         lease: int | None = None, start: Any = None) -> JournalEntry:
    """:func:`next_entry`, tagged by ``request.tagger`` when it has one: the entry a backend
    stores.

    Raises:
        The errors of :func:`next_entry`; ``JournalWriteError`` from a tagger that refuses (a
        keyring without a private key: nothing is written).
    """
    entry = next_entry(request, tail, now, lease=lease, start=start)
    return entry if request.tagger is None else request.tagger.tag_entry(entry)


H = TypeVar("H")
H_contra = TypeVar("H_contra", contravariant=True)


class AppendDialect(Protocol[H_contra]):
    """The pieces of the append rule a backend supplies, each run under its append lock, in its
    own transaction handle ``at`` (SQLite: the connection and the group's tails; memory: none).
    :func:`append_locked` runs them in the rule's order."""

    _clock: Clock

    def _stored_entry(self, at: H_contra, request: AppendRequest) -> JournalEntry | None:
        """The saga's stored entry under ``request.write_key`` (``None``: none)."""
        ...

    def _tail_of(self, at: H_contra, request: AppendRequest) -> Tail | None:
        """The saga's last entry (``None``: it has none)."""
        ...

    def _lease_of(self, at: H_contra, request: AppendRequest, tail: Tail | None) -> int | None:
        """The seq of the saga's newest RUN_STARTED at or after ``request.fence`` (``None``:
        none); asked only when ``request.checks_fence``."""
        ...

    def _entry_at(self, at: H_contra, request: AppendRequest, seq: int) -> JournalEntry | None:
        """The saga's stored entry at ``seq`` (``None``: none); asked only for a late outcome
        appended to a closed saga (the INTENT it names, :func:`reopens`)."""
        ...

    def _insert_entry(self, at: H_contra, request: AppendRequest, entry: JournalEntry,
                tail: Tail | None, lease: int | None) -> None:
        """Store ``entry``, sealed on ``tail`` (``lease`` as read, or ``None``)."""
        ...


def append_locked(dialect: AppendDialect[H], at: H, request: AppendRequest) -> tuple[JournalEntry, bool]:
    """The append rule, its steps in order, under the backend's append lock: a stored write key
    answers with its entry (:func:`replay_of`: the same write, or an error); else the tail and,
    for a fenced append, the lease are read, the entry sealed on them (:func:`seal`: the closed
    saga, ``expected_seq`` and the fence checked, the tag added) and inserted. On a closed
    saga, the INTENT a late outcome names is read too (:func:`reopens`).

    Returns:
        ``(entry, inserted)``: ``inserted`` is false for a retry of a stored write.

    Raises:
        The errors of :func:`replay_of` and :func:`seal`, with nothing inserted; the dialect's
        storage errors.
    """
    existing = dialect._stored_entry(at, request)
    if existing is not None:
        return replay_of(existing, request), False
    tail = dialect._tail_of(at, request)
    lease = dialect._lease_of(at, request, tail) if request.checks_fence else None
    start = None
    if tail is not None and tail[2] == Phase.SAGA_CLOSED.value:
        named = late_start(request.phase, request.payload)
        start = dialect._entry_at(at, request, named) if named is not None else None
    entry = seal(request, tail, stamp_from(dialect._clock), lease=lease, start=start)
    dialect._insert_entry(at, request, entry, tail, lease)
    return entry, True


def as_request(saga_id: AppendRequest | str, phase: Phase | str | None,
               fields: dict[str, Any]) -> AppendRequest:
    """The request a backend's ``append`` was given: the request itself, or the one the loose
    form ``append(saga_id, phase, write_key=..., ...)`` describes (:meth:`AppendRequest.build`).

    Raises:
        The errors of :meth:`AppendRequest.build`; TypeError: a request with more arguments, or
        the loose form without a phase.
    """
    if type(saga_id) is AppendRequest:
        if phase is not None or fields:
            raise TypeError("append(request) takes no other argument")
        return saga_id
    if phase is None:
        raise TypeError("append(saga_id, phase, ...) needs a phase")
    return AppendRequest.build(saga_id, phase, **fields)  # type: ignore[arg-type]


def as_requests(requests: Sequence[AppendRequest] | str,
                appends: Sequence[Mapping[str, Any]]) -> list[AppendRequest]:
    """The requests a backend's ``append_many`` was given: ``requests``, or those of the loose
    form ``append_many(saga_id, [{"phase": ..., "write_key": ...}, ...])``.

    Raises:
        The errors of :meth:`AppendRequest.build`.
    """
    if isinstance(requests, str):
        return [AppendRequest.build(requests, **spec) for spec in appends]
    return list(requests)
