"""Contract tests: the SDK's guardrail, hook and nested-resume order the fallback relies on
(sagacity_agents/sdk/fallback.py; ../shared/sdk-notes.md, "Approvals and RunState").

Plain SDK only, no saga: if an upgrade changes one of these facts, the fallback's "exactly one
outcome" guarantee may silently change, and the test naming the fact fails.
"""

from __future__ import annotations

import contextvars
from typing import Any

import pytest
from agents import (
    Agent,
    RunConfig,
    RunHooks,
    Runner,
    ToolExecutionConfig,
    ToolGuardrailFunctionOutput,
    ToolOutputGuardrailTripwireTriggered,
    function_tool,
    tool_input_guardrail,
    tool_output_guardrail,
)
from agents.run_state import RunState

from .helpers import agent, scripted, tool_outputs


def recorder(log: list[Any], name: str, verdict: str = "allow"):
    @tool_input_guardrail(name=name)
    def guard(data) -> ToolGuardrailFunctionOutput:
        ctx = data.context
        log.append((name, ctx.tool_call_id, ctx.is_tool_approved(ctx.tool_name, ctx.tool_call_id)))
        if verdict == "reject":
            return ToolGuardrailFunctionOutput.reject_content(f"{name} says no")
        return ToolGuardrailFunctionOutput.allow()

    return guard


async def test_input_guardrails_run_in_list_order_and_stop_at_the_first_rejection():
    """Fact: tool input guardrails run in list order; the first reject_content ends the list (a
    later guardrail never runs), the body and on_tool_start never run, and the model gets the
    message. So a guardrail of ours placed last writes nothing for a call the app rejects."""
    log: list[Any] = []
    ran: list[int] = []
    started: list[str] = []

    class Hooks(RunHooks[Any]):
        async def on_tool_start(self, context, agent, tool) -> None:
            started.append(tool.name)

    @function_tool(tool_input_guardrails=[recorder(log, "app", "reject"), recorder(log, "ours")])
    def refund(amount: int) -> str:
        ran.append(amount)
        return "ok"

    model = scripted([("refund", {"amount": 500}, "r1")], "done")
    await Runner.run(agent(model, refund), "go", hooks=Hooks())
    assert [name for name, _, _ in log] == ["app"]
    assert ran == [] and started == []
    assert tool_outputs(model) == ["app says no"]


async def test_output_guardrails_first_sees_real_result_later_one_replaces_it():
    """Fact: output guardrails run in list order after the body, each seeing the real result;
    a reject_content replaces what the model and on_tool_end get."""
    seen: list[Any] = []
    ended: list[Any] = []

    @tool_output_guardrail
    def first(data) -> ToolGuardrailFunctionOutput:
        seen.append(data.output)
        return ToolGuardrailFunctionOutput.allow()

    @tool_output_guardrail
    def redact(data) -> ToolGuardrailFunctionOutput:
        return ToolGuardrailFunctionOutput.reject_content("[redacted]")

    class Hooks(RunHooks[Any]):
        async def on_tool_end(self, context, agent, tool, result) -> None:
            ended.append(result)

    @function_tool(tool_output_guardrails=[first, redact])
    def secret() -> str:
        return "the real value"

    model = scripted([("secret", {}, "s1")], "done")
    await Runner.run(agent(model, secret), "go", hooks=Hooks())
    assert seen == ["the real value"]
    assert ended == ["[redacted]"] and "[redacted]" in str(model.calls[-1].input)


async def test_output_guardrail_raising_after_the_body_after_earlier_guardrails():
    """Fact: an output guardrail's raise_exception raises ToolOutputGuardrailTripwireTriggered
    out of the run after the body ran and after earlier output guardrails saw the result."""
    seen: list[Any] = []

    @tool_output_guardrail
    def first(data) -> ToolGuardrailFunctionOutput:
        seen.append(data.output)
        return ToolGuardrailFunctionOutput.allow()

    @tool_output_guardrail
    def explode(data) -> ToolGuardrailFunctionOutput:
        return ToolGuardrailFunctionOutput.raise_exception(output_info="no")

    @function_tool(tool_output_guardrails=[first, explode])
    def book() -> str:
        return "booked"

    with pytest.raises(ToolOutputGuardrailTripwireTriggered):
        await Runner.run(agent(scripted([("book", {}, "b1")], "x"), book), "go")
    assert seen == ["booked"]


@pytest.mark.parametrize("pre_approval", [False, True])
async def test_pre_approval_guardrails_run_before_the_pause_and_again_after(pre_approval):
    """Fact: without the option, input guardrails run once, after the approval (the call is then
    approved in the guardrail's ToolContext); with pre_approval_tool_input_guardrails they also
    run before the interruption, where ``is_tool_approved`` is still None."""
    log: list[Any] = []
    ran: list[int] = []

    @function_tool(needs_approval=True, tool_input_guardrails=[recorder(log, "g")])
    def wire(amount: int) -> str:
        ran.append(amount)
        return "sent"

    config = RunConfig(tool_execution=ToolExecutionConfig(pre_approval_tool_input_guardrails=pre_approval))
    ag = agent(scripted([("wire", {"amount": 5}, "w1")], "done"), wire)
    first = await Runner.run(ag, "go", run_config=config)
    assert first.interruptions and ran == []
    assert log == ([("g", "w1", None)] if pre_approval else [])
    state = first.to_state()
    state.approve(state.get_interruptions()[0])
    await Runner.run(ag, state, run_config=config)
    assert log[-1] == ("g", "w1", True) and ran == [5]


