"""Start-up checks: walk the agent graph, bind declarations to the saga, refuse bad setups.

"Fail at start-up, not at refund time": an irreversible tool without the SDK's
``needs_approval=True``, or two different tools under one name, anywhere an agent run can reach
(handoff targets, agents exposed as tools, at any depth), is refused before the run starts.
"""

from __future__ import annotations

from typing import Any

from agents import Agent

from ..core.declarations import Reversibility
from ..core.saga import Saga
from ..errors import ConfigurationError
from .graph import agent_graph
from .user_errors import SdkConfigurationError, as_user_error

__all__ = ["bind_agent"]


def bind_agent(saga: Saga, agent: Agent[Any]) -> None:
    """Register every declared tool a run of ``agent`` can reach with ``saga``, under the tool's
    qualified name, and check the declarations.

    Raises:
        ConfigurationError: (also the SDK's ``UserError``) an irreversible tool lacks
            ``needs_approval=True`` (a policy callable is refused: every irreversible call needs
            a human); two different tools share a name in the graph or in the saga; a part of
            the graph cannot be reached (see ``agent_graph``).
    """
    graph = agent_graph(agent)
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
    for site in graph.declared():
        assert site.declaration is not None
        try:
            saga.register(site.key, site.declaration, timeout=site.tool.timeout_seconds)
        except ConfigurationError as exc:
            raise as_user_error(exc) from None
