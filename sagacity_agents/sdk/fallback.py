"""The fallback for tools we cannot decorate: ``agent.as_tool`` agents, MCP tools, hand-built
``FunctionTool`` objects.

There is no plain function to put a decorator under, so the journaling is assembled from public
SDK seams around a *copy* of the tool (``copy.copy`` re-binds the SDK invoker to the copy; the
original is untouched). Replacing the invoker itself is a trap (sdk-notes.md, "Failures"): it
breaks ``__wrapped__`` and weakens the SDK's argument check for approval policies. The seams, in
the order the SDK runs them (pinned by tests/sdk/test_sdk_contract.py):

* **our tool input guardrail, last.** Input guardrails run in order and stop at the first
  rejection, so a call the application's own guardrail rejects never reaches ours and writes no
  INTENT. Ours journals the INTENT with the **raw** argument text (validated values are not
  reachable from outside the body) and sets the current call, so a nested run inside the tool (an
  ``as_tool`` agent) records this call as its parent; if the INTENT cannot be written it trips and
  the tool does not run. With ``pre_approval_tool_input_guardrails`` the SDK also runs it before
  the approval: that pass writes nothing (the INTENT comes once, after the approval). An
  irreversible tool's consumed approval is checked here, before the INTENT
  (``Saga.begin_external_call``);
* **the application's ``on_tool_start``**: when it raises, the body never runs;
  ``SagaRunHooks.on_tool_start`` then journals the call FAILED (not run);
* the tool's **failure formatter** (and timeout formatter), wrapped, journals a raw exception (a
  timeout) as FAILED before the SDK turns it into a message
  (``set_function_tool_failure_error_function``: internal to the SDK, read through
  ``_sdk_internals`` and pinned by a contract test);
* **our tool output guardrail, first**: it sees the tool's real result before any guardrail of
  the application replaces it or raises, and journals EXECUTED / REFUSED with it (FAILED when it
  is the SDK's own timeout message: the body was cancelled). It runs
  without our hooks too, so calls inside nested runs get their outcome;
* ``SagaRunHooks.on_tool_end`` is the last resort (a tool whose guardrail lists were replaced).

On resume, the SDK skips input guardrails and hooks for a pending nested ``as_tool`` call and only
runs its output guardrails: :func:`rebuild_pending_calls` reloads such calls from the journal so
their outcome is still written once.

What stays in doubt (docs/architecture.md, "Tools we cannot decorate"): a tool built with
``failure_error_function=None`` raises straight out of the run, and a body the SDK cancels (a
sibling failed) gets no formatter call: their INTENTs have no outcome and are reported, never
undone blindly. No path waits for ``in_flight_timeout``: no seam would bring a later outcome.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any, cast

from agents import Agent, FunctionTool, ToolTimeoutError
from agents.tool_guardrails import (
    ToolGuardrailFunctionOutput,
    ToolInputGuardrailData,
    ToolOutputGuardrailData,
    tool_input_guardrail,
    tool_output_guardrail,
)

from ..core.canonical import parse_json
from ..core.declarations import (
    DEFAULT_UNDO_TIMEOUT, Check, Classifier, Reversibility, SensitiveSpec, ToolDeclaration,
    Undo,
)
from ..core.entries import Phase
from ..core.saga import CallFrame, Saga, current_call, current_saga
from ..core.sensitive import Sensitivity
from ..errors import DeclarationError
from ._sdk_internals import (
    agent_of_tool,
    default_tool_timeout_error_message,
    resolve_function_tool_failure_error_function,
    set_function_tool_failure_error_function,
)
from .graph import agent_graph
from .user_errors import SdkDeclarationError, as_user_error

__all__ = ["FALLBACK_ATTR", "nested_agent_tool", "protect_tool", "rebuild_pending_calls"]

FALLBACK_ATTR = "_sagacity_fallback_declaration"
"""Attribute under which a protected copy carries its :class:`ToolDeclaration`."""

INTENT_GUARDRAIL = "sagacity_journal"
"""Name of the input guardrail that journals a protected call's INTENT."""

