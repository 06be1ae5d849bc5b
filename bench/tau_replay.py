"""The τ-bench airline clean replay's cost, like with like (issue 22, items 2 and 7).

``python -m examples.tau_airline.harness --mode clean`` prints one whole-replay ratio per journal
(saga replays over unwrapped replays, summed over the conversations). This bench measures the same
replays per conversation and per tool call, so the figure can be set beside ``bench/overhead.py
--durable``'s.

What each side does, per conversation and round (all replays of one conversation run back to
back, in a fresh order per round from ``bench/fair_order.py``; each on its own fresh copy of the
airline database, made before the clock starts):

* ``unwrapped``: :func:`examples.tau_airline.harness.replay_unwrapped`: plain ``function_tool``
  tools, one plain ``Runner.run`` per recorded user message, fed ``history + [message]`` where the
  history is the previous run's ``to_input_list()``. No journal, no approvals, no saga;
* ``memory`` / ``sqlite``: :func:`examples.tau_airline.harness.replay_saga` exactly as the clean
  mode runs it: the same tools under the library's declarations, one ``Sagacity.run(...,
  saga_id=..., close=False, approver=inline)`` per user message with the same history handling,
  irreversible calls approved inline (AWAITING_APPROVAL and APPROVED journaled, the approver
  awaited), then ``close_saga``. The journal is an ``InMemoryJournal``, or a ``SqliteJournal``
  with ``synchronous=FULL`` (one file for every saga of the bench, as in the clean mode);
* ``*-one-run``: the same three with the conversation's steps in ONE run (see below).

Timed: the runs (and ``close_saga`` on the saga side), nothing else: not the store's creation,
not the agent's construction, not the chain verification and journal read that ``replay_saga``
does after its clock stops, not the snapshots and checks (made in the first round only, untimed).
A full garbage collection runs, untimed, before each replay. Both sides use the same
``ScriptedModel`` steps (no network) and the same in-process tools, so the difference is the
saga layer's work and nothing else. The first round also checks that every saga ends COMPLETED
and that every variant leaves the database equal to the unwrapped replay's.

Figures, per journal (the median over rounds within a conversation, then over conversations with
at least one tool call, with a 95 % bootstrap interval from ``bench/durable_cost.py``'s
``interval``):

* added cost per tool call (ms) = (saga replay - unwrapped replay) / calls, beside the
  whole-replay ratio the harness prints today (sum of saga replays / sum of unwrapped ones, median
  over rounds) and the pooled added cost per call (sum of differences / sum of calls);
* SQLite: that added cost as a multiple of one bare INSERT + COMMIT (WAL, FULL; ``durable_cost``'s
  floor, ``--commits`` of them timed just before each SQLite replay, the median), the unit of
  ``bench/overhead.py --durable``;
* journal entries per tool call, by phase, and runs per conversation;
* the per-run part of the added cost. Decision: a conversation replayed as ONE run keeps every
  tool call (same tools, ids, argument strings, order, inline approvals and database effects: the
  first round checks the database) and drops only the run boundaries: the later user messages and
  the model steps that answered in text and ended a run (the last one is kept as the final
  output). It is not the recorded dialogue (the model never saw those inputs), but the tools and
  the journal's call entries are exactly the recorded replay's, and the unwrapped side gets the
  same one-run script, so the SDK's own per-run and per-step work cancels. Zero-call runs were not
  used: a run's cost may grow with the history it is fed, which an empty run would miss. Per
  conversation: per-run cost = (added, recorded runs - added, one run) / (runs - 1); and item 2's
  figure: added per call with the recorded runs / added per call with one run (pooled over
  conversations, with a bootstrap interval over conversations; within 10 % means <= 1.10).

The load average is printed at the start and the end: on a loaded machine every figure is
inflated, the SQLite ones most (fsync times vary).

Usage (from the repository root)::

    python bench/tau_replay.py [--conversations N|all] [--rounds R] [--warmup W]
        [--keys 34.0,15] [--commits C] [--data PATH] [--db-dir DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

_BENCH = Path(__file__).resolve().parent
for _path in (str(_BENCH.parent), str(_BENCH)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from durable_cost import _floor, _SqliteFloor, interval  # noqa: E402
from fair_order import round_orders  # noqa: E402

__all__ = ["JOURNALS", "VARIANTS", "main", "one_run", "print_report", "run_benchmark"]

JOURNALS = ("memory", "sqlite")
VARIANTS = ("unwrapped", "memory", "sqlite", "unwrapped-one-run", "memory-one-run",
            "sqlite-one-run")
"""Replays per conversation and round; ``*-one-run``: :func:`one_run`'s script."""


