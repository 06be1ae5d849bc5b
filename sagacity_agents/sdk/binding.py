"""Start-up checks: walk the agent graph, bind declarations to the saga, refuse bad setups.

"Fail at start-up, not at refund time": an irreversible tool without the SDK's
``needs_approval=True``, or two different tools under one name on one agent, anywhere an agent
run can reach (handoff targets, agents exposed as tools, at any depth), is refused before the run
starts; with ``strict=True``, so is any function tool nobody declared.
"""

from __future__ import annotations

import warnings
from typing import Any

from agents import Agent

from ..core.declarations import Reversibility
from ..core.saga import Saga
from ..errors import ConfigurationError
from .graph import agent_graph
from .local_tools import OutsideSagaWarning, hosted_mcp_never_approved, outside_the_saga
from .user_errors import SdkConfigurationError, as_user_error

__all__ = ["UNDECLARED_HINT", "bind_agent", "undeclared_error"]

UNDECLARED_HINT = (
    "Declare each tool: a decorator under @function_tool (@compensable(undo=...), @read_only, "
    "@no_undo or @irreversible), protect_tool(tool, reversibility=...) for a FunctionTool you "
    "cannot decorate (MCP, hand-built), nested_agent_tool(agent.as_tool(...)) for an agent "
    "exposed as a tool; or leave strict off to journal such calls as undeclared"
)


def undeclared_error(names: list[str]) -> SdkConfigurationError:
    """The ``ConfigurationError`` (also the SDK's ``UserError``) refusing undeclared tools under
    ``strict=True``; ``names`` are the tools, each with where it is (its graph path)."""
    return SdkConfigurationError(
        "strict=True: no saga declaration for " + "; ".join(names) + ". " + UNDECLARED_HINT)


def _edge_tools(agents: Any, strict: bool) -> None:
    """Warn about the tools outside the saga; under ``strict`` refuse hosted MCP servers that
    never ask a human."""
    outside = [f"{a.name}: {t}" for a in agents for t in outside_the_saga(a)]
    if outside:
        warnings.warn(OutsideSagaWarning(
            "tools outside the saga (not journaled, never undone): " + "; ".join(outside)), stacklevel=3)
    never = [f"{a.name}: {label}" for a in agents for label in hosted_mcp_never_approved(a)]
    if strict and never:
        raise SdkConfigurationError(
            "strict=True: hosted MCP server(s) " + ", ".join(never) + " never require approval: "
            "their calls run on OpenAI's side, unjournaled and without a human; give them "
            "require_approval='always' (or a per-tool policy) or run the server locally with "
            "protect_mcp_server")


def bind_agent(saga: Saga, agent: Agent[Any], *, strict: bool = False) -> None:
    """Register every declared tool a run of ``agent`` can reach with ``saga``, under the tool's
    qualified name and its agent (and the policy declarations of the protected MCP servers of
    every agent reached, under ``SERVER.TOOL``), and check the declarations. Compensation and
    recovery run only undos registered so (and each call's own, noted as it starts).

    Args:
        saga: the saga the run belongs to.
        agent: the agent the run starts with (or one it reached: bound again as it starts).
        strict: refuse a graph with any function tool nobody declared. Without it such tools
            run, and the run's hooks journal their calls as undeclared.

    Warns:
        OutsideSagaWarning: the graph has tools no saga can journal or undo (hosted tools,
            ``LocalShellTool``, ``ComputerTool``, unprotected shell or apply-patch tools), each
            named (``sdk/local_tools.py``).

    Raises:
        ConfigurationError: (also the SDK's ``UserError``) with ``strict``, a ``HostedMCPTool``
            whose server never requires approval; an irreversible tool lacks
            ``needs_approval=True`` (a policy callable is refused: every irreversible call needs
            a human); two different tools share a name on one agent; a part of the graph cannot
            be reached (see ``agent_graph``); with ``strict``, undeclared tools (each named with
            its path, and how to declare it).
    """
    graph = agent_graph(agent)
    _edge_tools(graph.agents, strict)
    if strict:
        undeclared = [f"{site.key} ({site.path})" for site in graph.undeclared()]
        if undeclared:
            raise undeclared_error(undeclared)
    for site in graph.declared():
        decl, tool = site.declaration, site.tool
        assert decl is not None
        if decl.reversibility is Reversibility.IRREVERSIBLE and tool.needs_approval is not True:
            raise SdkConfigurationError(
                f"tool {site.key!r} ({site.path}) is declared irreversible but its "
                "@function_tool does not have needs_approval=True (a policy callable would let "
                "some calls through without a human); an irreversible call must always wait "
                "for an approval:\n\n"
                "    @function_tool(needs_approval=True)\n    @irreversible\n"
                f"    def {tool.name}(...): ..."
            )
    try:
        for site in graph.declared():
            assert site.declaration is not None
            saga.register(site.key, site.declaration, agent=site.agent,
                          timeout=site.tool.timeout_seconds)
        for reached in graph.agents:
            # A protected MCP server's tools exist only once listed, but their declarations
            # (the undos) are its policy's: bound here, so that compensation and recovery find
            # them in the graph given, never elsewhere in the process.
            for server in getattr(reached, "mcp_servers", None) or ():
                protection = getattr(server, "_sagacity_protection", None)
                for decl in getattr(protection, "declarations", {}).values():
                    saga.register(decl.name, decl, agent=reached.name)
    except ConfigurationError as exc:
        raise as_user_error(exc) from None
