"""The two jobs :class:`~.hooks.SagaRunHooks` hands to small objects beside its SDK callbacks:

* :class:`SagaScope`, the saga's scope around one run: entering binds the agent, opens the saga,
  takes its run lease and sets the ``contextvars`` the tool wrappers read; leaving compensates
  when the run ended badly, closes the saga or leaves it open, and releases the lease;
* :class:`ApprovalDriver`, the approvals of a run: a request per paused call, the checked resume,
  and whether the run ended waiting for a human.

No RunHooks callback fires when a run raises or is interrupted (sdk-notes.md, "Hooks"), which is
why the scope is an async context manager around the run rather than a pair of callbacks.
"""

from __future__ import annotations

import asyncio
import contextvars
from dataclasses import dataclass
from typing import Any

from agents import Agent

from ..core.approval import ApprovalStore
from ..core.entries import Phase
from ..core.journal import Journal
from ..core.saga import Saga, SagaStatus, current_saga
from ..errors import ApprovalError, ConfigurationError, SagaStateError
from .approvals import ApprovalDesk, PauseOutcome
from .binding import bind_agent
from .nested import install_nested_runner, strict_scope
from .tracing import end_run_span, run_span

__all__ = ["ApprovalDriver", "SagaScope"]

_FINALIZING: set[asyncio.Future[Any]] = set()
"""Finalizations still running after their caller was cancelled (kept referenced)."""


_NO_TTL = 365 * 24 * 3600.0
"""How long a run may wait for a human's decision on requests that never expire (seconds)."""


class ApprovalDriver:
    """The approvals of one run of a saga (see :class:`~.hooks.SagaRunHooks`'s ``approval_driver``).

    Args:
        saga: the saga.
        agent: the agent the run starts with (``None``: not given; approvals then refuse).
        store: the approval store (``None``: no approvals: :attr:`desk` is ``None``).
        ttl: seconds before a request expires (``None``: never).
        fail_on_rejection: a rejected call fails the saga at resume.
    """

    def __init__(self, saga: Saga, agent: Agent[Any] | None, store: ApprovalStore | None,
                 ttl: float | None, fail_on_rejection: bool) -> None:
        self.saga = saga
        self.agent = agent
        self.desk = (ApprovalDesk(saga.journal, store, ttl=ttl, evidence=saga.evidence)
                     if store is not None else None)
        """The approval desk (requests, decisions, resume checks); ``None`` without a store."""
        self.fail_on_rejection = fail_on_rejection
        self.pending: bool | None = None
        """Whether the run returned with calls paused for approval; ``None`` until told (the
        facade tells it); else inferred from :attr:`asked_irreversible` (:meth:`waiting`)."""
        self.asked_irreversible: set[str] = set()
        """Call ids of irreversible calls the model asked for."""
        self.snapshot_used = False  # this run paused or resumed: its snapshot is ours to delete
        self.resume_refused = False  # the latest resume was refused: nothing changed

    def desk_for(self, what: str, entered: bool) -> ApprovalDesk:
        """The desk, for ``what`` (a method's name, said in the errors).

        Raises:
            SagaStateError: the scope is not entered.
            ConfigurationError: no approval store or no agent was given.
        """
        if not entered:
            raise SagaStateError(f"{what} needs the saga entered: call it inside `async with hooks`")
        if self.desk is None:
            raise ConfigurationError(f"{what} needs an approval store: SagaRunHooks(..., approvals=store)")
        if self.agent is None:
            raise ConfigurationError(f"{what} needs the agent: SagaRunHooks(..., agent=agent)")
        return self.desk

    async def request(self, result: Any, entered: bool) -> PauseOutcome:
        """See :meth:`~.hooks.SagaRunHooks.request_approvals`."""
        desk = self.desk_for("request_approvals", entered)
        if not getattr(result, "interruptions", None):
            self.pending = False
            return PauseOutcome((), None)
        outcome = await desk.pause(self.saga, self.agent, result.to_state())  # type: ignore[arg-type]
        self.pending = bool(outcome.requests)
        self.snapshot_used = self.snapshot_used or bool(outcome.requests)
        if outcome.requests:
            # A human decides within the requests' lifetime: the lease keeper counts the wait as
            # progress until then (core.lease), so an inline approver may take its time.
            self.saga.core.progress.waiting(
                self, f"approval of {len(outcome.requests)} call(s)", desk.ttl or _NO_TTL)
        return outcome

    async def resume(self, context: Any, entered: bool) -> Any:
        """See :meth:`~.hooks.SagaRunHooks.resume_state`."""
        desk = self.desk_for("resume_state", entered)
        self.saga.core.progress.body_ended(self)  # the decisions are in: no longer waiting
        try:
            state, decisions = await desk.restore(self.saga, self.agent, context)  # type: ignore[arg-type]
        except ApprovalError:
            self.resume_refused = True
            raise
        self.snapshot_used = True
        self.saga.resumed_approvals.update(d.call_id for d in decisions if d.approved)
        if self.fail_on_rejection:
            for decision in decisions:
                if not decision.approved:
                    self.saga.fail_now(decision.tool, decision.call_id,
                                       f"rejected (request {decision.request_id})")
        return state

    async def waiting(self, exc: BaseException | None) -> bool:
        """Whether the run that ended with ``exc`` ends waiting for approvals: it returned, some
        call is paused (told, or inferred: an irreversible call the model asked for has no
        INTENT, rejection or refusal), and nothing failed."""
        saga = self.saga
        if exc is None and self.pending is None and self.asked_irreversible:
            settled = {
                e.call_id
                for e in await saga.journal.entries(saga.saga_id)
                if e.phase in (Phase.INTENT, Phase.REJECTED, Phase.FAILED, Phase.REFUSED)
            }
            self.pending = bool(self.asked_irreversible - settled)
        return bool(exc is None and self.pending and not saga.failed)

    async def release_snapshot(self) -> None:
        """Delete the run's stored snapshot when this run paused or resumed (nothing waits on it
        any more: every request is consumed)."""
        if self.snapshot_used and self.desk is not None:
            await self.desk.store.delete_snapshot(self.saga.saga_id)


