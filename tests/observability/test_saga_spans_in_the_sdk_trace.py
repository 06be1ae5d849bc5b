"""Issue 23, point 1 and 2: the saga in the Agents SDK's own trace (custom spans) and the SDK
trace and span ids in the journal, for the demo's failing saga (flight, hotel, declined charge;
the hotel then the flight undone)."""

from __future__ import annotations

import json

import pytest
from agents import (
    Agent,
    OutputGuardrailTripwireTriggered,
    RunConfig,
    Runner,
    function_tool,
)
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents import FailurePolicy, Sagacity, SagaRunHooks, SagaStatus, Verdict, compensable
from sagacity_agents.backends import Phase
from sagacity_agents.demo.booking import BookingSystem
from sagacity_agents.demo.trip import CARD, TRIP_REQUEST, build_agent
from sagacity_agents.sdk.tracing import saga_trace

pytestmark = pytest.mark.case("O-23")


async def run_demo(tmp_path, **kwargs):
    """The demo's failing saga in a SQLite journal: (result, its entries)."""
    agent = build_agent(BookingSystem(tmp_path / "booking.db", reset=True))
    sagacity = Sagacity(str(tmp_path / "journal.db"), policy=FailurePolicy.CONTINUE)
    try:
        result = await sagacity.run(agent, TRIP_REQUEST, max_turns=12, **kwargs)
        entries = await sagacity.journal.entries(result.saga_id)
        (verified,) = await sagacity.verify(result.saga_id)
        assert verified.ok
        return result, entries
    finally:
        await sagacity.aclose()


async def test_demo_failing_saga_span_names_and_parent_links(tmp_path, sdk_spans):
    result, _ = await run_demo(tmp_path)
    assert result.status is SagaStatus.COMPENSATED
    names = [s.span_data.name for s in sdk_spans.ours()]
    assert sorted(names) == sorted([
        "saga.call book_flight", "saga.call book_hotel", "saga.call charge_card",
        "saga.undo book_hotel", "saga.undo book_flight", "saga.run",
    ])
    (trace,) = sdk_spans.traces  # one trace around the run and its compensation
    assert trace.group_id == result.saga_id
    assert {s.trace_id for s in sdk_spans.spans} == {trace.trace_id}
    run = sdk_spans.one("saga.run")
    assert run.parent_id is None
    for tool in ("book_flight", "book_hotel", "charge_card"):
        call = sdk_spans.one(f"saga.call {tool}")
        function = sdk_spans.by_id(call.parent_id)  # under the SDK's own function span
        assert function.span_data.type == "function" and function.span_data.name == tool
        assert sdk_spans.ancestors(call)[-1] == "saga.run"
        assert call.span_data.data["sagacity.saga.id"] == result.saga_id
        assert call.span_data.data["gen_ai.tool.name"] == tool
    for tool in ("book_flight", "book_hotel"):
        assert sdk_spans.one(f"saga.undo {tool}").parent_id == run.span_id


async def test_error_status_on_the_failed_call_and_the_saga(tmp_path, sdk_spans):
    await run_demo(tmp_path)
    charge = sdk_spans.one("saga.call charge_card")
    assert charge.error is not None and "CardDeclined" in charge.error["message"]
    assert charge.span_data.data["sagacity.outcome"] == "FAILED"
    assert charge.span_data.data["sagacity.verdict"] == "failed"
    for tool in ("book_flight", "book_hotel"):
        span = sdk_spans.one(f"saga.call {tool}")
        assert span.error is None and span.span_data.data["sagacity.outcome"] == "EXECUTED"
    run = sdk_spans.one("saga.run").span_data.data
    assert run["sagacity.saga.status"] == "COMPENSATED" and run["sagacity.still_dirty.count"] == 0
    assert run["sagacity.undone.count"] == 2
    assert sdk_spans.one("saga.run").error["message"] == "saga COMPENSATED"


