"""The tools a saga knows: each tool's declaration (whose undo compensation runs), by name and by
(agent, name), and its framework settings."""

from __future__ import annotations

from typing import Any

from ...errors import ConfigurationError
from ..declarations import ToolDeclaration, interchangeable

__all__ = ["ToolRegistry"]


class ToolRegistry:
    """The declarations bound in one saga."""

    def __init__(self) -> None:
        self.declarations: dict[str, ToolDeclaration] = {}
        """Tool name -> the first declaration bound or met under it (every one is journaled by
        id; compensation looks undos up by id)."""
        self.agent_declarations: dict[tuple[str | None, str], ToolDeclaration] = {}
        """(agent name, tool name) -> declaration, for tools of one name on several agents."""
        self.tool_settings: dict[str, dict[str, Any]] = {}
        """Tool name -> its framework settings (``timeout`` seconds, ...)."""

    def register(
        self, tool: str, declaration: ToolDeclaration, *, agent: str | None = None, **settings: Any
    ) -> None:
        """Make ``declaration``'s undo available for entries of ``tool`` and note the tool's
        framework settings (e.g. ``timeout`` seconds, used to say a cancellation was a timeout).

        Two agents of one saga may each have their own tool of one name: every INTENT journals
        its declaration id and agent, and compensation finds the undo by the INTENT's (agent,
        tool) when that declaration has the journaled id, else by the id when exactly one
        declaration of the saga has it; so the second declaration is kept beside the first
        (:meth:`declaration_for` by agent name) rather than refused. Name-only lookups
        (``declarations``) keep the first. (Two different tools of one name on one agent object
        are refused by the adapter's graph walk, which knows agents by identity.)

        Args:
            tool: the tool's name as calls are journaled (the SDK's qualified name).
            declaration: its saga declaration.
            agent: the name of the agent that has the tool (``None``: not known).
            settings: the tool's framework settings.

        Raises:
            ConfigurationError: a different declaration (another undo) under the same agent
                *name*, tool name and declaration id as one bound already (two agents of one
                name, each with a tool a factory made): neither the id nor the agent could tell
                their calls apart, and a wrong undo is worse than none. Give each tool its own
                id (``compensable(..., declaration_id=...)``) or the agents distinct names.
        """
        bound = self.agent_declarations.get((agent, tool))
        if (bound is not None and bound.declaration_id == declaration.declaration_id
                and not interchangeable(bound, declaration)):
            raise ConfigurationError(
                f"tool {tool!r}: two different declarations (different undos) under one "
                f"declaration id {declaration.declaration_id!r} on agents both named "
                f"{agent!r}; compensation could not tell their calls apart. Give each tool its "
                "own id with compensable(..., declaration_id=...) or the agents distinct names")
        self.agent_declarations.setdefault((agent, tool), declaration)
        self.declarations.setdefault(tool, declaration)
        if settings:
            self.tool_settings.setdefault(tool, settings)

    def note_declaration(self, tool: str, declaration: ToolDeclaration, agent: str | None) -> None:
        """A call of ``agent``'s ``tool`` is starting with ``declaration`` (the one its wrapper
        or guardrail carries): bind it, so compensation finds *this* undo for the call even
        when the agent was met only at run time (an agent run inside a tool body).

        Raises:
            ConfigurationError: as :meth:`register`.
        """
        if agent is None:
            self.declarations.setdefault(tool, declaration)
        elif self.agent_declarations.get((agent, tool)) is not declaration:
            self.register(tool, declaration, agent=agent)

    def declaration_for(self, tool: str, agent: str | None = None) -> ToolDeclaration | None:
        """The declaration bound for ``agent``'s tool ``tool``, else the first bound under that
        name (``None``: none)."""
        return self.agent_declarations.get((agent, tool)) or self.declarations.get(tool)
