"""Guardrail hooks (issue 10): H-01, H-02 and the composition matrix, through the SDK's real
guardrail machinery (ScriptedModel), on the in-memory and SQLite journals."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from agents import (
    Agent,
    FunctionTool,
    GuardrailFunctionOutput,
    OutputGuardrailTripwireTriggered,
    RunConfig,
    Runner,
    ToolInputGuardrailTripwireTriggered,
    function_tool,
    output_guardrail,
)
from agents.testing import assistant_message, function_call
from agents.tool_guardrails import ToolGuardrailFunctionOutput, tool_input_guardrail

from sagacity_agents import (
    CompensationContext,
    FailurePolicy,
    SagaRunHooks,
    Sagacity,
    SagaStatus,
    compensable,
    no_undo,
    protect_tool,
    read_only,
    record_undo_data,
)
from sagacity_agents.backends import InMemoryJournal, Phase
from sagacity_agents.errors import JournalWriteError
from sagacity_agents.guardrails import SagaVerdict, saga_output_guardrail, saga_tool_guardrail
from sagacity_agents.demo.booking import BookingSystem, CardDeclined
from sagacity_agents.demo.trip import FINAL_MESSAGE, TRIP_REQUEST, scripted_model, trip_tools

from .helpers import phases, scripted, tool_outputs

NOTHING_MORE = "nothing more will be changed"


# --- the demo's scenario (H-01) -----------------------------------------------------------------
def demo_agent(tmp_path, *, where: str = "agent") -> tuple[Agent[Any], BookingSystem, RunConfig | None]:
    booking = BookingSystem(tmp_path / "booking.db", reset=True)
    guard = [saga_output_guardrail()]
    agent = Agent(name="trip-agent", model=scripted_model(), tools=list(trip_tools(booking)),
                  output_guardrails=guard if where == "agent" else [])
    return agent, booking, (RunConfig(output_guardrails=guard) if where == "run_config" else None)


def undo_entries(entries) -> list[tuple[str, str | None]]:
    return [(e.phase.value, e.tool) for e in entries
            if e.phase in (Phase.COMPENSATING, Phase.COMPENSATED, Phase.COMPENSATION_FAILED)]


UNDONE_ONCE = [("COMPENSATING", "book_hotel"), ("COMPENSATED", "book_hotel"),
               ("COMPENSATING", "book_flight"), ("COMPENSATED", "book_flight")]


def assert_trip_undone_once(booking: BookingSystem, entries) -> None:
    counts = booking.counts()
    assert (counts.flights_cancelled, counts.hotels_cancelled, counts.empty) == (1, 1, True)
    assert undo_entries(entries) == UNDONE_ONCE
    assert [e.phase for e in entries].count(Phase.SAGA_CLOSED) == 1
    assert entries[-1].payload["status"] == "COMPENSATED"


@pytest.mark.case("H-01")
@pytest.mark.parametrize("where", ["agent", "run_config"])
async def test_runner_run_raises_the_sdks_tripwire_and_the_saga_is_compensated_once(
    tmp_path, any_journal, where
):
    """H-01 through Runner.run + SagaRunHooks: the model's "Your trip is booked!" never comes
    back; the SDK raises its own OutputGuardrailTripwireTriggered, naming the failed call and
    what will be undone; both undos run once."""
    agent, booking, run_config = demo_agent(tmp_path, where=where)
    kwargs = {"run_config": run_config} if run_config else {}
    with pytest.raises(OutputGuardrailTripwireTriggered) as caught:
        async with SagaRunHooks(any_journal, agent=agent, policy=FailurePolicy.CONTINUE) as hooks:
            await Runner.run(agent, TRIP_REQUEST, hooks=hooks, **kwargs)
    result = caught.value.guardrail_result
    assert result.agent_output == FINAL_MESSAGE  # what was withheld
    verdict = result.output.output_info
    assert isinstance(verdict, SagaVerdict) and verdict.blocks_output
    assert [(f.tool, f.call_id) for f in verdict.failures] == [("charge_card", "call_charge")]
    assert "CardDeclined" in verdict.failures[0].error
    # At guardrail time the undos have not run yet: they are pending, newest first.
    assert [(i.tool, i.call_id) for i in verdict.to_undo] == [("book_hotel", "call_hotel"),
                                                             ("book_flight", "call_flight")]
    assert verdict.undone == ()
    assert "to be undone when the run ends: book_hotel (call call_hotel)" in verdict.summary()
    assert hooks.status is SagaStatus.COMPENSATED
    assert [i.tool for i in hooks.report.undone] == ["book_hotel", "book_flight"]
    assert_trip_undone_once(booking, await any_journal.entries(hooks.saga_id))


@pytest.mark.case("H-01")
async def test_facade_says_the_output_was_withheld_and_why(tmp_path, any_journal):
    """H-01 through the facade: final_output is not the false success; the result says it was
    withheld, by which guardrail, which call failed and what was undone."""
    agent, booking, _ = demo_agent(tmp_path)
    result = await Sagacity(any_journal, policy=FailurePolicy.CONTINUE).run(agent, TRIP_REQUEST)
    assert result.final_output is None and not result.ok
    assert result.status is SagaStatus.COMPENSATED
    assert result.output_withheld
    assert isinstance(result.exception, OutputGuardrailTripwireTriggered)
    assert result.exception.guardrail_result.agent_output == FINAL_MESSAGE
    reason = result.withheld_reason
    assert reason.startswith("withheld by 'sagacity_saga_output': charge_card (call call_charge) failed: CardDeclined")
    assert reason.endswith("undone: book_hotel (call call_hotel), book_flight (call call_flight)")
    assert isinstance(result.root_cause, CardDeclined)
    assert_trip_undone_once(booking, await any_journal.entries(result.saga_id))


@pytest.mark.case("H-01")
async def test_streamed_facade_withholds_the_output(tmp_path, any_journal):
    """H-01 streamed: the run's exception is the SDK's tripwire, the result says withheld."""
    agent, booking, _ = demo_agent(tmp_path)
    sagacity = Sagacity(any_journal, policy=FailurePolicy.CONTINUE)
    async with sagacity.run_streamed(agent, TRIP_REQUEST) as stream:
        async for _event in stream.stream_events():
            pass
    result = stream.result
    assert result.final_output is None and result.output_withheld
    assert result.status is SagaStatus.COMPENSATED
    assert "charge_card (call call_charge) failed" in result.withheld_reason
    assert_trip_undone_once(booking, await any_journal.entries(result.saga_id))


@pytest.mark.case("H-01")
async def test_runner_run_streamed_with_saga_hooks(tmp_path, any_journal):
    agent, booking, _ = demo_agent(tmp_path)
    with pytest.raises(OutputGuardrailTripwireTriggered):
        async with SagaRunHooks(any_journal, agent=agent, policy=FailurePolicy.CONTINUE) as hooks:
            run = Runner.run_streamed(agent, TRIP_REQUEST, hooks=hooks)
            async for _event in run.stream_events():
                pass
    assert run.final_output is None
    assert hooks.status is SagaStatus.COMPENSATED
    assert_trip_undone_once(booking, await any_journal.entries(hooks.saga_id))


# --- a small trip toolset for H-02 and the matrix --------------------------------------------------
class Trip:
    """Tools whose bodies and undos write to ``log``: what ran, what was undone."""

    def __init__(self) -> None:
        self.log: list[str] = []
        log = self.log

        def undo(ctx: CompensationContext) -> None:
            log.append(f"undo {ctx.tool} {ctx.call_id}")

        @function_tool
        @compensable(undo=undo)
        async def book_flight(city: str) -> str:
            log.append("book_flight")
            record_undo_data({"city": city})
            return "FL-1"

        @function_tool
        @compensable(undo=undo)
        def book_hotel(city: str) -> str:  # sync: the worker-thread path
            log.append("book_hotel")
            return "HT-1"

        @function_tool
        @compensable(undo=undo)
        async def charge_card(amount: int) -> str:
            log.append("charge_card")
            raise CardDeclined(f"declined ({amount} EUR)")

        @function_tool
        @read_only
        def get_booking(ref: str) -> str:
            log.append("get_booking")
            return f"{ref}: booked"

        @function_tool
        @no_undo
        async def send_email(text: str) -> str:
            log.append("send_email")
            return "sent"

        self.book_flight, self.book_hotel, self.charge_card = book_flight, book_hotel, charge_card
        self.get_booking, self.send_email = get_booking, send_email

    def tools(self) -> list[FunctionTool]:
        return [self.book_flight, self.book_hotel, self.charge_card, self.get_booking, self.send_email]


H02_SCRIPT = (
    [("book_flight", {"city": "Lisbon"}, "c1")],
    [("book_hotel", {"city": "Lisbon"}, "c2")],
    [("charge_card", {"amount": 740}, "c3")],
    [("book_hotel", {"city": "Porto"}, "c4")],   # the model tries again after the failure
    [("get_booking", {"ref": "FL-1"}, "c5")],
    "Your trip is booked!",
)


def assert_h02(trip: Trip, entries, model) -> None:
    assert trip.log == ["book_flight", "book_hotel", "charge_card", "get_booking",
                        "undo book_hotel c2", "undo book_flight c1"]
    refused = [e for e in entries if e.phase is Phase.REFUSED]
    assert [(e.tool, e.call_id) for e in refused] == [("book_hotel", "c4")]
    assert refused[0].payload["not_run"] is True and refused[0].payload["intent_seq"] is None
    assert not [e for e in entries if e.call_id == "c4" and e.phase is not Phase.REFUSED]
    message = refused[0].payload["result"]
    assert NOTHING_MORE in message
    assert "will be undone: book_hotel (call c2), book_flight (call c1)" in message
    assert "CardDeclined" not in message  # error details stay out of the model's context
    assert phases(entries, tool="get_booking") == ["INTENT", "EXECUTED"]
    assert message in tool_outputs(model)  # what the model was told for c4
    assert undo_entries(entries) == [("COMPENSATING", "book_hotel"), ("COMPENSATED", "book_hotel"),
                                     ("COMPENSATING", "book_flight"), ("COMPENSATED", "book_flight")]


@pytest.mark.case("H-02")
async def test_refuse_effects_policy_refuses_effects_and_runs_reads(any_journal):
    """H-02 with FailurePolicy.REFUSE_EFFECTS and nothing attached: after the failed charge,
    book_hotel is refused (REFUSED, body not run), get_booking runs, the saga ends COMPENSATED
    with one undo per earlier effect; the user's tool objects are not changed."""
    trip = Trip()
    before = [list(t.tool_input_guardrails or []) for t in trip.tools()]
    model = scripted(*H02_SCRIPT)
    agent = Agent(name="trip", model=model, tools=trip.tools())
    result = await Sagacity(any_journal, policy=FailurePolicy.REFUSE_EFFECTS).run(agent, "go")
    assert result.status is SagaStatus.COMPENSATED
    assert [f.tool for f in result.failures] == ["charge_card"]
    assert [i.tool for i in result.report.undone] == ["book_hotel", "book_flight"]
    assert result.final_output == "Your trip is booked!"  # no output guardrail attached here
    assert_h02(trip, await any_journal.entries(result.saga_id), model)
    assert [list(t.tool_input_guardrails or []) for t in trip.tools()] == before
    refused = [e for e in await any_journal.entries(result.saga_id) if e.phase is Phase.REFUSED]
    assert refused[0].payload["refused_by"] == "policy"
    assert refused[0].payload["args"] == {"city": "Porto"}  # validated values, from the wrapper


