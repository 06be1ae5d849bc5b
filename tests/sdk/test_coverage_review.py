"""Issue 20, after a fresh review: the gaps a new user found in M-01 and M-03, each pinned.

* M-01: a ``CustomTool`` (one raw string in, a local executor; the sandbox's apply-patch tool
  is one) is journaled undeclared, its executor's exception journals FAILED, ``strict=True``
  refuses it at start; an undeclared tool that paused for an approval names the request it
  used (never reported "approved but never ran"); an undeclared timeout is journaled
  ``timed_out``; ``journal show`` prints an undeclared call's raw arguments.
* M-03: two agents may each protect a tool of one name with ``protect_tool``; each call is
  undone by its own undo (the agent is journaled with a protected call's INTENT).
"""

from __future__ import annotations

import asyncio

import pytest
from agents import Agent, CustomTool, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseCustomToolCall

from sagacity_agents import Sagacity, SagaStatus, compensable, protect_tool
from sagacity_agents.backends import Phase
from sagacity_agents.errors import ConfigurationError
from sagacity_agents.render import summarize_payload

from .helpers import scripted


def custom_call(text: str, call_id: str) -> ResponseCustomToolCall:
    return ResponseCustomToolCall(call_id=call_id, input=text, name="run_sql",
                                  type="custom_tool_call", id=call_id)


def declined():
    @function_tool
    @compensable(undo=lambda ctx: None)
    def charge(amount: int) -> str:
        raise RuntimeError("card declined")

    return charge


def sql_tool(effects: list, *, fail: bool = False, is_async: bool = True) -> CustomTool:
    def run(ctx, text: str) -> str:
        if fail:
            raise RuntimeError("syntax error at DELETE")
        effects.append(text)
        return "1 row deleted"

    async def arun(ctx, text: str) -> str:
        return run(ctx, text)

    return CustomTool(name="run_sql", description="raw SQL", on_invoke_tool=arun if is_async else run)


def sql_model(*then) -> ScriptedModel:
    model = ScriptedModel()
    model.enqueue([custom_call("DELETE FROM users", "q1")])
    for turn in then:
        model.enqueue(turn)
    return model


@pytest.mark.case("M-01")
@pytest.mark.parametrize("is_async", [True, False])
async def test_custom_tool_call_is_journaled_undeclared_and_reported_dirty(journal, is_async):
    """M-01: a CustomTool call runs inside the saga with its INTENT (raw input) and EXECUTED;
    when a later call fails the report says it was not undone: no undo declared."""
    effects: list = []
    model = sql_model([function_call("charge", {"amount": 5}, call_id="c1")], [assistant_message("ok")])
    agent = Agent(name="db", model=model, tools=[sql_tool(effects, is_async=is_async), declined()])
    result = await Sagacity(journal, policy="continue").run(agent, "go")
    assert effects == ["DELETE FROM users"]
    assert result.status is SagaStatus.COMPENSATED
    entries = [e for e in await journal.entries(result.saga_id) if e.call_id == "q1"]
    assert [e.phase for e in entries] == [Phase.INTENT, Phase.EXECUTED]
    assert entries[0].payload["reversibility"] == "undeclared"
    assert entries[0].payload["raw_args"] == '{"input": "DELETE FROM users"}'
    assert entries[0].payload["agent"] == "db"
    assert entries[1].payload["result"] == "1 row deleted"
    assert [(i.tool, i.call_id, i.detail) for i in result.report.still_dirty] == [
        ("run_sql", "q1", "no undo declared")]
    assert not result.report.clean


@pytest.mark.case("M-01")
@pytest.mark.parametrize("is_async", [True, False])
async def test_custom_tool_exception_is_journaled_failed_and_fails_the_saga(journal, is_async):
    """M-01: the SDK hands the model a CustomTool's exception as plain text; the saga sees the
    exception itself: FAILED, the saga fails, and the model still gets the SDK's text."""
    model = sql_model([assistant_message("all good")])
    tool = sql_tool([], fail=True, is_async=is_async)
    result = await Sagacity(journal, policy="continue").run(Agent(name="db", model=model, tools=[tool]), "go")
    assert result.status is SagaStatus.COMPENSATED
    failed = [e for e in await journal.entries(result.saga_id) if e.call_id == "q1"][-1]
    assert failed.phase is Phase.FAILED
    assert failed.payload["error_type"] == "RuntimeError"
    assert "syntax error at DELETE" in failed.payload["error"]
    sent = [i for i in model.calls[-1].input if isinstance(i, dict)
            and i.get("type") == "custom_tool_call_output"]
    assert [i["output"] for i in sent] == ["syntax error at DELETE"]


