"""MCP servers by name, for the undos and approvals that need a server after the run that met it.

An MCP call's undo is another call on the server *of the same name*: the
journal names the server (``declaration`` ``mcp:SERVER:TOOL#DIGEST``), never a connection.
During the run that made the call, the undo goes to the very server object that made it while
that one is connected; the registry is only for later (resume, recovery). Two connected server
objects under one name are refused (:func:`register`): the name would not say which one. Every
``protect_mcp_server`` registers its server here under ``server.name``; a process that recovers
or resumes a saga re-creates its servers (the application given with ``--app module:attr``
builds the agent and its ``mcp_servers``, protecting each), which registers them again, and
:func:`connected_mcp_servers` connects the ones that need it for the time of the work.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncIterator
from typing import Any

from ...core.declarations import Reversibility, ToolDeclaration, add_declaration_finder
from ...errors import ConfigurationError, DeclarationError

__all__ = ["McpServerMissingError", "connected_mcp_servers", "protection_named", "protection_that_made",
           "register"]

_BY_NAME: dict[str, Any] = {}
"""Server name -> its ``protect.McpProtection`` (typed ``Any``: the protection imports this
module, not the other way round)."""


_ALL: weakref.WeakSet[Any] = weakref.WeakSet()
"""Every protection of this process still alive (the one that made a call undoes it)."""


class McpServerMissingError(ConfigurationError):
    """The MCP server a journaled call or approval names is not known in this process."""


def _connected(server: Any) -> bool:
    return getattr(server, "session", None) is not None


def register(protection: Any) -> None:
    """Make ``protection`` the one its server's name finds (a later server of that name, such as
    the one a recovery re-creates, replaces the earlier one once that is disconnected).

    Raises:
        DeclarationError: another server object of the same name is registered and connected
            (two live servers under one name, e.g. two tenants: an undo or approval found by
            name could reach the wrong one). Give each its own name.
    """
    known = _BY_NAME.get(protection.server_name)
    if known is not None and known.server is not protection.server and _connected(known.server):
        raise DeclarationError(
            f"another MCP server object named {protection.server_name!r} is protected and "
            "connected in this process; an undo or approval found by that name could reach the "
            "wrong server: give each server its own name (MCPServerStdio(name=...)), or clean "
            "the first one up before protecting this one")
    _BY_NAME[protection.server_name] = protection
    _ALL.add(protection)


def protection_that_made(name: str, saga_id: str, call_id: str | None) -> Any | None:
    """The protection of a connected server called ``name`` that journaled the call ``call_id``
    of saga ``saga_id`` in this process (``McpProtection.made``), or ``None``."""
    for protection in list(_ALL):
        if protection.server_name == name and (saga_id, call_id) in protection.made \
                and _connected(protection.server):
            return protection
    return None


def protection_named(name: str, *, needed_for: str = "") -> Any:
    """The protection (``protect.McpProtection``) of the server called ``name`` in this process.

    Raises:
        McpServerMissingError: none: the message names the server and how to provide it.
    """
    found = _BY_NAME.get(name)
    if found is None:
        known = ", ".join(sorted(_BY_NAME)) or "none"
        raise McpServerMissingError(
            f"MCP server {name!r} is not known in this process{' (' + needed_for + ')' if needed_for else ''}; "
            f"servers protected here: {known}. Re-create it under the same name and protect it "
            "with protect_mcp_server(server, policy=...) (with the CLI: --app module:attr giving "
            "an agent whose mcp_servers include it)")
    if getattr(found.server, "session", True) is None:  # a client-session server never connected
        raise McpServerMissingError(
            f"MCP server {name!r} is protected in this process but not connected"
            f"{' (' + needed_for + ')' if needed_for else ''}: connect it first (async with server, "
            "or connected_mcp_servers(agent); the CLI does it for --app)")
    return found


def _servers_of(agent: Any) -> list[Any]:
    from ..graph import agent_graph  # the SDK layer's one walk of the graph

    servers: list[Any] = []
    for reached in agent_graph(agent).agents:
        for server in getattr(reached, "mcp_servers", None) or ():
            if all(server is not s for s in servers):
                servers.append(server)
    return servers


@contextlib.asynccontextmanager
async def connected_mcp_servers(agent: Any) -> AsyncIterator[list[Any]]:
    """Connect, for the time of the block, every MCP server of every agent a run of ``agent`` can
    reach that is not connected yet (resume and recovery in another process); those it
    connected are cleaned up when the block is left.

    Args:
        agent: an ``agents.Agent``.

    Yields:
        The servers found (connected).

    Raises:
        Exception: whatever a server's ``connect()`` raises (the ones connected before are
            cleaned up first).
    """
    opened: list[Any] = []
    try:
        for server in _servers_of(agent):
            if getattr(server, "session", None) is None:
                await server.connect()
                opened.append(server)
        yield _servers_of(agent)
    finally:
        for server in reversed(opened):
            with contextlib.suppress(Exception):
                await server.cleanup()


def _mcp_undo_not_known_here(declaration_id: str) -> ToolDeclaration | None:
    """For a journaled ``mcp:SERVER:TOOL#DIGEST`` id no protection of this process declares: a
    declaration whose undo fails saying why (the server is not protected here, or its policy
    gives the tool another entry than when the call ran), so the report names the server and
    ``recover`` retries once the application provides it; ``None`` for other ids."""
    if not declaration_id.startswith("mcp:"):
        return None
    server, _, rest = declaration_id[4:].partition(":")
    tool = rest.partition("#")[0]

    def undo(ctx: Any) -> None:
        protection_named(server, needed_for=f"undo of {tool}, declaration {declaration_id}")
        raise ConfigurationError(
            f"MCP server {server!r} is protected in this process, but its policy gives {tool!r} "
            f"another entry than when the call ran (declaration {declaration_id}); the undo is "
            "not guessed: protect the server with the policy in force then, and recover again")

    return ToolDeclaration(name=f"{server}.{tool}", reversibility=Reversibility.COMPENSATABLE, undo=undo)


add_declaration_finder(_mcp_undo_not_known_here)
