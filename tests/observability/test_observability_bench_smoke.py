"""Issue 23's benchmarks run end to end (tiny parameters; no timing assertion: figures are
measured in bench/, never in a test)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.case("O-23")

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_overhead_bench_runs(tmp_path):
    from agents import set_trace_processors, set_tracing_disabled

    try:
        result = load("observe_overhead").main(["--n", "200", "--calls", "20", "--rounds", "1",
                                                "--json", str(tmp_path / "o.json")])
    finally:
        set_tracing_disabled(True)
        set_trace_processors([])
    assert set(result["run_call_us"]) == {"core alone", "tracing off", "tracing on"}
    assert result["added_tracing_off_us"] >= 0 and (tmp_path / "o.json").exists()


def test_gauges_bench_counts_what_it_built(tmp_path):
    result = load("observe_gauges").main(["--sagas", "300", "--repeat", "1", "--dir", str(tmp_path)])
    for backend in ("memory", "sqlite"):
        counts = result[backend]
        assert counts["sagas"] == 300
        assert (counts["still_dirty"], counts["in_doubt"], counts["awaiting_approval"]) == (3, 3, 3)


@pytest.fixture(autouse=True)
def _forget_modules():
    yield
    for name in ("bench_observe_overhead", "bench_observe_gauges"):
        sys.modules.pop(name, None)