def one_run(script: Any) -> Any:
    """The conversation's steps as ONE run (see the module docstring for why it is faithful).

    Args:
        script: an :class:`examples.tau_airline.script.Script`.

    Returns:
        A copy whose single turn is the first user message followed by every step that calls a
        tool, in order (their text kept), and then the last step (a text answer: the recorded
        final one or the appended one), so the run ends where the recorded conversation does.
    """
    from examples.tau_airline.script import Turn

    steps = [step for turn in script.turns for step in turn.steps]
    kept = tuple(step for step in steps[:-1] if step.calls) + (steps[-1],)
    return replace(script, turns=(Turn(script.turns[0].user, kept),))


def _bootstrap(pairs: list[tuple[float, float]], stat: Callable[[list[tuple[float, float]]], float],
               resamples: int = 2000, seed: int = 7) -> tuple[float, float, float]:
    """(stat, low, high): ``stat`` of the (x, y) pairs (one per conversation) and a 95 % bootstrap
    percentile interval, resampling the pairs (``durable_cost.interval`` does it for a median of
    single values; a ratio of sums or a slope needs the pairs kept together)."""
    rng = random.Random(seed)
    values = []
    for _ in range(resamples):
        try:
            values.append(stat(rng.choices(pairs, k=len(pairs))))
        except (ZeroDivisionError, statistics.StatisticsError):  # a degenerate resample
            continue
    values.sort()
    n = len(values)
    return stat(pairs), values[int(0.025 * n)], values[max(int(0.975 * n) - 1, 0)]


def _ratio_of_sums(pairs: list[tuple[float, float]]) -> float:
    return sum(y for _, y in pairs) / sum(x for x, _ in pairs)