async def test_nested_as_tool_resume_skips_input_guardrails_and_hooks_runs_output_guardrails():
    """Fact: an as_tool call whose nested run paused is, on resume (from a serialized state with
    fresh agents), invoked again *without* its input guardrails and on_tool_start; its output
    guardrails and on_tool_end run once it completes. The restored interruption's ``agent`` is
    the inner agent. Hence fallback.rebuild_pending_calls."""
    log: list[str] = []

    class Hooks(RunHooks[Any]):
        async def on_tool_start(self, context, agent, tool) -> None:
            log.append(f"start {tool.name}")

        async def on_tool_end(self, context, agent, tool, result) -> None:
            log.append(f"end {tool.name}")

    @tool_input_guardrail
    def inp(data) -> ToolGuardrailFunctionOutput:
        log.append("input guardrail")
        return ToolGuardrailFunctionOutput.allow()

    @tool_output_guardrail
    def out(data) -> ToolGuardrailFunctionOutput:
        log.append(f"output guardrail {data.output}")
        return ToolGuardrailFunctionOutput.allow()

    def build(first: bool) -> Agent[Any]:
        @function_tool(needs_approval=True)
        def wire(amount: int) -> str:
            log.append("wire body")
            return "sent"

        inner = Agent(name="inner", model=scripted(*([[("wire", {"amount": 1}, "w1")]] if first else []),
                                                   "inner done"), tools=[wire])
        helper = inner.as_tool(tool_name="helper", tool_description="h")
        helper.tool_input_guardrails = [inp]
        helper.tool_output_guardrails = [out]
        return agent(scripted(*([[("helper", {"input": "x"}, "h1")]] if first else []), "outer done"),
                     helper, name="outer")

    first = await Runner.run(build(True), "go", hooks=Hooks())
    assert log == ["input guardrail", "start helper"]
    fresh = build(False)
    state = await RunState.from_json(fresh, first.to_state().to_json())
    (item,) = state.get_interruptions()
    assert item.agent.name == "inner" and item.call_id == "w1"
    state.approve(item)
    log.clear()
    result = await Runner.run(fresh, state, hooks=Hooks())
    assert result.final_output == "outer done"
    assert log == ["wire body", "output guardrail inner done", "end helper"]


async def test_a_call_rejected_by_a_guardrail_reaches_the_next_on_llm_start_as_its_output():
    """Fact: the rejection message of an input guardrail is the call's function_call_output in
    the input of the next model call, which on_llm_start receives (no other public seam shows a
    rejected call: no on_tool_start, no on_tool_end)."""
    seen: list[Any] = []

    class Hooks(RunHooks[Any]):
        async def on_llm_start(self, context, agent, system_prompt, input_items) -> None:
            seen.extend(i for i in input_items if isinstance(i, dict)
                        and i.get("type") == "function_call_output")

        async def on_tool_end(self, context, agent, tool, result) -> None:
            raise AssertionError("a rejected call has no on_tool_end")

    @function_tool(tool_input_guardrails=[recorder([], "g", "reject")])
    def refund(amount: int) -> str:
        raise AssertionError("must not run")

    await Runner.run(agent(scripted([("refund", {"amount": 1}, "r1")], "done"), refund), "go",
                     hooks=Hooks())
    assert [(i["call_id"], i["output"]) for i in seen] == [("r1", "g says no")]


async def test_a_contextvar_set_in_an_input_guardrail_reaches_the_nested_as_tool_run():
    """Fact: a ContextVar set inside a tool input guardrail is visible in that call's nested
    ``as_tool`` run (how nested calls learn their parent call)."""
    var: contextvars.ContextVar[str | None] = contextvars.ContextVar("parent_probe", default=None)
    seen: list[Any] = []

    @tool_input_guardrail
    def mark(data) -> ToolGuardrailFunctionOutput:
        var.set(data.context.tool_call_id)
        return ToolGuardrailFunctionOutput.allow()

    @function_tool
    def probe() -> str:
        seen.append(var.get())
        return "ok"

    inner = Agent(name="inner", model=scripted([("probe", {}, "p1")], "ok"), tools=[probe])
    helper = inner.as_tool(tool_name="helper", tool_description="h")
    helper.tool_input_guardrails = [mark]
    await Runner.run(agent(scripted([("helper", {"input": "x"}, "h1")], "done"), helper), "go")
    assert seen == ["h1"] and var.get() is None


async def test_default_timeout_message_is_what_the_model_and_output_guardrails_get():
    """Fact: on a tool timeout (default behaviour, no timeout_error_function) the output
    guardrails and the model get exactly ``default_tool_timeout_error_message`` (internal to the
    SDK, read through sagacity_agents/sdk/_sdk_internals.py): how protect_tool tells a
    cancelled body from a result."""
    import asyncio

    from sagacity_agents.sdk._sdk_internals import default_tool_timeout_error_message

    seen: list[Any] = []

    @tool_output_guardrail
    def first(data) -> ToolGuardrailFunctionOutput:
        seen.append(data.output)
        return ToolGuardrailFunctionOutput.allow()

    @function_tool(timeout=0.05, tool_output_guardrails=[first])
    async def slow() -> str:
        await asyncio.sleep(60)
        return "never"

    model = scripted([("slow", {}, "s1")], "done")
    await Runner.run(agent(model, slow), "go")
    expected = default_tool_timeout_error_message(tool_name="slow", timeout_seconds=0.05)
    assert seen == [expected] and tool_outputs(model) == [expected]
