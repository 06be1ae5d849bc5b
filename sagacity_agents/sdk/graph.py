"""One walk of the agent graph: every agent a run can reach, and every function tool on the way.

A run of agent ``A`` can call the tools of ``A``, of every agent it can hand off to (``handoffs``
given as ``Agent`` objects or as ``Handoff`` objects made by ``handoff(agent)``), and of every
agent exposed as a tool (``agent.as_tool(...)``, also wrapped by ``nested_agent_tool`` /
``protect_tool``), to any depth, with cycles. Start-up checks, binding declarations to the saga,
approval argument validation and recovery's undo lookup all use this one walk, so none of them
sees less of the graph than another.

Tools are keyed as the SDK keys them, by ``FunctionTool.qualified_name`` (``namespace.name`` for
a ``tool_namespace()`` tool, the name otherwise). Two agents may each have their own tool under
one key, as the SDK allows: every call journals its agent and declaration id, and the undo
is found by that id. Two *different* tools under one key on *one* agent are refused (the SDK
warns and lets the last win; which one a journaled call or an approval means would be a guess).

What the walk cannot see, and what happens then:

* a ``Handoff`` built by hand (its ``on_invoke_handoff`` picks the agent at run time): a
  :class:`UnseenAgentWarning`; the target's tools are bound when it starts
  (``SagaRunHooks.on_agent_start``) and checked per call at run time;
* a ``handoff(agent)`` whose agent was garbage collected (the SDK keeps only a weak reference):
  ``ConfigurationError`` (the SDK would fail at the handoff);
* an agent run with ``Runner.run`` inside a tool body, MCP servers' tools: seen only at run time;
  a call under a name already bound to another declaration fails before its body runs
  (``Saga.run_call``).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from agents import Agent, CustomTool, FunctionTool, Handoff

from ..core.declarations import ToolDeclaration
from . import _sdk_internals as sdk
from .tools import declaration_of
from .user_errors import SdkConfigurationError

__all__ = ["AgentGraph", "CustomToolSite", "ToolSite", "UnseenAgentWarning", "agent_graph", "tool_key"]


class UnseenAgentWarning(UserWarning):
    """Part of the agent graph cannot be seen before the run (a ``Handoff`` built by hand): its
    tools are checked only when they run."""


def tool_key(tool: FunctionTool) -> str:
    """The key the SDK identifies ``tool`` by: its public ``qualified_name``."""
    return tool.qualified_name


@dataclass(frozen=True)
class ToolSite:
    """One function tool found by the walk."""

    key: str
    """``tool.qualified_name``: the name calls are journaled and approved under."""
    agent: str
    """The name of the agent that has the tool."""
    tool: FunctionTool
    """The tool object."""
    declaration: ToolDeclaration | None
    """Its saga declaration (``None``: not decorated, not protected)."""
    path: str
    """How the root agent reaches it, for error messages (``"A -> handoff B -> as_tool c"``)."""


@dataclass(frozen=True)
class CustomToolSite:
    """One ``CustomTool`` found by the walk (never declared: its calls are journaled
    undeclared, ``sdk/undeclared.py``)."""

    key: str
    """``tool.name``: the name its calls are journaled under."""
    agent: str
    """The name of the agent that has the tool."""
    tool: CustomTool
    """The tool object."""
    path: str
    """How the root agent reaches it, for error messages."""
    declaration: None = None
    """Always ``None``: nothing declares a custom tool."""


@dataclass(frozen=True)
class AgentGraph:
    """The agents and function tools a run of :attr:`root` can reach (see the module doc)."""

    root: Agent[Any]
    agents: tuple[Agent[Any], ...]
    """Every reachable agent, the root first, each once."""
    sites: tuple[ToolSite, ...]
    """Every reachable function tool, once per agent that has it."""
    custom: tuple[CustomToolSite, ...] = ()
    """Every reachable ``CustomTool`` (one raw string in, a local executor; never declared, so
    every call of one is journaled undeclared), once per agent that has it."""

    def tools(self) -> dict[str, FunctionTool]:
        """Tool key -> tool; for a key several agents use for different tools, the first found
        (``tool_of`` tells them apart by agent)."""
        found: dict[str, FunctionTool] = {}
        for site in self.sites:
            found.setdefault(site.key, site.tool)
        return found

    def tool_of(self, key: str, agent: str | None) -> FunctionTool | None:
        """The tool ``agent`` has under ``key`` (any agent's when ``agent`` is ``None`` or has
        none); ``None`` when no agent has one."""
        for site in self.sites:
            if site.key == key and (agent is None or site.agent == agent):
                return site.tool
        return self.tools().get(key) if agent is not None else None

    def undeclared(self) -> Iterator[ToolSite | CustomToolSite]:
        """The sites whose tool carries no saga declaration (neither decorated nor protected),
        custom tools included."""
        yield from (site for site in self.sites if site.declaration is None)
        yield from self.custom

    def declared(self) -> Iterator[ToolSite]:
        """The sites whose tool carries a saga declaration."""
        return (site for site in self.sites if site.declaration is not None)


def _identity(tool: FunctionTool, decl: ToolDeclaration | None) -> int:
    """What makes two tool objects one tool: the same declaration, else the same function
    (``function_tool(f)`` built twice), else the same agent behind ``as_tool``."""
    if decl is not None:
        return id(decl)
    inner = sdk.agent_of_tool(tool)
    if isinstance(inner, Agent):
        return id(inner)
    return id(getattr(tool, "__wrapped__", None) or tool)


def _origin(tool: FunctionTool, decl: ToolDeclaration | None, index: int) -> str:
    """Where a tool object comes from, so two tools of one name read differently in an error:
    its place in ``agent.tools`` and its function (or the agent behind ``as_tool``)."""
    inner = sdk.agent_of_tool(tool)
    if isinstance(inner, Agent):
        what = f"agent {inner.name!r} as a tool"
    elif decl is not None:
        what = f"declared {decl.declaration_id or decl.name}"
    else:
        func = getattr(tool, "__wrapped__", None) or tool
        name = getattr(func, "__qualname__", None) or type(func).__name__
        what = f"{getattr(func, '__module__', None) or '?'}:{name}"
    return f"tools[{index}], {what}"


def _unreachable(path: str, what: str) -> SdkConfigurationError:
    return SdkConfigurationError(
        f"{path}: {what}; the saga layer cannot check or bind the tools behind it. This is a "
        "change in the Agents SDK this version was not written for (see "
        "sagacity_agents/sdk/_sdk_internals.py), or an agent that no longer exists"
    )


def agent_graph(root: Agent[Any]) -> AgentGraph:
    """Walk every agent and function tool a run of ``root`` can reach.

    Args:
        root: the agent a run starts with.

    Returns:
        The :class:`AgentGraph`.

    Raises:
        ConfigurationError: (also the SDK's ``UserError``) two different tools share a qualified
            name on one agent; a ``handoff(agent)`` whose agent was garbage collected; a handoff or agent tool
            whose target has a shape this version does not know (SDK changed).

    Warns:
        UnseenAgentWarning: a ``Handoff`` built by hand, whose target is known only at run time.
    """
    agents: list[Agent[Any]] = []
    sites: list[ToolSite] = []
    custom: list[CustomToolSite] = []
    # (agent, key) -> (identity, site, origin)
    by_key: dict[tuple[int, str], tuple[int, ToolSite, str]] = {}
    seen: set[int] = set()
    stack: list[tuple[Agent[Any], str]] = [(root, root.name)]
    while stack:
        agent, path = stack.pop()
        if id(agent) in seen:
            continue
        seen.add(id(agent))
        agents.append(agent)
        for index, tool in enumerate(getattr(agent, "tools", None) or ()):
            if isinstance(tool, CustomTool):
                custom.append(CustomToolSite(tool.name, agent.name, tool,
                                             f"{path} -> custom tool {tool.name}"))
                continue
            if not isinstance(tool, FunctionTool):
                continue  # hosted tools run at the provider: nothing of ours to journal
            decl = declaration_of(tool)
            key = tool.qualified_name
            site = ToolSite(key, agent.name, tool, decl, f"{path} -> tool {key}")
            known = by_key.get((id(agent), key))
            if known is None:
                by_key[(id(agent), key)] = (_identity(tool, decl), site, _origin(tool, decl, index))
                sites.append(site)
            elif known[0] != _identity(tool, decl):
                raise SdkConfigurationError(
                    f"agent {agent.name!r} has two different tools named {site.key!r}: "
                    f"{known[1].path} ({known[2]}) and {site.path} "
                    f"({_origin(tool, decl, index)}). The SDK lets the last one win; which one "
                    "a journaled call, its undo or its approval belongs to would be a guess; "
                    "give one of them another name (function_tool(name_override=...))"
                )
            inner = sdk.agent_of_tool(tool)
            if inner is sdk.UNKNOWN:
                raise _unreachable(site.path, "an agent tool with no agent instance")
            if isinstance(inner, Agent):
                stack.append((inner, f"{path} -> as_tool {key} -> {inner.name}"))
        for handoff in getattr(agent, "handoffs", None) or ():
            if isinstance(handoff, Agent):
                stack.append((handoff, f"{path} -> handoff {handoff.name}"))
                continue
            if not isinstance(handoff, Handoff):
                raise _unreachable(path, f"a handoff of unknown type {type(handoff).__name__}")
            target = sdk.handoff_target(handoff)
            where = f"{path} -> handoff {handoff.tool_name}"
            if target is sdk.UNKNOWN:
                raise _unreachable(where, "a Handoff whose target reference has an unknown shape")
            if target is None:
                if sdk.is_dead_handoff(handoff):
                    raise _unreachable(where, "its target agent was garbage collected")
                warnings.warn(
                    f"{where}: a Handoff built without handoff(agent) names its target only at "
                    "run time; the tools of that agent are checked when they run, not at start",
                    UnseenAgentWarning,
                    stacklevel=2,
                )
                continue
            assert isinstance(target, Agent)
            stack.append((target, f"{where} -> {target.name}"))
    return AgentGraph(root, tuple(agents), tuple(sites), tuple(custom))
