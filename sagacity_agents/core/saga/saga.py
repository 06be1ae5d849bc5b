"""A live saga: the scope tool wrappers journal into, and the end-of-run decision.

Framework-agnostic: an adapter calls :meth:`Saga.run_call` (async bodies) or
:meth:`Saga.run_call_sync` (sync bodies in worker threads) around each tool body, and
:meth:`Saga.finish` when a run ends. The active saga and the current call live in
``contextvars`` so that async, threaded, parallel and nested calls all see them.

:class:`Saga` is a facade over parts, each holding its own state beside a small shared one
(``state.SagaCore``: the saga's id, fenced journal, policy, failures and lease token):

* ``declared``  the tools the saga knows (:class:`~.declared.ToolRegistry`);
* ``lifecycle`` opening the saga and holding its run lease (:class:`~.lifecycle.RunLifecycle`);
* ``outcomes``  calls in flight and their outcomes: decided, written (or behind), held, retried
  (:class:`~.outcomes.OutcomeLog`);
* ``refusals``  calls refused before their INTENT (no grant) or by policy
  (:class:`~.refusals.Refusals`);
* ``calls``     one wrapped call, written once as steps and driven for async or sync bodies
  (:class:`~.calls.CallRecorder`, ``steps.py``);
* ``external``  calls whose body we cannot wrap (:class:`~.external.ExternalCalls`);
* ``closing``   the end of a run: fail, compensate, close or leave open
  (:class:`~.closing.SagaEnding`).

``verdict.py``, beside them, reads a saga through a protocol.
"""

from __future__ import annotations

import contextvars
import operator
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

from ...errors import ConfigurationError, LeaseLostError
from ..compensation import CompensationItem, CompensationReport
from ..data_keys import DataKeys, SagaSecrets
from ..declarations import ToolDeclaration
from ..entries import JournalEntry
from ..evidence import Evidence
from ..journal import Journal
from ..lease import DEFAULT_LEASE_SECONDS, check_lease_seconds
from .calls import CallRecorder, carry_context, current_call, current_idempotency_key, record_undo_data
from .closing import SagaEnding
from .declared import ToolRegistry
from .external import ExternalCalls
from .lifecycle import RunLifecycle
from .outcomes import OutcomeLog
from .refusals import Refusals
from .state import CallFrame, SagaCore
from .status import FailurePolicy, FailureRecord, Grant, SagaStatus

__all__ = [
    "CallFrame",
    "FailurePolicy",
    "FailureRecord",
    "Grant",
    "Saga",
    "SagaStatus",
    "carry_context",
    "current_call",
    "current_saga",
    "current_idempotency_key",
    "record_undo_data",
]

T = TypeVar("T")
V = TypeVar("V")


class _PartAttribute(Generic[V]):
    """A facade attribute kept by one of the saga's parts (read and written there)."""

    def __init__(self, part: str) -> None:
        self.part = part
        self.name = ""
        self._read = operator.attrgetter(part)

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        # One C-level lookup per read: tool wrappers and the SDK's hooks read these on every call.
        self._read = operator.attrgetter(f"{self.part}.{name}")

    def __get__(self, saga: Any, owner: type | None = None) -> V:
        if saga is None:
            return self  # type: ignore[return-value]
        return self._read(saga)  # type: ignore[no-any-return]

    def __set__(self, saga: Any, value: V) -> None:
        setattr(getattr(saga, self.part), self.name, value)