def _slope_intercept(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    fit = statistics.linear_regression([x for x, _ in pairs], [y for _, y in pairs])
    return fit.slope, fit.intercept


async def run_benchmark(
    data_dir: str | Path | None = None,
    conversations: int | None = None,
    rounds: int = 3,
    warmup: int = 1,
    *,
    keys: Sequence[str] | None = None,
    commits: int = 10,
    db_dir: str | Path | None = None,
    seed: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Replay the chosen conversations in every variant and return the figures (JSON-able).

    Args:
        data_dir: the ``tau-airline`` folder (``None``: ``../shared/tau-airline``).
        conversations: the first N chosen conversations (``None``: all).
        rounds: timed rounds (each replays every conversation in every variant).
        warmup: untimed rounds before them.
        keys: TASK.TRIAL or TASK keys (``select_scripts``); all conversations by default.
        commits: bare INSERT + COMMIT timed before each SQLite replay (their median is the unit).
        db_dir: folder for the SQLite journal and floor files (default: a temporary one).
        seed: seed of the round orders.
        progress: called as ``(round done, rounds in all)``.

    Returns:
        ``params``, ``loadavg_start``/``loadavg_end``, ``orders`` (per round, the variants in the
        order they ran, the same for every conversation of the round), ``counts`` (runs, calls,
        journal entries by phase), ``times`` (seconds per variant, per conversation key, one per
        timed round), ``floor_s`` (per conversation key, one per timed SQLite replay, recorded
        runs then one run per round), and ``figures`` (see :func:`print_report`).

    Raises:
        DataNotFoundError: the data folder is missing.
        ValueError: a key matches no conversation.
        RuntimeError: a saga did not end COMPLETED, or a variant's database differs from the
            unwrapped replay's (the first round checks; nothing is measured then).
    """
    from agents import set_tracing_disabled

    from examples.tau_airline.harness import (
        replay_saga,
        replay_unwrapped,
        select_scripts,
    )
    from examples.tau_airline.script import load_scripts
    from examples.tau_airline.store import AirlineStore, resolve_data_dir
    from sagacity_agents import Sagacity, SagaStatus
    from sagacity_agents.backends import InMemoryJournal, Phase, SqliteJournal

    set_tracing_disabled(True)
    loadavg_start = os.getloadavg()
    resolved = resolve_data_dir(data_dir)
    instructions = (resolved / "policy.md").read_text(encoding="utf-8")
    scripts = select_scripts(load_scripts(resolved), keys, conversations)
    merged = {script.key: one_run(script) for script in scripts}
    folder = Path(db_dir) if db_dir is not None else Path(tempfile.mkdtemp(prefix="tau-replay-"))
    folder.mkdir(parents=True, exist_ok=True)
    facades = {"memory": Sagacity(InMemoryJournal()),
               "sqlite": Sagacity(SqliteJournal(folder / f"journal-{os.getpid()}.db"))}
    floor = _SqliteFloor(folder / f"floor-{os.getpid()}.db")
    orders = round_orders(VARIANTS, warmup + rounds, seed)
    times: dict[str, dict[str, list[float]]] = {v: {s.key: [] for s in scripts} for v in VARIANTS}
    floors: dict[str, list[float]] = {s.key: [] for s in scripts}
    phases: dict[str, Counter[str]] = {"recorded": Counter(), "one-run": Counter()}
    gc.collect()
    gc.freeze()  # the per-replay collection then walks only what the replays left behind
    try:
        for r, order in enumerate(orders):
            timed = r >= warmup
            for script in scripts:
                snapshots: dict[str, Any] = {}
                for variant in order:
                    journal, _, shape = variant.partition("-")
                    played = merged[script.key] if shape else script
                    with AirlineStore(resolved) as store:
                        if journal == "sqlite":
                            commit = await _floor(floor, commits)
                        gc.collect()
                        if journal == "unwrapped":
                            seconds = await replay_unwrapped(played, store, instructions)
                        else:
                            saga_id = f"{variant}-{script.key}-r{r}"
                            replay = await replay_saga(played, store, facades[journal], saga_id,
                                                       instructions)
                            seconds = replay.seconds
                        if r == 0:
                            snapshots[variant] = store.snapshot()
                    if journal != "unwrapped" and r == 0:
                        if replay.status is not SagaStatus.COMPLETED or not replay.verified:
                            raise RuntimeError(f"{variant} {script.label}: saga ended "
                                               f"{replay.status.value}, chain ok {replay.verified}")
                        if journal == "memory":
                            entries = await facades[journal].journal.entries(saga_id)
                            phases["one-run" if shape else "recorded"].update(
                                Phase(entry.phase).value for entry in entries)
                    if timed:
                        times[variant][script.key].append(seconds)
                        if journal == "sqlite":
                            floors[script.key].append(commit)
                if r == 0:
                    differing = [v for v in VARIANTS if snapshots[v] != snapshots["unwrapped"]]
                    if differing:
                        raise RuntimeError(f"{script.label}: {differing} leave a database other "
                                           "than the unwrapped replay's")
            if progress is not None:
                progress(r + 1, len(orders))
    finally:
        gc.unfreeze()
        for facade in facades.values():
            await facade.aclose()
        floor.conn.close()
    counts = {
        "conversations": len(scripts),
        "conversations_with_calls": sum(bool(s.calls) for s in scripts),
        "runs": {s.key: len(s.turns) for s in scripts},
        "calls": {s.key: len(s.calls) for s in scripts},
        "entries_by_phase": {shape: dict(sorted(c.items())) for shape, c in phases.items()},
    }
    result = {
        "params": {"conversations": len(scripts), "rounds": rounds, "warmup": warmup,
                   "commits": commits, "seed": seed, "data": str(resolved)},
        "loadavg_start": loadavg_start,
        "loadavg_end": os.getloadavg(),
        "orders": orders,
        "counts": counts,
        "times": times,
        "floor_s": floors,
    }
    result["figures"] = figures(result) if rounds else {}
    return result


def figures(result: dict[str, Any]) -> dict[str, Any]:
    """The figures printed by :func:`print_report`, from ``run_benchmark``'s raw times.

    Per journal ``j`` (``memory``, ``sqlite``), as ``(median, low, high)`` triples where an
    interval is given:

    * ``whole_ratio`` (today's harness figure): per round, sum of ``j`` replays / sum of unwrapped
      replays; median, min, max over rounds;
    * ``added_ms_per_call``: per conversation with calls, median over rounds of (``j`` -
      unwrapped) / calls, in ms; median over conversations and its interval;
      ``pooled_added_ms_per_call``: per round, sum of differences / sum of calls, median over
      rounds; ``one_run_added_ms_per_call``: the same two with the one-run scripts;
    * ``multiple_of_commit`` (SQLite): per conversation, median over rounds of the added cost
      per call / the floor measured just before that replay; median and interval;
    * ``per_run_ms``: per conversation with more than one run, median over rounds of ((``j`` -
      unwrapped) - (``j``-one-run - unwrapped-one-run)) / (runs - 1); median and interval;
      ``per_run_share``: the pooled part of the added cost the extra runs account for;
    * ``short_over_long``: sum over conversations of the added cost per call (median over
      rounds) with the recorded runs / the same with one run, bootstrap over conversations;
    * ``one_run_fit_ms``: with one run per conversation, the least-squares line added (ms) =
      ``per_saga`` + ``per_call`` x calls over the conversations (bootstrap over conversations),
      and ``per_call`` over the median bare commit (the marginal cost of a call, the figure
      nearest to ``bench/overhead.py --durable``'s, whose runs spread one saga over 20 calls).
    """
    times, counts = result["times"], result["counts"]
    keys = list(counts["calls"])
    calls, runs = counts["calls"], counts["runs"]
    with_calls = [k for k in keys if calls[k]]
    rounds = result["params"]["rounds"]
    out: dict[str, Any] = {}
    floor_all = [x for k in keys for x in result["floor_s"][k]]
    out["commit_us"] = interval([x * 1e6 for x in floor_all]) if floor_all else None

    def added(variant: str, base: str, key: str) -> list[float]:
        return [a - b for a, b in zip(times[variant][key], times[base][key], strict=True)]

    for j in JOURNALS:
        one = f"{j}-one-run"
        figures_j: dict[str, Any] = {}
        ratios = [sum(times[j][k][r] for k in keys) / sum(times["unwrapped"][k][r] for k in keys)
                  for r in range(rounds)]
        figures_j["whole_ratio"] = (statistics.median(ratios), min(ratios), max(ratios))
        for name, variant, base in (("", j, "unwrapped"), ("one_run_", one, "unwrapped-one-run")):
            per_conv = [statistics.median(added(variant, base, k)) / calls[k] * 1e3
                        for k in with_calls]
            figures_j[f"{name}added_ms_per_call"] = interval(per_conv) if per_conv else None
            pooled = [sum(times[variant][k][r] - times[base][k][r] for k in keys)
                      / sum(calls.values()) * 1e3 for r in range(rounds)] if with_calls else []
            figures_j[f"{name}pooled_added_ms_per_call"] = (
                statistics.median(pooled) if pooled else None)
        if j == "sqlite" and with_calls:
            multiples = []
            for k in with_calls:
                # the floor list holds, per round, the recorded replay's then the one-run's
                # floors in the order they ran; pair each replay with its own
                per_round = []
                for r in range(rounds):
                    pair = result["floor_s"][k][2 * r: 2 * r + 2]
                    ran_first = result["orders"][-rounds + r].index(j) < \
                        result["orders"][-rounds + r].index(one)
                    commit = pair[0] if ran_first else pair[1]
                    per_round.append((times[j][k][r] - times["unwrapped"][k][r]) / calls[k] / commit)
                multiples.append(statistics.median(per_round))
            figures_j["multiple_of_commit"] = interval(multiples)
        multi = [k for k in keys if runs[k] > 1]
        extra = {k: statistics.median([a - b for a, b in zip(added(j, "unwrapped", k),
                                                               added(one, "unwrapped-one-run", k),
                                                               strict=True)])
                 for k in keys}
        figures_j["per_run_ms"] = (interval([extra[k] / (runs[k] - 1) * 1e3 for k in multi])
                                   if multi else None)
        total_added = sum(statistics.median(added(j, "unwrapped", k)) for k in keys)
        figures_j["per_run_share"] = sum(extra.values()) / total_added if total_added else None
        if with_calls:
            figures_j["short_over_long"] = _bootstrap(
                [(statistics.median(added(one, "unwrapped-one-run", k)) / calls[k],
                  statistics.median(added(j, "unwrapped", k)) / calls[k]) for k in with_calls],
                _ratio_of_sums)
        # one run per conversation: added = per saga + per call x calls (least squares over the
        # conversations); per saga: SAGA_OPENED, one run's lease, close_saga's, SAGA_CLOSED
        line = [(float(calls[k]), statistics.median(added(one, "unwrapped-one-run", k)) * 1e3)
                for k in keys]
        if len({x for x, _ in line}) > 1:
            figures_j["one_run_fit_ms"] = {
                "per_call": _bootstrap(line, lambda pairs: _slope_intercept(pairs)[0]),
                "per_saga": _bootstrap(line, lambda pairs: _slope_intercept(pairs)[1]),
            }
            if out["commit_us"] is not None:
                figures_j["one_run_fit_ms"]["per_call_multiple_of_commit"] = tuple(
                    x * 1e3 / out["commit_us"][0] for x in figures_j["one_run_fit_ms"]["per_call"])
        out[j] = figures_j
    return out


def _fmt(triple: tuple[float, float, float] | None, digits: int = 2, unit: str = "") -> str:
    if triple is None:
        return "n/a (no conversation qualifies)"
    median, low, high = triple
    return f"{median:.{digits}f}{unit} [{low:.{digits}f}, {high:.{digits}f}]"


def print_report(result: dict[str, Any]) -> None:
    """Print :func:`run_benchmark`'s figures (see :func:`figures` for their definitions)."""
    p, counts, f = result["params"], result["counts"], result["figures"]
    load = [tuple(round(x, 2) for x in result[k]) for k in ("loadavg_start", "loadavg_end")]
    runs, calls = counts["runs"], counts["calls"]
    total_runs, total_calls = sum(runs.values()), sum(calls.values())
    print(f"\n== τ-bench clean replay, like with like: {p['conversations']} conversations "
          f"({counts['conversations_with_calls']} with tool calls), {p['rounds']} rounds "
          f"after {p['warmup']} warm-up; load average {load[0]} at start, {load[1]} at end ==")
    print(f"runs per conversation: median {statistics.median(runs.values()):g}, max "
          f"{max(runs.values())}, {total_runs} runs for {total_calls} tool calls "
          f"({total_runs / max(total_calls, 1):.2f} runs per call)")
    for shape, by_phase in counts["entries_by_phase"].items():
        entries = sum(by_phase.values())
        detail = ", ".join(f"{name} {n}" for name, n in by_phase.items())
        print(f"journal entries, {shape}: {entries} ({entries / max(total_calls, 1):.2f} per "
              f"tool call): {detail}")
    print("  (close_saga takes the lease too: one RUN_STARTED/RUN_ENDED pair per saga beyond its "
          "runs)")
    if not f:
        print("no timed round: no figures")
        return
    print("intervals: 95 % bootstrap over conversations; per conversation the median over rounds")
    for j in JOURNALS:
        fj = f[j]
        ratio = fj["whole_ratio"]
        print(f"{j}: whole-replay ratio (as the harness prints it) x{ratio[0]:.2f} "
              f"(rounds {ratio[1]:.2f}-{ratio[2]:.2f})")
        print(f"  added per tool call: {_fmt(fj['added_ms_per_call'], 3, ' ms')} median over "
              f"conversations; pooled {fj['pooled_added_ms_per_call'] or 0:.3f} ms")
        if "multiple_of_commit" in fj:
            print(f"  = x{_fmt(fj['multiple_of_commit'])} of one bare INSERT+COMMIT "
                  f"({_fmt(f['commit_us'], 0, ' us')}); bench/overhead.py --durable's unit")
        print(f"  one run per conversation: {_fmt(fj['one_run_added_ms_per_call'], 3, ' ms')} per "
              f"call; pooled {fj['one_run_pooled_added_ms_per_call'] or 0:.3f} ms")
        if "one_run_fit_ms" in fj:
            fit = fj["one_run_fit_ms"]
            print(f"    fit over conversations: {_fmt(fit['per_call'], 3, ' ms')} per call + "
                  f"{_fmt(fit['per_saga'], 3, ' ms')} per saga"
                  + (f"; per call x{_fmt(fit['per_call_multiple_of_commit'])} of a bare commit"
                     if j == "sqlite" and "per_call_multiple_of_commit" in fit else ""))
        print(f"  per extra run: {_fmt(fj['per_run_ms'], 3, ' ms')}; the extra runs account for "
              f"{(fj['per_run_share'] or 0) * 100:.0f} % of the added cost")
        if "short_over_long" in fj:
            print(f"  item 2, recorded runs / one run, added cost per call: "
                  f"x{_fmt(fj['short_over_long'])} (within 10 % means <= 1.10)")


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns 0, or 2 when the data folder is missing."""
    from examples.tau_airline.store import DataNotFoundError

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", default="all",
                        help="the first N conversations (of --keys, if given), or 'all'")
    parser.add_argument("--keys", default=None, help="comma-separated TASK.TRIAL or TASK keys")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--commits", type=int, default=10,
                        help="bare INSERT+COMMIT timed before each SQLite replay")
    parser.add_argument("--seed", type=int, default=1, help="seed of the round orders")
    parser.add_argument("--data", default=None, help="tau-airline data folder")
    parser.add_argument("--db-dir", default=None, help="folder for the SQLite files")
    parser.add_argument("--json", dest="json_out", default=None, help="write the raw result")
    args = parser.parse_args(argv)
    if args.rounds < 0 or args.warmup < 0 or args.commits < 1:
        parser.error("--rounds and --warmup must be >= 0, --commits >= 1")
    if args.rounds + args.warmup == 0:
        parser.error("nothing to run: --rounds and --warmup are both 0")
    if args.conversations != "all" and not args.conversations.isdigit():
        parser.error("--conversations takes a number or 'all'")
    limit = None if args.conversations == "all" else int(args.conversations)
    keys = args.keys.split(",") if args.keys else None
    started = time.perf_counter()
    try:
        result = asyncio.run(run_benchmark(
            args.data, limit, args.rounds, args.warmup, keys=keys, commits=args.commits,
            db_dir=args.db_dir, seed=args.seed,
            progress=lambda done, total: print(f"round {done}/{total} done "
                                               f"({time.perf_counter() - started:.0f} s)",
                                               file=sys.stderr)))
    except DataNotFoundError as exc:
        print(exc, file=sys.stderr)
        return 2
    except ValueError as exc:
        parser.error(str(exc))
    print_report(result)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