@pytest.mark.case("H-02")
async def test_the_tool_guardrail_refuses_effects_under_the_continue_policy(any_journal):
    """H-02 with saga_tool_guardrail attached (policy CONTINUE), through Runner.run + hooks."""
    trip = Trip()
    for tool in trip.tools():
        tool.tool_input_guardrails = [saga_tool_guardrail()]
    model = scripted(*H02_SCRIPT)
    agent = Agent(name="trip", model=model, tools=trip.tools())
    async with SagaRunHooks(any_journal, agent=agent, policy=FailurePolicy.CONTINUE) as hooks:
        await Runner.run(agent, "go", hooks=hooks)
    assert hooks.status is SagaStatus.COMPENSATED
    entries = await any_journal.entries(hooks.saga_id)
    assert_h02(trip, entries, model)
    refused = [e for e in entries if e.phase is Phase.REFUSED][0]
    assert refused.payload["refused_by"] == "sagacity_saga_effects"
    assert json.loads(refused.payload["raw_args"]) == {"city": "Porto"}


@pytest.mark.case("H-02")
async def test_both_guardrails_refuse_the_effect_and_withhold_the_output(any_journal):
    """Both guardrails: the effect is refused and the false success withheld."""
    trip = Trip()
    model = scripted(*H02_SCRIPT)
    agent = Agent(name="trip", model=model, tools=trip.tools(),
                  output_guardrails=[saga_output_guardrail()])
    result = await Sagacity(any_journal, policy=FailurePolicy.REFUSE_EFFECTS).run(agent, "go")
    assert result.final_output is None and result.output_withheld
    assert result.status is SagaStatus.COMPENSATED
    assert_h02(trip, await any_journal.entries(result.saga_id), model)


