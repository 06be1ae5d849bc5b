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
* The keeper renews only while the run makes progress (:class:`RunProgress`): an append by the
  run, a model-turn boundary, or a tool body still inside its deadline (its INTENT's
  ``deadline_seconds``, :data:`DEFAULT_CALL_DEADLINE` when absent). After ``max(3,
  ceil(longest deadline or model timeout in flight / lease_seconds))`` lease periods without
  progress it stops renewing and stops the run with
  :class:`~sagacity_agents.errors.RunStalledError` naming the step it waits on: a run stuck on an
  await that never ends cannot hold the saga for ever; the lease expires and a recovery takes
  it. A beat reads the saga's tail only (``core.journal.read_tail``), never the whole saga.
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
    JournalClosedError, JournalConflictError, JournalError, LeaseLostError, RunStalledError,
    SagaStateError,
)
from .declarations import DEFAULT_CALL_DEADLINE
from .entries import JournalEntry, Phase
from .journal import (
    FENCE_KEY, LATE_KEY, Journal, append_each, capabilities_of, read_tail, utc_now,
)
from .ledger import is_closed

__all__ = [
    "DEFAULT_CALL_DEADLINE", "DEFAULT_LEASE_SECONDS", "DEFAULT_MODEL_TIMEOUT", "Lease",
    "LeaseKeeper", "RunProgress", "acquire_lease", "check_lease_seconds",
    "completed_unclosed", "intent_in_doubt_note", "lease_of", "lease_seconds", "new_holder_id",
]

DEFAULT_LEASE_SECONDS = 30.0
"""How long a run's lease lasts after the saga's last entry, in seconds."""


DEFAULT_MODEL_TIMEOUT = 600.0
"""How long a model turn may take, in seconds, before a run waiting on it counts as stalled
(the OpenAI client's own default request timeout)."""

MIN_IDLE_PERIODS = 3
"""Lease periods without progress a keeper always allows before it stops renewing."""

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


