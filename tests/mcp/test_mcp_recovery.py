"""N-04: a process killed mid-saga; `recover` in another process undoes the MCP charge through a
re-created server of the same name; a missing server is a clear error naming it."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sagacity_agents import idempotency_key
from sagacity_agents.backends import SqliteJournal
from sagacity_agents.core.identity import saga_derivation

from .conftest import Payments
from tests.forked import python_command

pytestmark = pytest.mark.case("N-04")

ROOT = Path(__file__).resolve().parents[2]


def _killed_saga(payments: Payments, journal: Path) -> str:
    env = {**os.environ, "PAYMENTS_DB": str(payments.path)}
    done = subprocess.run(python_command("-m", "tests.mcp.recovery_app", str(journal)), cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 9, done.stderr[-2000:]
    assert payments.rows("SELECT refunded FROM charges") == [(0,)]  # charged, then killed
    # The killed run's 1 s lease has expired: its entries are stamped an hour back (recovery_app).
    with sqlite3.connect(journal) as db:
        (saga_id,) = db.execute("SELECT DISTINCT saga_id FROM sagacity_journal").fetchone()
    return saga_id


def _recover(saga_id: str, journal: Path, payments: Payments, **env: str) -> subprocess.CompletedProcess[str]:
    """``sagacity saga recover`` in a process of its own (nothing of this one's registries)."""
    return subprocess.run(
        python_command("-m", "sagacity_agents", "saga", "recover", saga_id,
                       "--app", "tests.mcp.recovery_app:agent", "--db", str(journal)),
        cwd=ROOT, env={**os.environ, "PAYMENTS_DB": str(payments.path), "COLUMNS": "200", **env},
        capture_output=True, text=True, timeout=120, check=False)


def test_recover_in_another_process_undoes_through_a_recreated_server(
        payments: Payments, tmp_path: Path) -> None:
    journal = tmp_path / "j.db"
    saga_id = _killed_saga(payments, journal)
    out = _recover(saga_id, journal, payments)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "COMPENSATED" in out.stdout
    assert payments.rows("SELECT refunded FROM charges") == [(1,)]
    (_, args, meta), = payments.calls("refund")
    assert args == {"charge_id": payments.rows("SELECT id FROM charges")[0][0]}
    assert meta["sagacity/idempotency_key"].startswith("sgc-")


def test_missing_server_is_a_clear_error_naming_it(payments: Payments, tmp_path: Path) -> None:
    journal = tmp_path / "j.db"
    saga_id = _killed_saga(payments, journal)
    out = _recover(saga_id, journal, payments, PAYMENTS_SERVER_NAME="billing")  # no "payments" now
    assert out.returncode == 1, out.stdout + out.stderr
    assert "MCP server 'payments' is not known in this process" in " ".join(out.stdout.split())
    assert payments.rows("SELECT refunded FROM charges") == [(0,)]
    # The application gives the server back: the failed undo is retried, with the same key.
    again = _recover(saga_id, journal, payments)
    assert again.returncode == 0, again.stdout + again.stderr
    assert payments.rows("SELECT refunded FROM charges") == [(1,)]
    with sqlite3.connect(journal) as db:
        executed_seq = db.execute("SELECT seq FROM sagacity_journal WHERE phase = 'EXECUTED'").fetchone()[0]
    (_, _, meta), = payments.calls("refund")
    assert meta["sagacity/idempotency_key"] == asyncio.run(_derivation(journal, saga_id)).undo_key(saga_id, executed_seq)
    assert meta["sagacity/idempotency_key"] != idempotency_key(saga_id, executed_seq)  # the old rule's


async def _derivation(path: Path, saga_id: str) -> Any:
    journal = SqliteJournal(path)
    try:
        return await saga_derivation(journal, saga_id)
    finally:
        await journal.close()
