"""examples/mcp_payments end to end, in its own process: one saga fails at the MCP server's
isError and the charge is refunded through the server, once (issue 21)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.forked import python_command

pytestmark = pytest.mark.case("N-01")

ROOT = Path(__file__).resolve().parents[1]


def test_example_mcp_payments_refunds_through_the_server(tmp_path: Path) -> None:
    env = {**os.environ, "PAYMENTS_DB": str(tmp_path / "payments.db"), "COLUMNS": "200"}
    env.pop("OPENAI_API_KEY", None)
    done = subprocess.run(python_command("-m", "examples.mcp_payments", "--db", str(tmp_path / "shop.db")),
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "COMPENSATED" in done.stdout
    assert "undone through the server: charge (call c1)" in done.stdout
    assert "refunded 1 time(s)" in done.stdout
    with sqlite3.connect(tmp_path / "payments.db") as db:
        refunds = [json.loads(m) for (m,) in db.execute("SELECT meta FROM calls WHERE tool = 'refund'")]
    assert len(refunds) == 1 and refunds[0]["sagacity/idempotency_key"].startswith("sgc-")


def test_example_mcp_payments_output_is_the_readmes_even_with_an_api_key_set(tmp_path: Path) -> None:
    env = {**os.environ, "PAYMENTS_DB": str(tmp_path / "payments.db"), "OPENAI_API_KEY": "sk-not-a-key"}
    done = subprocess.run(python_command("-m", "examples.mcp_payments", "--db", str(tmp_path / "shop.db")),
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]  # the script, not a real model with a bad key
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and lines[0].endswith(": COMPENSATED")
    assert lines[1] == "  undone through the server: charge (call c1)"
    assert lines[2].startswith("  charge ch_") and lines[2].endswith(": 4900 cents, refunded 1 time(s)")
    assert "Traceback" not in done.stderr and "ERROR" not in done.stderr  # no server noise


def test_example_mcp_payments_checks_the_far_side_of_a_charge_left_in_doubt(tmp_path: Path) -> None:
    """The server dies after writing the charge, before answering: the call is in doubt. The
    recovery asks the server (``find_charge`` by the call's idempotency key) before any human:
    CHECKED "ran", and the charge is refunded in that same recovery, once."""
    env = {**os.environ, "PAYMENTS_DB": str(tmp_path / "payments.db"), "COLUMNS": "200"}
    env.pop("OPENAI_API_KEY", None)
    done = subprocess.run(python_command("-m", "examples.mcp_payments", "--db", str(tmp_path / "shop.db"),
                                         "--server-dies"),
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].endswith(": IN_DOUBT") and lines[1] == "  in doubt: charge (call c1)"
    assert lines[2:5] == ["  checked at the far side: charge (call c1): ran", "recovered: COMPENSATED",
                          "  undone through the server: charge (call c1)"]
    assert lines[5].endswith(": 4900 cents, refunded 1 time(s)")
    with sqlite3.connect(tmp_path / "payments.db") as db:
        (charge_key,) = db.execute("SELECT key FROM charges").fetchone()
        lookups = [json.loads(a) for (a,) in db.execute("SELECT args FROM calls WHERE tool = 'find_charge'")]
    assert lookups == [{"idempotency_key": charge_key}] and charge_key.startswith("sgc-call-")