@pytest.mark.parametrize("effect", ["book_hotel", "send_email", "undeclared"])
async def test_refuse_effects_covers_every_kind_that_changes_the_world(effect):
    """Compensatable and no-undo tools are refused by the policy; an undeclared tool is not
    ours to refuse (no wrapper), but saga_tool_guardrail refuses it (unknown = changes)."""
    trip = Trip()

    @function_tool
    def undeclared(text: str) -> str:
        trip.log.append("undeclared")
        return "done"

    journal = InMemoryJournal()
    model = scripted([("charge_card", {"amount": 1}, "c1")],
                     [(effect, {"city": "x"} if effect == "book_hotel" else {"text": "x"}, "c2")],
                     "done")
    agent = Agent(name="a", model=model, tools=[*trip.tools(), undeclared])
    result = await Sagacity(journal, policy=FailurePolicy.REFUSE_EFFECTS).run(agent, "go")
    refused = [e.tool for e in await journal.entries(result.saga_id) if e.phase is Phase.REFUSED]
    if effect == "undeclared":
        assert refused == [] and trip.log == ["charge_card", "undeclared"]
        guarded = copy.copy(undeclared)
        guarded.tool_input_guardrails = [saga_tool_guardrail()]
        trip.log.clear()
        model = scripted([("charge_card", {"amount": 1}, "c1")], [("undeclared", {"text": "x"}, "c2")], "done")
        result = await Sagacity(journal, policy=FailurePolicy.CONTINUE).run(
            Agent(name="a", model=model, tools=[trip.charge_card, guarded]), "go")
        refused = [e for e in await journal.entries(result.saga_id) if e.phase is Phase.REFUSED]
        assert [e.payload["reversibility"] for e in refused] == ["undeclared"]
        assert trip.log == ["charge_card"]
    else:
        assert refused == [effect] and trip.log == ["charge_card"]
    assert result.status is SagaStatus.COMPENSATED


