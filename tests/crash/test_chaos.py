"""The chaos run (``bench/chaos.py``): workers running booking sagas are killed, stopped and (on
PostgreSQL) disconnected while ``recover --all`` runs; afterwards every invariant holds (exit
status 0, ``violations: 0``). A short run on SQLite in the quick suite; 60 seconds on each
backend under ``-m slow`` (``.ci/run``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests import forked
from tests.pg import BASE, server_or_skip

ROOT = Path(__file__).resolve().parents[2]


def _chaos(tmp_path: Path, backend: str, seconds: int, workers: int) -> str:
    args = ["-m", "bench.chaos", "--backend", backend, "--workers", str(workers), "--seconds", str(seconds),
            "--seed", "7", "--dir", str(tmp_path / "chaos")]
    if backend == "postgres":
        server_or_skip()
        args += ["--pg", BASE]
    done = subprocess.run(forked.python_command(*args), cwd=ROOT, capture_output=True, text=True,
                          timeout=seconds * 10 + 600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "violations: 0" in done.stdout
    assert "CLI stderr named an API key: False" in done.stdout
    return done.stdout


def _figure(out: str, name: str) -> int:
    return int(next(line for line in out.splitlines() if line.startswith(f"{name}: ")).split(": ")[1])


@pytest.mark.multiprocess
def test_a_short_chaos_run_on_sqlite_keeps_every_invariant(tmp_path):
    out = _chaos(tmp_path, "sqlite", 10, 2)
    assert _figure(out, "sagas") > 0


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_minute_of_chaos_keeps_every_invariant(tmp_path, backend):
    out = _chaos(tmp_path, backend, 60, 3)
    assert _figure(out, "kills") > 0 and _figure(out, "stops") > 0
