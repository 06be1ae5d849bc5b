"""bench/tau_replay.py runs end to end on two conversations (tiny parameters; no timing
assertions): it replays every variant, checks the databases, counts the journal entries and
prints every figure."""

from __future__ import annotations

import json

import pytest

from tests.test_bench_smoke import _bench_script

KEYS = "34.0,37.0"
"""Several runs each, an inline-approved cancellation (34.0) and a certificate (37.0)."""


@pytest.fixture(scope="module")
def bench():
    with _bench_script("tau_replay") as module:
        yield module


def test_one_run_keeps_every_call_and_the_final_answer(bench, data_dir):
    from examples.tau_airline.harness import select_scripts
    from examples.tau_airline.script import load_scripts

    (script,) = select_scripts(load_scripts(data_dir), ["34.0"])
    merged = bench.one_run(script)
    assert len(script.turns) > 1 and len(merged.turns) == 1
    assert merged.calls == script.calls
    assert merged.turns[0].user == script.turns[0].user
    assert merged.turns[0].steps[-1] == script.turns[-1].steps[-1]
    assert all(step.calls for step in merged.turns[0].steps[:-1])


def test_cli_prints_every_figure(bench, data_dir, tmp_path, capsys):
    out = tmp_path / "tau.json"
    rc = bench.main(["--keys", KEYS, "--conversations", "2", "--rounds", "1", "--warmup", "0",
                     "--commits", "2", "--data", str(data_dir), "--db-dir", str(tmp_path),
                     "--json", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    for text in ("load average", "runs per conversation", "journal entries, recorded",
                 "journal entries, one-run", "whole-replay ratio", "added per tool call",
                 "of one bare INSERT+COMMIT", "one run per conversation", "per extra run",
                 "item 2, recorded runs / one run"):
        assert text in printed, text
    data = json.loads(out.read_text())
    counts = data["counts"]
    assert counts["conversations"] == 2 and set(counts["calls"]) == {"34.0", "37.0"}
    assert all(len(series[key]) == 1 for series in data["times"].values() for key in series)
    assert set(data["times"]) == set(bench.VARIANTS)
    recorded, one = counts["entries_by_phase"]["recorded"], counts["entries_by_phase"]["one-run"]
    runs = sum(counts["runs"].values())
    # every call journaled once in both shapes; only the run entries differ (2 sagas, 1 run
    # each, and close_saga takes the lease with a RUN_STARTED of its own)
    assert recorded["INTENT"] == one["INTENT"] == sum(counts["calls"].values())
    assert recorded["RUN_STARTED"] == runs + 2 and one["RUN_STARTED"] == 2 * 2
    assert {k: v for k, v in recorded.items() if not k.startswith("RUN_")} == \
        {k: v for k, v in one.items() if not k.startswith("RUN_")}
    assert recorded["APPROVED"] == one["APPROVED"] > 0
    for journal in bench.JOURNALS:
        assert data["figures"][journal]["added_ms_per_call"] is not None
    assert data["figures"]["sqlite"]["multiple_of_commit"] is not None


def test_cli_rejects_bad_arguments(bench):
    with pytest.raises(SystemExit):
        bench.main(["--conversations", "many"])
    with pytest.raises(SystemExit):
        bench.main(["--rounds", "0", "--warmup", "0"])
