"""What a paused call's approval is bound to.

A pending call (``ToolApprovalItem``) belongs to the tool its agent has under its qualified
name (two agents may each have one of that name). Its approval binds: the *validated* arguments
of a decorated tool; the parsed raw arguments of a tool we could not decorate (a custom tool's
raw string as ``{"input": text}``); a protected MCP tool's arguments and its definition as
listed now; a protected shell tool's commands and working directory.
"""

from __future__ import annotations

import inspect
import weakref
from typing import Any

from agents import FunctionTool
from agents.function_schema import function_schema

from ..core.canonical import encode_canonical, parse_json, to_canonical_value
from ..errors import ApprovalError, EncodingError
from .graph import AgentGraph
from .local_tools import shell_approval_subject
from .mcp.approval import mcp_approval_subject
from .tools import DECLARATION_ATTR, declaration_of
from .undeclared import pending_raw_arguments

__all__ = ["AUTO_REJECTION", "approval_args", "key_of", "pending_call_arguments",
           "reversibility_of", "tool_of"]


AUTO_REJECTION = "The tool call was rejected: its arguments are not valid for this tool."


def key_of(item: Any) -> str:
    """The qualified tool name of a pending call (``namespace.name`` or the name)."""
    return getattr(item, "qualified_name", None) or item.tool_name or ""


def tool_of(graph: AgentGraph, item: Any) -> FunctionTool | None:
    """The tool a pending call belongs to: the one its agent (``ToolApprovalItem.agent``) has
    under its qualified name, found by the graph walk. Two agents may each have a tool of one
    name: the first of that name could be the other agent's tool, with other arguments."""
    agent = getattr(item, "agent", None)
    return graph.tool_of(key_of(item), getattr(agent, "name", None))


_schemas: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _schema_of(func: Any) -> Any:
    """``function_schema(func)``, made once per function and kept while the function lives: it
    builds a pydantic model (about a millisecond), and depends on the function alone. A callable
    that takes no weak reference gets a fresh one each time."""
    try:
        return _schemas[func]
    except KeyError:
        schema = _schemas[func] = function_schema(func)
        return schema
    except TypeError:  # not weak-referenceable
        return function_schema(func)


def pending_call_arguments(tool: FunctionTool | None, raw: str) -> tuple[dict[str, Any], str | None]:
    """Return the canonical arguments a paused call's body would receive, and the raw text when
    it differs (only then is it stored).

    For a decorated tool these are the *validated* values (``"100"`` -> 100, defaults filled in),
    computed with the SDK's public ``function_schema`` on the original function; for a tool we
    could not decorate, the parsed raw arguments.

    Raises:
        ApprovalError: the arguments do not parse (duplicate keys, NaN, truncated JSON) or do
            not validate; such a call is rejected without asking anyone.
    """
    try:
        data = parse_json(raw or "{}")
    except EncodingError as exc:
        raise ApprovalError(f"arguments are not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ApprovalError("arguments are not a JSON object")
    # The saga wrapper the SDK calls: its signature is what the SDK validates against.
    func: Any = getattr(tool, "__wrapped__", None)
    if func is None or getattr(func, DECLARATION_ATTR, None) is None:
        return to_canonical_value(data), None
    schema = _schema_of(func)
    try:
        parsed = schema.params_pydantic_model(**data)
    except Exception as exc:  # noqa: BLE001 - pydantic ValidationError and friends
        raise ApprovalError(f"arguments do not validate: {exc}") from exc
    args, kwargs = schema.to_call_args(parsed)
    params = [p for p in inspect.signature(func).parameters.values()]
    if schema.takes_context:
        params = params[1:]
    bound = inspect.Signature(params).bind(*args, **kwargs)
    bound.apply_defaults()
    try:
        canonical = to_canonical_value(dict(bound.arguments))
        encode_canonical(canonical)
    except EncodingError as exc:
        raise ApprovalError(f"arguments have no canonical encoding: {exc}") from exc
    try:
        same = canonical == to_canonical_value(data)
    except EncodingError:
        same = False
    return canonical, None if same else raw


async def approval_args(graph: AgentGraph, item: Any) -> tuple[dict[str, Any], str | None]:
    """What an approval of the paused call ``item`` is bound to: for a protected MCP server's
    tool, its arguments and its definition as listed now (``sdk.mcp.approval``); for a protected
    shell tool, its commands and working directory (``sdk.local_tools``); otherwise
    :func:`pending_call_arguments`.

    Raises:
        ApprovalError: as :func:`pending_call_arguments`, or the MCP tool's definition cannot be
            read.
    """
    subject = shell_approval_subject(item) or await mcp_approval_subject(item)
    if subject is not None:
        return subject, None
    return pending_call_arguments(tool_of(graph, item), pending_raw_arguments(item))


def reversibility_of(tool: FunctionTool | None) -> str | None:
    """The saga declaration's reversibility of ``tool`` (``None``: not declared)."""
    decl = declaration_of(tool) if tool is not None else None
    return decl.reversibility.value if decl is not None else None
