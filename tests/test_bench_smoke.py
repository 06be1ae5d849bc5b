"""The overhead benchmark runs end to end (tiny parameters; no timing assertions)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "overhead.py"


@pytest.fixture(scope="module")
def overhead():
    spec = importlib.util.spec_from_file_location("bench_overhead", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


async def test_benchmark_core_runs(overhead, tmp_path):
    result = await overhead.run_benchmark(
        calls=3, rounds=2, warmup=1, fixed_rounds=1, append_n=5, db_dir=tmp_path
    )
    assert set(result["runs"]) == set(overhead.VARIANTS)
    for variant in overhead.VARIANTS:
        assert result["runs"][variant]["run_s"]["n"] == 2
        assert result["fixed_per_run"][variant]["run_s"]["n"] == 1
    # 3 calls -> INTENT + EXECUTED each, plus SAGA_OPENED, RUN_STARTED, RUN_ENDED, SAGA_CLOSED.
    assert result["journal_entries_last_saga"] == {
        "memory": 10, "sqlite-full": 10, "sqlite-normal": 10,
    }
    assert {"memory", "sqlite-full", "sqlite-normal", "raw-sqlite-full", "raw-sqlite-normal"} <= set(
        result["appends"]
    )
    json.dumps(result)  # JSON-able as --json writes it
    overhead.print_report(result)


def test_cli_writes_json(overhead, tmp_path):
    out = tmp_path / "out.json"
    rc = overhead.main([
        "--calls", "2", "--rounds", "1", "--warmup", "1", "--fixed-rounds", "0",
        "--append-n", "0", "--db-dir", str(tmp_path), "--json", str(out),
    ])
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["params"]["calls"] == 2
    assert "appends" not in data and "fixed_per_run" not in data


@contextlib.contextmanager
def _bench_script(name: str):
    """Load ``bench/<name>.py`` as a module for the duration of a test."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH.parent / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_guardrail_benchmark_runs(tmp_path):
    """bench/guardrails.py runs end to end (tiny parameters; no timing assertions)."""
    with _bench_script("guardrails") as module:
        out = tmp_path / "g.json"
        assert module.main(["--calls", "2", "--rounds", "1", "--warmup", "0", "--json", str(out)]) == 0
        data = json.loads(out.read_text())
        assert set(data["journals"]) == {"memory", "sqlite-full"}
        assert set(data["journals"]["memory"]) == set(module.VARIANTS)


def test_idle_cost_benchmark_runs(capsys):
    """bench/idle_cost.py runs end to end (tiny parameters; no timing assertions)."""
    with _bench_script("idle_cost") as module:
        assert module.main(["--rounds", "1", "--calls", "2", "--wait-ms", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "asyncio.sleep: the wait took" in out and "busy wait: the wait took" in out


def test_postgres_runs_summary_pools_the_committed_runs(capsys):
    """bench/postgres_runs_summary.py reads the runs the README quotes (their raw times) and
    pools them (few resamples here; no timing assertions)."""
    runs = sorted((BENCH.parent / "postgres_append_runs").glob("*.json"))
    assert len(runs) >= 2
    with _bench_script("postgres_runs_summary") as module:
        assert module.main([*map(str, runs), "--bootstrap", "20"]) == 0
    out = capsys.readouterr().out
    assert f"pooled over {len(runs)} runs" in out and "postgres-fast-outcomes: " in out


async def test_lease_beats_bench_runs(tmp_path):
    """bench/lease_beats.py end to end on SQLite (tiny sizes): every size beaten, the ratio
    computed (no timing asserted)."""
    with _bench_script("lease_beats") as bench:
        result = await bench.run_benchmark(sizes=[10, 50], beats=4, old_beats=1, db=None)
        assert set(result["sqlite"]) == {"10", "50", "ratio_large_to_small"}
        for size in ("10", "50"):
            assert result["sqlite"][size]["beat_ms_median"] > 0
            assert result["sqlite"][size]["whole_saga_beat_ms_median"] > 0
        json.dumps(result)
        bench.print_report(result)


async def test_sensitive_cost_bench_runs():
    """bench/sensitive_cost.py (``overhead.py --sensitive``) end to end, tiny sizes: protect
    alone, a call's two appends and whole runs, each variant measured (no timing asserted)."""
    with _bench_script("sensitive_cost") as bench:
        result = await bench.run_sensitive(calls=2, rounds=2, warmup=1, micro_n=20, append_batch=5)
        assert set(result["protect"]) == set(bench.PROTECT_VARIANTS)
        assert set(result["appends"]["added_per_call_us"]) == {"no-value", "one-card"}
        runs = result["runs"]
        assert set(runs["run_ms"]) >= {"no-value", "one-card"}
        if runs["unprotected_available"]:
            assert set(runs["added_per_call_us"]) == {"no-value", "one-card", "card-unprotected"}
            assert "one_card_same_tool_per_call_us" in runs
        assert {"no-value", "one-card"} <= set(result["calls_per_tool_call"])
        json.dumps(result)
        bench.print_sensitive(result)


def test_overhead_sensitive_flag_writes_json(overhead, tmp_path):
    out = tmp_path / "sensitive.json"
    assert overhead.main(["--sensitive", "--calls", "2", "--rounds", "1", "--warmup", "1",
                          "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["targets_us"] == {"no-value": 10.0, "one-card": 100.0}
