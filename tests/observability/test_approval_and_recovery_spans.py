"""Issue 23: the approval pause and decision spans (the decision's wait), the recovery span,
in the SDK's trace; and, with OpenTelemetry, the spans of what runs outside an SDK run (a
decision from the CLI, a recovery) joined to the run's trace as the journal knows it."""

from __future__ import annotations

import asyncio

import pytest
from click.testing import CliRunner

from sagacity_agents import Decision, FailurePolicy, Sagacity, SagaStatus
from sagacity_agents.backends import Phase
from sagacity_agents.cli import cli
from sagacity_agents.demo.booking import BookingSystem
from sagacity_agents.demo.trip import TRIP_REQUEST, build_agent
from tests.sdk import wire_app

from .conftest import points

pytestmark = pytest.mark.case("O-23")

WIRE = ("transfer", '{"amount": 5, "to": "acct-9"}', "w1")


@pytest.fixture(autouse=True)
def ledger(tmp_path, monkeypatch):
    monkeypatch.setattr(wire_app, "LEDGER", tmp_path / "ledger.txt")


async def test_approval_pause_and_decision_spans_with_the_wait(tmp_path, sdk_spans):
    async def slow_human(request):
        await asyncio.sleep(0.05)
        return Decision(approved=True, approver="alice", reason="ok")

    sagacity = Sagacity(str(tmp_path / "j.db"))
    try:
        result = await sagacity.run(wire_app.paused_agent(WIRE), "go", approver=slow_human)
        entries = await sagacity.journal.entries(result.saga_id)
    finally:
        await sagacity.aclose()
    assert result.status is SagaStatus.COMPLETED and wire_app.executions() == ["5 USD -> acct-9"]
    pause = sdk_spans.one("saga.approval.pause transfer")
    decision = sdk_spans.one("saga.approval.decision transfer")
    run = sdk_spans.one("saga.run")
    assert pause.parent_id == run.span_id and decision.parent_id == run.span_id
    assert pause.span_data.data["sagacity.approval.request_id"] == decision.span_data.data[
        "sagacity.approval.request_id"]
    assert decision.span_data.data["sagacity.approval.decision"] == "approved"
    assert decision.span_data.data["sagacity.approval.wait_seconds"] >= 0.05
    # who decided is a raw value: there because the run allows sensitive data (the SDK default)
    assert decision.span_data.data["sagacity.approval.approver"] == "alice"
    (awaiting,) = [e for e in entries if e.phase is Phase.AWAITING_APPROVAL]
    (approved,) = [e for e in entries if e.phase is Phase.APPROVED]
    assert awaiting.payload["trace"]["span_id"] == pause.span_id
    assert approved.payload["trace"]["span_id"] == decision.span_id
    assert awaiting.seq == pause.span_data.data["sagacity.call.seq"]


async def _left_open(path) -> str:
    """A demo saga whose run ended (close=False) with the flight and hotel booked, no charge."""
    from agents import Agent
    from agents.testing import ScriptedModel, assistant_message, function_call

    from sagacity_agents.demo.trip import trip_tools

    model = ScriptedModel([
        [function_call("book_flight", {"destination": "Lisbon", "date": "2025-06-12"}, call_id="f")],
        [function_call("book_hotel", {"city": "Lisbon", "nights": 3}, call_id="h")],
        [assistant_message("booked, the charge comes later")],
    ])
    agent = Agent(name="trip-agent", model=model,
                  tools=trip_tools(BookingSystem(path / "booking.db", reset=True)))
    sagacity = Sagacity(str(path / "j.db"))
    try:
        result = await sagacity.run(agent, TRIP_REQUEST, close=False)
        assert result.status is SagaStatus.OPEN
        return result.saga_id
    finally:
        await sagacity.aclose()


async def _recover(path, saga_id):
    agent = build_agent(BookingSystem(path / "booking.db"))
    sagacity = Sagacity(str(path / "j.db"), policy=FailurePolicy.CONTINUE)
    try:
        return await sagacity.recover(saga_id, agent), await sagacity.journal.entries(saga_id)
    finally:
        await sagacity.aclose()


async def test_recovery_span_in_a_trace_grouped_with_the_saga(tmp_path, sdk_spans):
    saga_id = await _left_open(tmp_path)
    first_trace = sdk_spans.traces[0].trace_id
    result, entries = await _recover(tmp_path, saga_id)
    assert result.status is SagaStatus.COMPENSATED
    run_trace, recovery_trace = sdk_spans.traces
    assert recovery_trace.name == "sagacity recover" and recovery_trace.group_id == saga_id
    assert run_trace.group_id == saga_id
    recover = sdk_spans.one("saga.recover")
    assert recover.trace_id == recovery_trace.trace_id and recover.parent_id is None
    assert recover.span_data.data["sagacity.linked.trace_id"] == first_trace
    assert recover.span_data.data["sagacity.saga.status"] == "COMPENSATED"
    undos = [s for s in sdk_spans.ours() if s.span_data.name.startswith("saga.undo")]
    assert [s.span_data.name for s in undos] == ["saga.undo book_hotel", "saga.undo book_flight"]
    assert all(s.parent_id == recover.span_id for s in undos)
    compensating = [e for e in entries if e.phase is Phase.COMPENSATING]
    assert {e.payload["trace"]["trace_id"] for e in compensating} == {recovery_trace.trace_id}


