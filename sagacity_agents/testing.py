"""Test helpers for applications built on sagacity-agents: a frozen clock and journal fault injection.

Nothing here imports the Agents SDK; the helpers work with any
:class:`~sagacity_agents.core.journal.Journal` backend.

* :class:`FrozenClock`: a :data:`~sagacity_agents.core.journal.Clock` that stands still until told
  to move (``advance``, ``set``, or an automatic ``tick`` per reading), so entries, their bytes and
  their hashes are reproducible across runs and backends::

      clock = FrozenClock(datetime(2026, 1, 1, tzinfo=timezone.utc))
      journal = InMemoryJournal(clock=clock)

* :class:`FaultyJournal` / :func:`make_failing`: wrap a journal so that chosen appends raise
  :class:`~sagacity_agents.errors.JournalWriteError`, to test what a saga does when storage
  fails: an INTENT that cannot be written means the tool body does not run; an EXECUTED entry
  that cannot be written keeps the outcome (held for a retried write)::

      journal = make_failing(InMemoryJournal(), phase=Phase.INTENT)          # every INTENT fails
      journal = make_failing(InMemoryJournal(), phase=Phase.EXECUTED, times=1)  # first one only
      journal = make_failing(InMemoryJournal(), nth=3)                        # the 3rd append

  With ``crash=True`` the chosen append kills the whole process with SIGKILL instead of raising
  (before or, with ``after_write=True``, right after the write): a process dying between two
  lines, for crash tests that run the saga in a child process and recover it from the journal.

  Batched appends (``append_many``, which PostgreSQL uses for RUN_ENDED + SAGA_CLOSED and for
  SAGA_OPENED + RUN_STARTED) go through the same rules, one attempt per entry.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .core.entries import JournalEntry, Phase
from .core.identity import journal_id_of
from .core.journal import (
    FENCE_KEY, LATE_KEY, AppendRequest, JournalBackend, append_requests, as_request, as_requests,
)
from .core.observe import TRACE_KEY
from .backends.memory.journal import InMemoryJournal
from .errors import JournalWriteError

__all__ = [
    "DEFAULT_START",
    "AppendAttempt",
    "FaultyJournal",
    "FrozenClock",
    "InMemoryJournal",
    "make_failing",
]

DEFAULT_START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
"""Where a :class:`FrozenClock` starts when no time is given: 2026-01-01T00:00:00Z."""


def _shift(value: dt.datetime, delta: dt.timedelta) -> dt.datetime:
    # Absolute-time arithmetic: plain ``value + delta`` is wall-clock arithmetic in ``value``'s
    # zone (wrong across a DST change) and resets ``fold``; going through UTC is neither.
    if not delta:
        return value
    return (value.astimezone(dt.UTC) + delta).astimezone(value.tzinfo)


def _aware(value: dt.datetime) -> dt.datetime:
    if not isinstance(value, dt.datetime):
        raise TypeError(f"expected a datetime, got {type(value).__qualname__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"naive datetime {value!r}: a clock must return aware datetimes")
    return value


class FrozenClock:
    """A clock that returns a fixed, aware datetime until moved.

    Pass it as ``clock=`` to a journal backend. Each call returns the current frozen time and then,
    if ``tick`` is not zero, moves it forward by ``tick`` seconds (so consecutive entries get
    distinct, predictable timestamps). Moves are in absolute time (across a DST change too) and
    keep the time zone of the current value. Moving backwards is allowed: journals order entries by
    sequence number, never by time, and tests may want to show that. Thread-safe.

    What is reproducible across runs: the timestamps, and therefore, for entries written with the
    same saga id, phases, tools, call ids, write keys and payloads, the canonical bytes and the
    hash chain. A saga driven by :class:`~sagacity_agents.Sagacity` or
    :class:`~sagacity_agents.SagaRunHooks` is *not* byte-for-byte reproducible even with this
    clock: its write keys carry a random per-process prefix (and a new saga gets a random id), so
    entry hashes differ from run to run; compare phases, tools and payloads instead, or append
    with fixed write keys to the journal directly.

    Args:
        start: the initial time, an aware datetime (any time zone; journals store it as UTC).
            Defaults to :data:`DEFAULT_START`.
        tick: seconds added after every reading (may be fractional or zero).

    Raises:
        ValueError: ``start`` is naive (no time zone).
        TypeError: ``start`` is not a datetime.
    """

    def __init__(self, start: dt.datetime | None = None, *, tick: float = 0.0) -> None:
        self._now = _aware(start) if start is not None else DEFAULT_START
        self._tick = dt.timedelta(seconds=tick)
        self._lock = threading.Lock()
        self.calls = 0
        """How many times the clock was read."""

    def __call__(self) -> dt.datetime:
        """Return the frozen time (then advance it by ``tick``)."""
        with self._lock:
            now = self._now
            self._now = _shift(now, self._tick)
            self.calls += 1
            return now

    @property
    def now(self) -> dt.datetime:
        """The time the next call will return, without reading (or ticking) the clock."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> dt.datetime:
        """Move the clock by ``seconds`` (negative moves it back) and return the new time.

        Args:
            seconds: how far to move; fractions below a microsecond are rounded by ``timedelta``.
        """
        with self._lock:
            self._now = _shift(self._now, dt.timedelta(seconds=seconds))
            return self._now

    def set(self, value: dt.datetime) -> None:
        """Set the clock to ``value``.

        Args:
            value: an aware datetime, in any time zone.

        Raises:
            ValueError: ``value`` is naive.
            TypeError: ``value`` is not a datetime.
        """
        value = _aware(value)
        with self._lock:
            self._now = value


