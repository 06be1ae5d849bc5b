"""The saga layer's own behaviour: compensation, journal faults, classification, declarations,
scope, runs (issue: saga core, "What it must show")."""

from __future__ import annotations

import asyncio
import threading

import pytest
from agents import Runner, function_tool

from sagacity_agents import (
    CompensationContext,
    FailurePolicy,
    SagaRunHooks,
    Sagacity,
    SagaStatus,
    Verdict,
    compensable,
    irreversible,
    no_undo,
    read_only,
    record_undo_data,
)
from sagacity_agents.backends import InMemoryJournal, Phase
from sagacity_agents.errors import (
    ConfigurationError,
    DeclarationError,
    HooksNotEnteredError,
    JournalWriteError,
    SagaStateError,
)

from .helpers import agent, phases, scripted, tool_outputs


class BrokenIntentJournal(InMemoryJournal):
    """Refuses INTENT appends (storage down before the tool runs)."""

    async def append(self, request, **kw):
        phase = request.phase  # views hand the backend an AppendRequest
        if phase is Phase.INTENT:
            raise JournalWriteError("disk full")
        return await super().append(request, **kw)


class BrokenOutcomeJournal(InMemoryJournal):
    """Refuses the first EXECUTED append (storage blip after the tool ran)."""

    def __init__(self):
        super().__init__()
        self.refused = 0

    async def append(self, request, **kw):
        phase = request.phase  # views hand the backend an AppendRequest
        if phase is Phase.EXECUTED and self.refused == 0:
            self.refused += 1
            raise JournalWriteError("connection lost")
        return await super().append(request, **kw)


def counter_tools(log: list[str]):
    def undo_a(ctx: CompensationContext) -> None:
        log.append(f"undo-{ctx.tool}")

    @function_tool
    @compensable(undo=undo_a)
    async def a(n: int) -> int:
        return n

    @function_tool
    @compensable(undo=undo_a)
    def b(n: int) -> int:
        return n

    @function_tool
    @compensable(undo=undo_a)
    async def c(n: int) -> int:
        await asyncio.sleep(0.01)
        return n

    @function_tool
    @no_undo
    async def fail() -> str:
        raise RuntimeError("nope")

    return a, b, c, fail


async def test_compensation_order_with_parallel_calls():
    """Parallel calls are undone in reverse sequence (journal order), not call order."""
    log: list[str] = []
    journal = InMemoryJournal()
    a, b, c, fail = counter_tools(log)
    model = scripted([("a", {"n": 1}, "1"), ("b", {"n": 2}, "2"), ("c", {"n": 3}, "3")],
                     [("fail", {}, "4")], "x")
    result = await Sagacity(journal).run(agent(model, a, b, c, fail), "go")
    entries = await journal.entries(result.saga_id)
    executed = [e for e in entries if e.phase is Phase.EXECUTED]
    expected = [f"undo-{e.tool}" for e in sorted(executed, key=lambda e: -e.seq)]
    assert log == expected and len(log) == 3
    assert [i.seq for i in result.report.undone] == sorted((e.seq for e in executed), reverse=True)


async def test_failing_undo_then_successful_ones():
    """A failing undo is journaled, the walk goes on, the saga ends COMPENSATION_FAILED and the
    report says exactly what is still dirty."""
    journal = InMemoryJournal()
    log: list[str] = []

    @function_tool
    @compensable(undo=lambda ctx: log.append("undo-first"))
    async def first() -> str:
        return "1"

    def broken(ctx):
        raise ConnectionError("refund API down")

    @function_tool
    @compensable(undo=broken)
    async def second() -> str:
        return "2"

    @function_tool
    @compensable(undo=lambda ctx: log.append("undo-third"))
    async def third() -> str:
        return "3"

    @function_tool
    @no_undo
    async def email() -> str:
        return "sent"

    @function_tool
    @no_undo
    async def fail() -> str:
        raise RuntimeError("x")

    model = scripted([("first", {}, "1")], [("second", {}, "2")], [("email", {}, "e")],
                     [("third", {}, "3")], [("fail", {}, "4")], "x")
    result = await Sagacity(journal).run(agent(model, first, second, email, third, fail), "go")
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert log == ["undo-third", "undo-first"]
    report = result.report
    assert [i.tool for i in report.undone] == ["third", "first"]
    assert [(i.tool, i.detail) for i in report.failed] == [("second", "ConnectionError: refund API down")]
    assert [i.tool for i in report.no_undo] == ["email"]
    assert [i.tool for i in report.still_dirty] == ["second", "email"]
    entries = await journal.entries(result.saga_id)
    assert [e.phase for e in entries if e.tool == "second"][-1] is Phase.COMPENSATION_FAILED
    # Not closed: a saga whose undo failed stays open for recovery (closed is terminal).
    assert entries[-1].phase is Phase.RUN_ENDED
    assert entries[-1].payload["status"] == "COMPENSATION_FAILED"
    assert not any(e.phase is Phase.SAGA_CLOSED for e in entries)


