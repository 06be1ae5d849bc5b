"""Journaling a call of a tool nobody declared, and reading its outcome.

Such a call is journaled from the run's hooks: ``SagaRunHooks.on_tool_start`` / ``on_tool_end``
for the saga's own run, ``NestedRunHooks`` for every run nested in it (``sdk/nested.py``), both
through :func:`begin_undeclared` / :func:`end_undeclared`. There is no body of ours to see its
exception, and ``on_tool_end`` receives what the model gets.
When that is the SDK's own failure text (the tool raised and its formatter is the SDK's default,
``default_tool_error_function``) or its own timeout text (``default_tool_timeout_error_message``),
the call is journaled FAILED, as a declared tool's would be; any other value is its result
(a custom formatter's message, or ``RunConfig.tool_error_formatter``'s, reads as a result).

A ``CustomTool`` (a Responses custom tool: one raw string in, run by a local executor; the
sandbox's apply-patch tool is one) has no declaration of ours at all: every call of one is
undeclared, its raw input journaled as ``{"input": text}``. The SDK turns its executor's
exception into the exception's text, which no reader can tell from a result, so the executor
is observed as the call starts (:func:`observe_custom_tool`): the exception it raises is noted
on the call's ``ToolContext`` and journals the call FAILED.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

from agents import Agent, CustomTool, FunctionTool, ToolTimeoutError, default_tool_error_function

from ..core.saga import Saga
from ._sdk_internals import (
    default_tool_timeout_error_message,
    resolve_function_tool_failure_error_function,
)
from .binding import undeclared_error
from .tools import declaration_of

__all__ = [
    "UndeclaredToolFailed", "begin_undeclared", "custom_tool_arguments", "end_undeclared",
    "is_undeclared", "observe_custom_tool", "pending_raw_arguments", "reported_failure",
]

_FAILURE_ATTR = "_sagacity_custom_tool_failure"
"""Where an observed ``CustomTool`` executor's exception is noted, on the call's ``ToolContext``."""
_OBSERVED_ATTR = "__sagacity_observed__"


class UndeclaredToolFailed(Exception):
    """An undeclared tool's call ended with the SDK's own failure message: the tool raised (its
    exception is not visible outside the tool's invoker)."""


def reported_failure(tool: Any, context: Any, result: Any) -> Exception | None:
    """The failure ``result`` reports for a call of the undeclared ``tool``, or ``None`` when it
    is a result.

    Args:
        tool: the SDK tool that ran.
        context: the call's ``ToolContext``.
        result: what ``on_tool_end`` received (what the model gets).

    Returns:
        ``ToolTimeoutError`` for the SDK's timeout message of this tool,
        :class:`UndeclaredToolFailed` for the SDK's default failure message (when the tool uses
        the default formatter), else ``None``.
    """
    noted = getattr(context, _FAILURE_ATTR, None)
    if isinstance(tool, CustomTool):
        return noted if isinstance(noted, Exception) else None
    if not isinstance(tool, FunctionTool) or not isinstance(result, str):
        return None
    timeout = tool.timeout_seconds
    if timeout is not None and tool.timeout_error_function is None and result == \
            default_tool_timeout_error_message(tool_name=tool.name, timeout_seconds=timeout):
        return ToolTimeoutError(tool_name=tool.name, timeout_seconds=timeout)
    formatter = resolve_function_tool_failure_error_function(tool, context)
    if formatter is default_tool_error_function and result == default_tool_error_function(
            context, UndeclaredToolFailed()):
        return UndeclaredToolFailed(f"the SDK reported a failure to the model: {result!r}")
    return None


def is_undeclared(tool: Any) -> bool:
    """Whether ``tool`` is a function tool nobody declared (neither decorated nor protected),
    or a ``CustomTool`` (never declared: see the module doc)."""
    return isinstance(tool, CustomTool) or (isinstance(tool, FunctionTool) and declaration_of(tool) is None)


def observe_custom_tool(tool: Any) -> None:
    """Make the exception of a ``CustomTool``'s executor visible to the saga (idempotent).

    The SDK reads ``tool.on_invoke_tool`` after ``on_tool_start`` returns and turns whatever it
    raises into text for the model. The executor is replaced, on the tool object, by one that
    notes the exception on the call's ``ToolContext`` and raises it again: outside a saga, and
    for the SDK, it behaves exactly as the original (same result, same exception).

    Args:
        tool: any tool; only a ``CustomTool`` is touched.
    """
    if not isinstance(tool, CustomTool) or getattr(tool.on_invoke_tool, _OBSERVED_ATTR, False):
        return
    executor = tool.on_invoke_tool

    def _note(context: Any, exc: Exception) -> None:
        try:
            setattr(context, _FAILURE_ATTR, exc)
        except Exception:  # noqa: BLE001 - a context that takes no attribute: read as a result
            pass

    def observed(context: Any, text: str) -> Any:
        try:
            result = executor(context, text)
        except Exception as exc:
            _note(context, exc)
            raise
        if not inspect.isawaitable(result):
            return result

        async def awaited() -> Any:
            try:
                return await result
            except Exception as exc:
                _note(context, exc)
                raise

        return awaited()

    setattr(observed, _OBSERVED_ATTR, True)
    observed.__wrapped__ = executor  # type: ignore[attr-defined]
    tool.on_invoke_tool = observed


def custom_tool_arguments(text: str) -> str:
    """The raw arguments a ``CustomTool`` call is journaled (and its approval hashed) with: its
    one raw string as ``{"input": text}``, JSON text."""
    return json.dumps({"input": text})


def pending_raw_arguments(item: Any) -> str:
    """The raw arguments of a paused call (a ``ToolApprovalItem``) as its INTENT will journal
    them: a custom tool call's raw string as :func:`custom_tool_arguments`, else the JSON text
    the model sent."""
    raw_item = getattr(item, "raw_item", None)
    kind = raw_item.get("type") if isinstance(raw_item, dict) else getattr(raw_item, "type", None)
    if kind == "custom_tool_call":
        text = raw_item.get("input") if isinstance(raw_item, dict) else getattr(raw_item, "input", None)
        return custom_tool_arguments(text if isinstance(text, str) else "")
    return getattr(item, "arguments", None) or ""


def _key_and_raw(context: Any, tool: Any) -> tuple[str, str]:
    """The name a call is journaled under, and its raw arguments (a JSON object's text)."""
    if isinstance(tool, CustomTool):
        return tool.name, custom_tool_arguments(getattr(context, "tool_arguments", None) or "")
    key = getattr(context, "qualified_tool_name", None) or tool.qualified_name
    return key, getattr(context, "tool_arguments", None) or ""


async def begin_undeclared(saga: Saga, context: Any, agent: Agent[Any], tool: FunctionTool, *,
                           strict: bool) -> None:
    """A call of the undeclared ``tool`` is about to run: journal its INTENT (raw arguments,
    ``undeclared``, the agent, the parent call when it runs in a nested run) before its body.

    A call whose INTENT a guardrail of ours already journaled (the tools of a server protected
    with ``protect_mcp_server``, which runs before the hooks) is left alone.

    Args:
        saga: the saga the run belongs to.
        context: the call's ``ToolContext`` (call id, qualified name, raw arguments).
        agent: the agent that made the call.
        tool: the tool.
        strict: refuse the call instead (``strict=True``).

    Raises:
        ConfigurationError: under ``strict`` (also the SDK's ``UserError``): journaled FAILED
            (``not_run``), the saga failed; the body must not run.
        JournalWriteError: the INTENT could not be written (the body must not run).
    """
    key, raw = _key_and_raw(context, tool)
    call_id = getattr(context, "tool_call_id", None)
    if saga.has_external_call(call_id):
        return  # journaled already, by a guardrail of ours (a protected MCP server's tool)
    if strict:
        await saga.refuse_undeclared_call(key, call_id, raw, undeclared_error(
            [f"{key} (met at run time on agent {agent.name!r}; call {call_id})"]))
    observe_custom_tool(tool)
    # Only a call whose approval this saga's resume consumed has a grant to name: the others
    # (no approval asked, or the SDK's own) cost no journal read on their way to the body.
    await saga.begin_external_call(None, key, call_id, raw, agent=agent.name,
                                   asks_approval=call_id in saga.resumed_approvals)


async def end_undeclared(saga: Saga, context: Any, tool: Any, result: Any) -> None:
    """Journal the outcome of a call whose INTENT was journaled from outside its body, if it
    has none yet: EXECUTED with ``result``, or FAILED when ``tool`` is undeclared and ``result``
    is the SDK's own failure or timeout message (:func:`reported_failure`). A protected tool's
    outcome normally comes from its own seams first; this is then the last resort (the core
    ignores it for a call its seam owns, a protected MCP server's: ``begin_external_call(...,
    owned=True)``)."""
    call_id = getattr(context, "tool_call_id", None)
    if saga.has_external_call(call_id):
        failure = reported_failure(tool, context, result) if is_undeclared(tool) else None
        task = saga.end_external_call(call_id, result=result, exc=failure,
                                      timed_out=isinstance(failure, ToolTimeoutError))
        if task is not None:
            await task
