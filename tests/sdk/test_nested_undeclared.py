"""Nothing unseen in nested runs either (issue 20, M-01).

A tool nobody declared, run by an agent nested in the saga, is journaled as the saga's own
run journals one: INTENT (raw arguments, ``undeclared``, the agent that made the call, the parent
call) before its body, its outcome after; it is reported "no undo declared" when the saga fails;
``strict=True`` refuses it. For every way the SDK runs a nested agent: ``as_tool`` (plain,
``nested_agent_tool``, streamed with ``on_stream``), ``Runner.run`` and ``Runner.run_streamed``
in a tool body, ``Runner.run_sync`` in a sync tool body, a handoff inside the nested run; sync and async tools; the saga's own run plain
or streamed. Runs on every backend of ``tests/backends.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from agents import Agent, RunHooks, Runner, function_tool

from sagacity_agents import Sagacity, SagaStatus, compensable, nested_agent_tool, read_only
from sagacity_agents.backends import Phase
from sagacity_agents.errors import ConfigurationError

from .helpers import scripted

pytestmark = pytest.mark.case("M-01")


def email_tool(log: list, *, sync: bool, fail: bool = False) -> Any:
    """``send_email``, declared nowhere, sync or async; ``fail`` makes its body raise."""
    if sync:
        def send_email(to: str) -> str:
            log.append(("email", to))
            if fail:
                raise RuntimeError("smtp down")
            return "sent"
    else:
        async def send_email(to: str) -> str:  # type: ignore[misc]
            log.append(("email", to))
            if fail:
                raise RuntimeError("smtp down")
            return "sent"
    return function_tool(send_email)


EMAIL = [("send_email", {"to": "ana@example.com"}, "e1")]
WAYS = ["as_tool", "as_tool_streamed", "nested_agent_tool", "runner_in_body",
        "runner_streamed_in_body", "handoff_in_nested"]


def trip(log: list, way: str, *, sync: bool = False, fail: bool = False,
         charge_fails: bool = True) -> tuple[Agent[Any], str]:
    """The trip agent: books a hotel (undone on failure), asks a nested agent that sends an
    undeclared email, then charges the card (declined). Returns it and the name of the agent
    that sends the email."""
    @function_tool
    @compensable(undo=lambda ctx: log.append(("cancel_hotel", ctx.result)))
    def book_hotel(city: str) -> str:
        log.append(("book_hotel", city))
        return "HT-1"

    @function_tool
    @read_only
    def charge(amount: int) -> str:
        if charge_fails:
            raise RuntimeError("card declined")
        return "charged"

    email = email_tool(log, sync=sync, fail=fail)
    if way == "handoff_in_nested":
        mailer = Agent(name="mailer", model=scripted(EMAIL, "mail sent"), tools=[email])
        desk = Agent(name="desk", model=scripted([("transfer_to_mailer", {}, "h1")]), handoffs=[mailer])
        sender = "mailer"
    else:
        desk = Agent(name="desk", model=scripted(EMAIL, "mail sent"), tools=[email])
        sender = "desk"

    if way in ("runner_in_body", "runner_streamed_in_body"):
        @function_tool
        @read_only
        async def notify(text: str) -> str:
            if way == "runner_in_body":
                return str((await Runner.run(desk, text)).final_output)
            stream = Runner.run_streamed(desk, text)
            async for _ in stream.stream_events():
                pass
            return str(stream.final_output)

        nested: Any = notify
    else:
        seen: list = []
        nested = desk.as_tool("notify", "Sends mail", on_stream=seen.append if way == "as_tool_streamed" else None)
        if way == "nested_agent_tool":
            nested = nested_agent_tool(nested)
    model = scripted([("book_hotel", {"city": "Lisbon"}, "c1")], [("notify", {"text": "mail", "input": "mail"}
                                                                   if way.startswith("runner") else {"input": "mail"}, "n1")],
                     [("charge", {"amount": 100}, "c3")], "Your trip is booked!")
    return Agent(name="trip", model=model, tools=[book_hotel, nested, charge]), sender


async def run(journal: Any, agent: Agent[Any], *, streamed: bool = False, **kw: Any) -> Any:
    sagacity = Sagacity(journal, **kw)
    if not streamed:
        return await sagacity.run(agent, "go")
    async with sagacity.run_streamed(agent, "go") as stream:
        async for _ in stream.stream_events():
            pass
    return stream.result


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
@pytest.mark.parametrize("way", WAYS)
async def test_undeclared_calls_of_nested_runs_are_journaled_and_reported(journal, way, sync):
    """M-01: the nested agent's undeclared ``send_email`` runs: INTENT (raw arguments,
    ``undeclared``, the agent that made the call, the nested call as parent) before its body,
    EXECUTED after; when the card is declined the hotel is undone and the email reported "not
    undone ... no undo declared"."""
    log: list = []
    agent, sender = trip(log, way, sync=sync)
    result = await run(journal, agent, policy="continue")
    assert result.status is SagaStatus.COMPENSATED
    assert log == [("book_hotel", "Lisbon"), ("email", "ana@example.com"), ("cancel_hotel", "HT-1")]
    entries = [e for e in await journal.entries(result.saga_id) if e.call_id == "e1"]
    assert [e.phase for e in entries] == [Phase.INTENT, Phase.EXECUTED]
    intent, outcome = entries
    assert intent.payload["reversibility"] == "undeclared"
    assert intent.payload["raw_args"] == '{"to":"ana@example.com"}'
    assert intent.payload["agent"] == sender and intent.payload["parent_call_id"] == "n1"
    parent = next(e for e in await journal.entries(result.saga_id)
                  if e.phase is Phase.INTENT and e.call_id == "n1")
    assert intent.payload["parent_intent_seq"] == parent.seq
    assert outcome.payload["result"] == "sent"
    dirty = [(d.tool, d.call_id, d.detail) for d in result.report.still_dirty]
    assert ("send_email", "e1", "no undo declared") in dirty


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "streamed"])
@pytest.mark.parametrize("way", ["as_tool", "runner_in_body"])
async def test_a_failed_undeclared_nested_call_fails_the_saga(journal, way, streamed):
    """M-01: a nested undeclared call whose body raises (the model gets the SDK's error text)
    is journaled FAILED and fails the saga, plain or streamed: the hotel is undone although the
    card would have been charged."""
    log: list = []
    agent, _sender = trip(log, way, fail=True, charge_fails=False)
    result = await run(journal, agent, streamed=streamed, policy="continue")
    assert result.status is SagaStatus.COMPENSATED
    assert ("cancel_hotel", "HT-1") in log
    phases = [e.phase for e in await journal.entries(result.saga_id) if e.call_id == "e1"]
    assert phases == [Phase.INTENT, Phase.FAILED]