@pytest.mark.case("M-01")
async def test_observed_custom_tool_behaves_as_before_outside_a_saga():
    """M-01: the observed executor is the original for everyone outside a saga: same result,
    same exception, observed once however many sagas meet it."""
    from sagacity_agents.sdk.undeclared import observe_custom_tool

    effects: list = []
    tool = sql_tool(effects)
    observe_custom_tool(tool)
    first = tool.on_invoke_tool
    observe_custom_tool(tool)
    assert tool.on_invoke_tool is first
    assert await tool.on_invoke_tool(object(), "x") == "1 row deleted" and effects == ["x"]
    broken = sql_tool([], fail=True, is_async=False)
    observe_custom_tool(broken)
    with pytest.raises(RuntimeError, match="syntax error"):
        broken.on_invoke_tool(object(), "x")


@pytest.mark.case("M-01")
async def test_strict_refuses_a_custom_tool_before_anything_runs(journal):
    """M-01: strict=True names a CustomTool among the undeclared tools, before the model runs."""
    effects: list = []
    model = sql_model([assistant_message("ok")])
    agent = Agent(name="db", model=model, tools=[sql_tool(effects)])
    with pytest.raises(ConfigurationError, match=r"run_sql \(db -> custom tool run_sql\)"):
        await Sagacity(journal, strict=True).run(agent, "go")
    assert effects == [] and not model.calls


@pytest.mark.case("M-01")
async def test_undeclared_call_approved_then_run_names_its_request(journal):
    """M-01: an undeclared tool paused by its own needs_approval; approved, resumed, run; a
    later failure. Its INTENT names the request it used, the report lists it once, as not
    undone, and never as "approved but never ran"."""
    ran: list = []

    @function_tool(needs_approval=True)
    def wire(amount: int) -> str:
        ran.append(amount)
        return "wired"

    def build(first: bool) -> Agent:
        model = scripted([("wire", {"amount": 5}, "w1")]) if first else \
            scripted([("charge", {"amount": 1}, "c1")], "ok")
        return Agent(name="w", model=model, tools=[wire, declined()])

    sagacity = Sagacity(journal, policy="continue")
    paused = await sagacity.run(build(True), "go")
    assert paused.status is SagaStatus.AWAITING_APPROVAL and ran == []
    (request,) = paused.approvals
    await sagacity.approve(request.request_id, approver="ana")
    done = await sagacity.resume(paused.saga_id, build(False))
    assert ran == [5] and done.status is SagaStatus.COMPENSATED
    (intent,) = [e for e in await journal.entries(paused.saga_id)
                 if e.phase is Phase.INTENT and e.tool == "wire"]
    assert intent.payload["reversibility"] == "undeclared"
    assert intent.payload["request_id"] == request.request_id
    assert done.report.approved_not_run == ()
    assert [(i.tool, i.detail) for i in done.report.still_dirty] == [("wire", "no undo declared")]


@pytest.mark.case("M-01")
async def test_undeclared_timeout_is_journaled_timed_out(journal):
    """M-01: an undeclared tool stopped by its own timeout is journaled FAILED with
    ``timed_out``, as a declared tool's is (the error is the SDK's own text)."""

    @function_tool(timeout=0.05)
    async def slow(x: int) -> str:
        await asyncio.sleep(5)
        return "late"

    model = scripted([("slow", {"x": 1}, "s1")], "ok")
    result = await Sagacity(journal, policy="continue").run(Agent(name="t", model=model, tools=[slow]), "go")
    failed = [e for e in await journal.entries(result.saga_id) if e.call_id == "s1"][-1]
    assert failed.phase is Phase.FAILED and failed.payload["timed_out"] is True
    assert failed.payload["error_type"] == "ToolTimeoutError"
    assert "timed out after 0.05 seconds" in failed.payload["error"]


@pytest.mark.case("M-01")
async def test_journal_show_prints_an_undeclared_calls_raw_arguments(journal):
    """M-01: an undeclared INTENT keeps ``args == {}`` and its arguments in ``raw_args``; the
    journal view shows those arguments, not an empty line."""

    @function_tool
    def send_email(to: str, body: str) -> str:
        return "sent"

    model = scripted([("send_email", {"to": "a@x", "body": "hi"}, "e1")], "ok")
    result = await Sagacity(journal).run(Agent(name="m", model=model, tools=[send_email]), "go")
    (intent,) = [e for e in await journal.entries(result.saga_id) if e.phase is Phase.INTENT]
    assert intent.payload["args"] == {}
    shown = summarize_payload(intent)
    assert '"to":"a@x"' in shown and '"body":"hi"' in shown and "[undeclared]" in shown