OUTCOME_GUARDRAIL = "sagacity_outcome"
"""Name of the output guardrail that journals a protected call's outcome."""


async def _before_approval(tool: FunctionTool, ctx: Any) -> bool:
    """Whether this guardrail pass is the one the SDK runs *before* an approval
    (``ToolExecutionConfig(pre_approval_tool_input_guardrails=True)``): the call may still pause,
    be rejected or be auto-rejected, so no INTENT may be written yet."""
    if tool.needs_approval is False:
        return False
    config = getattr(getattr(ctx, "run_config", None), "tool_execution", None)
    if not getattr(config, "pre_approval_tool_input_guardrails", False):
        return False
    if ctx.is_tool_approved(ctx.tool_name, ctx.tool_call_id) is not None:
        return False  # decided: this is the pass right before the body
    if tool.needs_approval is True:
        return True
    # A policy callable: undecided means either "pauses next" or "needs no approval, body next".
    # Ask the policy (the SDK's public signature); arguments it cannot read always pause.
    try:
        params = parse_json(ctx.tool_arguments or "{}")
        verdict: Any = tool.needs_approval(ctx, params, ctx.tool_call_id)
        if inspect.isawaitable(verdict):
            verdict = await verdict
    except Exception:  # noqa: BLE001 - the SDK forces an approval for such calls
        return True
    return bool(verdict)


def _journal_then(formatter: Any) -> Any:
    """Wrap an SDK error formatter ``(ctx, error) -> message`` (failure or timeout): the pending
    protected call is journaled FAILED with the raw error before the SDK gets its message."""

    def journal_then_format(ctx: Any, error: Exception) -> Any:
        saga = current_saga.get()
        call_id = getattr(ctx, "tool_call_id", None)
        if saga is not None and saga.has_external_call(call_id):
            saga.end_external_call(call_id, exc=error)
        return formatter(ctx, error)

    return journal_then_format


def protect_tool(
    tool: FunctionTool,
    *,
    reversibility: Reversibility | str,
    undo: Undo | None = None,
    classify: Classifier | None = None,
    undo_timeout: float = DEFAULT_UNDO_TIMEOUT,
    declaration_id: str | None = None,
    scope: str | None = None,
    deadline: float | None = None,
    undo_needs: tuple[str, ...] = (),
    check: Check | None = None,
    check_timeout: float | None = None,
    sensitive: SensitiveSpec = None,
) -> FunctionTool:
    """Return a journaled copy of a ``FunctionTool`` we cannot decorate.

    Args:
        tool: the SDK tool (left unchanged).
        reversibility: how its effect can be taken back (an irreversible one must carry
            ``needs_approval``; checked when a saga starts).
        undo: the undo of a compensatable tool; it receives ``args == {}``, the raw argument
            text as ``CompensationContext.raw_args`` and the tool's real output as ``result``.
        classify: optional reader of the returned value (refused / failed).
        undo_timeout: seconds compensation waits for one run of the undo (as for
            ``compensable``; default 60).
        declaration_id: the declaration's stable id, journaled with each INTENT so compensation
            and recovery find *this* undo (default ``"protect_tool:<qualified name>"``). Give
            one when two tools you protect under one name sit on one agent graph *and* the
            agent that made a call does not tell them apart (the agent is journaled, so the
            same name on two agents needs none).
        scope: whose tool this is when one id serves several tenants (as for ``compensable``):
            journaled with each INTENT; recovery runs only an undo of the same id and scope.
        deadline, undo_needs, check, check_timeout: as for ``compensable`` (the tool's own
            ``timeout_seconds``, when set, is its deadline; a check gets the raw argument text
            as ``CheckContext.raw_args``).
        sensitive: as for ``compensable``. The raw argument text is parsed to find named
            fields; each value found is masked inside it (the whole text is committed).

    Returns:
        A copy whose calls are journaled inside a saga (raw arguments) and unchanged outside one.
        Its guardrail lists are the tool's own plus ours: the INTENT guardrail last among the
        input guardrails, the outcome guardrail first among the output guardrails.

    Raises:
        DeclarationError: (also the SDK's ``UserError``) not a ``FunctionTool``, or an invalid
            declaration.
    """
    if not isinstance(tool, FunctionTool):
        raise SdkDeclarationError(f"protect_tool takes a FunctionTool, got {tool!r}")
    try:
        decl = ToolDeclaration(
            name=tool.name, reversibility=Reversibility(reversibility), undo=undo,
            classify=classify,
            declaration_id=declaration_id or f"protect_tool:{tool.qualified_name}",
            undo_timeout=undo_timeout, scope=scope, deadline=tool.timeout_seconds or deadline,
            undo_needs=undo_needs, check=check, check_timeout=check_timeout,
            sensitivity=cast(Sensitivity, sensitive),  # converted and checked by the declaration
        )
    except DeclarationError as exc:
        raise as_user_error(exc) from None
    protected = copy.copy(tool)
    protected.tool_input_guardrails = [*(tool.tool_input_guardrails or []),
                                       _intent_guardrail(protected, decl)]
    protected.tool_output_guardrails = [_outcome_guardrail(tool, decl),
                                        *(tool.tool_output_guardrails or [])]
    previous = resolve_function_tool_failure_error_function(tool)
    if previous is not None:
        set_function_tool_failure_error_function(protected, _journal_then(previous))
    if tool.timeout_error_function is not None:
        protected.timeout_error_function = _journal_then(tool.timeout_error_function)
    setattr(protected, FALLBACK_ATTR, decl)
    return protected