async def test_compensation_spans_in_reverse_order(tmp_path, sdk_spans):
    await run_demo(tmp_path)
    undos = [s for s in sdk_spans.ours() if s.span_data.name.startswith("saga.undo")]
    assert [s.span_data.name for s in undos] == ["saga.undo book_hotel", "saga.undo book_flight"]
    assert undos[0].started_at <= undos[0].ended_at <= undos[1].started_at
    seqs = [s.span_data.data["sagacity.call.seq"] for s in undos]
    assert seqs == sorted(seqs, reverse=True)
    for span in undos:
        data = span.span_data.data
        assert data["sagacity.outcome"] == "COMPENSATED" and data["sagacity.undo.key"].startswith("sgc-")


async def test_journal_entries_trace_ids_equal_the_spans(tmp_path, sdk_spans):
    _, entries = await run_demo(tmp_path)
    (trace,) = sdk_spans.traces
    links = {e.seq: e.payload["trace"] for e in entries}
    assert {link["trace_id"] for link in links.values()} == {trace.trace_id}
    run = sdk_spans.one("saga.run")
    by_call = {s.span_data.data["gen_ai.tool.call.id"]: s for s in sdk_spans.ours()
               if s.span_data.name.startswith("saga.call")}
    undo_by_target = {s.span_data.data["sagacity.call.seq"]: s for s in sdk_spans.ours()
                      if s.span_data.name.startswith("saga.undo")}
    for entry in entries:
        span_id = links[entry.seq]["span_id"]
        if entry.phase in (Phase.INTENT, Phase.EXECUTED, Phase.FAILED):
            assert span_id == by_call[entry.call_id].span_id
        elif entry.phase in (Phase.COMPENSATING, Phase.COMPENSATED):
            assert span_id == undo_by_target[entry.payload["target_seq"]].span_id
        else:  # saga-level entries: the saga.run span
            assert span_id == run.span_id, entry.phase
    # ...and back: each call span names its INTENT's seq.
    for call_id, span in by_call.items():
        intent = next(e for e in entries if e.phase is Phase.INTENT and e.call_id == call_id)
        assert span.span_data.data["sagacity.call.seq"] == intent.seq


def _everything(spans) -> str:
    return json.dumps([s.export() for s in spans], default=str)


async def test_no_raw_argument_in_any_span_when_sensitive_data_is_off(tmp_path, sdk_spans):
    await run_demo(tmp_path, run_config=RunConfig(trace_include_sensitive_data=False))
    text = _everything(sdk_spans.spans)
    assert sdk_spans.ours() and CARD not in text and "Lisbon" not in text and "amount_eur" not in text
    assert "sagacity.call.args" not in text and "sagacity.call.result" not in text
    # the hashes and ids are there
    assert sdk_spans.one("saga.call charge_card").span_data.data["sagacity.args.hash"]


async def test_raw_arguments_only_when_the_run_allows_them(tmp_path, sdk_spans):
    """Arguments go into spans only when the run allows sensitive data, and even then a card
    number only as its mask (the journal's committed value, never the value)."""
    await run_demo(tmp_path, run_config=RunConfig(trace_include_sensitive_data=True))
    data = sdk_spans.one("saga.call charge_card").span_data.data
    assert data["sagacity.call.args"] == {"card_number": "**** **** **** " + CARD.replace(" ", "")[-4:],
                                          "amount_eur": 740}
    assert CARD not in _everything(sdk_spans.ours())  # the SDK's own function span: its own rule


async def test_run_config_names_the_trace(tmp_path, sdk_spans):
    trace_id = "trace_" + "ab" * 16
    _, entries = await run_demo(tmp_path, run_config=RunConfig(
        workflow_name="trip booking", trace_id=trace_id, group_id="conversation-7"))
    (trace,) = sdk_spans.traces
    assert (trace.name, trace.trace_id, trace.group_id) == ("trip booking", trace_id, "conversation-7")
    assert {e.payload["trace"]["trace_id"] for e in entries} == {trace_id}


async def test_tracing_disabled_in_run_config_no_span_no_ids(tmp_path, sdk_spans):
    _, entries = await run_demo(tmp_path, run_config=RunConfig(tracing_disabled=True))
    assert sdk_spans.ours() == [] and all("trace" not in e.payload for e in entries)


def _declined(result: dict) -> Verdict | None:
    return Verdict.FAILED if result.get("status") == "declined" else None


@function_tool
@compensable(undo=lambda ctx: None, classify=_declined)
def charge(amount: int) -> dict:
    """Charge an amount."""
    return {"status": "declined", "amount": amount}