@dataclass(frozen=True, slots=True)
class AppendAttempt:
    """One call to :meth:`FaultyJournal.append`, as a fault predicate sees it."""

    number: int
    """1-based count of append calls made through this wrapper (failed ones included)."""
    saga_id: str
    """The saga appended to."""
    phase: Phase
    """The entry's phase."""
    write_key: str
    """The writer's key for this write."""
    tool: str | None
    """Tool name, for tool entries."""
    call_id: str | None
    """The model's call id, for tool entries."""
    payload: Any
    """The payload as passed by the writer: as given to a loose-form append; from a request,
    in its canonical form, without the keys the journal adds (the fence, the late mark, the
    trace link)."""


Predicate = Callable[[AppendAttempt], bool]
"""Decides whether an append attempt fails."""


_ADDED_KEYS = (FENCE_KEY, LATE_KEY, TRACE_KEY)


def _caller_payload(payload: Any) -> Any:
    """A request's payload without the keys the journal adds to it (see ``AppendAttempt``)."""
    if isinstance(payload, dict) and any(key in payload for key in _ADDED_KEYS):
        return {k: v for k, v in payload.items() if k not in _ADDED_KEYS}
    return payload


class FaultyJournal:
    """Wrap a :class:`~sagacity_agents.core.journal.Journal` so that chosen appends fail.

    An append for which ``when`` returns true raises :class:`JournalWriteError` (by default
    *before* anything is written, like a storage outage; with ``after_write=True`` *after* the
    inner journal stored it, like a commit whose acknowledgement was lost, which is how a
    harmless retry with the same write key is tested). Batched appends (``append_many``) are
    intercepted too, entry by entry, under the same rules (see :meth:`append_many`). Reads
    (``entries``, ``saga_ids``) and ``close`` go straight to the wrapped journal, as does any
    other attribute (e.g. ``execute_sql`` on a
    :class:`~sagacity_agents.backends.sqlite.journal.SqliteJournal`).

    Args:
        inner: the journal that stores what does not fail.
        when: predicate over :class:`AppendAttempt`; ``None`` makes every append a candidate.
        times: fail at most this many times, then pass everything through (``None``: no limit).
        after_write: raise after the inner append succeeded instead of before it.
        message: text of the raised error (the attempt is appended to it).
        crash: instead of raising, kill this process with SIGKILL at that point (POSIX; no
            ``finally``, no flush, no outcome write: what a power cut or ``kill -9`` leaves).

    Attributes:
        attempts: every append attempt seen, in order.
        failures: the attempts that were made to fail.
        armed: set to ``False`` (or call :meth:`disarm`) to stop injecting faults.
    """

    def __init__(
        self,
        inner: JournalBackend,
        *,
        when: Predicate | None = None,
        times: int | None = None,
        after_write: bool = False,
        message: str = "injected journal write failure",
        crash: bool = False,
    ) -> None:
        if times is not None and times < 0:
            raise ValueError("times must be >= 0 or None")
        self.inner = inner
        self.when = when
        self.times = times
        self.after_write = after_write
        self.message = message
        self.crash = crash
        self.armed = True
        self.attempts: list[AppendAttempt] = []
        self.failures: list[AppendAttempt] = []
        self._lock = threading.Lock()

    def disarm(self) -> None:
        """Stop injecting faults; later appends pass through unchanged."""
        self.armed = False

    def arm(self) -> None:
        """Resume injecting faults (the ``times`` budget already used is not reset)."""
        self.armed = True

    def _register(
        self, saga_id: str, phase: Phase, write_key: str, tool: str | None, call_id: str | None,
        payload: Any,
    ) -> tuple[AppendAttempt, bool]:
        with self._lock:
            attempt = AppendAttempt(
                len(self.attempts) + 1, saga_id, phase, write_key, tool, call_id, payload
            )
            self.attempts.append(attempt)
            if not self.armed:
                return attempt, False
            if self.times is not None and len(self.failures) >= self.times:
                return attempt, False
            if self.when is not None and not self.when(attempt):
                return attempt, False
            self.failures.append(attempt)
            return attempt, True

    def _error(self, attempt: AppendAttempt) -> JournalWriteError:
        if self.crash:
            os.kill(os.getpid(), signal.SIGKILL)
        return JournalWriteError(
            f"{self.message}: append #{attempt.number} {attempt.phase.value} to saga "
            f"{attempt.saga_id!r} (write key {attempt.write_key!r})"
        )

    async def append(self, saga_id: AppendRequest | str, phase: Phase | None = None,
                     **fields: Any) -> JournalEntry:
        """Append through the wrapped journal unless this attempt is chosen to fail.

        Args:
            saga_id: the request (:meth:`JournalBackend.append`), or the loose form's saga id,
                with ``phase`` and the other keywords.

        Raises:
            JournalWriteError: the attempt matched the fault predicate (or the inner journal
                failed on its own).
            EncodingError: the payload has no canonical encoding (the loose form; a fault chosen
                before the write is raised first).
        """
        built = saga_id if type(saga_id) is AppendRequest else None
        if built is not None:
            attempt, fail = self._attempt(as_request(built, phase, fields))
        else:
            attempt, fail = self._register(
                saga_id, Phase(phase), fields.get("write_key"), fields.get("tool"),  # type: ignore[arg-type]
                fields.get("call_id"), fields.get("payload"))
        if fail and not self.after_write:
            raise self._error(attempt)
        request = built if built is not None else as_request(saga_id, phase, fields)
        entry = await self.inner.append(request)
        if fail:
            raise self._error(attempt)
        return entry

    def _attempt(self, request: AppendRequest) -> tuple[AppendAttempt, bool]:
        return self._register(request.saga_id, request.phase, request.write_key, request.tool,
                              request.call_id, _caller_payload(request.payload))

    async def append_many(
        self, requests: Sequence[AppendRequest] | str, appends: Sequence[Mapping[str, Any]] = (), /,
    ) -> list[JournalEntry]:
        """Several appends to one saga in order (``core.journal.append_requests``), each an
        attempt under the same fault rules as :meth:`append`.

        The entries before the first chosen one (and, with ``after_write``, that one too) are
        handed to the wrapped journal as one batch (its own ``append_many`` when it has one, so
        the batched path is what runs), then the fault is raised; the entries after it are not
        attempted, as when a real batch stops at its first refused append.

        Args:
            requests: the requests (or the loose form: the saga id, then one keyword mapping
                per entry).

        Returns:
            The stored entries, in order, when no fault was chosen.

        Raises:
            JournalWriteError: an entry matched the fault predicate (or the wrapped journal
                failed on its own); the ones before it are written, the ones after it are not.
        """
        batch = as_requests(requests, appends)
        chosen: AppendAttempt | None = None
        count = 0
        for request in batch:
            count += 1
            attempt, fail = self._attempt(request)
            if fail:
                chosen = attempt
                break
        if chosen is not None and not self.after_write:
            count -= 1  # the chosen entry fails before its write
        written = await append_requests(self.inner, batch[:count])
        if chosen is not None:
            raise self._error(chosen)
        return written

    async def entries(self, saga_id: str) -> list[JournalEntry]:
        """The wrapped journal's entries (reads never fail)."""
        return await self.inner.entries(saga_id)

    async def saga_ids(self) -> list[str]:
        """The wrapped journal's saga ids (reads never fail)."""
        return await self.inner.saga_ids()

    async def saga_summaries(self, *, offset: int = 0, limit: int | None = None) -> list[Any]:
        """The wrapped journal's saga summaries (reads never fail)."""
        return await self.inner.saga_summaries(offset=offset, limit=limit)

    async def journal_id(self) -> str | None:
        """The inner journal's id (``core.journal.Identified``; ``None``: it has none)."""
        return await journal_id_of(self.inner)

    async def close(self) -> None:
        """Close the wrapped journal."""
        await self.inner.close()

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes not found normally: delegate (execute_sql, _replace...).
        # Not the backend's append_sync: a sync tool's writes must meet the faults too (they
        # then go through append, on the saga's event loop).
        if name in ("inner", "append_sync"):
            raise AttributeError(name)
        return getattr(self.inner, name)