async def test_refuse_effects_applies_to_protect_tool_copies():
    """A protect_tool copy is refused in its own guardrail under REFUSE_EFFECTS."""
    trip = Trip()

    @function_tool
    def hand_built(text: str) -> str:
        trip.log.append("hand_built")
        return "ok"

    protected = protect_tool(hand_built, reversibility="compensatable", undo=lambda ctx: None)
    journal = InMemoryJournal()
    model = scripted([("charge_card", {"amount": 1}, "c1")], [("hand_built", {"text": "x"}, "c2")], "done")
    result = await Sagacity(journal, policy=FailurePolicy.REFUSE_EFFECTS).run(
        Agent(name="a", model=model, tools=[trip.charge_card, protected]), "go")
    entries = await journal.entries(result.saga_id)
    assert [(e.phase, e.tool) for e in entries if e.tool == "hand_built"] == [(Phase.REFUSED, "hand_built")]
    assert trip.log == ["charge_card"] and NOTHING_MORE in tool_outputs(model)[-1]
    assert result.status is SagaStatus.COMPENSATED


async def test_refusal_is_kept_when_the_journal_refuses_it():
    """A REFUSED entry the journal cannot take is held and retried; the call is refused anyway."""

    class RefusesRefused(InMemoryJournal):
        def __init__(self) -> None:
            super().__init__()
            self.failed = 0

        async def append(self, request, **kw):
            phase = request.phase  # views hand the backend an AppendRequest
            if phase is Phase.REFUSED and not self.failed:
                self.failed += 1
                raise JournalWriteError("blip")
            return await super().append(request, **kw)

    trip = Trip()
    journal = RefusesRefused()
    model = scripted([("charge_card", {"amount": 1}, "c1")], [("book_hotel", {"city": "x"}, "c2")], "done")
    result = await Sagacity(journal, policy=FailurePolicy.REFUSE_EFFECTS).run(
        Agent(name="a", model=model, tools=trip.tools()), "go")
    assert trip.log == ["charge_card"] and journal.failed == 1
    assert [e.call_id for e in await journal.entries(result.saga_id) if e.phase is Phase.REFUSED] == ["c2"]
    assert result.status is SagaStatus.COMPENSATED


# --- no-ops outside a saga and on a healthy saga ---------------------------------------------------
async def test_guardrails_are_no_ops_outside_a_saga():
    trip = Trip()
    trip.book_hotel.tool_input_guardrails = [saga_tool_guardrail()]
    model = scripted([("charge_card", {"amount": 1}, "c1")], [("book_hotel", {"city": "x"}, "c2")], "done")
    agent = Agent(name="a", model=model, tools=trip.tools(), output_guardrails=[saga_output_guardrail()])
    result = await Runner.run(agent, "go")
    assert result.final_output == "done"
    assert trip.log == ["charge_card", "book_hotel"]  # nothing refused without a saga
    assert not result.output_guardrail_results[0].output.tripwire_triggered


async def test_guardrails_do_not_trip_on_a_healthy_saga(any_journal):
    trip = Trip()
    trip.book_hotel.tool_input_guardrails = [saga_tool_guardrail()]
    model = scripted([("book_hotel", {"city": "x"}, "c1")], [("get_booking", {"ref": "r"}, "c2")], "done")
    agent = Agent(name="a", model=model, tools=trip.tools(), output_guardrails=[saga_output_guardrail()])
    result = await Sagacity(any_journal).run(agent, "go")
    assert result.status is SagaStatus.COMPLETED and result.final_output == "done"
    assert not result.output_withheld and result.withheld_reason is None
    assert trip.log == ["book_hotel", "get_booking"]
    verdict = result.run_result.output_guardrail_results[0].output.output_info
    assert isinstance(verdict, SagaVerdict) and not verdict.blocks_output and verdict.summary() == ""


