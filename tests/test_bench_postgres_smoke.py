"""The PostgreSQL append benchmark runs end to end (tiny parameters; no timing assertions)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "postgres_append.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_postgres_append", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


async def test_postgres_benchmark_runs(bench, pg_session_uri, capsys):
    from tests.pg import SERVER

    result = await bench.run_benchmark(
        SERVER, seconds=0.1, workers=[1, 2], calls=2, rounds=1, slices=2
    )
    assert set(result["cells"]) == {
        f"{design}/{shape}" for design in bench.DESIGNS for shape in ("1x1", "2x1", "16x16")
    }
    for key, cell in result["cells"].items():
        assert cell["appends"] > 0, key
        if key.startswith("ours/"):
            assert cell["failed"] == 0 and cell["lost"] == 0, key
    journals = {"postgres", "postgres-fast-outcomes", "in-memory (reference)",
                "in-memory + 1 bare commit/call (floor)"}
    # The target's measure and the latency-based one, each for every journal.
    assert set(result["overhead"]["overhead_x_bare_commit_cost"]) == journals
    assert set(result["overhead"]["overhead_x_bare_commit"]) == journals
    assert isinstance(result["overhead"]["bare_commit_cost_ms"], float)
    assert "bare + 1 bare INSERT+COMMIT/call" in result["overhead"]["median_run_ms"]
    # T-04: the cells' designs ran in a fresh order each turn, every design once per turn.
    assert set(result["cell_orders"]) == {"1x1", "2x1", "16x16"}
    for orders in result["cell_orders"].values():
        assert len(orders) == 2 and all(sorted(o) == sorted(bench.DESIGNS) for o in orders)
    json.dumps(result)
    bench.print_report(result)
    assert "| ours |" in capsys.readouterr().out


async def test_postgres_load_benchmark_runs(pg_session_uri, capsys):
    """bench/postgres_load.py end to end (a few sagas): all complete, the pool wait and the
    statement timed (no timing asserted)."""
    from tests.pg import SERVER

    spec = importlib.util.spec_from_file_location("bench_postgres_load", BENCH.parent / "postgres_load.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        result = await module.run_benchmark(SERVER, sagas=4, calls=2, processes=1)
        run = result["runs"][0]
        assert run["outcomes"] == {"COMPLETED": 4} and run["stall_dump"] is None
        assert run["timings"]["pool_wait"]["n"] > 0 and run["timings"]["statement"]["n"] > 0
        json.dumps(result, default=str)
        module.print_report(result)
    finally:
        sys.modules.pop(spec.name, None)
