"""``SagaRunHooks``: the saga scope around one ``Runner.run`` / ``Runner.run_streamed``.

No RunHooks callback fires when a run raises or is interrupted (sdk-notes.md, "Hooks"), so the
hooks object is used *around* the run as an async context manager::

    hooks = SagaRunHooks("journal.db", agent=agent)      # a path, a URI or a Journal
    try:
        async with hooks:
            result = await Runner.run(agent, "book a trip", hooks=hooks)
    except SagaStopped as stopped:                        # STOP: the run stopped after a failure
        print(stopped.failure)
    print(hooks.status, hooks.report)                     # compensated before the raise went on

Entering opens the saga, takes its run lease (one run at a time per saga) and sets the
``contextvars`` scope the tool wrappers read; leaving sees the exception or the failed scope and
compensates, then ends the run. A caller cancelled while leaving compensates stops compensation
at the next step boundary (the undo running is journaled in doubt), and the run ends at once,
its lease released, for ``recover`` to finish. The hook callbacks enforce the
failure policy (stop the run after the first failed call), delegate to the user's own hooks, and
record what no tool seam sees: a call an input guardrail rejected (REFUSED, read from the next
model input) and a protected call whose ``on_tool_start`` raised (FAILED, not run). The saga's
scope and the run's approvals are small objects of their own (``sdk/scope.py``).

The SDK's trace ends when ``Runner.run`` returns, before the block compensates: wrap the block
in ``saga_trace(run_config, saga_id=...)`` (``sdk/tracing.py``) to have the undos in the run's
trace, as ``Sagacity`` does (docs/observability.md, "Who opens the trace").

Approvals, with an approval store given (``approvals=``), as the SDK's users write runs::

    async with SagaRunHooks(journal, agent=agent, approvals=store) as hooks:
        result = await Runner.run(agent, "wire 2500 EUR", hooks=hooks)
        paused = await hooks.request_approvals(result)   # requests + stripped snapshot stored
    # ... a human decides (sagacity approvals approve ID, or ApprovalDesk.decide) ...
    await wait_for_decision(store, paused.requests[0].request_id, timeout=300)
    # later, in this or any process:
    async with SagaRunHooks(journal, agent=agent, saga_id=hooks.saga_id, approvals=store) as hooks:
        state = await hooks.resume_state(context=ctx)     # checked, consumed, CONSUMED journaled
        result = await Runner.run(agent, state, hooks=hooks, context=ctx)
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from agents import (
    Agent,
    AgentsException,
    RunContextWrapper,
    RunHooks,
    Tool,
)

from ..core.approval import ApprovalStore
from ..core.declarations import Reversibility
from ..core.data_keys import DataKeys, MasterKey
from ..core.entries import Phase
from ..core.journal import Journal
from ..core.lease import DEFAULT_LEASE_SECONDS
from ..core.protection import data_keys_of
from ..core.saga import FailurePolicy, Saga, SagaStatus
from ..errors import ConfigurationError, LeaseLostError, SagaFailedError
from ..stores import open_journal
from ._sdk_internals import validate_run_hooks
from .approvals import ApprovalDesk, PauseOutcome
from .binding import bind_agent
from .nested import install_nested_runner
from .scope import ApprovalDriver, SagaScope
from .undeclared import begin_undeclared, end_undeclared, is_undeclared

__all__ = ["HooksNotEnteredError", "RunLeaseLostError", "SagaRunHooks", "SagaStopped"]


class SagaStopped(AgentsException, SagaFailedError):
    """Raised from a hook to stop the run at the first failed call (FailurePolicy.STOP).

    An ``AgentsException`` subclass, so it passes through the SDK unwrapped. ``__cause__`` is the
    failed call's exception when there was one; :attr:`failure` describes the call.
    """

    def __init__(self, message: str, failure: Any = None) -> None:
        super().__init__(message)
        self.failure = failure


class RunLeaseLostError(AgentsException, LeaseLostError):
    """Raised from a hook to stop a run that lost the saga's lease to another run (it stalled
    past the lease's expiry; ``core.fence``): a :class:`~sagacity_agents.errors.LeaseLostError`
    that passes through the SDK unwrapped (``except LeaseLostError`` catches it)."""

    def __init__(self, lost: LeaseLostError) -> None:
        LeaseLostError.__init__(self, str(lost), saga_id=lost.saga_id, fence=lost.fence,
                                current=lost.current)
        self.run_data = None  # AgentsException's field (its __init__ is not reached)


class HooksNotEnteredError(AgentsException, ConfigurationError):
    """A :class:`SagaRunHooks` reached a run without being entered: the run is refused rather
    than run unprotected."""


_ENTER_HINT = (
    "SagaRunHooks was passed to a run without being entered, so no saga protects it. Use:\n\n"
    "    async with SagaRunHooks(journal, agent=agent) as hooks:\n"
    "        await Runner.run(agent, input, hooks=hooks)\n\n"
    "or Sagacity.run(agent, input), which does this for you."
)


class SagaRunHooks(RunHooks[Any]):
    """Run hooks that open a saga on enter and finish it (compensating if needed) on exit.

    Runs nested in the saga (an ``as_tool`` agent's run, a ``Runner.run`` in a tool body) get
    hooks of their own, which journal their undeclared calls (``sdk/nested.py``).

    Args:
        journal: where the saga is journaled, as ``Sagacity`` takes it: a :class:`Journal`, a
            SQLite file path (``str`` or ``Path``; created if missing), a ``postgresql://`` URI
            (the ``postgres`` extra; migrated first) or ``":memory:"``; or an already built
            :class:`Saga`. A path or URI is opened here and closed when the ``async with`` block
            is left (after compensation); such hooks serve one block: make new ones for the next
            run (pass ``saga_id=hooks.saga_id`` to continue the saga).
        agent: the agent about to run; its declared tools are checked and bound on enter
            (an irreversible tool without ``needs_approval`` raises ``ConfigurationError`` then).
        saga_id: continue an existing saga (a later run of it); a new id if ``None``.
        policy: what the first failed call does (default: stop the run).
        hooks: the application's own ``RunHooks``; every callback is forwarded to it.
            ``AgentHooks`` here raise the SDK's own ``TypeError`` (attach them to the agent).
        close: close the saga when the run ends well (``False`` keeps it open for another run).
        lease_seconds: the run lease's duration (``core.lease``); entering takes the saga's
            lease and raises ``SagaStateError`` while another run holds it.
        approvals: the approval store, for :meth:`request_approvals` / :meth:`resume_state`
            (the same records as ``Sagacity``: requests, journaled hashes, stored snapshot).
        approval_ttl: seconds before a request expires (``None``: never); default 24 h.
        fail_on_rejection: a rejected call fails the saga (which compensates) at resume,
            instead of letting the model carry on.
        strict: refuse every function tool nobody declared: on enter for those the agent graph
            shows (``ConfigurationError`` naming each), at the call for those met only at run
            time (MCP servers, tools added by a hook: journaled FAILED, not run). Default
            ``False``: their calls run and are journaled as undeclared (README, "Undeclared
            tools").
        data_key: the master key of the saga's sensitive values, as ``Sagacity(data_key=...)``
            takes it; ``None``: ``$SAGACITY_DATA_KEY``.

    Attributes:
        saga: the :class:`Saga`. status: its status after exit. report: the compensation report
        (``None`` when nothing was compensated). error: the exception the run raised, if any.

    Raises:
        TypeError: ``hooks`` is an ``AgentHooks`` (the SDK's own check).
        ConfigurationError: ``journal`` is a PostgreSQL URI without the ``postgres`` extra.
        JournalError: a SQLite file that cannot be opened.

    Under ``FailurePolicy.STOP`` (the default) ``Runner.run`` raises :class:`SagaStopped` at the
    next step after the first failed call; the ``async with`` block compensates before the
    exception leaves it, so :attr:`status` and :attr:`report` are set in the ``except`` clause.
    """

    sagacity_scope_hooks = True
    """A run given these hooks is the saga's own: it gets no nested hooks (``sdk/nested.py``)."""

    def __init__(
        self,
        journal: Journal | Saga | str | Path,
        *,
        agent: Agent[Any] | None = None,
        saga_id: str | None = None,
        policy: FailurePolicy = FailurePolicy.STOP,
        hooks: RunHooks[Any] | None = None,
        close: bool = True,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        approvals: ApprovalStore | None = None,
        approval_ttl: float | None = 24 * 3600,
        fail_on_rejection: bool = False,
        strict: bool = False,
        data_key: str | MasterKey | DataKeys | None = None,
    ) -> None:
        if hooks is not None:
            validate_run_hooks(hooks)  # the SDK's own TypeError for AgentHooks, before anything runs
        own_journal: Journal | None = None
        if isinstance(journal, (str, Path)):
            journal = own_journal = open_journal(journal)
        self.saga = journal if isinstance(journal, Saga) else Saga(
            journal, saga_id, policy=policy, lease_seconds=lease_seconds,
            data_keys=data_keys_of(data_key),
        )
        self.agent = agent
        self.user_hooks = hooks
        self.error: BaseException | None = None
        self.approval_driver = ApprovalDriver(self.saga, agent, approvals, approval_ttl, fail_on_rejection)
        """The run's approvals (requests, the checked resume; ``sdk/scope.py``)."""
        self.scope = SagaScope(self.saga, agent, self.approval_driver, close, strict, own_journal)
        """The saga's scope around the run (enter, compensate, close; ``sdk/scope.py``)."""
        self._unstarted: dict[str, str] = {}
        """Calls of declared tools the model asked for that have not started: call id -> tool."""

    @property
    def strict(self) -> bool:
        """Whether undeclared function tools are refused."""
        return self.scope.strict

    @property
    def close(self) -> bool:
        """Whether the saga is closed when the run ends well."""
        return self.scope.close

    @property
    def status(self) -> SagaStatus | None:
        """The saga's status after the block (``None`` before)."""
        return self.scope.status

    @property
    def desk(self) -> ApprovalDesk | None:
        """The approval desk (requests, decisions, resume checks); ``None`` without a store."""
        return self.approval_driver.desk

    @property
    def fail_on_rejection(self) -> bool:
        """Whether a rejected call fails the saga at resume."""
        return self.approval_driver.fail_on_rejection

    @property
    def pending_approvals(self) -> bool | None:
        """Whether the run returned with calls paused for approval; ``None`` until told (the
        facade tells it). Used directly, the hooks infer it from the irreversible calls the model
        asked for that neither ran nor were rejected."""
        return self.approval_driver.pending

    @pending_approvals.setter
    def pending_approvals(self, value: bool | None) -> None:
        self.approval_driver.pending = value

    # --- approvals ------------------------------------------------------------------------
    async def request_approvals(self, result: Any) -> PauseOutcome:
        """After a run that returned interruptions: store an approval request per paused call and
        the run's snapshot (without application context or approvals), exactly as ``Sagacity``
        does; the saga then ends AWAITING_APPROVAL when the block is left.

        Invalid arguments are rejected on the spot; a call whose consumed decision is still
        unused is approved again without asking. When that leaves nothing to ask,
        ``requests`` is empty and ``state`` is the ``RunState`` to run on at once.

        Args:
            result: the ``RunResult`` (or finished ``RunResultStreaming``) of ``Runner.run``.

        Returns:
            :class:`~sagacity_agents.sdk.approvals.PauseOutcome`: the new requests (to show a
            human, and to pass to ``wait_for_decision``) and the state.

        Raises:
            SagaStateError: called outside the ``async with`` block.
            ConfigurationError: no approval store or no agent was given.
        """
        return await self.approval_driver.request(result, self.scope.entered)

    async def resume_state(self, *, context: Any = None) -> Any:
        """Return the checked ``RunState`` to resume the saga with: pass it to
        ``Runner.run(agent, state, hooks=hooks, context=context)`` inside this block.

        Loads the stored snapshot and checks every pending call against the store and the
        journal (failing closed: see docs/approvals.md), consumes the requests atomically,
        journals CONSUMED for each and applies the decisions. Works in any process: what lets an
        approved call run is the journal, not this object.

        Args:
            context: the trusted application context (the stored snapshot carries none).

        Raises:
            ApprovalError: a check refused or a pending call is undecided; nothing was consumed
                or run, and leaving the block leaves the saga AWAITING_APPROVAL (no compensation).
            SagaStateError: called outside the ``async with`` block.
            ConfigurationError: no approval store or no agent was given.
        """
        return await self.approval_driver.resume(context, self.scope.entered)

    @property
    def saga_id(self) -> str:
        """The saga's id."""
        return self.saga.saga_id

    @property
    def report(self) -> Any:
        """The compensation report, if the saga was compensated."""
        return self.saga.report

    async def __aenter__(self) -> SagaRunHooks:
        await self.scope.enter()
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        self.error = exc
        try:
            await self.scope.leave(exc)
        except asyncio.CancelledError as cancelled:
            # Stopped while finishing (its journal writes queued past the idle limit).
            stalled = self.saga.lifecycle.stalled_error(cancelled)
            if stalled is None:
                raise
            self.error = stalled
            raise stalled from cancelled
        stalled = self.saga.lifecycle.stalled_error(exc)
        if stalled is not None:
            # The lease keeper stopped a run that made no progress (core.lease): the caller
            # gets why, naming the step it waited on, not a bare cancellation.
            self.error = stalled
            raise stalled from exc
        if self.scope.status is SagaStatus.LEASE_LOST and exc is None:
            # The run returned (its output may say "all booked") but another run had taken the
            # saga over meanwhile and may have undone it all: never leave the block as if fine.
            lost = self.saga.lease_lost_error()
            assert lost is not None
            raise RunLeaseLostError(lost) from lost.__cause__
        return False

    async def _journal_guardrail_refusals(self, input_items: Any) -> None:
        """Journal REFUSED for declared calls an input guardrail rejected.

        A rejected call never starts (no ``on_tool_start``, no body, no INTENT); the SDK sends
        the model the guardrail's message as the call's output, and this next model call is the
        first place a public seam shows it. Calls the journal already knows (paused, decided,
        auto-rejected) are not guardrail rejections. Reading the output, rather than adding a
        guardrail of ours to the user's decorated tools, leaves their tool objects untouched.
        """
        outputs: dict[str, Any] = {}
        for item in input_items or ():
            get = item.get if isinstance(item, dict) else lambda k, i=item: getattr(i, k, None)
            call_id = get("call_id")
            if get("type") == "function_call_output" and isinstance(call_id, str) and call_id in self._unstarted:
                outputs[call_id] = get("output")
        if not outputs:
            return
        known = {e.call_id for e in await self.saga.journal.entries(self.saga.saga_id)}
        for call_id, output in outputs.items():
            tool = self._unstarted.pop(call_id)
            if call_id in known:
                continue
            try:
                await self.saga.journal.append(
                    self.saga.saga_id, Phase.REFUSED, write_key=f"guardrail:{uuid.uuid4().hex}",
                    tool=tool, call_id=call_id,
                    payload={"intent_seq": None, "not_run": True, "result": output,
                             "refused_by": "tool input guardrail"},
                )
            except Exception as exc:  # noqa: BLE001 - nothing ran; the saga says its record is short
                self.saga.journal_errors.append(f"REFUSED of {tool} (call {call_id}) not journaled: {exc}")

    # --- callbacks ------------------------------------------------------------------------
    def _check(self) -> None:
        if not self.scope.entered:
            raise HooksNotEnteredError(_ENTER_HINT)
        saga = self.saga
        core = saga.core  # read directly: this runs at every step of every run
        if core.lease_lost is not None:
            try:
                saga.check_lease()
            except LeaseLostError as lost:
                raise RunLeaseLostError(lost) from lost.__cause__
        if core.failures and core.policy is FailurePolicy.STOP:
            first = saga.failures[0]
            stop = SagaStopped(
                f"saga {saga.saga_id} stopped after {first.tool} (call {first.call_id}) failed: "
                f"{first.error}",
                first,
            )
            raise stop from first.exception

    async def on_llm_start(self, context: Any, agent: Agent[Any], system_prompt: Any, input_items: Any) -> None:
        """Stop the run if the saga failed (STOP policy); journal calls an input guardrail
        rejected, seen as their outputs in this input; then the user's hook."""
        self._check()
        self.saga.core.progress.turn_started()  # a model-turn boundary: progress (core.lease)
        if self._unstarted:
            await self._journal_guardrail_refusals(input_items)
        if self.user_hooks is not None:
            await self.user_hooks.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(self, context: Any, agent: Agent[Any], response: Any) -> None:
        """Stop the run if the saga failed; note the declared calls the model asked for (so a
        guardrail's rejection of one is journaled); then the user's hook."""
        self.saga.core.progress.turn_ended()
        self._check()
        for item in getattr(response, "output", None) or ():
            if getattr(item, "type", None) == "function_call":
                # Declarations are bound under the SDK's qualified name (namespace.name).
                namespace = getattr(item, "namespace", None)
                name = getattr(item, "name", "") or ""
                key = f"{namespace}.{name}" if isinstance(namespace, str) and namespace else name
                decl = self.saga.declaration_for(key, agent.name)
                if decl is not None:
                    self._unstarted[item.call_id] = key
                if decl is not None and decl.reversibility is Reversibility.IRREVERSIBLE:
                    self.approval_driver.asked_irreversible.add(item.call_id)
        if self.user_hooks is not None:
            await self.user_hooks.on_llm_end(context, agent, response)

    async def on_agent_start(self, context: Any, agent: Agent[Any]) -> None:
        """Stop the run if the saga failed; bind the agent's tools to the saga (start-up checks,
        ``sdk/binding.py``); then the user's hook."""
        self.saga.core.progress.turn_ended()
        self._check()
        bind_agent(self.saga, agent, strict=self.strict)
        if self.user_hooks is not None:
            await self.user_hooks.on_agent_start(context, agent)

    async def on_agent_end(self, context: Any, agent: Agent[Any], output: Any) -> None:
        """Stop the run if the saga failed; then the user's hook."""
        self.saga.core.progress.turn_ended()
        self._check()
        if self.user_hooks is not None:
            await self.user_hooks.on_agent_end(context, agent, output)

    async def on_handoff(self, context: RunContextWrapper[Any], from_agent: Agent[Any], to_agent: Agent[Any]) -> None:
        """Stop the run if the saga failed; then the user's hook."""
        self._check()
        if self.user_hooks is not None:
            await self.user_hooks.on_handoff(context, from_agent, to_agent)

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool) -> None:
        """Stop the run if the saga failed; make sure a run the body starts gets nested hooks
        (``sdk/nested.py``); journal an undeclared call's INTENT, or refuse it under
        ``strict``; then the user's hook. If that raises, the body will not run: a protected or
        undeclared call's INTENT gets its FAILED (``not_run``) outcome first."""
        self._unstarted.pop(getattr(context, "tool_call_id", None) or "", None)
        self._check()
        install_nested_runner()  # before the body: a nested run it starts gets hooks of ours
        if is_undeclared(tool) and not self.saga.closed:
            await begin_undeclared(self.saga, context, agent, tool, strict=self.strict)  # type: ignore[arg-type]
        if self.user_hooks is not None:
            try:
                await self.user_hooks.on_tool_start(context, agent, tool)
            except BaseException as exc:
                # The body will not run: a protected call's INTENT gets its outcome now.
                task = self.saga.end_external_call(
                    getattr(context, "tool_call_id", None), exc=exc, not_run=True
                )
                if task is not None:
                    await task
                raise

    async def on_tool_end(self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: Any) -> None:
        """Journal the outcome of a protected call if no earlier seam did (last resort), or of an
        undeclared call (EXECUTED with the result, FAILED when it is the SDK's own error or
        timeout message); the user's hook; then stop the run if the saga failed."""
        if self.scope.entered:
            await end_undeclared(self.saga, context, tool, result)
        if self.user_hooks is not None and self.scope.entered:
            await self.user_hooks.on_tool_end(context, agent, tool, result)
        self._check()