@pytest.mark.case("M-03")
async def test_protect_tool_same_name_on_two_agents_each_undone_by_its_own_undo(journal):
    """M-03: agent a protects its ``search``, agent b (a handoff) its own; both run, a later
    call fails; each INTENT journals its agent, and each call is undone by its own undo,
    newest first."""
    log: list = []

    def searcher(tag: str):
        @function_tool(name_override="search")
        def search(q: str) -> str:
            log.append(f"do-{tag}")
            return tag

        return protect_tool(search, reversibility="compensatable",
                            undo=lambda ctx: log.append(f"undo-{tag} {ctx.raw_args}"))

    model = scripted([("search", {"q": "a1"}, "s1")], [("transfer_to_b", {}, "h1")],
                     [("search", {"q": "b1"}, "s2")], [("charge", {"amount": 1}, "c1")], "x")
    b = Agent(name="b", model=model, tools=[searcher("B"), declined()])
    a = Agent(name="a", model=model, tools=[searcher("A")], handoffs=[b])
    result = await Sagacity(journal, policy="continue").run(a, "go")
    assert result.status is SagaStatus.COMPENSATED
    assert log == ["do-A", "do-B", 'undo-B {"q":"b1"}', 'undo-A {"q":"a1"}']
    agents = {e.call_id: e.payload["agent"] for e in await journal.entries(result.saga_id)
              if e.phase is Phase.INTENT and e.tool == "search"}
    assert agents == {"s1": "a", "s2": "b"}
    assert result.report.clean


# --- second review --------------------------------------------------------------------------

def lookalike(tag: str, log: list, *, protect: bool):
    """A ``search`` built by one factory: the same declaration id for every tag."""

    class Client:
        def __init__(self, name: str) -> None:
            self.name = name

    client = Client(tag)
    if protect:
        @function_tool(name_override="search")
        def plain(q: str) -> str:
            log.append(f"do-{client.name} {q}")
            return client.name

        return protect_tool(plain, reversibility="compensatable",
                            undo=lambda ctx: log.append(f"undo-{client.name} {ctx.raw_args}"))

    @function_tool(name_override="search")
    # one id and one scope around two clients: each call must still get its own undo
    @compensable(undo=lambda ctx: log.append(f"undo-{client.name} {ctx.args['q']}"), scope="search")
    def search(q: str) -> str:
        log.append(f"do-{client.name} {q}")
        return client.name

    return search


@pytest.mark.case("M-03")
@pytest.mark.parametrize("protect", [False, True], ids=["compensable", "protect_tool"])
async def test_agent_run_in_a_tool_body_is_undone_by_its_own_tool_not_a_lookalike(journal, protect):
    """M-03: an agent run with ``Runner.run`` inside a tool body (no graph walk sees it) has a
    ``search`` with the same declaration id as the outer agent's (one factory). Each call binds
    its own declaration under its agent as it starts: the inner call is undone by the inner
    tool's undo, the outer by the outer's."""
    from agents import Runner

    from sagacity_agents import read_only

    log: list = []
    inner = Agent(name="inner", model=scripted([("search", {"q": "in"}, "s2")], "done"),
                  tools=[lookalike("INNER", log, protect=protect)])

    @function_tool
    @read_only
    async def delegate(q: str) -> str:
        return str((await Runner.run(inner, q)).final_output)

    model = scripted([("search", {"q": "out"}, "s1")], [("delegate", {"q": "x"}, "d1")],
                     [("charge", {"amount": 1}, "c1")], "k")
    outer = Agent(name="outer", model=model,
                  tools=[lookalike("OUTER", log, protect=protect), delegate, declined()])
    result = await Sagacity(journal, policy="continue").run(outer, "go")
    assert result.status is SagaStatus.COMPENSATED
    undo_in = 'undo-INNER {"q":"in"}' if protect else "undo-INNER in"
    undo_out = 'undo-OUTER {"q":"out"}' if protect else "undo-OUTER out"
    assert log == ["do-OUTER out", "do-INNER in", undo_in, undo_out]


