"""A real MCP payments server (``examples/mcp_payments/payments_server.py``, the ``mcp`` package's
``MCPServer``) started by the test over stdio, its state in a SQLite file the test reads."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from agents import set_tracing_disabled
from tests.forked import python_command

SERVER = Path(__file__).resolve().parents[2] / "examples" / "mcp_payments" / "payments_server.py"

POLICY = {
    "server": "payments",
    "tools": {
        "balance": {"reversibility": "read_only"},
        "charge": {"reversibility": "compensatable",
                   "undo": {"tool": "refund", "arguments": {"charge_id": "$.result.charge_id"}}},
        "refund": {"reversibility": "no_undo"},
        "ship": {"reversibility": "no_undo"},
        "wire": {"reversibility": "irreversible"},
    },
}


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    set_tracing_disabled(True)


class Payments:
    """The server's SQLite state, as the test sees it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def rows(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        if not self.path.exists():
            return []  # the server never ran a tool
        with sqlite3.connect(self.path) as db:
            return db.execute(sql, args).fetchall()

    def calls(self, tool: str | None = None) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
        found = [(t, json.loads(a), json.loads(m)) for t, a, m in
                 self.rows("SELECT tool, args, meta FROM calls ORDER BY n")]
        return [c for c in found if tool is None or c[0] == tool]


@pytest.fixture
def payments(tmp_path: Path) -> Payments:
    return Payments(tmp_path / "payments.db")


def stdio_server(payments: Payments, *, name: str = "payments", cache_tools_list: bool = False,
                 **env: str) -> Any:
    """An ``MCPServerStdio`` running the payments server on ``payments``' file."""
    from agents.mcp import MCPServerStdio

    command, *args = python_command(str(SERVER))
    return MCPServerStdio(
        name=name,
        params={"command": command, "args": args,
                "env": {**os.environ, "PAYMENTS_DB": str(payments.path), **env}},
        client_session_timeout_seconds=30, cache_tools_list=cache_tools_list,
    )
