"""examples/hooks_approval end to end: approvals with Runner.run + SagaRunHooks only (F-12)."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tests.forked import python_command

pytestmark = pytest.mark.case("F-12")

ROOT = Path(__file__).resolve().parents[1]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "WIRE_BANK_DB": str(tmp_path / "bank.db"), "COLUMNS": "200"}
    env.pop("OPENAI_API_KEY", None)
    return env


def run(*args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(python_command(*args), cwd=ROOT, env=env, capture_output=True,
                          text=True, check=check, timeout=120)


def _wire_phases(db: str, saga_id: str) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute(
            "SELECT phase FROM sagacity_journal WHERE saga_id = ? AND tool = 'send_wire' ORDER BY seq",
            (saga_id,))]


def _wires(tmp_path: Path) -> list[tuple[int, str]]:
    with sqlite3.connect(tmp_path / "bank.db") as conn:
        return conn.execute("SELECT amount, iban FROM wires").fetchall()


def test_pause_approve_resume_in_three_processes(tmp_path):
    """F-12: Runner.run under SagaRunHooks pauses; one call stores the request and snapshot; a
    human approves from the CLI; another process gets the checked RunState with one call and
    Runner.run finishes the saga: the wire runs exactly once, a second resume is refused."""
    db, env = str(tmp_path / "hooks.db"), _env(tmp_path)
    paid = run("-m", "examples.hooks_approval", "pay", "--db", db, env=env)
    assert "AWAITING_APPROVAL" in paid.stdout
    request_id = re.search(r"request (apr-[0-9a-f]+)", paid.stdout).group(1)
    saga_id = re.search(r"saga ([0-9a-f]{32}): AWAITING_APPROVAL", paid.stdout).group(1)
    shown = run("-m", "sagacity_agents", "approvals", "show", request_id, "--db", db, env=env)
    assert '"amount_eur": 2500' in shown.stdout  # the validated arguments ("2500" -> 2500)
    run("-m", "sagacity_agents", "approvals", "approve", request_id, "--as", "alice", "--db", db, env=env)
    resumed = run("-m", "examples.hooks_approval", "resume", saga_id, "--db", db, env=env)
    assert f"saga {saga_id}: COMPLETED" in resumed.stdout
    again = run("-m", "examples.hooks_approval", "resume", saga_id, "--db", db, env=env, check=False)
    assert again.returncode == 1 and "closed" in again.stderr
    assert again.stderr.startswith("Error: ") and "Traceback" not in again.stderr
    assert _wires(tmp_path) == [(2500, "DE89370400440532013000")]
    assert _wire_phases(db, saga_id) == ["AWAITING_APPROVAL", "APPROVED", "CONSUMED", "INTENT", "EXECUTED"]
    verified = run("-m", "sagacity_agents", "journal", "verify", "--db", db, env=env)
    assert "ok" in verified.stdout


def test_the_paying_process_awaits_the_decision_and_resumes(tmp_path):
    """F-12 with wait_for_decision: the paying process waits; the CLI approves from another
    process; the paying process wakes up (store polling) and resumes on the same saga."""
    db, env = str(tmp_path / "hooks.db"), _env(tmp_path)
    payer = subprocess.Popen(
        python_command("-m", "examples.hooks_approval", "pay", "--db", db, "--wait", "60"),
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        request_id = None
        deadline = time.monotonic() + 60
        while request_id is None and time.monotonic() < deadline:
            listed = run("-m", "sagacity_agents", "approvals", "list", "--db", db, env=env, check=False)
            found = re.search(r"(apr-[0-9a-f]+)", listed.stdout)
            request_id = found.group(1) if found else None
            time.sleep(0.1)
        assert request_id is not None
        run("-m", "sagacity_agents", "approvals", "approve", request_id, "--as", "alice", "--db", db, env=env)
        out, err = payer.communicate(timeout=120)
    finally:
        if payer.poll() is None:
            payer.kill()
            payer.communicate()
    assert payer.returncode == 0, err
    assert f"request {request_id} approved by alice" in out
    assert re.search(r"saga [0-9a-f]{32}: COMPLETED", out)
    assert _wires(tmp_path) == [(2500, "DE89370400440532013000")]