def _as_hashed(seconds: float | int) -> float | int:
    """``seconds`` as its canonical bytes give it back (RFC 8785 writes 30.0 as 30): the payload an
    in-memory journal keeps then encodes to its own bytes (``core.chain._encodes_to``), and is
    verified at read speed instead of by the strict parser."""
    return int(seconds) if float(seconds).is_integer() else seconds


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
            # 30.0 as the bytes say it (RFC 8785: 30): an in-memory entry verifies at read speed
            "payload": {"agent": agent, "holder": holder, "lease_seconds": _as_hashed(seconds),
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


class RunProgress:
    """What a run is doing, as its :class:`LeaseKeeper` judges progress. Thread-safe enough for
    sync tools' worker threads (each update is one assignment or one dict operation).

    Progress is: an append by the run (:meth:`note`, or the keeper's ``touched``), a model-turn
    boundary (:meth:`turn_started`, :meth:`turn_ended`), or a tool body inside its deadline
    (:meth:`body_started` to :meth:`body_ended`; past ``deadline_seconds`` it is not).

    Args:
        clock: monotonic seconds (default ``time.monotonic``; tests inject one).
        model_timeout: seconds a model turn may take (default :data:`DEFAULT_MODEL_TIMEOUT`).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, *,
                 model_timeout: float = DEFAULT_MODEL_TIMEOUT) -> None:
        self.clock = clock
        self.model_timeout = model_timeout
        self.last = clock()
        """``clock()`` of the latest append or model-turn boundary."""
        self.turns = 0
        """Model turns started."""
        self._model_since: float | None = None
        self._bodies: dict[int, tuple[str, float, float]] = {}

    def note(self) -> None:
        """The run appended an entry (or otherwise moved on): progress now."""
        self.last = self.clock()

    def turn_started(self) -> None:
        """A model turn starts (``on_llm_start``): progress, and the model is in flight."""
        self.turns += 1
        self.last = self._model_since = self.clock()

    def turn_ended(self) -> None:
        """A model turn ended (``on_llm_end``, or an agent's start or end): progress."""
        self._model_since = None
        self.last = self.clock()

    def body_started(self, token: object, tool: str, call_id: str | None, payload: Any) -> None:
        """A tool body starts after its INTENT (``payload``: the INTENT's payload, whose
        ``deadline_seconds`` bounds it; :data:`DEFAULT_CALL_DEADLINE` when absent or not a
        number > 0). ``token``: what :meth:`body_ended` is called with."""
        deadline = payload.get("deadline_seconds") if isinstance(payload, Mapping) else None
        try:
            seconds = check_lease_seconds(deadline)
        except ValueError:
            seconds = DEFAULT_CALL_DEADLINE
        self.waiting(token, f"tool {tool}" + (f" (call {call_id})" if call_id else ""), seconds)

    def waiting(self, token: object, label: str, seconds: float) -> None:
        """The run waits on something bounded by ``seconds`` (a tool body, a human's decision):
        progress until then. ``label`` names it in a stall's message; ``token``: what
        :meth:`body_ended` is called with."""
        self._bodies[id(token)] = (label, self.clock(), seconds)

    def body_ended(self, token: object) -> None:
        """The body of :meth:`body_started`'s ``token`` ended (once or more: harmless)."""
        if self._bodies.pop(id(token), None) is not None:
            self.last = self.clock()

    def progress_at(self, now: float) -> float:
        """The latest moment the run made progress, as seen at ``now``: a body inside its
        deadline is progress until that deadline."""
        latest = self.last
        for _, started, seconds in list(self._bodies.values()):
            latest = max(latest, min(now, started + seconds))
        return latest

    def longest_wait(self) -> float:
        """The longest deadline (or model timeout) of what is in flight, in seconds (0: none)."""
        waits = [seconds for _, _, seconds in list(self._bodies.values())]
        if self._model_since is not None:
            waits.append(self.model_timeout)
        return max(waits, default=0.0)

    def waiting_on(self, now: float) -> str:
        """The step the run waits on, for an error message."""
        for label, started, seconds in list(self._bodies.values()):
            if now > started + seconds:
                return f"{label} past its deadline of {seconds:g} s"
        if self._model_since is not None:
            return f"model turn {self.turns}"
        bodies = [label for label, _, _ in list(self._bodies.values())]
        if bodies:
            return ", ".join(bodies)
        return f"the run's next step after model turn {self.turns}" if self.turns \
            else "the run's next step"


class LeaseKeeper:
    """Renews a held lease from the saga's own event loop while the saga writes nothing, as long
    as the run makes progress.

    Wakes every third of the duration; when nothing was journaled by the saga since the last
    wake-up (``touched()`` is older than that), it checks the lease is still this holder's (the
    saga's tail alone: ``core.journal.read_tail``) and journals LEASE_RENEWED under the lease's
    fence (the journal refuses it if another run took the lease). If the lease was lost (taken
    over after a stall: the journal refuses the fenced renewal, or the tail shows another run
    or the saga closed), it stops renewing, sets :attr:`lost` and calls ``on_lost``: the run
    stops at its next step.

    If the run made no progress (``progress``, :class:`RunProgress`; ``touched()`` counts as an
    append) for ``idle_periods`` lease periods (default ``max(3, ceil(longest deadline or model
    timeout in flight / seconds))``), it stops renewing, sets :attr:`stalled` (a
    :class:`~sagacity_agents.errors.RunStalledError` naming the step the run waits on, also the
    observable reason it stopped: :attr:`stopped_by`) and calls ``on_lost`` with it.

    Args:
        journal: the saga's journal.
        saga_id: the saga.
        holder: this run's holder id.
        seconds: the lease duration.
        touched: returns the ``time.monotonic()`` of the saga's latest journal write.
        fence: the seq of the lease's RUN_STARTED (``None``: renewals unfenced).
        on_lost: called once with a :class:`LeaseLostError` when the loss (or the stall) is seen.
        progress: the run's progress (``None``: every beat counts as progress, as before).
        idle_periods: lease periods without progress before it stops (an int >= 1; ``None``:
            the default above).
        sleep: awaits a number of seconds (default ``asyncio.sleep``; tests inject one).

    Raises:
        ValueError: ``idle_periods`` is not an int >= 1.
    """

    def __init__(
        self, journal: Journal, saga_id: str, holder: str, seconds: float,
        touched: Callable[[], float], *, fence: int | None = None,
        on_lost: Callable[[LeaseLostError], None] | None = None,
        progress: RunProgress | None = None, idle_periods: int | None = None,
        sleep: Callable[[float], Any] = asyncio.sleep,
    ) -> None:
        if idle_periods is not None and (isinstance(idle_periods, bool)
                                         or not isinstance(idle_periods, int) or idle_periods < 1):
            raise ValueError(f"idle_periods must be an int >= 1, got {idle_periods!r}")
        self.journal = journal
        self.saga_id = saga_id
        self.holder = holder
        self.seconds = seconds
        self.interval = seconds / 3
        self.touched = touched
        self.fence = fence
        self.on_lost = on_lost
        self.progress = progress
        self.idle_periods = idle_periods
        self.lost = False
        self.stalled: RunStalledError | None = None
        """Set when the keeper stopped because the run made no progress."""
        self.renewals = 0
        """LEASE_RENEWED entries this keeper journaled."""
        self._sleep = sleep
        self._renewals = itertools.count(1)
        self._clock = progress.clock if progress is not None else time.monotonic
        self._last_renewal = self._clock()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def stopped_by(self) -> type[LeaseLostError] | None:
        """Why the keeper stopped renewing: :class:`RunStalledError` (no progress),
        :class:`LeaseLostError` (another run holds the lease, or it was released), ``None``
        (it renews, or was stopped by its run)."""
        if self.stalled is not None:
            return RunStalledError
        return LeaseLostError if self.lost else None

    def start(self) -> None:
        """Start renewing (on the running loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._beat())

    async def stop(self) -> None:
        """Stop renewing (idempotent); returns once the keeper's task has ended, so no renewal
        lands after it.

        A cancellation alone does not stop the task for sure: Python 3.11's ``asyncio.wait_for``
        (inside psycopg_pool's wait for a connection) returns the result instead of raising
        when the cancellation and the result arrive together, and the beat goes on with the
        connection it got. So the keeper is also told to stop (checked after each of its
        awaits) and cancelled again until it has ended: a run never waits for ever on its
        keeper, renewing the lease it should release."""
        self._stopping = True
        task, self._task = self._task, None
        if task is None or task is asyncio.current_task():
            return
        while not task.done():
            task.cancel()
            await asyncio.wait((task,), timeout=max(self.interval, 0.05))
        if not task.cancelled():
            task.exception()  # retrieved: a beat that ended by an error has nothing to report

    def _lose(self, lost: LeaseLostError) -> None:
        self.lost = True
        if self.on_lost is not None:
            self.on_lost(lost)

    def _touched(self) -> float:
        touched = self.touched()
        if self.progress is not None and touched > self.progress.last:
            self.progress.last = touched  # an append by the run is progress
        return touched

    def check_progress(self) -> RunStalledError | None:
        """The stall error when the run made no progress for too long, else ``None``."""
        progress = self.progress
        if progress is None:
            return None
        self._touched()
        now = progress.clock()
        idle = now - progress.progress_at(now)
        periods = self.idle_periods or max(
            MIN_IDLE_PERIODS, math.ceil(progress.longest_wait() / self.seconds))
        if idle <= periods * self.seconds:
            return None
        waiting = progress.waiting_on(now)
        return RunStalledError(
            f"saga {self.saga_id}: no progress for {idle:.0f} s (over {periods} lease periods "
            f"of {self.seconds:g} s): waiting on {waiting}; the lease is no longer renewed and "
            "the run stops here (recover the saga once the lease has expired)",
            saga_id=self.saga_id, fence=self.fence, waiting_on=waiting, idle_seconds=idle)

    async def _beat(self) -> None:
        while not self._stopping:
            latest = max(self._touched(), self._last_renewal)
            await self._sleep(max(0.0, latest + self.interval - self._clock()))
            if self._stopping:
                return  # asked to stop while asleep, the cancellation lost on the way
            stalled = self.check_progress()
            if stalled is not None:
                self.stalled = await self._with_last_entry(stalled)
                self._lose(self.stalled)
                return
            if max(self._touched(), self._last_renewal) + self.interval > self._clock():
                continue  # the saga journaled meanwhile: that renewed the lease
            try:
                if not await self._renew():
                    return
            except LeaseLostError as lost:
                self._lose(lost)
                return
            except JournalConflictError:
                pass  # another entry landed: it renewed the lease (or the next beat sees a loss)
            except (JournalError, OSError):
                pass  # the journal is down: try again at the next beat
            self._last_renewal = self._clock()

    async def _with_last_entry(self, stalled: RunStalledError) -> RunStalledError:
        """``stalled``, naming the saga's newest entry too when the run's own step is not known
        (an undo of a recovery: ``waiting on the run's next step (its last entry: COMPENSATING of
        book_hotel (call c2), seq 7)``)."""
        if not stalled.waiting_on.startswith("the run's next step"):
            return stalled
        try:
            tail = await read_tail(self.journal, self.saga_id)
            if tail is not None and tail.phase is Phase.LEASE_RENEWED:
                # Once, at the stall: the run's own last step is under its renewals.
                tail = next((e for e in reversed(await self.journal.entries(self.saga_id))
                             if e.phase is not Phase.LEASE_RENEWED), None)
        except (JournalError, OSError):
            return stalled
        if tail is None:
            return stalled
        what = f"{Phase(tail.phase).value}" + (f" of {tail.tool}" if tail.tool else "") + (
            f" (call {tail.call_id})" if tail.call_id else "")
        waiting = f"{stalled.waiting_on} (its last entry: {what}, seq {tail.seq})"
        message = str(stalled).replace(f"waiting on {stalled.waiting_on}", f"waiting on {waiting}")
        return RunStalledError(message, saga_id=self.saga_id, fence=self.fence,
                               waiting_on=waiting, idle_seconds=stalled.idle_seconds)

    async def _renew(self) -> bool:
        """One beat's read and LEASE_RENEWED; ``False`` when the lease is seen gone (lost).

        Raises:
            LeaseLostError: the journal refused the fenced renewal.
            JournalError: the journal could not be read or written.
        """
        if self.fence is None:  # unfenced: only the whole saga tells whose the lease is
            entries = await self.journal.entries(self.saga_id)
            lease, tail = lease_of(entries), (entries[-1] if entries else None)
            gone = lease is None or lease.holder != self.holder or lease.ended
        else:  # the fenced append checks the lease; the tail shows a release or a close
            tail = await read_tail(self.journal, self.saga_id)
            lease = None
            gone = tail is None or tail.phase is Phase.SAGA_CLOSED or (
                tail.phase is Phase.RUN_ENDED and isinstance(tail.payload, dict)
                and tail.payload.get("holder") == self.holder) or (
                tail.phase is Phase.RUN_STARTED and tail.seq != self.fence)
        if self._stopping:
            return False  # stopped while reading: write nothing more
        if gone or tail is None:
            other: int | None
            if lease is not None:
                released, other = lease.ended and lease.holder == self.holder, lease.started_seq
            else:
                released = tail is not None and tail.phase in (Phase.RUN_ENDED, Phase.SAGA_CLOSED)
                other = tail.seq if tail is not None and tail.phase is Phase.RUN_STARTED else None
            self._lose(LeaseLostError(
                f"saga {self.saga_id}: the run lease of {self.holder} is gone ("
                + ("released" if released else "held by another run") + ")",
                saga_id=self.saga_id, fence=self.fence, current=other))
            return False
        await self.journal.append(
            self.saga_id, Phase.LEASE_RENEWED,
            write_key=f"lease:{self.holder}:{next(self._renewals)}",
            payload={"holder": self.holder}, expected_seq=tail.seq, fence=self.fence,
        )
        self.renewals += 1
        return True
