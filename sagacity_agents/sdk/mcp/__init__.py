"""MCP servers inside the saga: ``protect_mcp_server`` and its policy."""

from .approval import definition_change, mcp_approval_subject
from .policy import (
    McpPolicy,
    McpToolPolicy,
    McpUndo,
    UndoArgumentsError,
    definition_digest,
    tool_definition,
)
from .protect import (
    IDEMPOTENCY_META_KEY,
    McpCallFailed,
    McpProtection,
    protect_mcp_server,
)
from .registry import McpServerMissingError, connected_mcp_servers, protection_named

__all__ = [
    "IDEMPOTENCY_META_KEY",
    "McpCallFailed",
    "McpPolicy",
    "McpProtection",
    "McpServerMissingError",
    "McpToolPolicy",
    "McpUndo",
    "UndoArgumentsError",
    "connected_mcp_servers",
    "definition_change",
    "definition_digest",
    "mcp_approval_subject",
    "protect_mcp_server",
    "protection_named",
    "tool_definition",
]