@pytest.mark.case("M-03")
def test_an_agent_missing_from_the_graph_given_is_not_undone_by_a_lookalike():
    """M-03: recovery given a graph without the agent that made a call (an agent met only at
    run time) finds one declaration with the journaled id, bound for another agent: the undo
    is refused with the reason, never guessed."""
    from sagacity_agents.core.compensation import _declaration_for
    from sagacity_agents.core.declarations import Reversibility, ToolDeclaration

    outer = ToolDeclaration(name="search", reversibility=Reversibility.COMPENSATABLE,
                            undo=lambda ctx: None, declaration_id="app:mk.<locals>.search#1")
    decl, why = _declaration_for({"search": outer}, "search", outer.declaration_id, "inner",
                                 {("outer", "search"): outer})
    assert decl is None
    assert "journaled agent 'inner' is not in the agent graph given here" in why
    assert "bound only for 'outer'" in why
    # the agent that is in the graph still finds its own
    assert _declaration_for({"search": outer}, "search", outer.declaration_id, "outer",
                            {("outer", "search"): outer}) == (outer, None)


@pytest.mark.case("M-01")
@pytest.mark.parametrize("how", ["as_tool", "protect_tool"])
async def test_agent_tool_paused_for_an_inner_approval_resumes_verifiable(journal, how):
    """M-01: a plain ``as_tool`` agent (or one protected as compensatable) whose inner tool asks
    for an approval: the run pauses with the outer call in flight; the resumed run writes that
    call's outcome under its own lease. The journal verifies, and a later failure is
    compensated (the earlier ``book`` undone), not refused as a forgery."""
    effects: list = []

    @function_tool(needs_approval=True)
    def wire(amount: int) -> str:
        effects.append(f"wire {amount}")
        return "wired"

    @function_tool
    @compensable(undo=lambda ctx: effects.append("undo book"))
    def book(x: int) -> str:
        effects.append("book")
        return "booked"

    inner_model = scripted([("wire", {"amount": 7}, "w1")], "inner done", "inner done")
    outer_model = scripted([("book", {"x": 1}, "b1")], [("ask", {"input": "pay"}, "a1")],
                           [("charge", {"amount": 1}, "c1")], "k")
    inner = Agent(name="inner", model=inner_model, tools=[wire])

    def build() -> Agent:
        ask = inner.as_tool(tool_name="ask", tool_description="pays")
        if how == "protect_tool":
            ask = protect_tool(ask, reversibility="compensatable", undo=lambda ctx: effects.append("undo ask"))
        return Agent(name="outer", model=outer_model, tools=[book, ask, declined()])

    sagacity = Sagacity(journal, policy="continue")
    paused = await sagacity.run(build(), "go")
    assert paused.status is SagaStatus.AWAITING_APPROVAL
    await sagacity.approve(paused.approvals[0].request_id, approver="ana")
    done = await sagacity.resume(paused.saga_id, build())
    assert done.status is SagaStatus.COMPENSATED, done.exception
    assert "wire 7" in effects and "undo book" in effects
    (verdict,) = await sagacity.verify(paused.saga_id)
    assert verdict.ok, verdict.detail


@pytest.mark.case("M-01")
async def test_custom_tool_with_needs_approval_is_approved_on_its_raw_input(journal):
    """M-01: a CustomTool with ``needs_approval=True`` pauses through ours; the request binds
    ``{"input": text}`` (the raw string, not parsed as JSON), the same value its INTENT is
    checked against: approved, it runs once and its INTENT names the request."""
    effects: list = []

    async def run(ctx, text: str) -> str:
        effects.append(text)
        return "1 row deleted"

    def build(first: bool) -> Agent:
        model = ScriptedModel()
        if first:
            model.enqueue([custom_call("DELETE FROM users", "q1")])
        model.enqueue([assistant_message("ok")])
        tool = CustomTool(name="run_sql", description="raw SQL", on_invoke_tool=run, needs_approval=True)
        return Agent(name="db", model=model, tools=[tool])

    sagacity = Sagacity(journal)
    paused = await sagacity.run(build(True), "go")
    assert paused.status is SagaStatus.AWAITING_APPROVAL and effects == []
    (request,) = paused.approvals
    assert request.args == {"input": "DELETE FROM users"}
    await sagacity.approve(request.request_id, approver="ana")
    done = await sagacity.resume(paused.saga_id, build(False))
    assert done.status is SagaStatus.COMPLETED and effects == ["DELETE FROM users"]
    (intent,) = [e for e in await journal.entries(paused.saga_id) if e.phase is Phase.INTENT]
    assert intent.payload["request_id"] == request.request_id