async def test_classified_failure_is_an_error_while_the_sdk_span_shows_success(tmp_path, sdk_spans):
    model = ScriptedModel([[function_call("charge", {"amount": 5}, call_id="c1")],
                           [assistant_message("done")]])
    # CONTINUE: under STOP the hook that stops the run marks the SDK's span in error too.
    sagacity = Sagacity(":memory:", policy=FailurePolicy.CONTINUE)
    result = await sagacity.run(Agent(name="a", model=model, tools=[charge]), "go")
    assert result.status is SagaStatus.COMPENSATED
    span = sdk_spans.one("saga.call charge")
    assert span.error["message"] == "result classified as failed"
    assert span.span_data.data["sagacity.outcome"] == "FAILED"
    assert sdk_spans.by_id(span.parent_id).error is None  # the SDK's function span: a success


@pytest.mark.parametrize("wrapped", [True, False], ids=["saga_trace", "plain"])
async def test_hooks_users_get_compensation_in_the_run_trace_with_saga_trace(tmp_path, sdk_spans, wrapped):
    """With ``saga_trace`` around the block, the undos are in the run's trace; without it the
    SDK's trace ends with ``Runner.run`` and the undos (after it) are in none (why it exists)."""
    agent = build_agent(BookingSystem(tmp_path / "booking.db", reset=True))
    config = RunConfig(workflow_name="hooks")

    async def block() -> None:
        async with SagaRunHooks(str(tmp_path / "j.db"), agent=agent, policy=FailurePolicy.CONTINUE) as hooks:
            await Runner.run(agent, TRIP_REQUEST, hooks=hooks, run_config=config, max_turns=12)

    # the output guardrail withholds the cheerful answer after the failed charge
    if wrapped:
        with saga_trace(config), pytest.raises(OutputGuardrailTripwireTriggered):
            await block()
    else:
        with pytest.raises(OutputGuardrailTripwireTriggered):
            await block()
    undos = [s for s in sdk_spans.ours() if s.span_data.name.startswith("saga.undo")]
    assert len(sdk_spans.traces) == 1
    assert len(undos) == (2 if wrapped else 0)
    assert {s.trace_id for s in undos} <= {sdk_spans.traces[0].trace_id}


async def test_streamed_run_compensation_in_the_run_trace(tmp_path, sdk_spans):
    agent = build_agent(BookingSystem(tmp_path / "booking.db", reset=True))
    sagacity = Sagacity(":memory:", policy=FailurePolicy.CONTINUE)
    async with sagacity.run_streamed(agent, TRIP_REQUEST, max_turns=12) as stream:
        async for _ in stream.stream_events():
            pass
    assert stream.result.status is SagaStatus.COMPENSATED
    (trace,) = sdk_spans.traces
    undos = [s for s in sdk_spans.ours() if s.span_data.name.startswith("saga.undo")]
    assert [s.span_data.name for s in undos] == ["saga.undo book_hotel", "saga.undo book_flight"]
    assert {s.trace_id for s in sdk_spans.ours()} == {trace.trace_id}


async def test_call_span_names_its_outcome_and_undo_key(tmp_path, sdk_spans):
    _, entries = await run_demo(tmp_path)
    flight = sdk_spans.one("saga.call book_flight").span_data.data
    undo = sdk_spans.one("saga.undo book_flight").span_data.data
    executed = next(e for e in entries if e.phase is Phase.EXECUTED and e.tool == "book_flight")
    assert flight["sagacity.outcome.seq"] == executed.seq == undo["sagacity.call.seq"]
    assert flight["sagacity.undo.key"] == undo["sagacity.undo.key"]
    assert "sagacity.undo.key" not in sdk_spans.one("saga.call charge_card").span_data.data


async def test_run_config_as_a_dict_names_the_trace_too(tmp_path, sdk_spans):
    await run_demo(tmp_path, run_config={"workflow_name": "as a dict", "trace_include_sensitive_data": False})
    (trace,) = sdk_spans.traces
    assert trace.name == "as a dict"
    assert "sagacity.call.args" not in sdk_spans.one("saga.call charge_card").span_data.data
