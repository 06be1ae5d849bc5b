"""Journaling a call of a tool nobody declared, and reading its outcome (M-01).

Such a call is journaled from the run's hooks: ``SagaRunHooks.on_tool_start`` / ``on_tool_end``
for the saga's own run, ``NestedRunHooks`` for every run nested in it (``sdk/nested.py``), both
through :func:`begin_undeclared` / :func:`end_undeclared`. There is no body of ours to see its
exception, and ``on_tool_end`` receives what the model gets.
When that is the SDK's own failure text (the tool raised and its formatter is the SDK's default,
``default_tool_error_function``) or its own timeout text (``default_tool_timeout_error_message``),
the call is journaled FAILED, as a declared tool's would be; any other value is its result
(a custom formatter's message, or ``RunConfig.tool_error_formatter``'s, reads as a result).
"""

from __future__ import annotations

from typing import Any

from agents import Agent, FunctionTool, ToolTimeoutError, default_tool_error_function

from ..core.saga import Saga
from ._sdk_internals import (
    default_tool_timeout_error_message,
    resolve_function_tool_failure_error_function,
)
from .binding import undeclared_error
from .tools import declaration_of

__all__ = ["UndeclaredToolFailed", "begin_undeclared", "end_undeclared", "is_undeclared", "reported_failure"]


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
    """Whether ``tool`` is a function tool nobody declared (neither decorated nor protected)."""
    return isinstance(tool, FunctionTool) and declaration_of(tool) is None


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
        strict: refuse the call instead (``strict=True``, M-01).

    Raises:
        ConfigurationError: under ``strict`` (also the SDK's ``UserError``): journaled FAILED
            (``not_run``), the saga failed; the body must not run.
        JournalWriteError: the INTENT could not be written (the body must not run).
    """
    key = getattr(context, "qualified_tool_name", None) or tool.qualified_name
    call_id = getattr(context, "tool_call_id", None)
    if saga.has_external_call(call_id):
        return  # journaled already, by a guardrail of ours (a protected MCP server's tool)
    raw = getattr(context, "tool_arguments", None) or ""
    if strict:
        await saga.refuse_undeclared_call(key, call_id, raw, undeclared_error(
            [f"{key} (met at run time on agent {agent.name!r}; call {call_id})"]))
    await saga.begin_external_call(None, key, call_id, raw, agent=agent.name)


async def end_undeclared(saga: Saga, context: Any, tool: Any, result: Any) -> None:
    """Journal the outcome of a call whose INTENT was journaled from outside its body, if it
    has none yet: EXECUTED with ``result``, or FAILED when ``tool`` is undeclared and ``result``
    is the SDK's own failure or timeout message (:func:`reported_failure`). A protected tool's
    outcome normally comes from its own seams first; this is then the last resort."""
    call_id = getattr(context, "tool_call_id", None)
    if saga.has_external_call(call_id):
        failure = reported_failure(tool, context, result) if declaration_of(tool) is None else None
        task = saga.end_external_call(call_id, result=result, exc=failure)
        if task is not None:
            await task
