"""Issue 23, points 2 and 4 on the command line: ``journal show`` prints the trace and span
ids, the audit export keeps them, and ``saga show`` draws the saga as a timeline."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
from click.testing import CliRunner

from sagacity_agents import Decision, FailurePolicy, Sagacity, SagaStatus
from sagacity_agents.cli import cli
from sagacity_agents.demo.booking import BookingSystem
from sagacity_agents.demo.trip import TRIP_REQUEST, build_agent
from tests.sdk import wire_app

pytestmark = pytest.mark.case("O-23")


@pytest.fixture
def traced_demo(tmp_path, sdk_spans):
    """The demo's failing saga, traced, in a SQLite file: (location, saga id, spans)."""
    location = str(tmp_path / "j.db")

    async def run():
        sagacity = Sagacity(location, policy=FailurePolicy.CONTINUE)
        try:
            return await sagacity.run(build_agent(BookingSystem(tmp_path / "b.db", reset=True)),
                                      TRIP_REQUEST, max_turns=12)
        finally:
            await sagacity.aclose()

    result = asyncio.run(run())
    assert result.status is SagaStatus.COMPENSATED
    return location, result.saga_id, sdk_spans


def invoke(*args: str) -> str:
    out = CliRunner().invoke(cli, list(args), env={"COLUMNS": "220"})
    assert out.exit_code == 0, out.output
    return out.output


def test_journal_show_prints_the_trace_and_span_ids(traced_demo):
    location, saga_id, spans = traced_demo
    out = invoke("journal", "show", saga_id, "--db", location)
    (trace,) = spans.traces
    assert f"trace {trace.trace_id}  seq 1-15" in out
    charge = spans.one("saga.call charge_card")
    assert out.count(charge.span_id) == 2  # its INTENT and its FAILED
    assert out.count(spans.one("saga.run").span_id) == 5  # SAGA_OPENED, RUN_STARTED, SAGA_FAILED, RUN_ENDED, SAGA_CLOSED


def test_audit_export_keeps_the_ids(traced_demo, tmp_path):
    location, saga_id, spans = traced_demo
    out_file = tmp_path / "export.jsonl"
    invoke("audit", "export", saga_id, "--out", str(out_file), "--db", location)
    records = [json.loads(line) for line in out_file.read_text().splitlines()]
    entries = [json.loads(base64.b64decode(r["canonical"])) for r in records if r["type"] == "entry"]
    assert len(entries) == 15
    assert {e["payload"]["trace"]["trace_id"] for e in entries} == {spans.traces[0].trace_id}


def test_saga_show_draws_the_timeline(traced_demo):
    location, saga_id, _ = traced_demo
    out = invoke("saga", "show", saga_id[:8], "--db", location)
    lines = out.splitlines()
    assert "COMPENSATED" in lines[0] and "(15 entries)" in lines[0]
    rows = [line for line in lines if "book_" in line or "charge_card" in line]
    assert [r.split()[1] for r in rows] == ["book_flight", "book_hotel", "charge_card", "↩", "↩"]
    assert "FAILED" in rows[2] and "CardDeclined" in rows[2] and "█" in rows[2]
    assert "undo book_hotel" in rows[3] and "undo book_flight" in rows[4]  # newest call first
    assert all(" ms" in r or " s" in r for r in rows)


def test_saga_show_draws_the_approval_and_its_wait(tmp_path, monkeypatch):
    monkeypatch.setattr(wire_app, "LEDGER", tmp_path / "ledger.txt")
    location = str(tmp_path / "j.db")

    async def human(request):
        await asyncio.sleep(0.2)
        return Decision(approved=True, approver="alice", reason="ok")

    async def run():
        sagacity = Sagacity(location)
        try:
            return await sagacity.run(wire_app.paused_agent(("transfer", '{"amount": 5, "to": "acct-9"}', "w1")),
                                      "go", approver=human)
        finally:
            await sagacity.aclose()

    result = asyncio.run(run())
    out = invoke("saga", "show", result.saga_id, "--db", location)
    (row,) = [line for line in out.splitlines() if "approval transfer" in line]
    assert "APPROVED" in row and "waited" in row and "by alice" in row
    waited = float(row.split("waited")[1].split()[0])
    assert waited >= 200 or "s" == row.split("waited")[1].split()[1]  # in ms, or already seconds
