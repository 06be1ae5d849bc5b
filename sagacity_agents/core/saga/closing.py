"""The end of a run: deciding how it ended, failing the saga (SAGA_FAILED), compensating (the
reverse walk is ``core.compensation``), and closing it (SAGA_CLOSED, terminal) or leaving it
open for more runs, approvals or recovery.

Rules: design.md, "Runs, leases and the end of a saga".
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from ...errors import (
    JournalConflictError, JournalError, JournalWriteError, LeaseLostError, SagaFailedError,
)
from ...errors import describe_error as _describe
from ..compensation import CompensationItem, CompensationReport, SagaLedger, compensate
from ..entries import Phase
from .declared import ToolRegistry
from .external import ExternalCalls
from .lifecycle import RunLifecycle
from .outcomes import OutcomeLog
from .state import SagaCore
from .status import FailureRecord, SagaStatus

__all__ = ["SagaEnding"]

_CLOSE_ATTEMPTS = 3
"""Compensations (each followed by a conditional close) one run makes before it leaves the saga
open for ``recover``: each retry follows an entry another writer appended meanwhile."""


@dataclass(eq=False)
class SagaEnding:
    """Failing, compensating and closing a saga (a part of :class:`~.saga.Saga`)."""

    core: SagaCore
    tools: ToolRegistry
    lifecycle: RunLifecycle
    outcomes: OutcomeLog
    external: ExternalCalls
    report: CompensationReport | None = None
    """The compensation report of the latest compensation (``None``: none)."""
    in_doubt: tuple[CompensationItem, ...] = ()
    """Every call whose outcome is unknown when the saga was last finished (its INTENT, or
    its undo's COMPENSATING, has no outcome in the journal)."""
    closed: bool = False
    """True once SAGA_CLOSED is journaled."""

    def fail_now(self, tool: str, call_id: str | None, reason: str) -> None:
        """Mark the saga failed without a failed call (e.g. a rejection under a policy that
        fails the saga); with :attr:`FailurePolicy.STOP` the run stops at its next step."""
        self.core.note_failure(FailureRecord(None, tool, call_id, reason))

    async def fail(self, reason: str) -> None:
        """Journal SAGA_FAILED with ``reason`` (once per saga: a saga already marked failed, e.g.
        by a process that died while compensating, keeps its first reason).

        Raises:
            JournalError: the entry could not be written and the saga is not marked failed.
        """
        try:
            await self.core.journal.append(
                self.core.saga_id, Phase.SAGA_FAILED, write_key="saga:failed", payload={"reason": reason}
            )
        except JournalWriteError:
            # Read, never the verified snapshot: it predates this write, which may have landed.
            entries = await self.core.journal.entries(self.core.saga_id)
            if not any(e.phase is Phase.SAGA_FAILED for e in entries):
                raise

    async def compensate(self) -> CompensationReport:
        """Settle in-flight calls, then undo EXECUTED compensatable effects in reverse order.

        Repeats while calls that were still running during a pass have since ended, so an
        outcome that arrives late is still undone or reported.

        Returns:
            The compensation report (also kept on :attr:`report`).
        """
        still_running = await self.outcomes.settle()
        stop = self.lifecycle.compensation_stop
        known, self.core.verified = self.core.verified, None  # the first pass only: later ones read anew
        report = await compensate(self.core.journal, self.core.saga_id, self.tools.declarations,
                                  evidence=self.core.evidence, stop=stop,
                                  agent_declarations=self.tools.agent_declarations,
                                  ledger=SagaLedger(known) if known is not None else None)
        while still_running and not stop.is_set():
            before = still_running
            still_running = await self.outcomes.settle()
            if still_running >= before:
                break
            # Undos this run just gave up on (timed out) are left to recovery, not rerun here.
            report = _merge(report, await compensate(self.core.journal, self.core.saga_id, self.tools.declarations,
                                                     evidence=self.core.evidence, stop=stop,
                                                     retry_timed_out=False,
                                                     agent_declarations=self.tools.agent_declarations))
        self.report = report
        return report

    def stop_compensation(self) -> None:
        """Stop compensating at the next step boundary (the run's caller was cancelled): the undo
        running is no longer waited for (journaled in doubt: it may have acted), no further undo
        starts, and the run ends as usual (RUN_ENDED releases the lease) for ``recover`` to
        finish. Idempotent; called on the saga's event loop."""
        self.lifecycle.compensation_stop.set()

    async def close(self, status: SagaStatus, **extra: Any) -> None:
        """End the run (RUN_ENDED) and journal SAGA_CLOSED with the final status and report.

        Closed is terminal: nothing is appended after it. Only COMPLETED and COMPENSATED sagas
        are closed; one that ended IN_DOUBT or COMPENSATION_FAILED stays open for recovery.
        A failed write is retried once (same write key), then recorded in
        :attr:`journal_errors`: the status stands, the journal shows the saga still open, and
        ``Sagacity.close_saga`` / ``recover`` can close it later. When :attr:`evidence` signs
        checkpoints, the saga's head is then signed and stored (a failure is recorded in
        :attr:`journal_errors` too).

        Raises:
            ValueError: ``status`` is not a closing status.
        """
        await self._close(status, extra)

    async def _close(self, status: SagaStatus, extra: dict[str, Any], after: int | None = None) -> bool:
        """:meth:`close`; with ``after`` (the last seq the compensation read), only while
        nothing but this saga's own entries followed it (``RunLifecycle.release_lease``).

        Returns:
            ``False`` when ``after`` is set and another writer's entry followed it before the
            run ended: nothing was written, the lease is still held (compensate again).
            ``True`` otherwise. When another writer's entry lands between RUN_ENDED and a
            SAGA_CLOSED written alone (after a failed batch), the saga is left open, IN_DOUBT.

        Raises:
            ValueError: ``status`` is not a closing status.
        """
        if status not in (SagaStatus.COMPLETED, SagaStatus.COMPENSATED):
            raise ValueError(f"a saga is closed COMPLETED or COMPENSATED, not {status.value}")
        payload: dict[str, Any] = {"status": status.value, **extra}
        if self.report is not None:
            payload["report"] = self.report.to_dict()
        closing: dict[str, Any] = {"phase": Phase.SAGA_CLOSED, "write_key": self.core.close_key,
                                   "payload": payload}
        try:
            stored = await self.lifecycle.release_lease(status, closing, after=after)
        except JournalConflictError:
            return False
        if self.core.lease_lost is not None:
            self.core.status = SagaStatus.LEASE_LOST  # another run holds the saga: it is theirs to close
            return True
        self.core.status = status
        self.closed = True
        # Closed is terminal: the process's copy of its keys goes (this object keeps its own for
        # the writes still to come), so a long-lived process holds no key per saga it ran.
        self.core.data_keys.forget(self.core.saga_id)
        # SAGA_CLOSED alone (retried once, same write key) when it did not go with RUN_ENDED.
        for attempt in () if stored else (1, 2):
            try:
                tail = None if after is None else self.core.journal.own_tail(after)
                if after is not None and tail is None:
                    raise JournalConflictError(f"another writer appended after seq {after}")
                await self.core.journal.append(self.core.saga_id, **closing, expected_seq=tail)
                break
            except JournalError as exc:
                if after is not None and isinstance(exc, JournalConflictError):
                    # The run has ended: what landed is for a recovery to undo, never closed over.
                    self.core.status, self.closed = SagaStatus.IN_DOUBT, False
                    self.core.journal_errors.append(
                        f"SAGA_CLOSED not journaled: an entry landed after seq {after}, which "
                        f"compensation read ({_describe(exc)}); left open: recover it")
                    return True
                if attempt == 2:
                    self.core.journal_errors.append(f"SAGA_CLOSED not journaled: {_describe(exc)}")
                    return True
        if self.core.evidence is not None and self.core.evidence.signs_checkpoints:
            try:
                await self.core.evidence.checkpoint(self.core.journal, self.core.saga_id)
            except Exception as exc:  # noqa: BLE001 - the saga's status stands; reported
                self.core.journal_errors.append(f"checkpoint not written: {_describe(exc)}")
        return True

    async def _end_open(self, status: SagaStatus) -> SagaStatus:
        """End the run and leave the saga open with ``status`` (more runs, approvals, or
        recovery to come)."""
        await self.lifecycle.end_run(status)
        # RUN_ENDED refused by the fence: another run took the saga over meanwhile
        self.core.status = SagaStatus.LEASE_LOST if self.core.lease_lost is not None else status
        return self.core.status

    async def finish(self, *, error: BaseException | None, close: bool) -> SagaStatus:
        """Decide how one run of the saga ended, compensate when it ended badly, and end the
        run (its lease is released): see :meth:`_finish`.

        Raises:
            asyncio.CancelledError: the calling task was cancelled; an undo running then was
                journaled in doubt, and the run ended IN_DOUBT (RUN_ENDED: its lease is no
                longer renewed) for ``recover`` to finish.
        """
        try:
            return await self._finish(error=error, close=close)
        except asyncio.CancelledError:
            self.lifecycle.compensation_stop.set()
            if self.core.lease_lost is None and self.lifecycle.running:
                await self._end_open(SagaStatus.IN_DOUBT)
            raise

    async def _finish(self, *, error: BaseException | None, close: bool) -> SagaStatus:
        """Decide how one run of the saga ended, compensating when it ended badly, and end the
        run (its lease is released).

        A run ended badly when it raised (``error``) or any call failed; then the saga is
        compensated and, when every effect was undone or kept on purpose (COMPENSATED), closed.
        A saga left COMPENSATION_FAILED or IN_DOUBT is *not* closed: it takes no more runs and
        waits, open, for :meth:`~sagacity_agents.Sagacity.recover` (design.md, "Runs, leases and
        the end of a saga"). A run that ended well closes the saga COMPLETED when ``close`` is
        true (IN_DOUBT, open, if some call has no outcome), and leaves it OPEN otherwise.

        A run that lost its lease (:attr:`lease_lost`: another run took the saga over while this
        one stalled) writes nothing more but the late outcomes of its calls still running: no
        SAGA_FAILED, no undo, no RUN_ENDED, no SAGA_CLOSED; its status is LEASE_LOST.

        Returns:
            The saga's status after this run.
        """
        if self.core.lease_lost is not None:
            return await self._end_lost()
        if error is not None or bool(self.core.failures):
            return await self._fail_and_undo(error)
        await self.outcomes.settle()
        if self.core.lease_lost is not None:
            return await self._end_lost()
        if close:
            if self.core.fresh_id:
                # Every entry of a saga this object created was written here: a call without
                # outcome would still be in flight (settle() waited) or held unwritten.
                in_doubt = bool(self.outcomes.active) or bool(self.external.pending_external_calls())
            else:
                known = self.core.verified or await self.core.journal.entries(self.core.saga_id)
                in_doubt = bool(SagaLedger(known).in_doubt())
            if in_doubt or self.outcomes.unwritten:  # name every call in doubt (never on the hot path)
                self.in_doubt = await self._calls_in_doubt()
                return await self._end_open(SagaStatus.IN_DOUBT)
            await self.close(SagaStatus.COMPLETED)
            return self.core.status  # LEASE_LOST when another run took the saga meanwhile
        return await self._end_open(SagaStatus.OPEN)

    async def _fail_and_undo(self, error: BaseException | None) -> SagaStatus:
        """The end of a run that ended badly (:meth:`_finish`): SAGA_FAILED, compensation, and
        the close when that leaves the saga COMPENSATED.

        The close is conditional on the entries the compensation read (``report.read_seq``):
        an entry another writer appended since (a stalled run's late outcome, landing while
        the undos ran) was not undone, so the saga is compensated again (the walk reads anew;
        undos already done are not rerun) and the close tried again, :data:`_CLOSE_ATTEMPTS`
        times at most; then the run ends IN_DOUBT, open, for ``recover``.
        """
        await self.outcomes.settle()
        if self.core.failures:
            first = self.core.failures[0]
            reason = f"{first.tool} (call {first.call_id}) failed: {first.error}"
            if error is not None and not isinstance(error, SagaFailedError):
                reason += f"; run raised {_describe(error)}"
        else:
            reason = f"run raised {_describe(error)}" if error is not None else "failed"
        try:
            await self.fail(reason)
        except LeaseLostError:
            return await self._end_lost()
        except JournalError as exc:  # compensation must not wait for the journal's health
            self.core.journal_errors.append(f"SAGA_FAILED not journaled: {_describe(exc)}")
        for _ in range(_CLOSE_ATTEMPTS):
            if self.core.lease_lost is not None:
                return await self._end_lost()
            try:
                report = await self.compensate()
            except LeaseLostError:
                return await self._end_lost()
            if self.core.lease_lost is not None:  # lost while an undo ran (its outcome went late)
                return await self._end_lost()
            self.in_doubt = report.in_doubt
            if report.failed:
                return await self._end_open(SagaStatus.COMPENSATION_FAILED)
            if report.in_doubt or self.outcomes.unwritten or self.core.journal_errors:
                return await self._end_open(SagaStatus.IN_DOUBT)
            if await self._close(SagaStatus.COMPENSATED, {}, after=report.read_seq):
                return self.core.status  # LEASE_LOST when another run took the saga meanwhile
        self.core.journal_errors.append(
            f"SAGA_CLOSED not journaled: other writers kept appending while the saga was "
            f"compensated ({_CLOSE_ATTEMPTS} attempts); left open: recover it")
        return await self._end_open(SagaStatus.IN_DOUBT)

    async def _end_lost(self) -> SagaStatus:
        """End a run that lost its lease: wait for its calls still running (their outcomes are
        written late, ``core.fence``), stop renewing, write nothing else."""
        await self.outcomes.settle()
        await self.lifecycle.release_lease(SagaStatus.LEASE_LOST)
        self.core.status = SagaStatus.LEASE_LOST
        return self.core.status

    async def _calls_in_doubt(self) -> tuple[CompensationItem, ...]:
        """INTENTs without outcome, from the journal, and calls whose outcome is held unwritten
        (from memory: the journal may be the reason they are)."""
        items: list[CompensationItem] = []
        try:
            entries = await self.core.journal.entries(self.core.saga_id)
            items = [CompensationItem(e.seq, e.tool, e.call_id, "INTENT without outcome")
                     for e in SagaLedger(entries).in_doubt()]
        except Exception:  # noqa: BLE001 - the journal is down; memory still names some calls
            pass
        seqs = {i.seq for i in items}
        for phase, kwargs in self.outcomes.unwritten:
            seq = (kwargs.get("payload") or {}).get("intent_seq")
            if isinstance(seq, int) and seq not in seqs:
                items.append(CompensationItem(seq, kwargs.get("tool"), kwargs.get("call_id"),
                                              f"{phase.value} outcome not journaled"))
        return tuple(sorted(items, key=lambda i: i.seq))


def _merge(first: CompensationReport, second: CompensationReport) -> CompensationReport:
    seen = {i.seq for i in first.undone + first.failed}
    return CompensationReport(
        undone=first.undone + tuple(i for i in second.undone if i.seq not in seen),
        failed=first.failed + tuple(i for i in second.failed if i.seq not in seen),
        kept_irreversible=second.kept_irreversible,
        no_undo=second.no_undo,
        in_doubt=second.in_doubt,
        approved_not_run=second.approved_not_run,
        contradicted=second.contradicted,
        read_seq=second.read_seq,
    )
