"""M-03 after issue 20's review: one factory's tools (one declaration id) on two agents.

``make_book(hotels)`` and ``make_book(cars)`` journal the same declaration id; compensation must
undo each call with the undo bound for the INTENT's agent, never the other instance's, and refuse
(still dirty) when it cannot tell. Each test runs on the in-memory and the SQLite journal.
"""

from __future__ import annotations

import pytest
from agents import Agent, function_tool

from sagacity_agents import SagaStatus, Sagacity, compensable
from sagacity_agents.errors import ConfigurationError

from .helpers import scripted
from .test_agent_graph import journals  # noqa: F401 - the memory/SQLite fixture

pytestmark = pytest.mark.case("M-03")


class Client:
    """A booking system; ``cancel`` raises for an unknown booking unless ``idempotent``."""

    def __init__(self, system: str, idempotent: bool) -> None:
        self.system, self.idempotent, self.live = system, idempotent, []

    def book(self, x: str) -> str:
        self.live.append(x)
        return f"{self.system}-{x}"

    def cancel(self, x: str) -> None:
        if x in self.live:
            self.live.remove(x)
        elif not self.idempotent:
            raise RuntimeError(f"{self.system}: no booking {x}")


def make_book(client: Client):
    """One factory, one declaration id for every client: each client's tools carry its system as
    their scope (journaled with each INTENT), so each call is undone by its own client's undo."""
    def undo(ctx):
        client.cancel(ctx.args["x"])

    @function_tool
    @compensable(undo=undo, scope=client.system)
    def book(x: str) -> str:
        return client.book(x)

    return book


@function_tool
@compensable(undo=lambda ctx: None)
def fail_later(x: int) -> str:
    raise RuntimeError("boom")


def graph(mode, hotels, cars, names=("hotel_agent", "cars_agent"), run=True):
    """The reviewer's t8 shapes: hotel agent books, then a handoff to (or the tool of) the car
    agent, which books; then a tool fails."""
    hotel_book, car_book = make_book(hotels), make_book(cars)
    if not run:
        b = Agent(name=names[1], model=scripted(), tools=[car_book, fail_later])
        return Agent(name=names[0], model=scripted(), tools=[hotel_book], handoffs=[b]) \
            if mode == "handoff" else Agent(name=names[0], model=scripted(), tools=[
                hotel_book, b.as_tool(tool_name="cars", tool_description="cars"), fail_later])
    if mode == "handoff":
        b = Agent(name=names[1], model=scripted([("book", {"x": "C1"}, "b1")],
                                                [("fail_later", {"x": 1}, "f1")], "done"),
                  tools=[car_book, fail_later])
        return Agent(name=names[0], model=scripted([("book", {"x": "H1"}, "a1")],
                                                   [("transfer_to_cars_agent", {}, "h1")]),
                     tools=[hotel_book], handoffs=[b])
    b = Agent(name=names[1], model=scripted([("book", {"x": "C1"}, "b1")], "car done"),
              tools=[car_book])
    return Agent(name=names[0], model=scripted([("book", {"x": "H1"}, "a1")],
                                               [("cars", {"input": "go"}, "t1")],
                                               [("fail_later", {"x": 1}, "f1")], "done"),
                 tools=[hotel_book, b.as_tool(tool_name="cars", tool_description="cars"),
                        fail_later])


@pytest.mark.parametrize("mode", ["handoff", "as_tool"])
@pytest.mark.parametrize("idempotent", [False, True])
async def test_factory_tools_on_two_agents_are_undone_by_their_own_instance(
        journals, mode, idempotent):
    """Each booking is cancelled in its own system; nothing live, nothing failed."""
    hotels, cars = Client("hotels", idempotent), Client("cars", idempotent)
    result = await Sagacity(journals()).run(graph(mode, hotels, cars), "go")
    assert result.status is SagaStatus.COMPENSATED
    assert hotels.live == [] and cars.live == []
    assert [i.tool for i in result.report.undone] == ["book", "book"]
    assert not result.report.failed


