"""The run lease: one run at a time per saga, recorded in the saga's own journal.

Rules (design.md, "Runs, leases and the end of a saga"):

* A run, a resume, a recovery or a close takes the saga's lease by journaling RUN_STARTED with a
  holder id (host, process id and a random part) and a lease duration. The append is conditional
  (``expected_seq``: the saga's tail as just read), so two writers cannot both take it: the one
  that loses re-reads the saga and finds the lease held.
* The lease is held from that RUN_STARTED until a RUN_ENDED of the same holder (or the saga's
  SAGA_CLOSED), and expires ``lease_seconds`` after the newest entry *the holder* wrote since the
  RUN_STARTED: every entry the running saga writes carries the lease's fence token
  (``core.fence``) and renews it; an entry of anyone else (a human's RESOLVED or decision, a late
  entry of an earlier holder) does not. While the saga writes nothing (a long tool body, a slow
  model) a :class:`LeaseKeeper` task of the saga's own journals LEASE_RENEWED every third of the
  duration; no scheduler outside the process.
* A held, unexpired lease of another holder refuses the new run with
  :class:`~sagacity_agents.errors.SagaStateError` before anything is written. An expired one (its
  holder died, or stalled longer than the duration) may be taken over; the new RUN_STARTED names
  the lease it replaced in ``took_over``.
* RUN_ENDED is also what tells an idle saga kept open between runs (``close=False``, or
  waiting for approval) from one whose process crashed mid-run.

Expiry compares ``recorded_at`` (written by the journal's clock) with this process's UTC clock:
hosts sharing a journal must keep their clocks roughly in sync (well within the duration). A
holder that stalls past its expiry (a blocked event loop, a suspended VM) may find its lease
taken over. The fence (``core.fence``) then stops it: the journal refuses every entry it writes
under the lost lease (only the outcomes of calls it had started are written, marked late), so
it starts no new tool body and never undoes or closes the saga. Choose a duration longer than
the stalls you expect all the same: a takeover turns the stalled run's work into a recovery.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import math
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import (
    JournalClosedError, JournalConflictError, JournalError, LeaseLostError, SagaStateError,
)
from .entries import JournalEntry, Phase
from .journal import FENCE_KEY, LATE_KEY, Journal, append_each, capabilities_of, utc_now
from .ledger import is_closed

__all__ = [
    "DEFAULT_LEASE_SECONDS", "Lease", "LeaseKeeper", "acquire_lease", "check_lease_seconds",
    "completed_unclosed", "intent_in_doubt_note", "lease_of", "lease_seconds", "new_holder_id",
]

DEFAULT_LEASE_SECONDS = 30.0
"""How long a run's lease lasts after the saga's last entry, in seconds."""

_ACQUIRE_ATTEMPTS = 50
"""Conditional RUN_STARTED appends tried before giving up (each loses only to a real write)."""


def _commit_rule(journal: Journal) -> dict[str, bool]:
    """The journal's commit rule for outcomes, journaled in RUN_STARTED so that a reader
    (``sagacity journal show``) sees under which rule the run wrote: ``{"durable_outcomes":
    bool}`` (``core.journal.lazy_phases``), or nothing for a journal that does not say."""
    durable = capabilities_of(journal).durable_outcomes
    return {} if durable is None else {"durable_outcomes": bool(durable)}


def check_lease_seconds(value: object) -> float:
    """``value`` as a lease duration in seconds, or a clear error.

    Raises:
        ValueError: not a real number (a bool, a string, ``None``), not finite, or not > 0.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"lease_seconds must be a number of seconds > 0, got {value!r}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"lease_seconds must be a finite number of seconds > 0, got {value!r}")
    return seconds


def new_holder_id() -> str:
    """A lease holder id: ``host:pid:random`` (unique per :class:`~sagacity_agents.core.saga.Saga`
    object, readable by an operator)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def _parse_stamp(stamp: str) -> dt.datetime:
    return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc)


@dataclass(frozen=True, slots=True)
class Lease:
    """A saga's latest run lease, as its journal shows it."""

    holder: str
    """Holder id of the RUN_STARTED that took it."""
    started_seq: int
    """Sequence number of that RUN_STARTED."""
    seconds: float
    """Its duration: how long after the newest entry it stays valid."""
    expires_at: dt.datetime
    """When it expires unless renewed (aware UTC): newest entry's ``recorded_at`` + ``seconds``."""
    ended: bool
    """A RUN_ENDED of the holder (or SAGA_CLOSED) followed it: released, not expired."""

    def held(self, now: dt.datetime | None = None) -> bool:
        """Whether the lease still excludes other runs at ``now`` (default: the UTC clock)."""
        return not self.ended and (now or utc_now()) < self.expires_at

    def describe(self) -> dict[str, Any]:
        """A JSON-able summary (journaled as ``took_over`` when the lease is taken over)."""
        return {"holder": self.holder, "run_seq": self.started_seq,
                "expired_at": self.expires_at.isoformat().replace("+00:00", "Z")}