def test_otel_decision_from_the_cli_joins_the_run_trace(tmp_path, sdk_spans, otel):
    """A run pauses (its SDK trace in the journal); the CLI, another process with no SDK trace,
    approves: its OTel span is in the run's trace (the SDK trace's 32 hex digits), child of the
    pause's span, and the APPROVED entry carries the OTel span's ids."""
    exporter, reader, _ = otel
    location = str(tmp_path / "j.db")

    async def pause():
        sagacity = Sagacity(location)
        try:
            result = await sagacity.run(wire_app.paused_agent(WIRE), "go")
            return result, await sagacity.approvals.list(result.saga_id)
        finally:
            await sagacity.aclose()

    result, (request,) = asyncio.run(pause())
    assert result.status is SagaStatus.AWAITING_APPROVAL
    pause_span = sdk_spans.one("saga.approval.pause transfer")
    out = CliRunner().invoke(cli, ["approvals", "approve", request.request_id, "--as", "alice",
                                   "--db", location])
    assert out.exit_code == 0, out.output
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "sagacity.approval.decision"]
    assert f"trace_{span.context.trace_id:032x}" == pause_span.trace_id
    assert span.parent is not None and f"{span.parent.span_id:016x}" == pause_span.span_id[5:21]
    assert span.attributes["gen_ai.tool.name"] == "transfer"
    assert span.attributes["sagacity.approval.request_id"] == request.request_id
    assert "alice" not in str(dict(span.attributes))  # raw values never go to OTel spans

    async def approved_entry():
        sagacity = Sagacity(location)
        try:
            return [e for e in await sagacity.journal.entries(result.saga_id)
                    if e.phase is Phase.APPROVED]
        finally:
            await sagacity.aclose()

    (approved,) = asyncio.run(approved_entry())
    assert approved.payload["trace"] == {"otel_trace_id": f"{span.context.trace_id:032x}",
                                         "otel_span_id": f"{span.context.span_id:016x}"}
    (wait,) = points(reader, "sagacity.approval.wait")
    assert wait.count == 1 and wait.attributes["sagacity.approval.decision"] == "approved"


async def test_otel_recovery_span_joined_to_the_run_trace(tmp_path, sdk_spans, otel):
    exporter, reader, _ = otel
    saga_id = await _left_open(tmp_path)
    run_trace = sdk_spans.traces[0].trace_id
    result, entries = await _recover(tmp_path, saga_id)
    assert result.status is SagaStatus.COMPENSATED
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "sagacity.recover"]
    assert f"trace_{span.context.trace_id:032x}" == run_trace
    assert span.attributes["sagacity.saga.status"] == "COMPENSATED"
    assert span.status.is_ok
    # the recovery's entries carry both: its SDK trace's ids and the OTel span's
    last = entries[-1].payload["trace"]
    assert last["otel_span_id"] == f"{span.context.span_id:016x}"
    assert last["trace_id"] == sdk_spans.traces[1].trace_id
    outcomes = {p.attributes["gen_ai.tool.name"]: p.value for p in points(reader, "sagacity.compensations")}
    assert outcomes == {"book_hotel": 1, "book_flight": 1}


async def test_otel_resolve_span_joins_the_last_known_trace(sdk_spans, otel):
    """A crashed saga is recovered (its call in doubt stays), then a human resolves the call from
    a process with no SDK trace: the ``sagacity.resolve`` span is in the recovery's trace, and
    the RESOLVED entry carries its OTel ids."""
    from sagacity_agents.backends import InMemoryJournal
    from tests.sdk.test_recovery import crashed_saga
    from tests.sdk.test_resolve import step_agent

    exporter, _, _ = otel
    sagacity = Sagacity(InMemoryJournal())
    saga_id = await crashed_saga(sagacity.journal)  # c3 (INTENT seq 6) in doubt
    first = await sagacity.recover(saga_id, step_agent())
    assert first.status is SagaStatus.IN_DOUBT
    recovery_trace = sdk_spans.traces[-1].trace_id
    resolved = await sagacity.resolve(saga_id, 6, ran=False, resolver="ops", reason="checked",
                                      force=True)
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "sagacity.resolve"]
    assert f"trace_{span.context.trace_id:032x}" == recovery_trace
    assert span.attributes["sagacity.call.seq"] == 6 and span.attributes["sagacity.resolution.ran"] is False
    assert span.attributes["sagacity.resolution.seq"] == resolved.seq
    assert resolved.payload["trace"]["otel_span_id"] == f"{span.context.span_id:016x}"
