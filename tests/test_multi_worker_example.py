"""examples/multi_worker end to end on PostgreSQL: N worker processes on one database, a pause
approved by the CLI in another process and resumed by a third; the payout runs exactly once."""

from __future__ import annotations

import os

import pytest
import subprocess
from pathlib import Path
from tests.forked import python_command

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.multiprocess
def test_workers_approve_from_another_process_resume_in_a_third(pg_uri, tmp_path):
    payouts = tmp_path / "payouts.txt"
    env = {**os.environ, "MULTI_WORKER_PAYOUTS": str(payouts), "COLUMNS": "200"}
    env.pop("OPENAI_API_KEY", None)
    done = subprocess.run(
        python_command("-m", "examples.multi_worker", "--db", pg_uri, "--workers", "2",
                       "--sagas", "3"),
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for i in range(2):
        assert f"worker {i}: 3/3 sagas completed" in out
    assert "COMPLETED" in out  # the resumed saga
    lines = payouts.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("900 EUR -> acme")
    assert "payouts sent by this run: 1" in out
    assert out.count("verify: ok") == 2 * 3 + 1 and "BROKEN" not in out, out