async def test_strict_refuses_a_nested_agent_with_undeclared_tools_before_it_runs(journal):
    """M-01, strict=True: an agent run with ``Runner.run`` in a tool body (no walk sees it)
    whose tools include an undeclared one is refused when it starts, before its model is
    called: nothing of it runs, the saga fails and the hotel is undone."""
    log: list = []
    agent, _sender = trip(log, "runner_in_body", charge_fails=False)
    result = await run(journal, agent, strict=True)
    assert result.status is SagaStatus.COMPENSATED
    assert log == [("book_hotel", "Lisbon"), ("cancel_hotel", "HT-1")]
    entries = await journal.entries(result.saga_id)
    assert not [e for e in entries if e.call_id == "e1"]
    notify = [e for e in entries if e.call_id == "n1"]
    assert [e.phase for e in notify] == [Phase.INTENT, Phase.FAILED]
    assert "strict=True" in notify[1].payload["error"] and "send_email" in notify[1].payload["error"]


class AddsTool(RunHooks):
    """An application hook that gives the agent a tool at run time (as MCP servers do)."""

    def __init__(self, tool: Any) -> None:
        self.tool = tool

    async def on_agent_start(self, context: Any, agent: Agent[Any]) -> None:
        if self.tool not in agent.tools:
            agent.tools.append(self.tool)


async def test_strict_refuses_an_undeclared_tool_met_at_call_time_in_a_nested_run(journal):
    """M-01, strict=True: a tool added by the nested run's own hook (no graph shows it) is
    refused at its call: FAILED (``not_run``, its raw arguments), never run; the saga fails."""
    log: list = []
    email = email_tool(log, sync=False)
    desk = Agent(name="desk", model=scripted(EMAIL, "mail sent"), tools=[])

    @function_tool
    @read_only
    async def notify(text: str) -> str:
        return str((await Runner.run(desk, text, hooks=AddsTool(email))).final_output)

    model = scripted([("notify", {"text": "mail"}, "n1")], "done")
    result = await run(journal, Agent(name="trip", model=model, tools=[notify]), strict=True)
    assert log == [] and result.status is not SagaStatus.COMPLETED
    [refused] = [e for e in await journal.entries(result.saga_id) if e.call_id == "e1"]
    assert refused.phase is Phase.FAILED and refused.payload["not_run"]
    assert refused.payload["raw_args"] == '{"to":"ana@example.com"}'


async def test_strict_refuses_a_nested_as_tool_graph_before_anything_runs(journal):
    """M-01, strict=True: where the graph shows the nested run's undeclared tool (an ``as_tool``
    agent's), the saga refuses it before anything is journaled or any model called."""
    log: list = []
    agent, _sender = trip(log, "nested_agent_tool")
    with pytest.raises(ConfigurationError) as caught:
        await Sagacity(journal, strict=True).run(agent, "go")
    assert "send_email (trip -> as_tool notify -> desk -> tool send_email)" in str(caught.value)
    assert log == [] and await journal.saga_ids() == []


async def test_the_run_s_own_hooks_still_see_a_nested_run(journal):
    """The nested hooks forward every callback to the hooks the nested run was given."""
    seen: list = []

    class Watch(RunHooks):
        async def on_tool_start(self, context: Any, agent: Agent[Any], tool: Any) -> None:
            seen.append(("start", agent.name, tool.name))

        async def on_tool_end(self, context: Any, agent: Agent[Any], tool: Any, result: Any) -> None:
            seen.append(("end", agent.name, tool.name, result))

    log: list = []
    desk = Agent(name="desk", model=scripted(EMAIL, "mail sent"), tools=[email_tool(log, sync=True)])
    nested = desk.as_tool("notify", "Sends mail", hooks=Watch())
    model = scripted([("notify", {"input": "mail"}, "n1")], "done")
    result = await run(journal, Agent(name="trip", model=model, tools=[nested]))
    assert result.status is SagaStatus.COMPLETED
    assert seen == [("start", "desk", "send_email"), ("end", "desk", "send_email", "sent")]
    assert [e.phase for e in await journal.entries(result.saga_id) if e.call_id == "e1"] == [
        Phase.INTENT, Phase.EXECUTED]