async def test_output_guardrail_trips_on_a_call_in_doubt():
    """No call failed, but an outcome the journal refused leaves the call in doubt at the time
    the final output is checked: the output is withheld."""

    class LosesOutcome(InMemoryJournal):
        async def append(self, request, **kw):
            phase = request.phase  # views hand the backend an AppendRequest
            if phase is Phase.EXECUTED:
                raise JournalWriteError("connection lost")
            return await super().append(request, **kw)

    trip = Trip()
    model = scripted([("book_hotel", {"city": "x"}, "c1")], "done")
    agent = Agent(name="a", model=model, tools=trip.tools(), output_guardrails=[saga_output_guardrail()])
    result = await Sagacity(LosesOutcome()).run(agent, "go")
    assert result.output_withheld and result.final_output is None
    verdict = result.exception.guardrail_result.output.output_info
    assert verdict.failures == () and [i.call_id for i in verdict.in_doubt] == ["c1"]
    assert "outcome unknown (in doubt): book_hotel (call c1)" in result.withheld_reason
    assert result.status is SagaStatus.IN_DOUBT


async def test_output_guardrail_fails_closed_when_the_journal_cannot_be_read():
    class Unreadable(InMemoryJournal):
        broken_reads = 0

        async def entries(self, saga_id):
            if self.broken_reads:
                self.broken_reads -= 1
                raise OSError("disk gone")
            return await super().entries(saga_id)

    journal = Unreadable()

    @function_tool
    @read_only
    def break_journal() -> str:
        journal.broken_reads = 1  # the next read: the guardrail's
        return "ok"

    model = scripted([("break_journal", {}, "c1")], "done")
    agent = Agent(name="a", model=model, tools=[break_journal], output_guardrails=[saga_output_guardrail()])
    with pytest.raises(OutputGuardrailTripwireTriggered) as caught:
        async with SagaRunHooks(journal, agent=agent) as hooks:
            await Runner.run(agent, "go", hooks=hooks)
    verdict = caught.value.guardrail_result.output.output_info
    assert verdict.journal_error == "OSError: disk gone" and verdict.blocks_output
    assert "the journal could not be read (OSError: disk gone)" in verdict.summary()
    assert hooks.status is SagaStatus.COMPENSATED  # the run raised: never COMPLETED


# --- the composition matrix ----------------------------------------------------------------------
def user_tool_guardrail(behaviour: str, calls: list[str]):
    @tool_input_guardrail(name=f"user_{behaviour}")
    def user(data) -> ToolGuardrailFunctionOutput:
        calls.append(data.context.tool_call_id)
        if behaviour == "reject_content":
            return ToolGuardrailFunctionOutput.reject_content("the application said no")
        if behaviour == "raise_exception":
            return ToolGuardrailFunctionOutput.raise_exception(output_info="the application raised")
        return ToolGuardrailFunctionOutput.allow()

    return user


async def run_facade(sagacity: Sagacity, agent: Agent[Any], streamed: bool):
    if not streamed:
        return await sagacity.run(agent, "go")
    async with sagacity.run_streamed(agent, "go") as stream:
        async for _event in stream.stream_events():
            pass
    return stream.result


BEHAVIOURS = ["allow", "reject_content", "raise_exception"]


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "streamed"])
@pytest.mark.parametrize("ours_first", [True, False], ids=["ours-first", "theirs-first"])
@pytest.mark.parametrize("behaviour", BEHAVIOURS)
async def test_tool_guardrail_matrix_after_a_failure(any_journal, behaviour, ours_first, streamed):
    """Ours and the application's tool input guardrail on the same tool, after the saga failed.

    The SDK runs them in list order and the first that does not allow decides. Whatever
    decides, book_hotel's body never runs and the earlier effect is undone exactly once."""
    trip = Trip()
    calls: list[str] = []
    theirs = user_tool_guardrail(behaviour, calls)
    ours = saga_tool_guardrail()
    trip.book_hotel.tool_input_guardrails = [ours, theirs] if ours_first else [theirs, ours]
    model = scripted([("book_flight", {"city": "x"}, "c1")], [("charge_card", {"amount": 1}, "c2")],
                     [("book_hotel", {"city": "x"}, "c3")], "done")
    agent = Agent(name="a", model=model, tools=trip.tools())
    result = await run_facade(Sagacity(any_journal, policy=FailurePolicy.CONTINUE), agent, streamed)
    entries = await any_journal.entries(result.saga_id)
    refused = [e.call_id for e in entries if e.phase is Phase.REFUSED]
    assert "book_hotel" not in trip.log
    assert trip.log[-1] == "undo book_flight c1" and trip.log.count("undo book_flight c1") == 1
    assert result.status is SagaStatus.COMPENSATED
    if ours_first:
        assert calls == [] and refused == ["c3"] and result.final_output == "done"
    elif behaviour == "allow":
        assert calls == ["c3"] and refused == ["c3"] and result.final_output == "done"
    elif behaviour == "reject_content":
        # The application's rejection is journaled REFUSED by SagaRunHooks (issue 7, item 3).
        assert calls == ["c3"] and refused == ["c3"]
        assert "the application said no" in tool_outputs(model)
    else:
        assert calls == ["c3"] and refused == []
        assert isinstance(result.exception, ToolInputGuardrailTripwireTriggered)
        assert result.final_output is None and not result.output_withheld
    assert not [e for e in entries if e.call_id == "c3" and e.phase is Phase.INTENT]


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "streamed"])
@pytest.mark.parametrize("ours_first", [True, False], ids=["ours-first", "theirs-first"])
@pytest.mark.parametrize("behaviour", BEHAVIOURS)
async def test_tool_guardrail_matrix_on_a_healthy_saga(any_journal, behaviour, ours_first, streamed):
    """Before any failure ours allows: the application's guardrail alone decides, as without us."""
    trip = Trip()
    calls: list[str] = []
    theirs = user_tool_guardrail(behaviour, calls)
    ours = saga_tool_guardrail()
    trip.book_hotel.tool_input_guardrails = [ours, theirs] if ours_first else [theirs, ours]
    model = scripted([("book_flight", {"city": "x"}, "c1")], [("book_hotel", {"city": "x"}, "c2")], "done")
    agent = Agent(name="a", model=model, tools=trip.tools())
    result = await run_facade(Sagacity(any_journal), agent, streamed)
    entries = await any_journal.entries(result.saga_id)
    refused = {e.call_id: e.payload["refused_by"] for e in entries if e.phase is Phase.REFUSED}
    # An application guardrail's rejection is journaled REFUSED (issue 7, item 3); nothing of ours.
    assert calls == ["c2"] and refused == ({"c2": "tool input guardrail"}
                                           if behaviour == "reject_content" else {})
    if behaviour == "allow":
        assert trip.log == ["book_flight", "book_hotel"] and result.status is SagaStatus.COMPLETED
    elif behaviour == "reject_content":
        assert trip.log == ["book_flight"] and result.status is SagaStatus.COMPLETED
        assert "the application said no" in tool_outputs(model)
    else:  # the run raised: the saga undoes what ran, once
        assert trip.log == ["book_flight", "undo book_flight c1"]
        assert result.status is SagaStatus.COMPENSATED
        assert isinstance(result.exception, ToolInputGuardrailTripwireTriggered)