def left_open_graph(hotels, cars):
    """Hotel agent books then hands off to the car agent, which books; nothing fails."""
    hotel_book, car_book = make_book(hotels), make_book(cars)
    b = Agent(name="cars_agent", model=scripted([("book", {"x": "C1"}, "b1")], "ok"),
              tools=[car_book])
    a = Agent(name="hotel_agent", model=scripted([("book", {"x": "H1"}, "a1")],
                                                 [("transfer_to_cars_agent", {}, "h1")]),
              tools=[hotel_book], handoffs=[b])
    return a, b, hotel_book


@pytest.mark.parametrize("mode", ["handoff", "as_tool"])
async def test_recovery_with_a_fresh_graph_in_the_same_process(journals, mode):
    """A run left open, then recovered with a fresh agent graph (new tool objects): each
    booking is undone by the instance bound for its INTENT's agent."""
    hotels, cars = Client("hotels", True), Client("cars", True)
    a, b, hotel_book = left_open_graph(hotels, cars)
    if mode == "as_tool":
        a = Agent(name="hotel_agent", model=scripted([("book", {"x": "H1"}, "a1")],
                                                     [("cars", {"input": "go"}, "t1")], "done"),
                  tools=[hotel_book, b.as_tool(tool_name="cars", tool_description="cars")])
    first = await Sagacity(journals()).run(a, "go", close=False)
    assert first.status is SagaStatus.OPEN and hotels.live == ["H1"] and cars.live == ["C1"]
    fresh = graph(mode, hotels, cars, run=False)
    result = await Sagacity(journals()).recover(first.saga_id, fresh)
    assert result.status is SagaStatus.COMPENSATED
    assert hotels.live == [] and cars.live == []


async def test_recovery_that_cannot_tell_the_instances_apart_refuses(journals):
    """Recovery with agents of other names: two different declarations share the id and none is
    bound for the journaled agent, so no undo runs; both stay dirty and are named."""
    hotels, cars = Client("hotels", True), Client("cars", True)
    a, b, hotel_book = left_open_graph(hotels, cars)
    first = await Sagacity(journals()).run(a, "go", close=False)
    renamed = graph("handoff", hotels, cars, names=("h2", "c2"), run=False)
    result = await Sagacity(journals()).recover(first.saga_id, renamed)
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert hotels.live == ["H1"] and cars.live == ["C1"]
    assert len(result.report.still_dirty) == 2
    assert all("not guessed" in i.detail for i in result.report.failed)


async def test_same_agent_name_same_id_different_undos_refused_at_start(journals):
    """Two agents of one name, each with its own instance of the factory's tool: no INTENT could
    say which undo is its own, so the run is refused before any tool runs."""
    hotels, cars = Client("hotels", True), Client("cars", True)
    b = Agent(name="booker", model=scripted(), tools=[make_book(cars)])
    a = Agent(name="booker", model=scripted(), tools=[make_book(hotels)], handoffs=[b])
    with pytest.raises(ConfigurationError, match="declaration id"):
        await Sagacity(journals()).run(a, "go")
    assert hotels.live == [] and cars.live == []


async def test_a_pause_journals_the_agent_that_asked():
    """The AWAITING_APPROVAL entry names the agent whose call waits (``sagacity approvals show``
    prints it): two agents' ``wire`` tools are told apart by a human."""
    from sagacity_agents import irreversible
    from sagacity_agents.backends import InMemoryApprovalStore, InMemoryJournal, Phase

    @function_tool(needs_approval=True)
    @irreversible
    def wire(amount: int) -> str:
        return "sent"

    b = Agent(name="agent_b", model=scripted([("wire", {"amount": 9}, "w2")], "ok"), tools=[wire])
    a = Agent(name="agent_a", model=scripted([("transfer_to_agent_b", {}, "h1")]),
              tools=[wire], handoffs=[b])
    journal = InMemoryJournal()
    result = await Sagacity(journal, approvals=InMemoryApprovalStore()).run(a, "go")
    assert result.status is SagaStatus.AWAITING_APPROVAL
    paused = [e for e in await journal.entries(result.saga_id)
              if e.phase is Phase.AWAITING_APPROVAL]
    assert [e.payload["agent"] for e in paused] == ["agent_b"]
