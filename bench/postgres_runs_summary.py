"""Several runs of ``bench/postgres_append.py`` side by side, and their per-call ratios pooled.

One run's 95 % interval of a per-call ratio is wide on a noisy host (50 rounds, each ratio a
quotient of two noisy medians). Pooled here: the mean over runs of each run's ratio (a journal's
paired overhead over one bare INSERT+COMMIT's cost to the run), with a 95 % interval from a
bootstrap that resamples the rounds within each run (the host's speed differs from run to run,
so rounds are never mixed across runs). Reads the raw run times each run stores in its JSON.

Usage::

    python bench/postgres_runs_summary.py RUN.json [RUN.json ...] [--bootstrap 2000] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from postgres_append import COMMIT_RUN  # noqa: E402

JOURNALS = ("postgres", "postgres-fast-outcomes", "in-memory + 1 bare commit/call (floor)")


def _ratio(run_ms: dict[str, list[float]], journal: str, rounds: Sequence[int]) -> float:
    bare = run_ms["bare"]
    overhead = statistics.median(run_ms[journal][i] - bare[i] for i in rounds)
    cost = statistics.median(run_ms[COMMIT_RUN][i] - bare[i] for i in rounds)
    return overhead / cost


def pooled(runs: list[dict[str, Any]], bootstrap: int, seed: int) -> dict[str, dict[str, float]]:
    """Per journal: the mean over ``runs`` of their ratios, and its 95 % interval (rounds
    resampled within each run, ``bootstrap`` times)."""
    rng = random.Random(seed)
    raws = [run["overhead"]["raw"]["run_ms"] for run in runs]
    out: dict[str, dict[str, float]] = {}
    for journal in JOURNALS:
        point = statistics.fmean(_ratio(raw, journal, range(len(raw["bare"]))) for raw in raws)
        means = sorted(
            statistics.fmean(
                _ratio(raw, journal, [rng.randrange(len(raw["bare"])) for _ in raw["bare"]])
                for raw in raws
            )
            for _ in range(bootstrap)
        )
        out[journal] = {
            "mean": round(point, 2),
            "low": round(means[int(0.025 * len(means))], 2),
            "high": round(means[min(int(0.975 * len(means)), len(means) - 1)], 2),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="JSON files written by postgres_append.py --json")
    parser.add_argument("--bootstrap", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    runs = [json.loads(Path(p).read_text("utf-8")) for p in args.runs]
    print("| run | 1 worker, % of bare | 64 workers, x original | durable | fast outcomes | floor "
          "| durable / fast vs latency |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for path, run in zip(args.runs, runs, strict=True):
        cells, o = run["cells"], run["overhead"]
        one = 100 * cells["ours/1x1"]["per_s"] / cells["bare/1x1"]["per_s"]
        many = max((int(k.split("/")[1].split("x")[0]) for k in cells if k.endswith("x1")))
        ratio = cells[f"ours/{many}x1"]["per_s"] / cells[f"original/{many}x1"]["per_s"]

        def cost(journal: str) -> str:
            low, high = o["overhead_x_bare_commit_cost_95"][journal]
            return f"{o['overhead_x_bare_commit_cost'][journal]}x ({low}-{high})"

        latency = o["overhead_x_bare_commit"]
        print(f"| {Path(path).name} | {one:.0f} % | {ratio:.1f}x | {cost('postgres')} "
              f"| {cost('postgres-fast-outcomes')} | {cost(JOURNALS[2])} "
              f"| {latency['postgres']}x / {latency['postgres-fast-outcomes']}x |")
    print(f"\npooled over {len(runs)} runs (mean of the runs' ratios to one bare INSERT+COMMIT's "
          "cost to the run, 95 % interval):")
    for journal, figures in pooled(runs, args.bootstrap, args.seed).items():
        print(f"  {journal}: {figures['mean']}x ({figures['low']}-{figures['high']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