async def test_intent_write_failure_means_the_body_does_not_run():
    ran: list[int] = []

    @function_tool
    @no_undo
    async def pay(n: int) -> str:
        ran.append(n)
        return "paid"

    model = scripted([("pay", {"n": 1}, "p1")], "x")
    result = await Sagacity(BrokenIntentJournal()).run(agent(model, pay), "go")
    assert ran == []
    assert result.status is not SagaStatus.COMPLETED
    assert "INTENT" in result.failures[0].error


async def test_outcome_write_failure_keeps_the_outcome_and_retries():
    journal = BrokenOutcomeJournal()

    @function_tool
    @no_undo
    async def pay(n: int) -> str:
        return "paid-42"

    model = scripted([("pay", {"n": 1}, "p1")], "x")
    result = await Sagacity(journal).run(agent(model, pay), "go")
    assert tool_outputs(model) == ["paid-42"]  # the model got the real outcome
    entries = await journal.entries(result.saga_id)
    assert phases(entries) == ["INTENT", "EXECUTED"]  # retried at settle with the same key
    assert result.status is SagaStatus.COMPLETED


class Opaque:
    pass


async def test_result_that_cannot_be_encoded_is_kept_and_marked():
    journal = InMemoryJournal()

    @function_tool
    @read_only
    async def weird() -> str:
        return Opaque()  # type: ignore[return-value]

    model = scripted([("weird", {}, "w1")], "x")
    result = await Sagacity(journal).run(agent(model, weird), "go")
    executed = next(e for e in await journal.entries(result.saga_id) if e.phase is Phase.EXECUTED)
    marker = executed.payload["result"]
    assert "$encoding_error" in marker and "Opaque" in marker["$encoding_error"]
    assert "0x" not in str(marker)  # never a repr with a memory address
    assert result.status is SagaStatus.COMPLETED


async def test_refused_versus_failed_returned_values():
    journal = InMemoryJournal()

    def classify(value: str):
        if value.startswith("Error:"):
            return Verdict.REFUSED
        if value.startswith("FATAL"):
            return Verdict.FAILED
        return None

    undone: list[str] = []

    @function_tool
    @compensable(undo=lambda ctx: undone.append(ctx.result), classify=classify)
    async def book(x: str) -> str:
        return x

    model = scripted([("book", {"x": "Error: no seats"}, "1")], [("book", {"x": "ok-1"}, "2")], "x")
    result = await Sagacity(journal).run(agent(model, book), "go")
    assert result.status is SagaStatus.COMPLETED
    assert phases(await journal.entries(result.saga_id)) == ["INTENT", "REFUSED", "INTENT", "EXECUTED"]

    model = scripted([("book", {"x": "ok-2"}, "1")], [("book", {"x": "FATAL db"}, "2")], "x")
    result = await Sagacity(journal).run(agent(model, book), "go")
    assert phases(await journal.entries(result.saga_id)) == ["INTENT", "EXECUTED", "INTENT", "FAILED"]
    assert result.status is SagaStatus.COMPENSATED
    assert undone == ["ok-2"]  # the refused/failed values are not undone


async def test_undo_data_reaches_the_undo():
    journal = InMemoryJournal()
    seen: list[CompensationContext] = []

    @function_tool
    @compensable(undo=seen.append)
    def set_price(item: str, price: int) -> str:
        record_undo_data({"previous_price": 7})
        return "ok"

    @function_tool
    @no_undo
    def fail() -> str:
        raise RuntimeError("x")

    model = scripted([("set_price", {"item": "a", "price": 9}, "1")], [("fail", {}, "2")], "x")
    result = await Sagacity(journal).run(agent(model, set_price, fail), "go")
    (ctx,) = seen
    assert ctx.undo_data == {"previous_price": 7}
    assert ctx.args == {"item": "a", "price": 9} and ctx.result == "ok"
    assert ctx.idempotency_key.startswith("sgc-") and ctx.saga_id == result.saga_id


def test_irreversible_without_needs_approval_refused_at_start_up():
    @function_tool
    @irreversible
    def wire(amount: int) -> str:
        return "sent"

    with pytest.raises(ConfigurationError, match="needs_approval=True"):
        Sagacity(InMemoryJournal()).run_sync(agent(scripted("x"), wire), "go")


async def test_pass_through_outside_a_saga():
    calls: list[int] = []

    @function_tool
    @compensable(undo=lambda ctx: None)
    def bump(n: int) -> int:
        record_undo_data({"n": n})  # a no-op outside a saga
        calls.append(n)
        return n + 1

    model = scripted([("bump", {"n": 1}, "1")], "done")
    result = await Runner.run(agent(model, bump), "go")
    assert calls == [1] and result.final_output == "done"
    assert tool_outputs(model) == ["2"]


