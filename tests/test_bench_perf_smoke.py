"""The durable measure of ``bench/overhead.py --durable`` and the public-API harness run end to end
(tiny rounds; no timing asserted: only that every figure the targets are decided on is there)."""

from __future__ import annotations

import json

from tests.test_bench_smoke import _bench_script as _bench


def test_order_statistics_interval_of_the_median():
    """The distribution-free interval: ranks 10 and 21 of 30 (coverage 95.7 %); (min, max) below 6."""
    with _bench("durable_cost") as bench:
        values = [float(v) for v in range(30)]
        assert bench.median_interval(values) == (14.5, 9.0, 20.0)
        assert bench.median_interval([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)


async def test_durable_measure_runs(pg_session_uri, monkeypatch, capsys):
    from tests.pg import SERVER

    with _bench("durable_cost") as bench:
        monkeypatch.setattr(bench, "PG", SERVER)
        result = await bench.run_durable(calls=2, rounds=2, warmup=1, commits=2, peer=False, fsyncs=False)
        s = result["series"]
        for backend in ("sqlite-full", "postgres"):
            for kind in ("async", "sync"):
                assert {f"{backend}/{kind}/{x}" for x in ("beyond_us", "added_us", "ratio")} <= set(s)
        for kind in ("async", "sync"):
            assert {f"memory/{kind}/per_turn_pct", f"memory/{kind}/added_us"} <= set(s)
        assert {"one_call_runs/ratio", "one_call_runs/wall_ratio"} <= set(s)
        # every run of a round ran once per round, the bare commits between rounds
        assert all(len(v) == 2 for v in result["raw_s"].values())
        json.dumps(result)
        bench.print_durable(result)
    out = capsys.readouterr().out
    assert "beyond the commit" in out and "ratio of medians" in out and "median of per-round ratios" in out
    assert "peer: not asked for" in out


def test_public_harness_runs(pg_session_uri, tmp_path, capsys):
    from tests.pg import SERVER

    with _bench("public_harness") as harness:
        out = tmp_path / "h.json"
        assert harness.main(["--rounds", "2", "--warmup", "1", "--pg", SERVER, "--dir", str(tmp_path),
                             "--json", str(out)]) == 0
        data = json.loads(out.read_text())
    assert data["postgres"] == "measured"
    assert {f"{j}/{k}/beyond_us" for j in ("sqlite", "postgres") for k in ("async", "sync")} <= set(data["figures"])
    text = capsys.readouterr().out
    assert "bootstrap" in text and text.count("target <=") == 8


def test_call_path_share_charges_each_sample_to_its_innermost_owner(tmp_path):
    """A sample ends in ours when our frame is the innermost of ours and the SDK's (stdlib below it
    counts as ours), in the SDK's when an SDK frame is deeper; start-up samples are left out."""
    raw = tmp_path / "samples.txt"
    loop = "run (asyncio/runners.py:118);run_until_complete (asyncio/base_events.py:653)"
    ours = "append_locked (/x/sagacity_agents/core/append_rule.py:479)"
    sdk = "AgentRunner.run (agents/run.py:610)"
    raw.write_text("\n".join([
        f"{loop};{sdk};{ours};dumps (json/__init__.py:231) 3",  # ours, stdlib below it
        f"{loop};{ours};{sdk} 5",  # the SDK's, though we called it
        f"{loop};select (selectors.py:468) 2",  # the loop's own
        "<module> (x.py:1);_find_and_load (<frozen importlib._bootstrap>:1176) 7",  # start-up
    ]) + "\n", encoding="utf-8")
    with _bench("call_path_share") as bench:
        total, owners, by_function = bench.shares(raw)
    assert total == 10
    assert owners == {"ours": 3, "sdk": 5, "asyncio and the rest": 2}
    assert by_function == {"append_locked  core/append_rule.py": 3}


def test_write_key_index_ab_runs():
    """The write-key index A/B commits real journal rows into the shipped table and one without
    the index (its DDL read from the package), and counts the -wal pages each commit adds."""
    with _bench("call_path_ab") as bench:
        assert "UNIQUE (saga_id, write_key)" in bench._journal_ddl(True)
        assert "UNIQUE" not in bench._journal_ddl(False)
        result = bench.write_key_index(blocks=1, per_block=3)
    with_index, without = (float(x) for x in result["-wal pages per commit, A / B"].split(" / "))
    assert with_index > without >= 1.0