def lease_of(entries: Sequence[JournalEntry]) -> Lease | None:
    """The lease of the saga's latest run (``None``: no run ever started, or the latest
    RUN_STARTED names no holder: written by a version without leases).

    Args:
        entries: the saga's entries in ``seq`` order.
    """
    start = None
    for position in range(len(entries) - 1, -1, -1):
        if entries[position].phase is Phase.RUN_STARTED:
            start = position
            break
    if start is None:
        return None
    first = entries[start]
    payload = first.payload if isinstance(first.payload, dict) else {}
    holder = str(payload.get("holder") or "")
    if not holder:
        return None
    seconds = lease_seconds(payload.get("lease_seconds"))
    ended = False
    newest = first
    for later in entries[start + 1:]:
        if later.phase is Phase.SAGA_CLOSED:
            ended = True
        elif later.phase is Phase.RUN_ENDED and isinstance(later.payload, dict) \
                and later.payload.get("holder") == holder:
            ended = True
        if _renews(later, first.seq, holder) and _stamp(later.recorded_at) is not None:
            newest = later
    began = _stamp(newest.recorded_at)
    try:
        expires = began + dt.timedelta(seconds=seconds) if began is not None else _NEVER_HELD
    except OverflowError:  # a duration past the calendar: held for good (a human ends it)
        expires = dt.datetime.max.replace(tzinfo=dt.timezone.utc)
    return Lease(holder, first.seq, seconds, expires, ended)


_NEVER_HELD = dt.datetime.min.replace(tzinfo=dt.timezone.utc)


def _stamp(recorded_at: Any) -> dt.datetime | None:
    """``recorded_at`` as a time, or ``None`` when a row holds something else."""
    try:
        return _parse_stamp(recorded_at)
    except (TypeError, ValueError):
        return None


def lease_seconds(value: Any) -> float:
    """A RUN_STARTED's ``lease_seconds`` as a duration: a finite number > 0, else
    :data:`DEFAULT_LEASE_SECONDS` (the library writes only such numbers; anything else, a
    string, a negative, NaN or infinity, is a row someone else wrote, and
    must not stop a reader such as ``recover --all``)."""
    try:
        return check_lease_seconds(value)
    except ValueError:
        return DEFAULT_LEASE_SECONDS


def _renews(entry: JournalEntry, run_seq: int, holder: str) -> bool:
    """Whether ``entry`` renews the lease of the RUN_STARTED at ``run_seq``: the holder's own
    entries only (a human's RESOLVED must not keep a dead holder's lease)."""
    payload = entry.payload if isinstance(entry.payload, dict) else {}
    if payload.get(LATE_KEY):
        return False
    if payload.get(FENCE_KEY) == run_seq:
        return True
    # Entries of versions before the fence name their holder only in run bookkeeping.
    return entry.phase in (Phase.LEASE_RENEWED, Phase.RUN_ENDED) and payload.get("holder") == holder


def intent_in_doubt_note(intent: JournalEntry, entries: Sequence[JournalEntry]) -> str:
    """The report line of an INTENT without outcome: ``"INTENT without outcome"``, plus a warning
    when the run that wrote it was taken over rather than ended: its holder may be alive and
    stalled, still running the call (a human who finds no effect *yet* must make sure that
    process has stopped before answering "not run").

    Args:
        intent: the INTENT.
        entries: the saga's entries in ``seq`` order.
    """
    payload = intent.payload if isinstance(intent.payload, dict) else {}
    fence = payload.get(FENCE_KEY)
    run = next((e for e in entries if e.seq == fence and e.phase is Phase.RUN_STARTED), None)
    if run is None:
        return "INTENT without outcome"
    holder = (run.payload or {}).get("holder") if isinstance(run.payload, dict) else None
    ended = any(e.phase is Phase.RUN_ENDED and isinstance(e.payload, dict)
                and e.payload.get("holder") == holder for e in entries if e.seq > run.seq)
    taken = any(e.phase is Phase.RUN_STARTED and isinstance(e.payload, dict)
                and isinstance(e.payload.get("took_over"), dict)
                and e.payload["took_over"].get("run_seq") == run.seq for e in entries)
    if ended or not taken:
        return "INTENT without outcome"
    return (f"INTENT without outcome; its run ({holder}) was taken over, not ended: that process "
            "may still be running this call, so make sure it has stopped before answering that "
            "the call did not run")


