"""Start-up checks: walk an agent's tools, bind declarations to the saga, refuse bad setups.

"Fail at start-up, not at refund time": an irreversible tool without the SDK's
``needs_approval=True`` is refused before the run starts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agents import Agent, FunctionTool

from ..core.declarations import Reversibility, ToolDeclaration
from ..core.saga import Saga
from ..errors import ConfigurationError
from .tools import declaration_of

__all__ = ["bind_agent", "declared_tools"]


def _agents(agent: Agent[Any]) -> Iterator[Agent[Any]]:
    seen: set[int] = set()
    stack = [agent]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for handoff in getattr(current, "handoffs", ()) or ():
            target = handoff if isinstance(handoff, Agent) else getattr(handoff, "agent", None)
            if isinstance(target, Agent):
                stack.append(target)


def declared_tools(agent: Agent[Any]) -> Iterator[tuple[FunctionTool, ToolDeclaration]]:
    """Yield ``(tool, declaration)`` for every declared function tool of ``agent`` and of the
    agents it can hand off to."""
    for current in _agents(agent):
        for tool in current.tools:
            if isinstance(tool, FunctionTool):
                decl = declaration_of(tool)
                if decl is not None:
                    yield tool, decl


def bind_agent(saga: Saga, agent: Agent[Any]) -> None:
    """Register every declared tool of ``agent`` with ``saga`` and check the declarations.

    Raises:
        ConfigurationError: an irreversible tool lacks ``needs_approval=True`` (a policy callable
            is refused: every irreversible call needs a human), or two different tools share a
            name.
    """
    for tool, decl in declared_tools(agent):
        if decl.reversibility is Reversibility.IRREVERSIBLE and tool.needs_approval is not True:
            raise ConfigurationError(
                f"tool {tool.name!r} is declared irreversible but its @function_tool does not have "
                "needs_approval=True (a policy callable would let some calls through without a "
                "human); an irreversible call must always wait for an approval:\n\n"
                "    @function_tool(needs_approval=True)\n    @irreversible\n"
                f"    def {tool.name}(...): ..."
            )
        saga.register(tool.name, decl, timeout=tool.timeout_seconds)
