"""The journal contract every backend meets, and the append rule they share.

A journal is append-only and keeps one hash chain per saga. Appends to one saga are totally
ordered with no gaps, whatever the concurrency (tasks, threads, processes on one SQLite file).
Every append carries a *write key* chosen by the writer, unique per logical write and reused by
every retry of it: appending an entry whose key already exists returns the stored entry when it is
the same write, and raises when the key was used for something else (design.md, "Writes and keys").

Two more rules every backend applies through :func:`next_entry`, atomically with the append:

* SAGA_CLOSED is terminal: an append to a saga whose last entry is SAGA_CLOSED is refused
  (:class:`~sagacity_agents.errors.JournalClosedError`); a retry of the close itself still
  returns the stored entry (the write-key rule comes first).
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

The interface is async; backends that block (SQLite) run their I/O off the event loop.

Optional members a backend may add, read once per journal (:func:`capabilities_of`):
``append_many`` (appends in one round trip, :func:`append_each`), ``entries_many`` / ``rows_many``
(sagas in one read, :func:`read_sagas`), ``append_sync`` (a blocking, fenced append from a sync
tool's thread, where the class that defines ``append`` defines it) and ``writes_outcomes_behind``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import (
    ClaimTakenError, JournalClosedError, JournalConflictError, JournalWriteError, LeaseLostError,
)
from .canonical import canonical_bytes, format_timestamp, to_canonical_value
from .entries import GENESIS_HASH, OUTCOME_PHASES, JournalEntry, Phase, seal_entry
from .observe import TRACE_KEY, trace_link, without_trace

__all__ = [
    "CLAIMANT_KEY", "CLAIM_PHASES", "Capabilities", "capabilities_of", "FENCE_KEY", "LATE_KEY", "LATE_PHASES", "LAZY_PHASES", "lazy_phases", "AppendRequest", "Clock", "Journal", "SagaSummary", "Tail", "append_each", "claimant_of",
    "next_entry", "new_claimant", "read_saga_rows", "read_sagas", "replay_of", "stamp_from", "utc_now", "utc_stamp",
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


LAZY_PHASES = frozenset({Phase.SAGA_OPENED, Phase.RUN_STARTED})
"""Committed without waiting for the disk, always (docs/architecture.md, "One durable commit
per call"): nothing outside the journal follows from these entries alone, and the saga's next
durable commit (its first INTENT's, at the latest) makes them durable."""


def lazy_phases(*, durable_outcomes: bool) -> frozenset[Phase]:
    """The phases a backend commits without waiting for the disk (the commit rule of
    docs/architecture.md, "One durable commit per call"): :data:`LAZY_PHASES`, and a call's
    outcome (EXECUTED, REFUSED, FAILED) unless ``durable_outcomes``. A late outcome
    (``AppendRequest.late``) waits for the disk whatever its phase; every other entry (an INTENT,
    an approval pause, a compensation decision, an undo's outcome, RUN_ENDED, SAGA_CLOSED) waits.

    A power loss can then turn the last call's outcome into "in doubt" (never undone blindly)
    and lose nothing else: a call's INTENT is durable before its body runs, and the outcome is
    made durable by the next durable commit (the next INTENT, the end of the run) before anything
    depends on it. A process crash loses nothing (the commit is in the operating system's hands).
    """
    return LAZY_PHASES if durable_outcomes else LAZY_PHASES | OUTCOME_PHASES


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
    ) -> AppendRequest:
        """Validate and convert the arguments of :meth:`Journal.append`; with ``fence``, the
        token goes into the converted payload (:data:`FENCE_KEY`, and :data:`LATE_KEY` when
        ``late``), and the trace current in this context (``core.observe.trace_link``: every
        backend stores the same bytes) under ``"trace"`` when the payload is a mapping.

        Raises:
            EncodingError: the payload has no canonical encoding.
            TypeError: a saga id or write key that is not a ``str``, or a tool or call id that is
                neither a ``str`` nor ``None`` (a ``uuid.UUID`` saga id: pass ``str(uuid)``).
                Refused here, before any backend sees it, so that it is this caller's error
                alone on every backend (SQLite would fail its binding inside a shared commit).
            ValueError: an empty saga id or write key, a negative ``expected_seq``, a claim
                (:data:`CLAIM_PHASES`) whose payload has no claimant nonce, a fenced payload
                that is not a mapping (or already holds the fence's keys), a fence below 1, or
                ``late`` without a fence or on a phase not in :data:`LATE_PHASES`.
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
        if phase in CLAIM_PHASES and claimant_of(converted) is None:
            raise ValueError(
                f"a {phase.value} entry is a claim: its payload must carry the writer's nonce "
                f"under {CLAIMANT_KEY!r} (core.journal.new_claimant())"
            )
        if fence is not None or late:
            converted = _fenced_payload(phase, converted, fence, late)
        link = trace_link()
        if link is not None and isinstance(converted, dict) and TRACE_KEY not in converted:
            converted = {**converted, TRACE_KEY: link}  # the entry's trace (core.observe: why here)
        return cls(saga_id, phase, write_key, tool, call_id, converted, not flags[0], expected_seq,
                   fence, late)


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


@dataclass(frozen=True, slots=True)
class SagaSummary:
    """One saga as :meth:`Journal.saga_summaries` lists it: enough to show its status without
    reading its whole chain (a closed saga's last entry is its SAGA_CLOSED; an idle one's its
    RUN_ENDED). Unverified: verify the saga before acting on it."""

    saga_id: str
    """The saga's id."""
    entry_count: int
    """How many entries are stored for it."""
    first: JournalEntry
    """Its stored entry with the lowest ``seq`` (seq 1 unless entries were removed)."""
    last: JournalEntry
    """Its stored entry with the highest ``seq``."""


Tail = tuple[int, str, str]
"""The saga's last entry as a backend reads it under its append lock: (seq, hash, phase name)."""


def next_entry(
    request: AppendRequest, tail: Tail | None, now: dt.datetime | str, *, lease: int | None = None,
) -> JournalEntry:
    """Seal ``request`` as the entry that follows ``tail`` (``None``: the saga's first entry).

    The shared append rule: backends call it with the tail read under their append lock, after
    the write-key check (so a retried write still returns its stored entry).

    Args:
        lease: the seq of the saga's newest RUN_STARTED, read under the same lock (``None``: it
            has none). Read only when ``request.checks_fence``; ignored otherwise.

    Raises:
        JournalClosedError: the saga's last entry is SAGA_CLOSED (a closed saga is terminal).
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
    if tail is not None and tail[2] == Phase.SAGA_CLOSED.value:
        raise JournalClosedError(
            f"saga {request.saga_id!r} is closed (SAGA_CLOSED at seq {tail[0]}); nothing is "
            f"appended after a close ({request.phase.value} refused)"
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


@runtime_checkable
class Journal(Protocol):
    """An append-only, hash-chained store of journal entries (one chain per saga)."""

    async def append(
        self,
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
    ) -> JournalEntry:
        """Append one entry to ``saga_id``'s chain and return it once durably stored.

        Args:
            saga_id: the saga's id.
            phase: what the entry records.
            write_key: unique per logical write within the saga; a retry passes the same key.
            tool: tool name, for tool entries.
            call_id: the model's call id, for tool entries.
            payload: JSON-able data, converted by the canonical rules.
            expected_seq: append only while the saga's last entry has this ``seq`` (0: the saga
                has no entry yet); checked atomically with the append. ``None``: no condition.
            fence: the seq of the RUN_STARTED whose lease the writer holds: written only while
                it is the saga's newest RUN_STARTED, checked atomically with the append, and
                stored in the payload (which must then be a mapping or ``None``). ``None``:
                unfenced (a human's entry, a run's own RUN_STARTED).
            late: with ``fence``, an outcome whose writer lost that lease while the body ran:
                written without the check, marked late (:data:`LATE_PHASES` only).

        Returns:
            The stored entry (the earlier one when this is a retry of the same write).

        Raises:
            EncodingError: the payload has no canonical encoding (nothing is written).
            JournalClosedError: the saga is closed (its last entry is SAGA_CLOSED).
            JournalConflictError: ``expected_seq`` is not the saga's last ``seq``.
            LeaseLostError: (a ``JournalConflictError``) ``fence`` is not the saga's newest
                RUN_STARTED; nothing written.
            ClaimTakenError: (a ``JournalConflictError``) a claim whose write key another writer
                (another claimant nonce) already claimed.
            JournalWriteError: storage failed, or the write key names a different entry.
        """
        ...

    async def entries(self, saga_id: str) -> list[JournalEntry]:
        """Return the saga's entries in ``seq`` order, as stored (an empty list if unknown).

        Raises:
            JournalError: storage could not be read.
        """
        ...

    async def saga_ids(self) -> list[str]:
        """Return every saga id in the journal, oldest saga first.

        Raises:
            JournalError: storage could not be read.
        """
        ...

    async def saga_summaries(self, *, offset: int = 0, limit: int | None = None) -> list[SagaSummary]:
        """Return one page of :class:`SagaSummary`, in :meth:`saga_ids` order (oldest first).

        Cost: one pass over the journal's ``(saga_id, seq)`` index to count and order the sagas
        (no payload read), then the first and last entry of each saga of the page; never a
        whole chain.

        Args:
            offset: sagas to skip (>= 0).
            limit: most sagas to return (>= 0); ``None``: all of them.

        Raises:
            ValueError: a negative ``offset`` or ``limit``.
            JournalError: storage could not be read.
        """
        ...

    async def close(self) -> None:
        """Release connections and threads. Idempotent."""
        ...


def check_page(offset: int, limit: int | None) -> None:
    """Refuse a page that :meth:`Journal.saga_summaries` cannot serve (every backend calls it).

    Raises:
        ValueError: a negative ``offset`` or ``limit``, or one that is not an int.
    """
    for name, value in (("offset", offset), ("limit", limit)):
        if value is None and name == "limit":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, not {value!r}")


async def append_each(
    journal: Journal, saga_id: str, appends: Sequence[Mapping[str, Any]]
) -> list[JournalEntry]:
    """Append ``appends`` to ``saga_id`` in order: in one round trip where the backend has
    ``append_many`` (PostgreSQL), else one :meth:`Journal.append` after the other.

    Args:
        journal: the journal.
        saga_id: the saga.
        appends: keyword arguments of :meth:`Journal.append` (``phase``, ``write_key``, ...), one
            mapping per entry.

    Returns:
        The stored entries, in order.

    Raises:
        The errors of :meth:`Journal.append`, for the first append that fails: the appends before
        it are written, the ones after it are not.
    """
    many = getattr(journal, "append_many", None)
    if many is not None:
        return list(await many(saga_id, appends))
    return [await journal.append(saga_id, **spec) for spec in appends]


@dataclass(frozen=True, slots=True)
class Capabilities:
    """The optional members a journal has (see the module notes), read once per journal."""
    sync_append: bool = False  # append_sync, defined by the class that defines append
    batch_append: bool = False  # append_many
    rows_read: bool = False  # rows_many
    entries_many: bool = False  # entries_many
    outcomes_behind: bool = False  # writes_outcomes_behind


def capabilities_of(journal: Any) -> Capabilities:
    """What ``journal`` offers beyond :class:`Journal` (the one place its members are probed)."""
    def owner(name: str) -> type | None:
        return next((c for c in type(journal).__mro__ if name in c.__dict__), None)
    found = {field: bool(getattr(journal, member, False)) for field, member in (
        ("batch_append", "append_many"), ("rows_read", "rows_many"), ("entries_many", "entries_many"),
        ("outcomes_behind", "writes_outcomes_behind"))}
    sync = owner("append_sync")
    return Capabilities(sync_append=sync is not None and sync is owner("append"), **found)


READ_BATCH = 256
"""Sagas read per ``entries_many`` call by :func:`read_sagas`: one statement per batch, and a
bounded amount of the journal in memory at a time."""


async def read_sagas(
    journal: Journal, saga_ids: Sequence[str], *, batch: int = READ_BATCH
) -> AsyncIterator[tuple[str, list[JournalEntry]]]:
    """Yield ``(saga_id, entries)`` for each of ``saga_ids``, in that order: ``batch`` sagas per
    read where the backend has ``entries_many``, else one :meth:`Journal.entries` per saga.

    Args:
        journal: the journal.
        saga_ids: the sagas to read (an unknown one yields an empty list).
        batch: sagas per read (>= 1).

    Raises:
        JournalError: storage could not be read.
    """
    many = getattr(journal, "entries_many", None)
    if many is None:
        for saga_id in saga_ids:
            yield saga_id, await journal.entries(saga_id)
        return
    async with contextlib.aclosing(_batches(many, saga_ids, batch)) as found:
        async for item in found:
            yield item


async def read_saga_rows(
    journal: Journal, saga_ids: Sequence[str], *, batch: int = READ_BATCH
) -> AsyncIterator[tuple[str, list[tuple[Any, ...]]]]:
    """Yield ``(saga_id, rows)`` for each of ``saga_ids``, in that order, ``batch`` sagas per
    read: the stored rows (tuples of ``entries.CHAIN_COLUMNS``: no tags; ``seq`` order), no
    entry built; ``JournalEntry.from_row`` builds one from a row and two ``None`` tags.

    Args:
        journal: a journal with ``rows_many`` (the SQL backends; see the module's optional
            members).
        saga_ids: the sagas to read (an unknown one yields an empty list).
        batch: sagas per read (>= 1).

    Raises:
        JournalError: storage could not be read.
    """
    rows_many = journal.rows_many  # type: ignore[attr-defined]
    async with contextlib.aclosing(_batches(rows_many, saga_ids, batch)) as found:
        async for item in found:
            yield item


async def _batches(
    many: Callable[[list[str]], Any], saga_ids: Sequence[str], batch: int
) -> AsyncGenerator[tuple[str, Any], None]:
    """``(saga_id, many's list for it)`` for each of ``saga_ids``, ``batch`` per call of ``many``."""
    chunks = [list(saga_ids[start:start + batch]) for start in range(0, len(saga_ids), batch)]
    # The next batch is read (on the backend's thread, or by the server) while the caller
    # checks this one: the read and the check overlap.
    ahead = asyncio.ensure_future(many(chunks[0])) if chunks else None
    try:
        for i, chunk in enumerate(chunks):
            assert ahead is not None
            found = await ahead
            if i + 1 < len(chunks):
                ahead = asyncio.ensure_future(many(chunks[i + 1]))
                # Let the read start now (hand the statement to the backend's thread, or send
                # it to the server): the caller checks the batch without awaiting anything, so
                # the task would otherwise first run when it is awaited, and nothing overlap.
                await asyncio.sleep(0)
            else:
                ahead = None
            for saga_id in chunk:
                yield saga_id, found.get(saga_id, [])
    finally:
        if ahead is not None:  # the caller stopped early: the read ahead is not wanted
            ahead.add_done_callback(_retrieved)
            ahead.cancel()


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Mark an abandoned read's error as seen (asyncio would log it as never retrieved)."""
    if not task.cancelled():
        task.exception()