def user_output_guardrail(trips: bool, calls: list[str]):
    @output_guardrail(name="user_output")
    def user(ctx, agent, output) -> GuardrailFunctionOutput:
        calls.append(str(output))
        return GuardrailFunctionOutput(output_info="the application's check", tripwire_triggered=trips)

    return user


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "streamed"])
@pytest.mark.parametrize("ours_first", [True, False], ids=["ours-first", "theirs-first"])
@pytest.mark.parametrize("theirs_trips", [False, True], ids=["theirs-allows", "theirs-trips"])
@pytest.mark.parametrize("saga_failed", [True, False], ids=["saga-failed", "saga-ok"])
async def test_output_guardrail_matrix(any_journal, saga_failed, theirs_trips, ours_first, streamed):
    """Ours and the application's output guardrail on the same agent, in either order, streamed
    and not. The SDK starts both (list order) and the first to trip raises; the saga is
    compensated once whenever the run raised, and the result names the guardrail that withheld
    the output."""
    trip = Trip()
    calls: list[str] = []
    theirs = user_output_guardrail(theirs_trips, calls)
    ours = saga_output_guardrail()
    failing = [("charge_card", {"amount": 1}, "c2")] if saga_failed else [("get_booking", {"ref": "r"}, "c2")]
    model = scripted([("book_flight", {"city": "x"}, "c1")], failing, "All booked!")
    agent = Agent(name="a", model=model, tools=trip.tools(),
                  output_guardrails=[ours, theirs] if ours_first else [theirs, ours])
    result = await run_facade(Sagacity(any_journal, policy=FailurePolicy.CONTINUE), agent, streamed)
    entries = await any_journal.entries(result.saga_id)
    if not saga_failed and not theirs_trips:
        assert result.status is SagaStatus.COMPLETED and result.final_output == "All booked!"
        assert not result.output_withheld and calls == ["All booked!"]
        return
    assert result.final_output is None and result.output_withheld
    assert isinstance(result.exception, OutputGuardrailTripwireTriggered)
    assert result.status is SagaStatus.COMPENSATED
    assert trip.log.count("undo book_flight c1") == 1
    assert undo_entries(entries) == [("COMPENSATING", "book_flight"), ("COMPENSATED", "book_flight")]
    # Both start together; the first to *complete* with a tripwire is reported (ours awaits a
    # journal read, so with SQLite the application's synchronous check may finish first).
    if saga_failed and not theirs_trips:
        assert result.withheld_reason.startswith("withheld by 'sagacity_saga_output': charge_card")
    elif theirs_trips and not saga_failed:  # the run raised, so the saga was compensated
        assert result.withheld_reason == ("output guardrail 'user_output' tripped: the "
                                          "application's check; undone: book_flight (call c1)")
    else:
        assert result.withheld_reason.startswith(("withheld by 'sagacity_saga_output'",
                                                  "output guardrail 'user_output' tripped"))
    if saga_failed:  # whoever tripped, the reason says what the saga did
        assert "charge_card (call c2) failed: CardDeclined" in result.withheld_reason
        assert result.withheld_reason.endswith("undone: book_flight (call c1)")


