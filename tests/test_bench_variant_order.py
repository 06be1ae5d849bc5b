"""T-04: the benchmarks run their variants in a fresh order every round, from a seeded helper
(``bench/fair_order.py``), and say which order ran; nothing is timed here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.case("T-04")

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _load(name: str):
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_order_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_each_round_is_a_fresh_permutation_and_the_seed_repeats_it():
    fair = _load("fair_order")
    names = ("a", "b", "c", "d")
    orders = fair.round_orders(names, 30, seed=7)
    assert len(orders) == 30 and all(sorted(o) == sorted(names) for o in orders)
    assert len({tuple(o) for o in orders}) > 10  # not one order, nor a rotation of one (4 of those)
    firsts = {o[0] for o in orders}
    assert firsts == set(names)
    assert orders == fair.round_orders(names, 30, seed=7)
    assert orders != fair.round_orders(names, 30, seed=8)


def test_the_guardrail_benchmark_uses_and_reports_the_orders(tmp_path):
    module = _load("guardrails")
    fair = _load("fair_order")
    try:
        import asyncio

        result = asyncio.run(module.run_benchmark(calls=1, rounds=2, warmup=1, db_dir=tmp_path, seed=3))
    finally:
        sys.modules.pop("bench_order_guardrails", None)
    assert result["orders"]["memory"] == fair.round_orders(module.VARIANTS, 3, 3)


def test_the_fallback_benchmark_uses_and_reports_the_orders():
    import asyncio

    module = _load("fallback")
    fair = _load("fair_order")
    try:
        result = asyncio.run(module.run_benchmark(calls=1, rounds=2, warmup=1, seed=5))
    finally:
        sys.modules.pop("bench_order_fallback", None)
    assert result["orders"] == fair.round_orders(module.VARIANTS, 3, 5)
    assert all(len(series) == 2 for series in result["times"].values())


def test_the_postgres_benchmark_draws_cell_orders_from_the_helper_and_keeps_ratios_unrounded():
    """Read, not run (it needs a server; tests/test_bench_postgres_smoke.py runs it and checks
    ``cell_orders``)."""
    pg = (BENCH / "postgres_append.py").read_text()
    assert "from fair_order import round_orders" in pg
    assert "for design in order:" in pg and "for design in DESIGNS:\n                    if progress" not in pg
    assert "round(v / cost, 4)" not in pg and "round(v / latency, 4)" not in pg