async def test_unentered_saga_run_hooks_refuse_the_run():
    @function_tool
    @no_undo
    def pay() -> str:
        raise AssertionError("must not run unprotected")

    hooks = SagaRunHooks(InMemoryJournal())
    with pytest.raises(HooksNotEnteredError, match="without being entered"):
        await Runner.run(agent(scripted([("pay", {}, "1")], "x"), pay), "go", hooks=hooks)


async def test_saga_run_hooks_used_directly_compose_with_user_hooks():
    from agents import RunHooks

    class Mine(RunHooks):
        def __init__(self):
            self.tools: list[str] = []

        async def on_tool_end(self, context, agent, tool, result):
            self.tools.append(tool.name)

    @function_tool
    @read_only
    def look() -> str:
        return "x"

    mine = Mine()
    journal = InMemoryJournal()
    ag = agent(scripted([("look", {}, "1")], "done"), look)
    async with SagaRunHooks(journal, agent=ag, hooks=mine) as hooks:
        await Runner.run(ag, "go", hooks=hooks)
    assert hooks.status is SagaStatus.COMPLETED and mine.tools == ["look"]


def test_missing_or_mistyped_undo_rejected_at_wrap_time():
    with pytest.raises(DeclarationError, match="needs undo"):
        compensable(undo=None)(lambda: None)  # type: ignore[arg-type]

    def two_args(ctx, extra):
        pass

    def f() -> str:
        return ""

    with pytest.raises(DeclarationError, match="cannot be called with one CompensationContext"):
        compensable(undo=two_args)(f)
    with pytest.raises(DeclarationError, match="undo must be a callable"):
        compensable(undo="refund")(f)  # type: ignore[arg-type]


def test_decorator_on_top_of_function_tool_fails_with_the_right_order():
    def f(x: int) -> str:
        return ""

    with pytest.raises(DeclarationError, match=r"@function_tool\(\.\.\.\)\n    @read_only"):
        read_only(function_tool(f))


async def test_sync_and_async_tools_are_journaled_alike():
    journal = InMemoryJournal()
    log: list[str] = []
    a, b, c, fail = counter_tools(log)
    threads: set[str] = set()

    @function_tool
    @read_only
    def where() -> str:
        threads.add(threading.current_thread().name)
        return "here"

    model = scripted([("a", {"n": 1}, "1")], [("b", {"n": 2}, "2")], [("where", {}, "3")], "x")
    result = await Sagacity(journal).run(agent(model, a, b, where), "go")
    assert phases(await journal.entries(result.saga_id)) == ["INTENT", "EXECUTED"] * 3
    assert threading.main_thread().name not in threads


async def test_streamed_consumer_that_stops_early():
    """Default: the run goes on to its end unread; abandon='cancel' cancels and compensates."""
    journal = InMemoryJournal()
    log: list[str] = []
    a, b, c, fail = counter_tools(log)
    sagacity = Sagacity(journal)

    model = scripted([("a", {"n": 1}, "1")], [("c", {"n": 3}, "3")], "done")
    async with sagacity.run_streamed(agent(model, a, c), "go") as stream:
        async for _event in stream.stream_events():
            break
    assert stream.result.status is SagaStatus.COMPLETED
    assert stream.result.final_output == "done"

    model = scripted([("a", {"n": 1}, "1")], [("c", {"n": 3}, "3")], "done")
    async with sagacity.run_streamed(agent(model, a, c), "go", abandon="cancel") as stream:
        async for event in stream.stream_events():
            if getattr(event, "name", "") == "tool_output":
                break
    assert stream.result.status is SagaStatus.COMPENSATED
    assert "undo-a" in log


def test_facade_sync_form():
    log: list[str] = []
    a, b, c, fail = counter_tools(log)
    result = Sagacity(InMemoryJournal()).run_sync(
        agent(scripted([("b", {"n": 2}, "1")], "done"), b), "go"
    )
    assert result.status is SagaStatus.COMPLETED and result.final_output == "done"


async def test_saga_over_two_runs():
    """One saga, two runs: a failure in the second undoes the first run's effects too."""
    journal = InMemoryJournal()
    log: list[str] = []
    a, b, c, fail = counter_tools(log)
    sagacity = Sagacity(journal)
    first = await sagacity.run(agent(scripted([("a", {"n": 1}, "1")], "ok"), a), "one", close=False)
    assert first.status is SagaStatus.OPEN
    second = await sagacity.run(
        agent(scripted([("b", {"n": 2}, "1")], [("fail", {}, "2")], "x"), a, b, fail),
        "two", saga_id=first.saga_id,
    )
    assert second.saga_id == first.saga_id
    assert second.status is SagaStatus.COMPENSATED
    assert log == ["undo-b", "undo-a"]
    entries = await journal.entries(first.saga_id)
    assert sum(e.phase is Phase.RUN_STARTED for e in entries) == 2
    with pytest.raises(SagaStateError, match="closed"):
        await sagacity.run(agent(scripted("x"), a), "three", saga_id=first.saga_id)


