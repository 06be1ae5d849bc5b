"""A call's outcome: EXECUTED / REFUSED / FAILED as the body and the tool's classifier decide,
written after the body (or behind it, for journals that write outcomes behind), held in memory
and retried when the journal refuses it, and waited for before anything reads the saga's state.

:class:`OutcomeLog` owns every way an outcome reaches the journal: :meth:`OutcomeLog.write_steps`
is the one write (append, mark an unencodable value, hold a refused entry), and
:meth:`OutcomeLog.finish_steps` ends a call with it (or writes it behind), whichever driver runs
the call (``steps.py``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ...errors import EncodingError
from ...errors import describe_error as _describe
from ..declarations import ToolDeclaration, Verdict
from ..entries import JournalEntry, Phase
from .declared import ToolRegistry
from .payloads import encode_or_marker, with_result
from .state import CallFrame, InFlight, SagaCore
from .status import FailureRecord
from .steps import Append, Steps, drive

__all__ = ["OutcomeLog", "outcome_keys"]


def outcome_keys(intent: JournalEntry) -> dict[str, Any]:
    """The write key, tool and call id of the outcome entry that answers ``intent``."""
    return {"write_key": f"{intent.write_key.rsplit(':', 1)[0]}:outcome",
            "tool": intent.tool, "call_id": intent.call_id}


class OutcomeLog:
    """Calls in flight and their outcomes: decided, written (or behind), held and retried (a
    part of :class:`~.saga.Saga`)."""

    def __init__(self, core: SagaCore, tools: ToolRegistry) -> None:
        self.core = core
        self.tools = tools
        self.active = 0
        """Calls between :meth:`begin` and :meth:`end` (any thread)."""
        self._unwritten: list[tuple[Phase, dict[str, Any]]] = []
        # Outcome entries written behind their calls (journals with ``outcomes_behind``): pending
        # writes, and the latest, which the next one waits for (outcomes keep call order).
        self.behind = core.capabilities.outcomes_behind
        self._behind: set[asyncio.Future[None]] = set()
        self._behind_last: asyncio.Future[None] | None = None

    def begin(self) -> InFlight:
        """Count a call in flight (its INTENT is about to be written: that renews the lease)."""
        core = self.core
        with core.lock:
            self.active += 1
        core.last_journaled = time.monotonic()
        return InFlight()

    def end(self, token: InFlight) -> None:
        """End a call counted by :meth:`begin` (once; later ends do nothing)."""
        core = self.core
        core.last_journaled = time.monotonic()
        core.progress.body_ended(token)
        with core.lock:
            if not token.ended:
                token.ended = True
                self.active -= 1

    def keep_unwritten(self, phase: Phase, payload: dict[str, Any], keys: dict[str, Any]) -> None:
        """Hold an outcome the journal refused; :meth:`settle` retries it with the same write key."""
        with self.core.lock:
            self._unwritten.append((phase, {"payload": payload, **keys}))

    def decide(
        self, decl: ToolDeclaration, intent: JournalEntry, frame: CallFrame, result: Any = None,
        exc: BaseException | None = None, elapsed: float = 0.0,
    ) -> tuple[Phase, dict[str, Any], FailureRecord | None]:
        """The call's outcome entry (phase, payload) and, when the call fails the saga, its
        failure record (its seq is filled in once written).

        Args:
            decl: the tool's declaration (its classifier).
            intent: the call's INTENT.
            frame: the call's frame (the undo data the body recorded).
            result: what the body returned.
            exc: what the body raised (``None``: it returned).
            elapsed: seconds the body ran (a cancellation at the tool's timeout is a timeout).
        """
        tool = intent.tool or ""
        base: dict[str, Any] = {"intent_seq": intent.seq}
        if exc is not None:
            return self._failed(tool, intent, frame, base, exc, elapsed)
        try:
            verdict = decl.verdict(result)
        except Exception as classify_exc:  # noqa: BLE001 - see below
            # The body returned, so its effect may exist: journal it as EXECUTED (undoable) and
            # fail the saga, rather than hide an effect behind FAILED.
            error = f"classifier raised {_describe(classify_exc)}"
            payload = {**with_result(base, result), "classifier_error": error}
            if frame.has_undo_data:
                payload["undo_data"] = frame.undo_data
            return Phase.EXECUTED, payload, FailureRecord(
                None, tool, intent.call_id, error, classify_exc
            )
        # Converted once, by the journal; a value with no encoding is marked on the retry in
        # write_steps (never a repr).
        payload = with_result(base, result)
        if frame.has_undo_data:
            payload["undo_data"] = frame.undo_data
        if verdict is Verdict.REFUSED:
            return Phase.REFUSED, payload, None
        if verdict is Verdict.FAILED:
            payload["error"] = "result classified as failed"
            return Phase.FAILED, payload, FailureRecord(None, tool, intent.call_id, payload["error"])
        if frame.undo_data_error is not None:
            # The effect exists, what its undo needs could not be journaled (record_undo_data
            # marked it): EXECUTED, and the saga fails; compensation reports it still dirty.
            error = (f"undo data could not be journaled ({frame.undo_data_error}): the effect "
                     "may exist and cannot be undone")
            return Phase.EXECUTED, payload, FailureRecord(None, tool, intent.call_id, error)
        return Phase.EXECUTED, payload, None

    def _failed(
        self, tool: str, intent: JournalEntry, frame: CallFrame, base: dict[str, Any],
        exc: BaseException, elapsed: float,
    ) -> tuple[Phase, dict[str, Any], FailureRecord]:
        cancelled = isinstance(exc, asyncio.CancelledError)
        timeout = self.tools.tool_settings.get(tool, {}).get("timeout")
        timed_out = bool(cancelled and timeout is not None and elapsed >= float(timeout) * 0.999)
        error = _describe(exc)
        if timed_out:
            error = f"timed out after {timeout} s (cancelled by the tool's own timeout)"
        elif cancelled:
            error = "cancelled before it finished (CancelledError)"
        payload = {**base, "error_type": type(exc).__qualname__, "error": error,
                   "cancelled": cancelled, "timed_out": timed_out}
        if frame.has_undo_data:
            # The body recorded the state before its change, then failed: the change may
            # have happened. Compensation runs the undo for such an entry too.
            payload["undo_data"] = frame.undo_data
        return Phase.FAILED, payload, FailureRecord(None, tool, intent.call_id, error, exc)

    def write_steps(
        self, phase: Phase, payload: dict[str, Any], keys: dict[str, Any],
        failure: FailureRecord | None = None,
    ) -> Steps[JournalEntry | None]:
        """The one write of an outcome: append it; a value with no canonical encoding is marked
        and the append retried; an append that fails is held for :meth:`settle` (same write
        key). ``failure`` is noted, with the entry's seq, whatever happened.

        Args:
            phase, payload: the entry.
            keys: ``write_key``, ``tool`` and ``call_id`` of the entry.
            failure: the saga's failure record when the call failed it.

        Returns:
            The entry, ``None`` when it is held unwritten.
        """
        entry = None
        try:
            try:
                entry = yield Append(phase, {"payload": payload, **keys})
            except EncodingError:
                payload = {
                    key: (encode_or_marker(value) if key in ("result", "undo_data") else value)
                    for key, value in payload.items()
                }
                entry = yield Append(phase, {"payload": payload, **keys})
        except Exception:  # noqa: BLE001 - the outcome is kept and retried by settle()
            self.keep_unwritten(phase, payload, keys)
        if failure is not None:
            seq = entry.seq if entry is not None else None
            self.core.note_failure(
                FailureRecord(seq, failure.tool, failure.call_id, failure.error, failure.exception))
        return entry

    async def write(
        self, phase: Phase, payload: dict[str, Any], keys: dict[str, Any],
        failure: FailureRecord | None = None,
    ) -> JournalEntry | None:
        """:meth:`write_steps` on the event loop."""
        return await drive(self.write_steps(phase, payload, keys, failure), self.core.journal,
                           self.core.saga_id)

    def finish_steps(
        self, done: InFlight, phase: Phase, payload: dict[str, Any], keys: dict[str, Any],
        failure: FailureRecord | None, *, on_loop: bool = False,
    ) -> Steps[JournalEntry | None]:
        """End a call with its outcome: written now (:meth:`write_steps`), or behind the call
        when the journal writes outcomes behind and the call did not fail the saga. The call
        counts in flight until its outcome is written or held.

        The outcome of a call that failed the saga is written from the event loop whichever
        driver runs the call (a sync body's worker thread hands it over): the rare path, one
        route for both (``on_loop``: this is that write).

        A cancellation during the write (the SDK gives cancelled siblings ~0.25 s) finishes it
        as a task of its own, with the same write key (harmless if the first attempt landed),
        and the call counts in flight until it has, so :meth:`settle` waits for it.

        Args:
            done: the call's in-flight token.
            phase, payload: the outcome entry.
            keys: its ``write_key``, ``tool`` and ``call_id`` (:func:`outcome_keys`).
            failure: the saga's failure record when the call failed it.

        Returns:
            The entry when it was written here (``None``: behind, or held unwritten).
        """
        if failure is not None and not on_loop:
            return (yield drive(self.finish_steps(done, phase, payload, keys, failure, on_loop=True),
                                self.core.journal, self.core.saga_id))
        if failure is None and self.behind:
            yield self._schedule_behind(done, phase, payload, keys)
            return None
        try:
            entry = yield from self.write_steps(phase, payload, keys, failure)
        except asyncio.CancelledError:
            task = asyncio.ensure_future(self.write(phase, payload, keys, failure))
            task.add_done_callback(lambda _t: self.end(done))
            raise
        except BaseException:
            self.end(done)
            raise
        self.end(done)
        return entry

    async def _schedule_behind(
        self, done: InFlight, phase: Phase, payload: dict[str, Any], keys: dict[str, Any]
    ) -> None:
        """Write a successful call's outcome behind it: the result goes back to the agent now,
        the entry follows (after the previous outcome written behind, so outcomes keep the order
        in which calls ended). The call counts as in flight until the entry is written or held
        unwritten, so :meth:`settle` (before compensation, a verdict, the end of a run) waits
        for it. Runs on the event loop."""
        previous = self._behind_last

        async def write() -> None:
            try:
                if previous is not None and not previous.done():
                    await asyncio.wait((previous,))
                await self.write(phase, payload, keys)
            finally:
                self.end(done)

        task = asyncio.ensure_future(write())
        self._behind.add(task)
        task.add_done_callback(self._behind.discard)
        self._behind_last = task

    async def outcomes_written(self) -> None:
        """Wait until every outcome written behind its call is in the journal or held unwritten
        (at most ``in_flight_timeout`` seconds); returns at once when none is pending."""
        if self._behind:
            await asyncio.wait(tuple(self._behind), timeout=self.core.in_flight_timeout)

    async def settle(self) -> int:
        """Wait for calls still in flight (up to ``in_flight_timeout`` seconds), then retry any
        outcome write that failed earlier (same write key: harmless if it had landed).

        Returns:
            How many calls were still running when the wait gave up (their INTENTs are in doubt).
        """
        core = self.core
        # Calls end on worker threads too; a short poll only runs while calls are still in
        # flight, i.e. after a run ended badly, never on the hot path.
        await self.outcomes_written()
        deadline = time.monotonic() + core.in_flight_timeout
        while self.active and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        with core.lock:
            unwritten, self._unwritten = self._unwritten, []
        for phase, kwargs in unwritten:
            try:
                await core.journal.append(core.saga_id, phase, **kwargs)
            except Exception:  # noqa: BLE001 - still kept; reported as in doubt
                with core.lock:
                    self._unwritten.append((phase, kwargs))
        with core.lock:
            return self.active

    @property
    def unwritten(self) -> list[tuple[Phase, dict[str, Any]]]:
        """The outcomes held unwritten, as ``(phase, append keywords)`` (a copy)."""
        with self.core.lock:
            return list(self._unwritten)

    @property
    def unwritten_outcomes(self) -> list[dict[str, Any]]:
        """Outcomes the journal refused and that are held in memory (journal down), without
        the tool's sensitivity (how the append protects them, not what it holds)."""
        return [{"phase": p.value, **{n: v for n, v in k.items() if n != "sensitive"}}
                for p, k in self.unwritten]
