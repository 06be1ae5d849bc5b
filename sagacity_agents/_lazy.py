"""Names the doors export but import on first use (internal).

The doors export what the Agents SDK adapter defines without importing the SDK when they are
imported, so core-only users (the CLI's journal commands, an auditor verifying an export) do not
pay for it; the PostgreSQL backend's classes likewise wait until one is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

HOMES = {
    "Decision": "sagacity_agents.sdk.results",
    "HooksNotEnteredError": "sagacity_agents.sdk.hooks",
    "McpPolicy": "sagacity_agents.sdk.mcp",
    "McpServerMissingError": "sagacity_agents.sdk.mcp",
    "PostgresApprovalStore": "sagacity_agents.backends.postgres.approvals",
    "PostgresCheckpointStore": "sagacity_agents.backends.postgres.checkpoints",
    "PostgresDatabase": "sagacity_agents.backends.postgres.setup",
    "PostgresJournal": "sagacity_agents.backends.postgres.journal",
    "RunLeaseLostError": "sagacity_agents.sdk.hooks",
    "SagaRecovered": "sagacity_agents.sdk.results",
    "SagaResult": "sagacity_agents.sdk.results",
    "SagaRunHooks": "sagacity_agents.sdk.hooks",
    "SagaStopped": "sagacity_agents.sdk.hooks",
    "SagaStream": "sagacity_agents.sdk.streaming",
    "Sagacity": "sagacity_agents.sdk.facade",
    "StreamAbandoned": "sagacity_agents.sdk.results",
    "compensable": "sagacity_agents.sdk.tools",
    "irreversible": "sagacity_agents.sdk.tools",
    "nested_agent_tool": "sagacity_agents.sdk.fallback",
    "no_undo": "sagacity_agents.sdk.tools",
    "protect_mcp_server": "sagacity_agents.sdk.mcp",
    "protect_tool": "sagacity_agents.sdk.fallback",
    "read_only": "sagacity_agents.sdk.tools",
    "saga_output_guardrail": "sagacity_agents.sdk.guardrails",
    "saga_tool_guardrail": "sagacity_agents.sdk.guardrails",
    "saga_trace": "sagacity_agents.sdk.tracing",
}
"""Every name a door imports on first use -> the module that defines it."""


def on_first_use(namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A door's ``__getattr__``: each name of the door's ``__all__`` listed in :data:`HOMES` is
    imported from its module on first use.

    Args:
        namespace: the door's ``globals()``; a name, once imported, is kept there, so the next
            lookup does not come back here.

    Returns:
        The ``__getattr__``. It raises ``AttributeError`` for any other name (which is also how
        ``from package import submodule`` finds a submodule).
    """
    module = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        if name not in HOMES or name not in namespace.get("__all__", ()):
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(HOMES[name]), name)
        namespace[name] = value
        return value

    return __getattr__
