"""N-04: a process killed mid-saga; `recover` in another process undoes the MCP charge through a
re-created server of the same name; a missing server is a clear error naming it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from sagacity_agents.cli import cli
from sagacity_agents.sdk.mcp import registry

from .conftest import Payments

ROOT = Path(__file__).resolve().parents[2]


def _killed_saga(payments: Payments, journal: Path) -> str:
    env = {**os.environ, "PAYMENTS_DB": str(payments.path)}
    done = subprocess.run([sys.executable, "-m", "tests.mcp.recovery_app", str(journal)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 9, done.stderr[-2000:]
    assert payments.rows("SELECT refunded FROM charges") == [(0,)]  # charged, then killed
    time.sleep(1.2)  # the killed run's 1 s lease expires
    import sqlite3

    with sqlite3.connect(journal) as db:
        (saga_id,) = db.execute("SELECT DISTINCT saga_id FROM sagacity_journal").fetchone()
    return saga_id


def test_N04_recover_in_another_process_undoes_through_a_recreated_server(
        payments: Payments, tmp_path: Path, monkeypatch) -> None:
    journal = tmp_path / "j.db"
    saga_id = _killed_saga(payments, journal)
    monkeypatch.setenv("PAYMENTS_DB", str(payments.path))
    monkeypatch.chdir(ROOT)
    out = CliRunner().invoke(cli, ["saga", "recover", saga_id, "--app", "tests.mcp.recovery_app:agent",
                                   "--db", str(journal)])
    assert out.exit_code == 0, out.output
    assert "COMPENSATED" in out.output
    assert payments.rows("SELECT refunded FROM charges") == [(1,)]
    (_, args, meta), = payments.calls("refund")
    assert args == {"charge_id": payments.rows("SELECT id FROM charges")[0][0]}
    assert meta["sagacity/idempotency_key"].startswith("sgc-")


def test_N04_missing_server_is_a_clear_error_naming_it(payments: Payments, tmp_path: Path, monkeypatch) -> None:
    journal = tmp_path / "j.db"
    saga_id = _killed_saga(payments, journal)
    monkeypatch.setenv("PAYMENTS_DB", str(payments.path))
    monkeypatch.setenv("PAYMENTS_SERVER_NAME", "billing")  # the app no longer has "payments"
    monkeypatch.setattr(registry, "_BY_NAME", {})  # as in a fresh process
    monkeypatch.chdir(ROOT)
    out = CliRunner().invoke(cli, ["saga", "recover", saga_id, "--app", "tests.mcp.recovery_app:agent",
                                   "--db", str(journal)])
    assert out.exit_code == 1, out.output
    assert "MCP server 'payments' is not known in this process" in " ".join(out.output.split())
    assert payments.rows("SELECT refunded FROM charges") == [(0,)]
