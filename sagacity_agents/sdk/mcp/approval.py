"""Approvals of irreversible MCP calls, bound to the tool's definition.

An MCP tool is whatever its server says it is when it is called: a server can keep a tool's
name and change its description or input schema between the approval and the call (a "rug
pull"). So what a human approves for an MCP tool is its arguments **and** its definition as the
server listed it when the run paused: the approval request's ``args`` are
``{"arguments": ..., "mcp_tool": {"server", "name", "description", "input_schema"}}`` and its hash
covers both. ``sagacity approvals show`` prints that stored definition (no server needed).
Pausing and resuming need the server connected (its tools exist only once listed): resume lists
them again (fresh: never from a ``cache_tools_list`` cache) and refuses, naming what changed, when the definition is not the approved one; the
INTENT guardrail checks the same subject once more right before the call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...core.saga.payloads import raw_args_value
from ...errors import ApprovalError
from .registry import protection_named

__all__ = ["definition_change", "mcp_approval_subject", "mcp_reversibility"]


def _server_of(item: Any) -> str | None:
    origin = getattr(item, "tool_origin", None)
    if origin is None or getattr(getattr(origin, "type", None), "value", getattr(origin, "type", None)) != "mcp":
        return None
    return getattr(origin, "mcp_server_name", None)


async def mcp_approval_subject(item: Any) -> dict[str, Any] | None:
    """What an approval of the paused call ``item`` is bound to, when it is a call of a protected
    MCP server's tool; ``None`` for any other call (approved on its arguments alone).

    Args:
        item: a ``ToolApprovalItem`` (``tool_origin`` names the MCP server).

    Raises:
        ApprovalError: the server is not protected in this process or does not list the tool
            (it cannot be bound to a definition: refused, never approved blind).
    """
    server = _server_of(item)
    if server is None:
        return None
    try:
        protection = protection_named(server, needed_for="an approval of its tool")
        listed = await protection.definitions(fresh=True)
        found = listed.get(protection.own_name(item.tool_name or "", listed))
        definition = {k: v for k, v in found.items() if k != "read_only_hint"} if found else None
    except Exception as exc:
        raise ApprovalError(f"cannot bind the approval of {item.tool_name!r} to its MCP definition: {exc}") from exc
    if definition is None:
        raise ApprovalError(f"MCP server {server!r} no longer lists the tool {item.tool_name!r}")
    return {"arguments": raw_args_value(item.arguments or ""), "mcp_tool": definition}


def mcp_reversibility(item: Any) -> str | None:
    """The reversibility the policy of a protected MCP server gives the paused call's tool (by
    name), journaled with the pause and compared at resume; ``None`` for any other call."""
    server = _server_of(item)
    if server is None:
        return None
    try:
        protection = protection_named(server)
        entry = protection.policy.tools.get(protection.own_name(item.tool_name or ""))
    except Exception:  # noqa: BLE001 - not protected here: the subject check refuses it anyway
        return None
    return entry.reversibility.value if entry is not None else None


def _schema_change(old: Any, new: Any) -> str:
    old_props = set((old or {}).get("properties", {}) or {}) if isinstance(old, Mapping) else set()
    new_props = set((new or {}).get("properties", {}) or {}) if isinstance(new, Mapping) else set()
    parts = []
    if new_props - old_props:
        parts.append("parameters added: " + ", ".join(sorted(new_props - old_props)))
    if old_props - new_props:
        parts.append("parameters removed: " + ", ".join(sorted(old_props - new_props)))
    return "input schema changed" + (f" ({'; '.join(parts)})" if parts else "")


def describe_change(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """In words, what differs between two listed definitions of an MCP tool
    (``policy.tool_definition``): its description, its input schema, its name or server."""
    changes = []
    if old.get("description") != new.get("description"):
        changes.append(f"description was {old.get('description')!r}, is now {new.get('description')!r}")
    if old.get("input_schema") != new.get("input_schema"):
        changes.append(_schema_change(old.get("input_schema"), new.get("input_schema")))
    if old.get("name") != new.get("name") or old.get("server") != new.get("server"):
        changes.append(f"tool was {old.get('server')}/{old.get('name')}, is now {new.get('server')}/{new.get('name')}")
    return "; ".join(changes)


def definition_change(approved: Any, current: Any) -> str | None:
    """What changed between the approved MCP definition and the current one, in words, or
    ``None`` when nothing did (or the request is not an MCP one)."""
    if not isinstance(approved, Mapping) or "mcp_tool" not in approved or not isinstance(current, Mapping):
        return None
    old, new = approved.get("mcp_tool") or {}, current.get("mcp_tool") or {}
    changes = describe_change(old, new)
    if not changes:
        return None
    return (f"MCP tool {old.get('name')!r} of server {old.get('server')!r} changed since it was "
            "approved: " + changes)
