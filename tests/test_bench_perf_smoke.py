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
