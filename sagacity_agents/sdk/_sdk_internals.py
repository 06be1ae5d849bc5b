"""Every private attribute of the Agents SDK this library reads, in one place.

The SDK keeps some facts only in private names: the target of a ``handoff(agent)`` (a weak
reference), the agent behind an ``agent.as_tool(...)`` tool, and the failure formatter of a
``FunctionTool``. The SDK's own graph walk (``agents.extensions.visualization``) and run loop read
the same names. Nothing outside this module touches them, and
``tests/sdk/test_sdk_contract.py`` pins each one with a test, so an SDK upgrade that renames or
reshapes one fails there, loudly, rather than making the saga layer skip part of the agent graph.

Re-exported SDK functions that are importable but internal (not in ``agents.__all__``):
``resolve_function_tool_failure_error_function`` / ``set_function_tool_failure_error_function``
(the failure-formatter seam of ``protect_tool``), ``default_tool_timeout_error_message`` (how
``protect_tool`` tells a timed-out call from a result), ``validate_run_hooks`` (the SDK's own check
that run hooks are ``RunHooks``, raising its ``TypeError`` for ``AgentHooks``),
``normalize_callable_object`` (the SDK's own decision of which callable objects ``function_tool``
takes, with its ``UserError`` for the others), and ``AgentRunner`` /
``get_default_agent_runner`` / ``set_default_agent_runner`` (the runner every ``Runner.run``,
``run_streamed`` and ``run_sync`` delegates to, ``Agent.as_tool``'s nested runs included: where
nested runs get hooks of ours, ``sdk/nested.py``).
"""

from __future__ import annotations

from typing import Any

from agents import Agent, FunctionTool, Handoff
from agents.run import AgentRunner, get_default_agent_runner, set_default_agent_runner
from agents.run_internal.turn_preparation import validate_run_hooks
from agents.tool import (
    _normalize_function_tool_callable,
    default_tool_timeout_error_message,
    resolve_function_tool_failure_error_function,
    set_function_tool_failure_error_function,
)

__all__ = [
    "UNKNOWN",
    "AgentRunner",
    "agent_of_tool",
    "default_tool_timeout_error_message",
    "get_default_agent_runner",
    "handoff_target",
    "is_dead_handoff",
    "mcp_approval_policy",
    "mcp_prefixed_tool_names",
    "normalize_callable_object",
    "resolve_function_tool_failure_error_function",
    "set_default_agent_runner",
    "set_function_tool_failure_error_function",
    "set_mcp_approval_policy",
    "validate_run_hooks",
]

UNKNOWN = object()
"""Returned when an SDK object does not have the shape this module was written for."""


def handoff_target(handoff: Handoff[Any, Any]) -> Agent[Any] | None | object:
    """The agent a ``Handoff`` transfers to.

    ``handoff(agent)`` keeps its target only in ``Handoff._agent_ref``, a ``weakref.ref``
    (agents 0.24, ``agents/handoffs/__init__.py``).

    Returns:
        The target ``Agent``; ``None`` when the handoff was built by hand (no reference: its
        ``on_invoke_handoff`` picks the agent at run time) or when the referenced agent was
        garbage collected (``is_dead_handoff`` tells the two apart); :data:`UNKNOWN` when the
        attribute is missing or not a weak reference (the SDK changed).
    """
    if not hasattr(handoff, "_agent_ref"):
        return UNKNOWN
    ref = handoff._agent_ref
    if ref is None:
        return None
    if not callable(ref):
        return UNKNOWN
    target = ref()
    if target is None:
        return None
    return target if isinstance(target, Agent) else UNKNOWN


def is_dead_handoff(handoff: Handoff[Any, Any]) -> bool:
    """Whether ``handoff`` referenced an agent that no longer exists (a dead weak reference)."""
    ref = getattr(handoff, "_agent_ref", None)
    return callable(ref) and ref() is None