@dataclass(eq=False)
class SagaScope:
    """The saga's scope around one run (see :class:`~.hooks.SagaRunHooks`)."""

    saga: Saga
    agent: Agent[Any] | None
    """The agent the run starts with (bound on enter), or ``None``."""
    approval_driver: ApprovalDriver
    """The run's approvals (requests, the checked resume)."""
    close: bool
    """Close the saga when the run ends well."""
    strict: bool
    """Refuse undeclared function tools (bound on enter, set for the run's calls)."""
    own_journal: Journal | None
    """A journal opened for this scope (closed when it is left), else ``None``."""
    journal_released: bool = False
    entered: bool = False
    status: SagaStatus | None = None
    _token: contextvars.Token[Saga | None] | None = None
    _strict_token: contextvars.Token[bool] | None = None
    _run_span: Any = None  # the saga.run span of the block (sdk/tracing.py)

    async def enter(self) -> None:
        """Bind the agent, open the saga and take its run lease, set the run's context.

        Raises:
            SagaStateError: a saga is already active in this context; the scope is entered,
                or spent (its own journal closed); another run holds the lease.
            ConfigurationError: the agent's tools fail the start-up checks.
        """
        if current_saga.get() is not None:
            raise SagaStateError(
                "a saga is already active in this context; nested runs inside a wrapped tool "
                "join it automatically (call Runner.run without SagaRunHooks)"
            )
        if self.entered:
            raise SagaStateError("this SagaRunHooks is already entered")
        if self.journal_released:
            raise SagaStateError("these SagaRunHooks opened their journal from a path and closed it "
                                 "when their block was left: make new ones for the next run")
        saga, agent = self.saga, self.agent
        # The saga.run span, begun first so that the run's entries carry it (sdk/tracing.py).
        self._run_span = run_span(saga.saga_id, agent.name if agent is not None else None)
        try:
            if agent is not None:
                bind_agent(saga, agent, strict=self.strict)
            await saga.begin_run(agent.name if agent is not None else "")
        except BaseException as exc:
            end_run_span(self._run_span, "NOT_STARTED", None, exc)
            self._run_span = None
            await self.release_journal()
            raise
        install_nested_runner()  # nested runs of this saga journal their undeclared calls too
        self._token = current_saga.set(saga)
        self._strict_token = strict_scope.set(self.strict)
        self.entered = True

    async def leave(self, exc: BaseException | None) -> None:
        """Finish the run that ended with ``exc`` (:attr:`status` is set) and end its span.

        Raises:
            asyncio.CancelledError: the caller was cancelled while the saga was finished.
        """
        span, self._run_span = self._run_span, None
        try:
            await self._leave(exc)
        finally:
            end_run_span(span, self.status, self.saga.report, exc)

    async def _leave(self, exc: BaseException | None) -> None:
        if self._token is not None:
            current_saga.reset(self._token)
            self._token = None
        if self._strict_token is not None:
            strict_scope.reset(self._strict_token)
            self._strict_token = None
        self.entered = False
        if self.approval_driver.resume_refused and isinstance(exc, ApprovalError):
            # A refused resume changes nothing: no compensation, the saga still waits.
            self.approval_driver.resume_refused = False
            try:
                await self.saga.end_run(SagaStatus.AWAITING_APPROVAL)
            finally:
                await self.release_journal()
            self.status = SagaStatus.AWAITING_APPROVAL
            return
        # Finalizing (compensation above all) runs as its own task, shielded, so that no journal
        # write of it is interrupted. A caller cancelled while it runs (asyncio.wait_for giving
        # up, a second task.cancel(), an anyio/Starlette cancel scope) stops compensation at its
        # next step boundary: the undo running is no longer waited for (journaled in doubt), no
        # further undo starts, the run ends (RUN_ENDED: the lease is no longer renewed), and
        # `recover` finishes the rest. The caller waits for that wrap-up (a few journal writes)
        # unless it is cancelled once more.
        finalize = asyncio.ensure_future(self._finalize_and_release(exc))
        _FINALIZING.add(finalize)
        finalize.add_done_callback(_FINALIZING.discard)
        try:
            self.status = await asyncio.shield(finalize)
        except asyncio.CancelledError:
            self.saga.stop_compensation()
            try:
                self.status = await asyncio.shield(finalize)
            except asyncio.CancelledError:
                pass  # cancelled again: the wrap-up goes on without us
            raise

    async def release_journal(self) -> None:
        """Close the journal this scope opened from a path or URI (none otherwise); the scope
        then refuses another block."""
        if self.own_journal is not None and not self.journal_released:
            self.journal_released = True
            await self.own_journal.close()

    async def _finalize_and_release(self, exc: BaseException | None) -> SagaStatus:
        try:
            return await self._finalize(exc)
        finally:
            await self.release_journal()

    async def _finalize(self, exc: BaseException | None) -> SagaStatus:
        saga = self.saga
        if saga.lease_lost is not None:  # another run holds the saga: write nothing more
            return await saga.finish(error=exc, close=self.close)
        if await self.approval_driver.waiting(exc):
            await saga.settle()
            await saga.end_run(SagaStatus.AWAITING_APPROVAL)
            if saga.lease_lost is not None:  # RUN_ENDED refused: another run holds the saga
                return SagaStatus.LEASE_LOST
            return SagaStatus.AWAITING_APPROVAL
        await self.approval_driver.release_snapshot()
        return await saga.finish(error=exc, close=self.close)