class Saga:
    """One saga in this process: where wrapped calls journal, and how a run's end is decided.

    Args:
        journal: where entries go.
        saga_id: reuse an existing id (a later run of the same saga, a resume); a new UUID if None.
        policy: what the first failed call does (default :attr:`FailurePolicy.STOP`).
        in_flight_timeout: seconds :meth:`settle` waits for calls still running before deciding
            what to undo; calls still running then are reported in doubt.
        metadata: JSON-able data journaled with SAGA_OPENED.
        evidence: how the saga's past is verified before acting on it (reopening, compensating)
            and whether checkpoints are signed at close; default: the hash chain alone.
        lease_seconds: duration of the run lease this object takes in :meth:`start_run` (see
            ``core.lease``): another process may take the saga over this many seconds after
            the last entry of a run whose holder died.
        data_keys: the application's data keys (``core.data_keys.DataKeys``), which commit and
            seal the saga's sensitive values once a run holds its lease; ``None``: the
            process's keys for ``SAGACITY_DATA_KEY`` (``core.protection.default_data_keys``).

    Raises:
        ValueError: ``lease_seconds`` is not a positive number.
    """

    def __init__(
        self,
        journal: Journal,
        saga_id: str | None = None,
        *,
        policy: FailurePolicy = FailurePolicy.STOP,
        in_flight_timeout: float = 30.0,
        metadata: dict[str, Any] | None = None,
        evidence: Evidence | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        data_keys: DataKeys | None = None,
    ) -> None:
        lease_seconds = check_lease_seconds(lease_seconds)
        self.core = core = SagaCore(journal, saga_id, policy=policy,
                                    in_flight_timeout=in_flight_timeout, evidence=evidence,
                                    data_keys=data_keys)
        self.tools = tools = ToolRegistry()
        self.lifecycle = lifecycle = RunLifecycle(core, metadata or {}, lease_seconds)
        self.outcomes = outcomes = OutcomeLog(core, tools)
        self.refusals = refusals = Refusals(core, outcomes, self)
        self.calls = calls = CallRecorder(self, core, tools, lifecycle, outcomes, refusals)
        self.external = external = ExternalCalls(calls)
        self.ending = SagaEnding(core, tools, lifecycle, outcomes, external)

    # --- state, kept by the parts -----------------------------------------------------------
    saga_id: _PartAttribute[str] = _PartAttribute("core")
    journal: _PartAttribute[Journal] = _PartAttribute("core")
    """The saga's journal, fenced: every append carries :attr:`fence` (``core.fence``)."""
    evidence: _PartAttribute[Evidence | None] = _PartAttribute("core")
    policy: _PartAttribute[FailurePolicy] = _PartAttribute("core")
    in_flight_timeout: _PartAttribute[float] = _PartAttribute("core")
    failures: _PartAttribute[list[FailureRecord]] = _PartAttribute("core")
    status: _PartAttribute[SagaStatus] = _PartAttribute("core")
    journal_errors: _PartAttribute[list[str]] = _PartAttribute("core")
    """Journal writes of the saga's own bookkeeping that failed (SAGA_FAILED, SAGA_CLOSED)."""
    fence: _PartAttribute[int | None] = _PartAttribute("core")
    lease_lost: _PartAttribute[LeaseLostError | None] = _PartAttribute("core")
    unjournaled: _PartAttribute[list[str]] = _PartAttribute("core")
    last_journaled: _PartAttribute[float] = _PartAttribute("core")
    data_keys: _PartAttribute[DataKeys] = _PartAttribute("core")
    secrets: _PartAttribute[SagaSecrets | None] = _PartAttribute("core")
    """The saga's secrets once a run holds its lease (``core.protection``), else ``None``."""
    declarations: _PartAttribute[dict[str, ToolDeclaration]] = _PartAttribute("tools")
    agent_declarations: _PartAttribute[dict[tuple[str | None, str], ToolDeclaration]] = \
        _PartAttribute("tools")
    tool_settings: _PartAttribute[dict[str, dict[str, Any]]] = _PartAttribute("tools")
    loop: _PartAttribute[Any] = _PartAttribute("lifecycle")
    metadata: _PartAttribute[dict[str, Any]] = _PartAttribute("lifecycle")
    lease_seconds: _PartAttribute[float] = _PartAttribute("lifecycle")
    holder: _PartAttribute[str] = _PartAttribute("lifecycle")
    compensation_stop: _PartAttribute[Any] = _PartAttribute("lifecycle")
    resumed_approvals: _PartAttribute[set[str | None]] = _PartAttribute("refusals")
    """Call ids whose approval a resume of this object consumed (CONSUMED journaled): only
    such a call of an undeclared tool reads the journal for its grant."""
    resume_parents: _PartAttribute[dict[str | None, CallFrame]] = _PartAttribute("calls")
    report: _PartAttribute[CompensationReport | None] = _PartAttribute("ending")
    in_doubt: _PartAttribute[tuple[CompensationItem, ...]] = _PartAttribute("ending")
    closed: _PartAttribute[bool] = _PartAttribute("ending")
    """True once SAGA_CLOSED is journaled."""

    @property
    def failed(self) -> bool:
        """True once any call failed (raised, was cancelled, or was classified failed)."""
        return bool(self.core.failures)

    @property
    def running(self) -> bool:
        """True between :meth:`start_run` and :meth:`end_run` (this object holds the lease)."""
        return self.lifecycle.running

    @property
    def unwritten_outcomes(self) -> list[dict[str, Any]]:
        """Outcomes the journal refused and that are held in memory (journal down)."""
        return self.outcomes.unwritten_outcomes

    # --- tools ------------------------------------------------------------------------------
    def register(
        self, tool: str, declaration: ToolDeclaration, *, agent: str | None = None, **settings: Any
    ) -> None:
        """See :meth:`~.declared.ToolRegistry.register`.

        Raises:
            ConfigurationError: two different declarations under one agent name, tool name
                and declaration id.
        """
        self.tools.register(tool, declaration, agent=agent, **settings)

    def note_declaration(self, tool: str, declaration: ToolDeclaration, agent: str | None) -> None:
        """See :meth:`~.declared.ToolRegistry.note_declaration`."""
        self.tools.note_declaration(tool, declaration, agent)

    def declaration_for(self, tool: str, agent: str | None = None) -> ToolDeclaration | None:
        """See :meth:`~.declared.ToolRegistry.declaration_for`."""
        return self.tools.declaration_for(tool, agent)

    # --- runs and the lease -----------------------------------------------------------------
    async def open(self, *, recovering: bool = False,
                   verified: list[JournalEntry] | None = None) -> None:
        """See :meth:`~.lifecycle.RunLifecycle.open`; the saga's appends are protected from
        then on (its secrets: ``RunLifecycle.secure``), even when no run takes its lease."""
        await self.lifecycle.open(recovering=recovering, verified=verified)
        if self.core.secrets is None:
            await self.lifecycle.secure()

    def begin_run(self, agent_name: str, *, recovering: bool = False,
                  verified: list[JournalEntry] | None = None) -> Coroutine[Any, Any, None]:
        """See :meth:`~.lifecycle.RunLifecycle.begin_run`."""
        return self.lifecycle.begin_run(agent_name, recovering=recovering, verified=verified)

    def start_run(self, agent_name: str, *, opening: dict[str, Any] | None = None,
                  verified: list[JournalEntry] | None = None) -> Coroutine[Any, Any, None]:
        """See :meth:`~.lifecycle.RunLifecycle.start_run`."""
        return self.lifecycle.start_run(agent_name, opening=opening, verified=verified)

    def end_run(self, status: SagaStatus) -> Coroutine[Any, Any, None]:
        """See :meth:`~.lifecycle.RunLifecycle.end_run`."""
        return self.lifecycle.end_run(status)

    def check_lease(self) -> None:
        """See :meth:`~.state.SagaCore.check_lease`.

        Raises:
            LeaseLostError: this object's run lease is another run's now.
        """
        self.core.check_lease()

    def lease_lost_error(self) -> LeaseLostError | None:
        """See :meth:`~.state.SagaCore.lease_lost_error`."""
        return self.core.lease_lost_error()

    # --- calls ------------------------------------------------------------------------------
    def run_call(
        self, decl: ToolDeclaration, tool: str, call_id: str | None, args: dict[str, Any],
        body: Callable[[], Awaitable[T]], *, raw_args: str | None = None, agent: str | None = None,
    ) -> Coroutine[Any, Any, T]:
        """See :meth:`~.calls.CallRecorder.run_call`."""
        return self.calls.run_call(decl, tool, call_id, args, body, raw_args=raw_args, agent=agent)

    def run_call_sync(
        self, decl: ToolDeclaration, tool: str, call_id: str | None, args: dict[str, Any],
        body: Callable[[], T], *, raw_args: str | None = None, agent: str | None = None,
    ) -> T:
        """See :meth:`~.calls.CallRecorder.run_call_sync`."""
        return self.calls.run_call_sync(decl, tool, call_id, args, body, raw_args=raw_args,
                                        agent=agent)

    def refuses_effects(self, decl: ToolDeclaration | None) -> bool:
        """See :meth:`~.refusals.Refusals.refuses_effects`."""
        return self.refusals.refuses_effects(decl)

    def refuse_call(
        self, decl: ToolDeclaration | None, tool: str, call_id: str | None,
        args: dict[str, Any] | None, *, raw_args: str | None = None, refused_by: str,
        intent: JournalEntry | None = None,
    ) -> Coroutine[Any, Any, str]:
        """See :meth:`~.refusals.Refusals.refuse_call`."""
        return self.refusals.refuse_call(decl, tool, call_id, args, raw_args=raw_args,
                                         refused_by=refused_by, intent=intent)

    def settle(self) -> Coroutine[Any, Any, int]:
        """See :meth:`~.outcomes.OutcomeLog.settle`."""
        return self.outcomes.settle()

    def outcomes_written(self) -> Coroutine[Any, Any, None]:
        """See :meth:`~.outcomes.OutcomeLog.outcomes_written`."""
        return self.outcomes.outcomes_written()

    # --- calls whose body we cannot wrap ----------------------------------------------------
    def begin_external_call(
        self, decl: ToolDeclaration | None, tool: str, call_id: str | None, raw_args: str, *,
        agent: str | None = None, asks_approval: bool = False,
        grant_args: dict[str, Any] | None = None, owned: bool = False,
    ) -> Coroutine[Any, Any, JournalEntry]:
        """See :meth:`~.external.ExternalCalls.begin_external_call`."""
        return self.external.begin_external_call(
            decl, tool, call_id, raw_args, agent=agent, asks_approval=asks_approval,
            grant_args=grant_args, owned=owned)

    def adopt_external_call(self, intent: JournalEntry) -> None:
        """See :meth:`~.external.ExternalCalls.adopt_external_call`."""
        self.external.adopt_external_call(intent)

    def external_frame(self, call_id: str | None) -> CallFrame | None:
        """See :meth:`~.external.ExternalCalls.external_frame`."""
        return self.external.external_frame(call_id)

    def has_external_call(self, call_id: str | None) -> bool:
        """See :meth:`~.external.ExternalCalls.has_external_call`."""
        return self.external.has_external_call(call_id)

    def end_external_call(
        self, call_id: str | None, *, result: Any = None, exc: BaseException | None = None,
        declaration: ToolDeclaration | None = None, not_run: bool = False,
        timed_out: bool = False, owner: bool = False,
    ) -> Any:
        """See :meth:`~.external.ExternalCalls.end_external_call`."""
        return self.external.end_external_call(
            call_id, result=result, exc=exc, declaration=declaration, not_run=not_run,
            timed_out=timed_out, owner=owner)

    def refuse_undeclared_call(
        self, tool: str, call_id: str | None, raw_args: str, error: ConfigurationError
    ) -> Coroutine[Any, Any, None]:
        """See :meth:`~.external.ExternalCalls.refuse_undeclared_call`."""
        return self.external.refuse_undeclared_call(tool, call_id, raw_args, error)

    def pending_external_calls(self) -> int:
        """See :meth:`~.external.ExternalCalls.pending_external_calls`."""
        return self.external.pending_external_calls()

    # --- the end of a run -------------------------------------------------------------------
    def fail_now(self, tool: str, call_id: str | None, reason: str) -> None:
        """See :meth:`~.closing.SagaEnding.fail_now`."""
        self.ending.fail_now(tool, call_id, reason)

    def fail(self, reason: str) -> Coroutine[Any, Any, None]:
        """See :meth:`~.closing.SagaEnding.fail`."""
        return self.ending.fail(reason)

    def compensate(self) -> Coroutine[Any, Any, CompensationReport]:
        """See :meth:`~.closing.SagaEnding.compensate`."""
        return self.ending.compensate()

    def stop_compensation(self) -> None:
        """See :meth:`~.closing.SagaEnding.stop_compensation`."""
        self.ending.stop_compensation()

    def close(self, status: SagaStatus, **extra: Any) -> Coroutine[Any, Any, None]:
        """See :meth:`~.closing.SagaEnding.close`."""
        return self.ending.close(status, **extra)

    def finish(self, *, error: BaseException | None, close: bool) -> Coroutine[Any, Any, SagaStatus]:
        """See :meth:`~.closing.SagaEnding.finish`."""
        return self.ending.finish(error=error, close=close)


current_saga: contextvars.ContextVar[Saga | None] = contextvars.ContextVar(
    "sagacity_current_saga", default=None
)
"""The saga of the current context (set around a run; inherited by tasks and worker threads)."""
