"""examples/wire_transfer end to end, each step its own process (issue: human approval, item 8)."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
from pathlib import Path
from tests.forked import python_command

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        python_command(*args), cwd=ROOT, env=env, capture_output=True, text=True, check=check,
        timeout=120,
    )


def test_pause_approve_in_another_process_resume_exactly_once(tmp_path):
    db = str(tmp_path / "wire.db")
    env = {**os.environ, "WIRE_BANK_DB": str(tmp_path / "bank.db"), "COLUMNS": "200"}
    env.pop("OPENAI_API_KEY", None)
    started = run("-m", "examples.wire_transfer", "--db", db, env=env)
    request_id = re.search(r"request (apr-[0-9a-f]+)", started.stdout).group(1)
    saga_id = re.search(r"saga ([0-9a-f]{32}) is waiting", started.stdout).group(1)

    shown = run("-m", "sagacity_agents", "approvals", "show", request_id, "--db", db, env=env)
    assert '"amount_eur": 2500' in shown.stdout
    assert re.search(r"reversibility\s+irreversible", shown.stdout)  # as journaled at the pause
    run("-m", "sagacity_agents", "approvals", "approve", request_id, "--as", "alice",
        "--reason", "invoice checked", "--db", db, env=env)
    resumed = run("-m", "sagacity_agents", "saga", "resume", saga_id,
                  "--app", "examples.wire_transfer.app:agent", "--db", db, env=env)
    assert "COMPLETED" in resumed.stdout
    again = run("-m", "sagacity_agents", "saga", "resume", saga_id,
                "--app", "examples.wire_transfer.app:agent", "--db", db, env=env, check=False)
    assert again.returncode != 0

    wires = sqlite3.connect(tmp_path / "bank.db").execute("SELECT amount, iban FROM wires").fetchall()
    assert wires == [(2500, "DE89370400440532013000")]

    journal = sqlite3.connect(db)
    phases = [r[0] for r in journal.execute(
        "SELECT phase FROM sagacity_journal WHERE saga_id = ? AND tool = 'send_wire' ORDER BY seq",
        (saga_id,))]
    assert phases == ["AWAITING_APPROVAL", "APPROVED", "CONSUMED", "INTENT", "EXECUTED"]
    shown = run("-m", "sagacity_agents", "journal", "show", saga_id, "--full", "--db", db, env=env)
    assert "alice" in shown.stdout and "APPROVED" in shown.stdout
    verified = run("-m", "sagacity_agents", "journal", "verify", "--db", db, env=env)
    assert "ok" in verified.stdout


def test_reject_from_the_cli_never_runs_the_wire(tmp_path):
    db = str(tmp_path / "wire.db")
    env = {**os.environ, "WIRE_BANK_DB": str(tmp_path / "bank.db"), "COLUMNS": "200"}
    started = run("-m", "examples.wire_transfer", "--db", db, env=env)
    request_id = re.search(r"request (apr-[0-9a-f]+)", started.stdout).group(1)
    saga_id = re.search(r"saga ([0-9a-f]{32}) is waiting", started.stdout).group(1)
    listed = run("-m", "sagacity_agents", "approvals", "list", "--db", db, env=env)
    assert request_id in listed.stdout
    run("-m", "sagacity_agents", "approvals", "reject", request_id, "--as", "bob",
        "--reason", "unknown IBAN", "--db", db, env=env)
    resumed = run("-m", "sagacity_agents", "saga", "resume", saga_id,
                  "--app", "examples.wire_transfer.app:agent", "--db", db, env=env)
    assert "unknown IBAN" in resumed.stdout  # the model got the rejection message
    bank = tmp_path / "bank.db"
    assert not bank.exists() or sqlite3.connect(bank).execute(
        "SELECT count(*) FROM sqlite_master WHERE name='wires'").fetchone()[0] in (0, 1)
    if bank.exists():
        rows = sqlite3.connect(bank).execute("SELECT count(*) FROM wires").fetchone()[0]
        assert rows == 0
