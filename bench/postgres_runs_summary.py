"""Several runs of ``bench/postgres_append.py`` side by side, and their per-call ratios pooled.

One run's 95 % interval of a per-call ratio is wide on a noisy host (50 rounds, each ratio a
quotient of two noisy medians). Pooled here: the mean over runs of each run's ratio (a journal's
paired overhead over one bare INSERT+COMMIT's cost to the run), with a 95 % interval from a
bootstrap that resamples the rounds within each run (the host's speed differs from run to run,
so rounds are never mixed across runs). That interval covers the round-to-round noise of these
runs, not the spread between hosts or days. Reads the raw run times each run stores in its JSON
(``postgres_append.py --json``); only the standard library is needed.

Usage::

    python bench/postgres_runs_summary.py RUN.json [RUN.json ...] [--bootstrap 2000] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

COMMIT_RUN = "bare + 1 bare INSERT+COMMIT/call"  # postgres_append.COMMIT_RUN (no import: no psycopg)
JOURNALS = ("postgres", "postgres-fast-outcomes", "in-memory + 1 bare commit/call (floor)")


def _ratio(run_ms: dict[str, list[float]], journal: str, rounds: Sequence[int]) -> float:
    bare = run_ms["bare"]
    overhead = statistics.median(run_ms[journal][i] - bare[i] for i in rounds)
    cost = statistics.median(run_ms[COMMIT_RUN][i] - bare[i] for i in rounds)
    return overhead / cost if cost > 0 else math.inf  # a commit cannot cost nothing: unresolved


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
    print("| run | fewest workers: ours, % of bare | most workers on 1 saga: ours / original "
          "| durable | fast outcomes | floor | durable / fast vs mean latency "
          "| durable / fast vs median single commit |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for path, run in zip(args.runs, runs, strict=True):
        cells, o = run["cells"], run["overhead"]
        fewest, most = min(run["workers"]), max(run["workers"])
        one = 100 * cells[f"ours/{fewest}x1"]["per_s"] / cells[f"bare/{fewest}x1"]["per_s"]
        ratio = cells[f"ours/{most}x1"]["per_s"] / max(cells[f"original/{most}x1"]["per_s"], 1e-9)

        def cost(journal: str) -> str:
            low, high = o["overhead_x_bare_commit_cost_95"][journal]
            return f"{o['overhead_x_bare_commit_cost'][journal]:.2f}x ({low:.2f}-{high:.2f})"

        def pair(key: str) -> str:
            figures = o.get(key)
            if figures is None:
                return "-"
            return f"{figures['postgres']:.2f}x / {figures['postgres-fast-outcomes']:.2f}x"

        print(f"| {Path(path).name} | {one:.0f} % ({fewest}) | {ratio:.1f}x ({most}) "
              f"| {cost('postgres')} | {cost('postgres-fast-outcomes')} | {cost(JOURNALS[2])} "
              f"| {pair('overhead_x_bare_commit')} | {pair('overhead_x_bare_commit_median_one')} |")
    print(f"\npooled over {len(runs)} runs (mean of the runs' ratios to one bare INSERT+COMMIT's "
          "cost to the run, 95 % interval):")
    for journal, figures in pooled(runs, args.bootstrap, args.seed).items():
        print(f"  {journal}: {figures['mean']}x ({figures['low']}-{figures['high']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