# --- the rest of the graph -------------------------------------------------------------------------
async def test_refusal_reaches_a_nested_agents_tools():
    """Inside an as_tool agent (joined to the saga), a tool that changes the world is refused by
    REFUSE_EFFECTS, and saga_tool_guardrail on the inner tool finds its declaration on the inner
    agent (not bound to the saga before the call)."""
    from sagacity_agents import nested_agent_tool

    trip = Trip()
    guarded_send = copy.copy(trip.send_email)
    guarded_send.tool_input_guardrails = [saga_tool_guardrail()]
    inner_model = scripted([("book_hotel", {"city": "x"}, "i1"), ("get_booking", {"ref": "r"}, "i2")],
                           [("send_email", {"text": "hi"}, "i3")], "inner done")
    inner = Agent(name="inner", model=inner_model, tools=[trip.book_hotel, trip.get_booking, guarded_send])
    inner_tool = nested_agent_tool(inner.as_tool(tool_name="inner", tool_description="inner agent"))
    outer_model = scripted([("book_flight", {"city": "x"}, "o1")], [("charge_card", {"amount": 1}, "o2")],
                           [("inner", {"input": "go"}, "o3")], "outer done")
    journal = InMemoryJournal()
    outer = Agent(name="outer", model=outer_model, tools=[trip.book_flight, trip.charge_card, inner_tool])
    result = await Sagacity(journal, policy=FailurePolicy.REFUSE_EFFECTS).run(outer, "go")
    entries = await journal.entries(result.saga_id)
    refused = {e.call_id: e.payload["refused_by"] for e in entries if e.phase is Phase.REFUSED}
    assert refused == {"i1": "policy", "i3": "sagacity_saga_effects"}
    assert trip.log == ["book_flight", "charge_card", "get_booking", "undo book_flight o1"]
    assert result.status is SagaStatus.COMPENSATED


async def test_refuse_effects_refuses_an_irreversible_call_without_asking_anyone():
    """An irreversible call after the failure is refused by saga_tool_guardrail run before the
    approval (pre_approval_tool_input_guardrails): no human is asked, nothing runs."""
    from agents import RunConfig
    from agents.run_config import ToolExecutionConfig

    from sagacity_agents import irreversible

    ran: list[str] = []

    @function_tool(needs_approval=True)
    @irreversible
    def wire(amount: int) -> str:
        ran.append("wire")
        return "sent"

    wire.tool_input_guardrails = [saga_tool_guardrail()]
    trip = Trip()
    journal = InMemoryJournal()
    model = scripted([("charge_card", {"amount": 1}, "c1")], [("wire", {"amount": 5}, "c2")], "done")
    config = RunConfig(tool_execution=ToolExecutionConfig(pre_approval_tool_input_guardrails=True))
    result = await Sagacity(journal, policy=FailurePolicy.CONTINUE).run(
        Agent(name="a", model=model, tools=[trip.charge_card, wire]), "go", run_config=config)
    entries = await journal.entries(result.saga_id)
    assert [(e.phase, e.call_id) for e in entries if e.tool == "wire"] == [(Phase.REFUSED, "c2")]
    assert ran == [] and result.approvals == () and result.status is SagaStatus.COMPENSATED


async def test_output_guardrail_trips_under_a_saga_already_compensated(any_journal):
    """A saga closed COMPENSATED still contradicts a success (the guardrail judges closed sagas;
    the tool wrappers and tool guardrail treat them as no saga)."""
    from sagacity_agents.core.saga import current_saga

    trip = Trip()
    async with SagaRunHooks(any_journal, policy=FailurePolicy.CONTINUE) as hooks:
        model = scripted([("charge_card", {"amount": 1}, "c1")], "x")
        await Runner.run(Agent(name="a", model=model, tools=trip.tools()), "go", hooks=hooks)
    assert hooks.status is SagaStatus.COMPENSATED
    token = current_saga.set(hooks.saga)
    try:
        agent = Agent(name="b", model=scripted("all good"), output_guardrails=[saga_output_guardrail()])
        with pytest.raises(OutputGuardrailTripwireTriggered) as caught:
            await Runner.run(agent, "go")
    finally:
        current_saga.reset(token)
    verdict = caught.value.guardrail_result.output.output_info
    assert verdict.status == "COMPENSATED" and verdict.failed