def _intent_guardrail(protected: FunctionTool, decl: ToolDeclaration) -> Any:
    """The input guardrail of a protected tool: journals the call's INTENT (raw arguments)
    inside a saga, or refuses the call (the saga's policy, or a failure to journal it)."""

    @tool_input_guardrail(name=INTENT_GUARDRAIL)
    async def journal_intent(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        saga = current_saga.get()
        if saga is None or saga.closed:
            return ToolGuardrailFunctionOutput.allow()
        ctx = data.context
        if await _before_approval(protected, ctx):
            return ToolGuardrailFunctionOutput.allow()
        try:
            saga.note_declaration(ctx.tool_name, decl, getattr(data.agent, "name", None))
        except Exception as exc:  # noqa: BLE001 - fail closed: a call we could not undo right
            return ToolGuardrailFunctionOutput.raise_exception(output_info=str(exc))
        if saga.refuses_effects(decl):  # FailurePolicy.REFUSE_EFFECTS, after a failure
            return ToolGuardrailFunctionOutput.reject_content(await saga.refuse_call(
                decl, ctx.tool_name, ctx.tool_call_id, None, raw_args=ctx.tool_arguments,
                refused_by="policy",
            ))
        raw = ctx.tool_arguments or ""
        try:
            intent = await saga.begin_external_call(decl, ctx.tool_name, ctx.tool_call_id, raw,
                                                    agent=getattr(data.agent, "name", None))
        except Exception as exc:  # noqa: BLE001 - fail closed: the tool must not run
            return ToolGuardrailFunctionOutput.raise_exception(output_info=str(exc))
        # Reaches the tool body and a nested run inside it (sdk-notes.md, "Scope propagation").
        current_call.set(CallFrame(saga, ctx.tool_name, ctx.tool_call_id, intent.seq))
        return ToolGuardrailFunctionOutput.allow()

    return journal_intent


def _outcome_guardrail(tool: FunctionTool, decl: ToolDeclaration) -> Any:
    """The output guardrail of a protected tool: journals the call's outcome (its output, or
    the SDK's timeout as a failure) before the SDK's output reaches the model."""
    timed_out_message = (
        default_tool_timeout_error_message(tool_name=tool.name, timeout_seconds=tool.timeout_seconds)
        if tool.timeout_seconds is not None and tool.timeout_error_function is None else None
    )

    @tool_output_guardrail(name=OUTCOME_GUARDRAIL)
    async def journal_outcome(data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        saga = current_saga.get()
        call_id = getattr(data.context, "tool_call_id", None)
        if saga is not None and saga.has_external_call(call_id):
            if timed_out_message is not None and data.output == timed_out_message:
                # The SDK cancelled the body at its timeout and sent the model this message.
                error = ToolTimeoutError(tool_name=tool.name, timeout_seconds=tool.timeout_seconds or 0)
                task = saga.end_external_call(call_id, exc=error, declaration=decl,
                                              timed_out=True)
            else:
                task = saga.end_external_call(call_id, result=data.output, declaration=decl)
            if task is not None:
                await task
        return ToolGuardrailFunctionOutput.allow()

    return journal_outcome


def nested_agent_tool(tool: FunctionTool, *, sensitive: SensitiveSpec = None) -> FunctionTool:
    """Protect an ``agent.as_tool(...)`` tool: the call is journaled (read-only: its effects are
    the inner agent's own journaled tool calls) and the inner calls record it as their parent.

    Args:
        tool: the ``FunctionTool`` that ``agent.as_tool(...)`` returned (left unchanged).
        sensitive: as for ``protect_tool`` (the input text and the inner agent's answer).

    Returns:
        The protected copy (see :func:`protect_tool`).

    Raises:
        DeclarationError: not a ``FunctionTool``.
    """
    return protect_tool(tool, reversibility=Reversibility.READ_ONLY, sensitive=sensitive)


async def rebuild_pending_calls(saga: Saga, agent: Agent[Any], state: Any) -> int:
    """Reload, from the journal, the protected calls a paused run left open, before resuming it.

    A nested ``as_tool`` call paused for an approval inside it has an INTENT and no outcome. On
    resume the SDK skips its input guardrails and hooks and runs only its output guardrails, in
    whatever process resumes: without this, its outcome would never be journaled (the saga would
    end IN_DOUBT). Each such INTENT is registered as a pending call of ``saga`` (not counted in
    flight: nothing runs it until the resumed run does). A nested call paused in ``state``
    records as its parent the one open innermost call into the agent that asked for it (found
    through the agent graph).

    Args:
        saga: the saga about to resume (opened, not yet running).
        agent: the starting agent given to resume.
        state: the restored ``RunState``.

    Returns:
        How many calls were reloaded.

    Raises:
        JournalError: the journal cannot be read.
    """
    entries = await saga.journal.entries(saga.saga_id)
    ended = {
        e.payload.get("intent_seq") for e in entries
        if e.phase in (Phase.EXECUTED, Phase.REFUSED, Phase.FAILED) and isinstance(e.payload, dict)
    }
    open_calls = [
        e for e in entries
        if e.phase is Phase.INTENT and isinstance(e.payload, dict) and "raw_args" in e.payload
        and e.seq not in ended
    ]
    for intent in open_calls:
        saga.adopt_external_call(intent)
    # The parent of a paused nested call: the one open innermost call into the agent that asked
    # for it (several open calls into one agent, run in parallel: left out rather than guessed).
    parents = {e.payload.get("parent_intent_seq") for e in open_calls}
    graph = agent_graph(agent)
    into: dict[int, list[Any]] = {}
    for leaf in (e for e in open_calls if e.seq not in parents):
        # The tool of the agent that made the call (two agents may share a tool name).
        tool = graph.tool_of(leaf.tool or "", leaf.payload.get("agent"))
        inner = agent_of_tool(tool) if tool is not None else None
        if isinstance(inner, Agent):
            into.setdefault(id(inner), []).append(leaf)
    for item in state.get_interruptions():
        leaves = into.get(id(getattr(item, "agent", None)), [])
        if len(leaves) == 1:
            saga.resume_parents[getattr(item, "call_id", None)] = CallFrame(
                saga, leaves[0].tool or "", leaves[0].call_id, leaves[0].seq
            )
    return len(open_calls)