_RUN_BOOKKEEPING = frozenset({Phase.RUN_STARTED, Phase.LEASE_RENEWED, Phase.RUN_ENDED})


def completed_unclosed(entries: Sequence[JournalEntry]) -> bool:
    """Whether the saga's last run ended COMPLETED and only its SAGA_CLOSED is missing.

    That is what a process killed (or whose close write failed) between RUN_ENDED and
    SAGA_CLOSED leaves: the run decided the saga succeeded and journaled it. Recovery then
    finishes the close instead of undoing a completed saga. True when no SAGA_FAILED or
    SAGA_CLOSED is in the chain, the newest RUN_ENDED says COMPLETED, and only run bookkeeping
    (RUN_STARTED, LEASE_RENEWED, RUN_ENDED: e.g. an earlier recovery killed in turn) follows it.

    Args:
        entries: the saga's entries in ``seq`` order.
    """
    if any(e.phase in (Phase.SAGA_FAILED, Phase.SAGA_CLOSED) for e in entries):
        return False
    for entry in reversed(entries):
        if entry.phase is Phase.RUN_ENDED:
            payload = entry.payload if isinstance(entry.payload, dict) else {}
            return payload.get("status") == "COMPLETED"
        if entry.phase not in _RUN_BOOKKEEPING:
            return False
    return False


async def acquire_lease(
    journal: Journal, saga_id: str, *, holder: str, seconds: float, agent: str,
    check: Callable[[list[JournalEntry]], None] | None = None,
    opening: Mapping[str, Any] | None = None,
    known_entries: Sequence[JournalEntry] | None = None,
) -> JournalEntry:
    """Take ``saga_id``'s run lease for ``holder``: journal RUN_STARTED, conditionally.

    Args:
        journal: the saga's journal.
        saga_id: the saga.
        holder: the taker's holder id (:func:`new_holder_id`).
        seconds: the lease duration (> 0).
        agent: name of the agent (or operation: ``"recover"``, ``"close"``) taking it, journaled.
        check: called with the saga's entries before each attempt; raises to refuse the run
            (e.g. the saga failed), and then nothing is written.
        opening: the SAGA_OPENED append (keyword arguments of ``Journal.append``) of a saga the
            caller creates: the first attempt reads nothing and writes it just before
            RUN_STARTED, in one batch (``core.journal.append_each``); RUN_STARTED is conditional
            on following it, so if anything else was there the attempt fails and the next reads.
        known_entries: the saga's entries as the caller just read (and verified) them: the first
            attempt decides on these instead of reading; RUN_STARTED is conditional on their
            tail, so if anything was written since, the attempt fails and the next reads.

    Returns:
        The RUN_STARTED entry.

    Raises:
        SagaStateError: another holder's lease is held and unexpired, or the saga is closed
            (its last entry is SAGA_CLOSED; a saga a late outcome reopened is taken, when
            ``check`` lets it: a recovery); nothing was written.
        JournalError: the journal could not be read or written.
    """
    if seconds <= 0:
        raise ValueError("lease_seconds must be > 0")
    for attempt in range(_ACQUIRE_ATTEMPTS):
        batch = attempt == 0 and opening is not None
        if batch or (attempt == 0 and known_entries is not None):
            entries = [] if batch else list(known_entries or ())
        else:
            entries = await journal.entries(saga_id)
        if is_closed(entries):  # a reopened saga (core.ledger.reopened_by): ``check`` decides
            raise SagaStateError(f"saga {saga_id} is closed; a closed saga takes no more runs",
                                 code="SAGA_CLOSED")
        if check is not None:
            check(entries)
        lease = lease_of(entries)
        took_over = None
        if lease is not None and not lease.ended and lease.holder != holder:
            if lease.held():
                raise SagaStateError(
                    f"saga {saga_id} is running elsewhere: its run lease is held by "
                    f"{lease.holder} (RUN_STARTED seq {lease.started_seq}) until "
                    f"{lease.expires_at.isoformat()} at least; one run at a time per saga",
                    code="LEASE_HELD",
                )
            took_over = lease.describe()  # its holder died or stalled: journaled takeover
        tail = entries[-1].seq if entries else 0
        started: dict[str, Any] = {
            "phase": Phase.RUN_STARTED, "write_key": f"run:{holder}:{uuid.uuid4().hex[:8]}",
            "payload": {"agent": agent, "holder": holder, "lease_seconds": seconds,
                        "took_over": took_over, **_commit_rule(journal)},
            "expected_seq": tail + 1 if batch else tail,  # with the opening: right after it
        }
        try:
            if batch:
                assert opening is not None
                return (await append_each(journal, saga_id, [opening, started]))[-1]
            return await journal.append(saga_id, **started)
        except JournalClosedError as exc:
            # Closed between our read and our write (a concurrent run or recovery finished it).
            raise SagaStateError(
                f"saga {saga_id} is closed; a closed saga takes no more runs", code="SAGA_CLOSED"
            ) from exc
        except JournalConflictError:
            continue  # someone wrote in between: read again and decide again
    raise SagaStateError(f"saga {saga_id} is too busy to take its run lease; try again",
                         code="LEASE_BUSY")