def test_verdict_texts_for_the_model_and_for_people():
    """The model's message names calls, never error text; summary() gives people the errors."""
    from sagacity_agents.saga import CompensationItem, FailureRecord

    verdict = SagaVerdict(
        saga_id="s1", status="OPEN",
        failures=(FailureRecord(7, "charge_card", "c3", "CardDeclined: card 4000 0000 0000 0002"),),
        to_undo=(CompensationItem(6, "book_hotel", "c2"), CompensationItem(4, "book_flight", "c1")),
        kept=(CompensationItem(5, "send_email", "c9", "no_undo"),),
    )
    message = verdict.model_message()
    assert message == (
        "Not run: this task failed earlier (charge_card (call c3)), so nothing more will be changed. "
        "The changes already made will be undone: book_hotel (call c2), book_flight (call c1). "
        "Cannot be undone: send_email (call c9). Do not retry; tell the user what happened."
    )
    assert "4000" not in message
    assert verdict.summary() == (
        "charge_card (call c3) failed: CardDeclined: card 4000 0000 0000 0002; to be undone when "
        "the run ends: book_hotel (call c2), book_flight (call c1); cannot be undone: send_email (call c9)"
    )
    assert verdict.to_dict()["to_undo"][0] == {"seq": 6, "tool": "book_hotel", "call_id": "c2", "detail": ""}


async def test_an_unprintable_output_info_of_the_application_does_not_break_the_result():
    class Opaque:
        def __str__(self) -> str:
            raise RuntimeError("no")

    @output_guardrail(name="opaque")
    def opaque(ctx, agent, output) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info=Opaque(), tripwire_triggered=True)

    agent = Agent(name="a", model=scripted("hi"), output_guardrails=[opaque, saga_output_guardrail()])
    result = await Sagacity(InMemoryJournal()).run(agent, "go")
    assert result.withheld_reason == "output guardrail 'opaque' tripped: <Opaque with no printable form>"
    assert result.status is SagaStatus.COMPENSATED  # a run that raised is never COMPLETED


@pytest.mark.parametrize("through", ["facade", "hooks"])
async def test_an_irreversible_call_after_a_failure_is_not_put_to_a_human(through):
    """REFUSE_EFFECTS without pre-approval guardrails: the SDK pauses the irreversible call, and
    the failed saga is compensated rather than left waiting for an approval."""
    from sagacity_agents import irreversible

    ran: list[str] = []

    @function_tool(needs_approval=True)
    @irreversible
    def wire(amount: int) -> str:
        ran.append("wire")
        return "sent"

    trip = Trip()
    journal = InMemoryJournal()
    model = scripted([("book_flight", {"city": "x"}, "c0")], [("charge_card", {"amount": 1}, "c1")],
                     [("wire", {"amount": 5}, "c2")], "done")
    agent = Agent(name="a", model=model, tools=[trip.book_flight, trip.charge_card, wire])
    if through == "facade":
        result = await Sagacity(journal, policy=FailurePolicy.REFUSE_EFFECTS).run(agent, "go")
        status, saga_id = result.status, result.saga_id
        assert result.approvals == ()
    else:
        async with SagaRunHooks(journal, agent=agent, policy=FailurePolicy.REFUSE_EFFECTS) as hooks:
            await Runner.run(agent, "go", hooks=hooks)
        status, saga_id = hooks.status, hooks.saga_id
    assert status is SagaStatus.COMPENSATED and ran == []
    assert trip.log[-1] == "undo book_flight c0"
    assert not [e for e in await journal.entries(saga_id) if e.tool == "wire"]


async def test_tool_guardrail_keys_namespaced_tools_as_the_wrapper_does(any_journal):
    """A tool_namespace() tool is journaled as ``namespace.name`` by the wrapper; the guardrail's
    REFUSED entry names it the same way, and a namespaced read-only tool of the same bare name as
    a tool that changes the world is still allowed."""
    from agents import tool_namespace

    trip = Trip()
    ran: list[str] = []

    @function_tool
    @read_only
    def book_hotel(city: str) -> str:  # same bare name as Trip's compensatable book_hotel
        ran.append("crm.book_hotel")
        return "looked up"

    (crm_hotel,) = tool_namespace(name="crm", description="CRM", tools=[book_hotel])
    guarded = copy.copy(trip.book_hotel)
    guarded.tool_input_guardrails = [saga_tool_guardrail()]
    crm_hotel.tool_input_guardrails = [saga_tool_guardrail()]
    model = scripted([("charge_card", {"amount": 1}, "c1")], [("book_hotel", {"city": "x"}, "c2")])
    model.enqueue([function_call("book_hotel", {"city": "y"}, call_id="c3", namespace="crm")])
    model.enqueue([assistant_message("done")])
    agent = Agent(name="a", model=model, tools=[trip.charge_card, guarded, crm_hotel])
    result = await Sagacity(any_journal, policy=FailurePolicy.CONTINUE).run(agent, "go")
    entries = await any_journal.entries(result.saga_id)
    assert [(e.phase, e.tool, e.call_id) for e in entries if e.call_id in ("c2", "c3")] == [
        (Phase.REFUSED, "book_hotel", "c2"), (Phase.INTENT, "crm.book_hotel", "c3"),
        (Phase.EXECUTED, "crm.book_hotel", "c3")]
    assert ran == ["crm.book_hotel"] and "book_hotel" not in trip.log