async def test_close_saga_kept_open():
    journal = InMemoryJournal()
    log: list[str] = []
    a, *_ = counter_tools(log)
    sagacity = Sagacity(journal)
    first = await sagacity.run(agent(scripted([("a", {"n": 1}, "1")], "ok"), a), "one", close=False)
    assert await sagacity.close_saga(first.saga_id) is SagaStatus.COMPLETED
    assert (await journal.entries(first.saga_id))[-1].phase is Phase.SAGA_CLOSED


async def test_opening_a_saga_inside_an_active_one_raises():
    sagacity = Sagacity(InMemoryJournal())
    errors: list[BaseException] = []

    @function_tool
    @read_only
    async def nest() -> str:
        try:
            await sagacity.run(agent(scripted("inner")), "x")
        except SagaStateError as exc:
            errors.append(exc)
        return "ok"

    await sagacity.run(agent(scripted([("nest", {}, "1")], "done"), nest), "go")
    assert len(errors) == 1


async def test_input_guardrail_tripping_after_tools_ran_compensates():
    from agents import Agent, GuardrailFunctionOutput, input_guardrail

    journal = InMemoryJournal()
    log: list[str] = []
    a, *_ = counter_tools(log)

    @input_guardrail(run_in_parallel=True)
    async def slow_guard(ctx, agent, input):
        await asyncio.sleep(0.2)
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered=True)

    model = scripted([("a", {"n": 1}, "1")], "done")
    ag = Agent(name="g", model=model, tools=[a], input_guardrails=[slow_guard])
    result = await Sagacity(journal).run(ag, "go")
    assert result.exception is not None
    if phases(await journal.entries(result.saga_id)):
        assert result.status is SagaStatus.COMPENSATED and log == ["undo-a"]


async def test_cancelled_run_is_compensated_and_cancellation_propagates():
    journal = InMemoryJournal()
    log: list[str] = []
    a, *_ = counter_tools(log)

    hanging = asyncio.Event()

    @function_tool
    @read_only
    async def hang() -> str:
        hanging.set()
        await asyncio.sleep(10)
        return "never"

    model = scripted([("a", {"n": 1}, "1")], [("hang", {}, "2")], "done")
    task = asyncio.create_task(Sagacity(journal).run(agent(model, a, hang), "go"))
    await hanging.wait()  # cancelled in the second step, however long a loaded machine takes
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (saga_id,) = await journal.saga_ids()
    entries = await journal.entries(saga_id)
    assert entries[-1].phase is Phase.SAGA_CLOSED and log == ["undo-a"]


async def test_nested_run_inside_a_wrapped_tool_joins_the_saga():
    """A Runner.run started inside a wrapped tool joins the enclosing saga; its calls record the
    outer call as their parent, and a failure inside it fails the whole saga."""
    journal = InMemoryJournal()
    log: list[str] = []
    a, b, c, fail = counter_tools(log)

    @function_tool
    @compensable(undo=lambda ctx: log.append("undo-delegate"))
    async def delegate(task: str) -> str:
        inner = agent(scripted([("a", {"n": 7}, "inner-1")], [("fail", {}, "inner-2")], "x"), a, fail)
        result = await Runner.run(inner, task)
        return str(result.final_output)

    model = scripted([("delegate", {"task": "go"}, "outer-1")], "done")
    result = await Sagacity(journal, policy=FailurePolicy.CONTINUE).run(agent(model, delegate), "go")
    entries = await journal.entries(result.saga_id)
    inner_intents = [e for e in entries if e.phase is Phase.INTENT and e.tool in ("a", "fail")]
    assert [e.payload["parent_call_id"] for e in inner_intents] == ["outer-1", "outer-1"]
    assert result.status is SagaStatus.COMPENSATED
    assert log == ["undo-delegate", "undo-a"]


def test_compensable_used_bare_says_how_to_use_it():
    with pytest.raises(DeclarationError, match=r"@compensable\(undo=my_undo\)"):

        @compensable
        async def book(city: str, nights: int) -> str:
            return ""


def test_compensable_used_bare_on_a_one_parameter_tool_says_how_to_use_it():
    with pytest.raises(DeclarationError, match=r"@compensable\(undo=my_undo\)"):

        @compensable
        async def cancel_order(order_id: str) -> str:
            return ""
