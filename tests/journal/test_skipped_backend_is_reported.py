"""T-03: a test that claims every backend says what did not run.

Without a PostgreSQL server (and ``$CI`` unset) the cases "on every backend" run on the embedded
backends and report the PostgreSQL variant as skipped, by name; they never pass silently on
fewer backends. Run in a child pytest pointed at a server that is not there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.case("T-03")

ROOT = Path(__file__).resolve().parents[2]


def test_without_a_server_the_postgres_variant_is_reported_skipped():
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["SAGACITY_TEST_PG"] = "postgresql://postgres@127.0.0.1:9/nothing?connect_timeout=1"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--no-cov",
         "tests/journal/test_journal_cases.py", "-k", "order_is_by_seq_never_by_time"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    out = run.stdout
    assert run.returncode == 0, out + run.stderr
    assert "1 passed, 1 skipped" in out, out
    assert "SKIPPED" in out and "PostgreSQL" in out, out
    assert "test_order_is_by_seq_never_by_time[embedded]" not in out  # it passed

