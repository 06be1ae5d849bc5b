"""Contract tests: the SDK guardrail behaviour sdk/guardrails.py relies on (openai-agents 0.24).

An SDK upgrade that changes one of these facts fails here first, not in a user's run.
"""

from __future__ import annotations

import asyncio
import contextvars

import pytest
from agents import (
    Agent,
    AgentsException,
    GuardrailFunctionOutput,
    OutputGuardrailTripwireTriggered,
    RunConfig,
    RunHooks,
    Runner,
    ToolInputGuardrailTripwireTriggered,
    function_tool,
    output_guardrail,
)
from agents.tool_guardrails import ToolGuardrailFunctionOutput, tool_input_guardrail

from .helpers import scripted, tool_outputs

SCOPE: contextvars.ContextVar[str | None] = contextvars.ContextVar("contract_scope", default=None)


def recording_output_guardrail(name: str, log: list[str], *, trips: bool, slow: bool = False):
    @output_guardrail(name=name)
    async def check(ctx, agent, output) -> GuardrailFunctionOutput:
        log.append(f"{name} start {SCOPE.get()}")
        if slow:
            try:
                await asyncio.sleep(0.5)
            except asyncio.CancelledError:
                log.append(f"{name} cancelled")
                raise
        log.append(f"{name} end")
        return GuardrailFunctionOutput(output_info=name, tripwire_triggered=trips)

    return check


async def test_output_guardrails_start_in_order_and_the_first_to_trip_cancels_the_rest():
    """Agent guardrails, then RunConfig guardrails, start in list order as concurrent tasks;
    the first to complete with a tripwire raises OutputGuardrailTripwireTriggered (an
    AgentsException) carrying its result and the withheld output, and cancels the others."""
    log: list[str] = []
    slow = recording_output_guardrail("app_slow", log, trips=False, slow=True)
    ours = recording_output_guardrail("ours", log, trips=True)
    config_one = recording_output_guardrail("config", log, trips=False)
    agent = Agent(name="a", model=scripted("Your trip is booked!"), output_guardrails=[slow, ours])
    SCOPE.set("saga-1")
    with pytest.raises(OutputGuardrailTripwireTriggered) as caught:
        await Runner.run(agent, "go", run_config=RunConfig(output_guardrails=[config_one]))
    assert isinstance(caught.value, AgentsException)
    assert caught.value.guardrail_result.guardrail is ours
    assert caught.value.guardrail_result.output.output_info == "ours"
    assert caught.value.guardrail_result.agent_output == "Your trip is booked!"
    # The context variable set before the run reaches the guardrail (our saga scope).
    assert log[:3] == ["app_slow start saga-1", "ours start saga-1", "ours end"]
    assert "app_slow cancelled" in log and "app_slow end" not in log


async def test_run_hooks_see_the_final_output_before_output_guardrails_run():
    """on_agent_end fires with the final output *before* the output guardrails: an application
    hook that publishes output from on_agent_end bypasses any output guardrail (documented)."""
    log: list[str] = []

    class Hooks(RunHooks):
        async def on_agent_end(self, context, agent, output):
            log.append(f"agent_end {output}")

    agent = Agent(name="a", model=scripted("hi"),
                  output_guardrails=[recording_output_guardrail("g", log, trips=True)])
    with pytest.raises(OutputGuardrailTripwireTriggered):
        await Runner.run(agent, "go", hooks=Hooks())
    assert log[0] == "agent_end hi" and log[1].startswith("g start")


async def test_streamed_text_reaches_the_consumer_before_the_output_guardrail_trips():
    """In a streamed run the model's text deltas and the message item are streamed before the
    output guardrails run; the tripwire is then raised out of stream_events() and the result
    has no final output. So a streaming UI must not show text as final until the stream ended
    without an exception (README, "Guardrails")."""
    log: list[str] = []
    agent = Agent(name="a", model=scripted("Your trip is booked!"),
                  output_guardrails=[recording_output_guardrail("g", log, trips=True)])
    run = Runner.run_streamed(agent, "go")
    seen: list[str] = []
    with pytest.raises(OutputGuardrailTripwireTriggered):
        async for event in run.stream_events():
            data = getattr(event, "data", None)
            if getattr(data, "type", None) == "response.output_text.delta":
                seen.append(f"delta {data.delta}")
            if getattr(event, "name", None) == "message_output_created":
                seen.append("message item")
    assert seen == ["delta Your trip is booked!", "message item"]
    assert run.final_output is None
    assert isinstance(run.run_loop_exception, OutputGuardrailTripwireTriggered)


def recording_tool_guardrail(name: str, log: list[str], behaviour: str):
    @tool_input_guardrail(name=name)
    def check(data) -> ToolGuardrailFunctionOutput:
        log.append(f"{name} {data.context.tool_call_id} {SCOPE.get()}")
        if behaviour == "reject_content":
            return ToolGuardrailFunctionOutput.reject_content(f"{name} says no")
        if behaviour == "raise_exception":
            return ToolGuardrailFunctionOutput.raise_exception(output_info=name)
        return ToolGuardrailFunctionOutput.allow()

    return check


@pytest.mark.parametrize("behaviour", ["allow", "reject_content", "raise_exception"])
async def test_tool_input_guardrails_run_in_list_order_and_the_first_non_allow_decides(behaviour):
    """Tool input guardrails run one after the other in list order, before the body; the first
    that rejects sends its message to the model and skips the body and the later guardrails;
    raise_exception makes the run raise ToolInputGuardrailTripwireTriggered."""
    log: list[str] = []

    @function_tool
    def tool() -> str:
        log.append("body")
        return "ran"

    tool.tool_input_guardrails = [recording_tool_guardrail("first", log, behaviour),
                                  recording_tool_guardrail("second", log, "reject_content")]
    model = scripted([("tool", {}, "c1")], "done")
    SCOPE.set("saga-2")
    if behaviour == "raise_exception":
        with pytest.raises(ToolInputGuardrailTripwireTriggered) as caught:
            await Runner.run(Agent(name="a", model=model, tools=[tool]), "go")
        assert caught.value.output.output_info == "first"
        assert log == ["first c1 saga-2"]
        return
    await Runner.run(Agent(name="a", model=model, tools=[tool]), "go")
    if behaviour == "allow":
        assert log == ["first c1 saga-2", "second c1 saga-2"]
        assert tool_outputs(model) == ["second says no"]
    else:
        assert log == ["first c1 saga-2"]
        assert tool_outputs(model) == ["first says no"]
