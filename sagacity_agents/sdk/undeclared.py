"""Reading the outcome of a call of a tool nobody declared (M-01).

Such a call is journaled from the run's hooks (``SagaRunHooks.on_tool_start`` / ``on_tool_end``):
there is no body of ours to see its exception, and ``on_tool_end`` receives what the model gets.
When that is the SDK's own failure text (the tool raised and its formatter is the SDK's default,
``default_tool_error_function``) or its own timeout text (``default_tool_timeout_error_message``),
the call is journaled FAILED, as a declared tool's would be; any other value is its result
(a custom formatter's message, or ``RunConfig.tool_error_formatter``'s, reads as a result).
"""

from __future__ import annotations

from typing import Any

from agents import FunctionTool, ToolTimeoutError, default_tool_error_function

from ._sdk_internals import (
    default_tool_timeout_error_message,
    resolve_function_tool_failure_error_function,
)

__all__ = ["UndeclaredToolFailed", "reported_failure"]


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
