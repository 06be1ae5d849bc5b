"""A call's outcome: EXECUTED / REFUSED / FAILED as the body and the tool's classifier decide,
written after the body (or behind it, for journals that write outcomes behind), held in memory
and retried when the journal refuses it, and waited for before anything reads the saga's state.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ...errors import EncodingError
from ...errors import describe_error as _describe
from ..declarations import ToolDeclaration, Verdict
from ..entries import JournalEntry, Phase
from .lifecycle import RunLifecycle
from .payloads import encode_or_marker, with_result
from .state import CallFrame, InFlight
from .status import FailureRecord

__all__ = ["CallOutcomes"]


class CallOutcomes(RunLifecycle):
    """Deciding, writing and settling calls' outcomes (a layer of :class:`~.saga.Saga`)."""

    def _outcome(
        self, decl: ToolDeclaration, intent: JournalEntry, frame: CallFrame, result: Any = None,
        exc: BaseException | None = None, elapsed: float = 0.0,
    ) -> tuple[Phase, dict[str, Any], FailureRecord | None]:
        tool = intent.tool or ""
        base: dict[str, Any] = {"intent_seq": intent.seq}
        if exc is not None:
            cancelled = isinstance(exc, asyncio.CancelledError)
            timeout = self.tool_settings.get(tool, {}).get("timeout")
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
        # _write_outcome (never a repr).
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

    async def _write_outcome(
        self, intent: JournalEntry, phase: Phase, payload: dict[str, Any],
        failure: FailureRecord | None,
    ) -> JournalEntry | None:
        """Write the call's outcome (retried by :meth:`settle` when the journal refuses it);
        returns the entry, ``None`` when it is held unwritten."""
        kwargs: dict[str, Any] = {
            "write_key": f"{intent.write_key.rsplit(':', 1)[0]}:outcome",
            "tool": intent.tool,
            "call_id": intent.call_id,
        }
        seq, entry = None, None
        try:
            try:
                entry = await self.journal.append(self.saga_id, phase, payload=payload, **kwargs)
            except EncodingError:
                payload = {
                    key: (encode_or_marker(value) if key in ("result", "undo_data") else value)
                    for key, value in payload.items()
                }
                entry = await self.journal.append(self.saga_id, phase, payload=payload, **kwargs)
            seq = entry.seq
        except Exception:  # noqa: BLE001 - the outcome is kept and retried by settle()
            self._keep_unwritten(phase, payload, kwargs)
        if failure is not None:
            self._note_failure(
                FailureRecord(seq, failure.tool, failure.call_id, failure.error, failure.exception)
            )
        return entry

    def _write_behind(
        self, done: InFlight, intent: JournalEntry, phase: Phase, payload: dict[str, Any]
    ) -> None:
        """Write a successful call's outcome behind it: the result goes back to the agent now,
        the entry follows (after the previous outcome written behind, so outcomes keep the order
        in which calls ended). The call counts as in flight until the entry is written or held
        unwritten, so :meth:`settle` (before compensation, a verdict, the end of a run) waits
        for it. Only for successful calls: a failure is noted before the call returns."""
        previous = self._behind_last

        async def write() -> None:
            try:
                if previous is not None and not previous.done():
                    await asyncio.wait((previous,))
                await self._write_outcome(intent, phase, payload, None)
            finally:
                self._end(done)

        task = asyncio.ensure_future(write())
        self._behind.add(task)
        task.add_done_callback(self._behind.discard)
        self._behind_last = task

    async def outcomes_written(self) -> None:
        """Wait until every outcome written behind its call is in the journal or held unwritten
        (at most ``in_flight_timeout`` seconds); returns at once when none is pending."""
        if self._behind:
            await asyncio.wait(tuple(self._behind), timeout=self.in_flight_timeout)

    async def _finish_write(
        self, done: InFlight, intent: JournalEntry, phase: Phase,
        payload: dict[str, Any], failure: FailureRecord | None,
    ) -> None:
        try:
            await self._write_outcome(intent, phase, payload, failure)
        except asyncio.CancelledError:
            # Cancelled during the write (the SDK gives cancelled siblings ~0.25 s): finish it as
            # a task of its own, with the same write key (harmless if the first attempt landed),
            # and count the call in flight until it has, so settle() waits for it.
            task = asyncio.ensure_future(self._write_outcome(intent, phase, payload, failure))
            task.add_done_callback(lambda _t: self._end(done))
            raise
        except BaseException:
            self._end(done)
            raise
        self._end(done)

    async def settle(self) -> int:
        """Wait for calls still in flight (up to ``in_flight_timeout`` seconds), then retry any
        outcome write that failed earlier (same write key: harmless if it had landed).

        Returns:
            How many calls were still running when the wait gave up (their INTENTs are in doubt).
        """
        # Calls end on worker threads too; a short poll only runs while calls are still in
        # flight, i.e. after a run ended badly, never on the hot path.
        await self.outcomes_written()
        deadline = time.monotonic() + self.in_flight_timeout
        while self._active and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        with self._lock:
            unwritten, self._unwritten = self._unwritten, []
        for phase, kwargs in unwritten:
            try:
                await self.journal.append(self.saga_id, phase, **kwargs)
            except Exception:  # noqa: BLE001 - still kept; reported as in doubt
                with self._lock:
                    self._unwritten.append((phase, kwargs))
        with self._lock:
            return self._active

    @property
    def unwritten_outcomes(self) -> list[dict[str, Any]]:
        """Outcomes the journal refused and that are held in memory (journal down)."""
        with self._lock:
            return [{"phase": p.value, **k} for p, k in self._unwritten]