class LeaseKeeper:
    """Renews a held lease from the saga's own event loop while the saga writes nothing.

    Wakes every third of the duration; when nothing was journaled by the saga since the last
    wake-up (``touched()`` is older than that), it checks the lease is still this holder's and
    journals LEASE_RENEWED under the lease's fence. If the lease was lost (taken over after a
    stall: the journal refuses the fenced renewal, or the saga shows another holder), it stops
    renewing, sets :attr:`lost` and calls ``on_lost``: the run stops at its next step.

    Args:
        journal: the saga's journal.
        saga_id: the saga.
        holder: this run's holder id.
        seconds: the lease duration.
        touched: returns the ``time.monotonic()`` of the saga's latest journal write.
        fence: the seq of the lease's RUN_STARTED (``None``: renewals unfenced).
        on_lost: called once with a :class:`LeaseLostError` when the loss is seen.
    """

    def __init__(
        self, journal: Journal, saga_id: str, holder: str, seconds: float,
        touched: Callable[[], float], *, fence: int | None = None,
        on_lost: Callable[[LeaseLostError], None] | None = None,
    ) -> None:
        self.journal = journal
        self.saga_id = saga_id
        self.holder = holder
        self.interval = seconds / 3
        self.touched = touched
        self.fence = fence
        self.on_lost = on_lost
        self.lost = False
        self._renewals = itertools.count(1)
        self._last_renewal = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start renewing (on the running loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._beat())

    async def stop(self) -> None:
        """Stop renewing (idempotent)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def _lose(self, lost: LeaseLostError) -> None:
        self.lost = True
        if self.on_lost is not None:
            self.on_lost(lost)

    async def _beat(self) -> None:
        while True:
            latest = max(self.touched(), self._last_renewal)
            await asyncio.sleep(max(0.0, latest + self.interval - time.monotonic()))
            if max(self.touched(), self._last_renewal) + self.interval > time.monotonic():
                continue  # the saga journaled meanwhile: that renewed the lease
            try:
                entries = await self.journal.entries(self.saga_id)
                lease = lease_of(entries)
                if lease is None or lease.holder != self.holder or lease.ended:
                    self._lose(LeaseLostError(
                        f"saga {self.saga_id}: the run lease of {self.holder} is gone ("
                        + ("released" if lease is not None and lease.ended and lease.holder == self.holder
                           else f"held by {lease.holder if lease else 'nobody'}") + ")",
                        saga_id=self.saga_id, fence=self.fence,
                        current=lease.started_seq if lease is not None else None))
                    return
                await self.journal.append(
                    self.saga_id, Phase.LEASE_RENEWED,
                    write_key=f"lease:{self.holder}:{next(self._renewals)}",
                    payload={"holder": self.holder}, expected_seq=entries[-1].seq, fence=self.fence,
                )
            except LeaseLostError as lost:
                self._lose(lost)
                return
            except JournalConflictError:
                pass  # another entry landed: it renewed the lease (or the next beat sees a loss)
            except (JournalError, OSError):
                pass  # the journal is down: try again at the next beat
            self._last_renewal = time.monotonic()
