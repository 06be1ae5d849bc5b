"""What a saga run hands back: ``SagaResult`` (how one run ended, built from the run's hooks by
``saga_result``), the inline approver's ``Decision`` and ``Approver`` type, and the reasons
``SagaRecovered`` and ``StreamAbandoned`` recorded when a saga is recovered or a stream abandoned."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.compensation import CompensationItem, CompensationReport
from ..core.recovery import SagaRecovered
from ..core.saga import FailureRecord, SagaStatus
from ..errors import LeaseLostError, SagacityError
from .guardrails import withheld_reason
from .hooks import SagaRunHooks

__all__ = [
    "Approver",
    "Decision",
    "SagaRecovered",
    "SagaResult",
    "StreamAbandoned",
    "ask_approver",
    "saga_result",
]


@dataclass(frozen=True)
class Decision:
    """What an inline approver returns for one request."""

    approved: bool
    """True to approve, False to reject."""
    approver: str
    """Who decided (journaled)."""
    reason: str | None = None
    """Why (journaled; a rejection's reason is shown to the model)."""


Approver = Callable[[Any], "Awaitable[Decision] | Decision"]
"""An inline approver: ``async (ApprovalRequest) -> Decision`` (a console prompt, a chat bot...);
a plain function returning a :class:`Decision` works too. A bare ``bool`` is refused: a decision
is journaled with who made it (:func:`ask_approver`)."""


async def ask_approver(approver: Approver, request: Any) -> Decision:
    """Ask an inline approver about ``request`` and check its answer.

    Args:
        approver: the application's approver (async or not).
        request: the :class:`~sagacity_agents.core.approval.ApprovalRequest` to decide.

    Returns:
        The approver's :class:`Decision`.

    Raises:
        TypeError: the approver returned anything but a :class:`Decision` (``True``, ``"yes"``,
            ``None``...); the message names what it returned and what to return instead.
        Exception: whatever the approver raised.
    """
    answer = approver(request)
    if inspect.isawaitable(answer):
        answer = await answer
    if not isinstance(answer, Decision):
        shown = repr(answer) if isinstance(answer, (bool, str, type(None), int)) else type(answer).__qualname__
        raise TypeError(
            f"the approver returned {shown} for approval request {request.request_id} "
            f"({request.tool}); it must return a sagacity_agents.Decision, e.g. "
            "Decision(approved=True, approver='alice', reason='checked the invoice'): a decision "
            "is journaled with who made it, so a bare bool is not enough"
        )
    return answer


class StreamAbandoned(SagacityError):
    """The consumer of a streamed saga run left before the run completed; the run was cancelled
    and the saga compensated."""


@dataclass(frozen=True)
class SagaResult:
    """How one saga run ended."""

    saga_id: str
    """The saga's id (journal key; pass it to later runs or to ``sagacity journal show``)."""
    status: SagaStatus
    """COMPLETED, OPEN (kept open for another run), COMPENSATED, COMPENSATION_FAILED, IN_DOUBT,
    AWAITING_APPROVAL, or LEASE_LOST (another run took the saga over while this one stalled:
    ``exception`` is the :class:`~sagacity_agents.errors.LeaseLostError`; the saga is the other
    run's, read it from the journal)."""
    final_output: Any = None
    """The run's final output (``None`` when it raised or paused)."""
    exception: BaseException | None = None
    """The exception the run raised, if any (a run that raised is never COMPLETED)."""
    report: CompensationReport | None = None
    """What compensation undid and what is still dirty; ``None`` when nothing was compensated."""
    failures: tuple[FailureRecord, ...] = ()
    """Failed calls, in the order the saga saw them; ``failures[0].exception`` is the raw one."""
    run_result: Any = None
    """The SDK's ``RunResult`` / ``RunResultStreaming`` when the run returned."""
    approvals: tuple[Any, ...] = field(default=())
    """Approval requests waiting for a human (AWAITING_APPROVAL)."""
    in_doubt: tuple[CompensationItem, ...] = ()
    """Every call whose outcome is unknown (IN_DOUBT): its journal seq, tool and call id; a
    human must find out whether its effect exists. Also set when nothing was compensated."""
    withheld_reason: str | None = None
    """Why the run's final output was withheld (an output guardrail tripped, e.g.
    ``saga_output_guardrail``: the failed call and what was undone); ``None`` otherwise."""

    @property
    def output_withheld(self) -> bool:
        """True when an output guardrail withheld the run's final output (``final_output`` is
        then ``None``; the model's text is ``exception.guardrail_result.agent_output``)."""
        return self.withheld_reason is not None

    @property
    def ok(self) -> bool:
        """True for COMPLETED and OPEN (no failure)."""
        return self.status in (SagaStatus.COMPLETED, SagaStatus.OPEN)

    @property
    def root_cause(self) -> BaseException | None:
        """The first failed call's raw exception, else the run's exception."""
        for failure in self.failures:
            if failure.exception is not None:
                return failure.exception
        return self.exception


def saga_result(
    hooks: SagaRunHooks, run_result: Any, error: BaseException | None,
    approvals: tuple[Any, ...] = (),
) -> SagaResult:
    """The :class:`SagaResult` of a run under ``hooks`` (finalized): its status, output (none
    when it raised or paused), exception, report, failures, and the approvals it waits for."""
    status = hooks.status or SagaStatus.OPEN
    lost = status is SagaStatus.LEASE_LOST
    if lost and (error is None or isinstance(error, LeaseLostError)):
        # The loss is this run's outcome, whatever it returned; told after finalizing, so that
        # an outcome written behind and refused even late is named too.
        error = hooks.saga.lease_lost_error()
    return SagaResult(
        saga_id=hooks.saga_id,
        status=status,
        final_output=(getattr(run_result, "final_output", None)
                      if error is None and status is not SagaStatus.AWAITING_APPROVAL else None),
        exception=error,
        report=hooks.report,
        failures=tuple(hooks.saga.failures),
        run_result=run_result,
        approvals=approvals if status is SagaStatus.AWAITING_APPROVAL else (),
        in_doubt=hooks.saga.in_doubt,
        withheld_reason=(
            "this run lost the saga's lease to another run (a recovery), which may have undone "
            "its calls: its output is not the saga's outcome; read the journal"
            if lost else withheld_reason(error, hooks.saga.failures, hooks.report)),
    )