def agent_of_tool(tool: FunctionTool) -> Agent[Any] | None | object:
    """The agent behind an ``agent.as_tool(...)`` tool (also behind a ``copy.copy`` of it, as
    ``nested_agent_tool`` / ``protect_tool`` make).

    ``Agent.as_tool`` sets ``FunctionTool._is_agent_tool = True`` and
    ``FunctionTool._agent_instance = agent`` (a strong reference; agents 0.24, ``agents/agent.py``).

    Returns:
        The inner ``Agent``; ``None`` for a tool that is not an agent tool; :data:`UNKNOWN` when
        the tool says it is an agent tool but holds no ``Agent`` (the SDK changed).
    """
    if not getattr(tool, "_is_agent_tool", False):
        return None
    inner = getattr(tool, "_agent_instance", None)
    return inner if isinstance(inner, Agent) else UNKNOWN


def normalize_callable_object(func: Any) -> Any:
    """What ``function_tool`` makes of a callable object (not a function, method or class), or
    the SDK's own ``UserError`` for one it refuses.

    ``agents.tool._normalize_function_tool_callable`` (agents 0.24) refuses ``functools.partial``,
    instances carrying ``__wrapped__`` / ``__signature__`` / their own annotations, a ``__call__``
    that is not a plain function (staticmethod, classmethod, singledispatchmethod, partialmethod,
    a custom descriptor, one with ``__wrapped__`` or ``__signature__``), generic classes, context
    parameters that are not the first positional one, and annotations it cannot resolve. It is
    called here with a placeholder name override, so a class name the SDK cannot use as a tool
    name is *not* refused here: the SDK refuses it when it builds the tool, exactly when the user
    gave no ``name_override``; and without docstring use, so no docstring is read here (the SDK
    reads them when it builds the tool, unless ``use_docstring_info=False``).

    Returns:
        The SDK's adapter: a plain function whose ``__signature__`` (``self`` bound) and
        ``__annotations__`` (resolved as the SDK resolves them) are the tool's.

    Raises:
        UserError: the SDK's, with its message, for every shape ``function_tool`` refuses.
    """
    adapter, _description = _normalize_function_tool_callable(func, None, "-", False)
    return adapter


def mcp_approval_policy(server: Any) -> Any:
    """The approval policy an MCP server was built with, as the SDK normalized it.

    ``MCPServer.__init__(require_approval=...)`` keeps it only in ``_needs_approval_policy``
    (agents 0.24, ``agents/mcp/server.py``): ``False`` / ``True``, a ``{tool name: bool}`` dict,
    or a callable ``(run_context, agent, mcp_tool) -> bool`` (maybe awaitable).

    Returns:
        That value, or :data:`UNKNOWN` when the server has no such attribute (the SDK changed).
    """
    return getattr(server, "_needs_approval_policy", UNKNOWN)


def set_mcp_approval_policy(server: Any, policy: Any) -> None:
    """Give an MCP server a callable approval policy ``(run_context, agent, mcp_tool) -> bool``,
    as ``require_approval=callable`` would have (the SDK keeps callables as they are).

    Raises:
        TypeError: the server has no ``_needs_approval_policy`` (the SDK changed): refusing is
            safer than letting irreversible MCP tools run without a human.
    """
    if mcp_approval_policy(server) is UNKNOWN:
        raise TypeError(f"{type(server).__name__} has no approval policy this version can extend "
                        "(agents 0.24 MCPServer._needs_approval_policy)")
    server._needs_approval_policy = policy


def mcp_prefixed_tool_names(server_name: str, tool_name: str) -> set[str]:
    """The names the SDK may give the tool ``tool_name`` of the server ``server_name`` under
    ``mcp_config={"include_server_in_tool_names": True}``: ``mcp_SERVER__TOOL`` as
    ``MCPUtil._build_prefixed_tool_base_name`` builds it, shortened with or without the hash
    suffix ``MCPUtil._shorten_tool_name`` adds (agents 0.24, ``agents/mcp/util.py``; a further
    collision renaming is not covered: such a name is not found, so the tool stays undeclared)."""
    from agents.mcp.util import MCPUtil, get_mcp_server_log_name

    base = MCPUtil._build_prefixed_tool_base_name(get_mcp_server_log_name(server_name), tool_name)
    seed = f"{get_mcp_server_log_name(server_name)}\0{tool_name}"
    return {base, MCPUtil._shorten_tool_name(base, seed), MCPUtil._shorten_tool_name(base, seed, force_hash=True)}
