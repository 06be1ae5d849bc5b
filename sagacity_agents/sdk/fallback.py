"""The fallback for tools we cannot decorate: ``agent.as_tool`` agents, MCP tools, hand-built
``FunctionTool`` objects.

There is no plain function to put a decorator under, so the journaling is assembled from public
SDK seams around a *copy* of the tool (``copy.copy`` re-binds the SDK invoker to the copy; the
original is untouched):

* a tool input guardrail journals the INTENT with the **raw** argument text (validated values are
  not reachable from outside the body) and sets the current call, so a nested run inside the tool
  (an ``as_tool`` agent) records this call as its parent; if the INTENT cannot be written the
  guardrail trips and the tool does not run;
* the tool's failure formatter is wrapped so a raw exception is journaled as FAILED before the
  SDK turns it into a message (``set_function_tool_failure_error_function``: internal to the SDK,
  isolated here and pinned by a contract test);
* ``SagaRunHooks.on_tool_end`` journals EXECUTED with the string the model receives.

Limits (documented in docs/architecture.md): a tool built with ``failure_error_function=None``
raises straight out of the run, so its INTENT stays *in doubt* (reported, never undone blindly);
fallback tools inside a nested run have no hooks of ours, so their outcome is in doubt as well.
"""

from __future__ import annotations

import copy
from typing import Any

from agents import FunctionTool
from agents.tool_guardrails import (
    ToolGuardrailFunctionOutput,
    ToolInputGuardrailData,
    tool_input_guardrail,
)

from ..core.declarations import Classifier, Reversibility, ToolDeclaration, Undo
from ..core.saga import CallFrame, current_call, current_saga
from ..errors import DeclarationError
from ._sdk_internals import (
    resolve_function_tool_failure_error_function,
    set_function_tool_failure_error_function,
)
from .user_errors import SdkDeclarationError, as_user_error

__all__ = ["FALLBACK_ATTR", "nested_agent_tool", "protect_tool"]

FALLBACK_ATTR = "_sagacity_fallback_declaration"
"""Attribute under which a protected copy carries its :class:`ToolDeclaration`."""


def protect_tool(
    tool: FunctionTool,
    *,
    reversibility: Reversibility | str,
    undo: Undo | None = None,
    classify: Classifier | None = None,
) -> FunctionTool:
    """Return a journaled copy of a ``FunctionTool`` we cannot decorate.

    Args:
        tool: the SDK tool (left unchanged).
        reversibility: how its effect can be taken back (an irreversible one must carry
            ``needs_approval``; checked when a saga starts).
        undo: the undo of a compensatable tool; it receives ``args == {}`` and the raw argument
            text as ``CompensationContext.raw_args``.
        classify: optional reader of the returned string (refused / failed).

    Returns:
        A copy whose calls are journaled inside a saga (raw arguments) and unchanged outside one.

    Raises:
        DeclarationError: not a ``FunctionTool``, or an invalid declaration.
    """
    if not isinstance(tool, FunctionTool):
        raise SdkDeclarationError(f"protect_tool takes a FunctionTool, got {tool!r}")
    try:
        decl = ToolDeclaration(
            name=tool.name, reversibility=Reversibility(reversibility), undo=undo,
            classify=classify, declaration_id=f"protect_tool:{tool.qualified_name}",
        )
    except DeclarationError as exc:
        raise as_user_error(exc) from None
    protected = copy.copy(tool)

    @tool_input_guardrail(name="sagacity_journal")
    async def journal_intent(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        saga = current_saga.get()
        if saga is None or saga.closed:
            return ToolGuardrailFunctionOutput.allow()
        ctx = data.context
        saga.declarations.setdefault(ctx.tool_name, decl)
        if saga.refuses_effects(decl):  # FailurePolicy.REFUSE_EFFECTS, after a failure
            return ToolGuardrailFunctionOutput.reject_content(await saga.refuse_call(
                decl, ctx.tool_name, ctx.tool_call_id, None, raw_args=ctx.tool_arguments,
                refused_by="policy",
            ))
        try:
            intent = await saga.begin_external_call(
                decl, ctx.tool_name, ctx.tool_call_id, ctx.tool_arguments or ""
            )
        except Exception as exc:  # noqa: BLE001 - fail closed: the tool must not run
            return ToolGuardrailFunctionOutput.raise_exception(output_info=str(exc))
        # Reaches the tool body and a nested run inside it (sdk-notes.md, "Scope propagation").
        current_call.set(CallFrame(saga, ctx.tool_name, ctx.tool_call_id, intent.seq))
        return ToolGuardrailFunctionOutput.allow()

    protected.tool_input_guardrails = [journal_intent, *(tool.tool_input_guardrails or [])]
    previous = resolve_function_tool_failure_error_function(tool)
    if previous is not None:

        def journal_failure(ctx: Any, error: Exception) -> Any:
            saga = current_saga.get()
            call_id = getattr(ctx, "tool_call_id", None)
            if saga is not None and saga.has_external_call(call_id):
                saga.end_external_call(call_id, exc=error)
            return previous(ctx, error)

        set_function_tool_failure_error_function(protected, journal_failure)
    setattr(protected, FALLBACK_ATTR, decl)
    return protected


def nested_agent_tool(tool: FunctionTool) -> FunctionTool:
    """Protect an ``agent.as_tool(...)`` tool: the call is journaled (read-only: its effects are
    the inner agent's own journaled tool calls) and the inner calls record it as their parent.
    """
    return protect_tool(tool, reversibility=Reversibility.READ_ONLY)