def make_failing(
    journal: JournalBackend,
    *,
    phase: Phase | str | Iterable[Phase | str] | None = None,
    nth: int | Iterable[int] | None = None,
    tool: str | None = None,
    saga_id: str | None = None,
    when: Predicate | None = None,
    times: int | None = None,
    after_write: bool = False,
    crash: bool = False,
) -> FaultyJournal:
    """Wrap ``journal`` so that appends matching every given condition raise JournalWriteError.

    Conditions combine with AND; with none given, every append fails.

    Args:
        journal: the journal to wrap.
        phase: fail only entries of this phase (or of any of these phases).
        nth: fail only the n-th append through the wrapper (1-based), or any of these numbers.
        tool: fail only entries for this tool name.
        saga_id: fail only entries of this saga.
        when: an extra predicate over :class:`AppendAttempt`.
        times: fail at most this many times (e.g. ``times=1`` for a fault that a retry survives).
        after_write: store the entry first, then raise (an acknowledgement lost after commit).
        crash: kill the process with SIGKILL instead of raising (see :class:`FaultyJournal`).

    Returns:
        The :class:`FaultyJournal` to hand to the code under test.

    Raises:
        ValueError: an unknown phase name, or ``nth`` below 1.
    """
    phases: frozenset[Phase] | None = None
    if phase is not None:
        items = [phase] if isinstance(phase, (Phase, str)) else list(phase)
        phases = frozenset(Phase(p) for p in items)
    numbers: frozenset[int] | None = None
    if nth is not None:
        numbers = frozenset([nth] if isinstance(nth, int) else nth)
        if any(n < 1 for n in numbers):
            raise ValueError("nth counts appends from 1")

    def predicate(attempt: AppendAttempt) -> bool:
        return (
            (phases is None or attempt.phase in phases)
            and (numbers is None or attempt.number in numbers)
            and (tool is None or attempt.tool == tool)
            and (saga_id is None or attempt.saga_id == saga_id)
            and (when is None or when(attempt))
        )

    return FaultyJournal(journal, when=predicate, times=times, after_write=after_write, crash=crash)
