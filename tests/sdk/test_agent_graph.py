"""Guarantees across the whole agent graph (issue 7, items 1 and 4 of F-xx: F-01 to F-04).

Each test runs on the in-memory and the SQLite journal; "a fresh Sagacity" is a new facade over
the same journal object (in-memory) or a new connection to the same SQLite file.
"""

from __future__ import annotations

import gc
import weakref

import pytest
from agents import Agent, Handoff, Runner, UserError, function_tool, handoff

from sagacity_agents import (
    Sagacity,
    SagaRunHooks,
    SagaStatus,
    compensable,
    irreversible,
    nested_agent_tool,
    read_only,
)
from sagacity_agents.backends import InMemoryApprovalStore, InMemoryJournal, Phase, SqliteJournal
from sagacity_agents.errors import ConfigurationError
from sagacity_agents.core.approval import args_hash
from sagacity_agents.sdk.graph import UnseenAgentWarning, agent_graph

from .helpers import scripted


@pytest.fixture(params=["memory", "sqlite"])
def journals(request, tmp_path):
    """``open()`` returns the journal: the same object (memory) or a new connection (SQLite)."""
    opened: list = []
    shared = InMemoryJournal()

    def open_journal():
        journal = shared if request.param == "memory" else SqliteJournal(tmp_path / "graph.db")
        opened.append(journal)
        return journal

    yield open_journal
    import asyncio

    for journal in opened:
        if request.param == "sqlite":
            asyncio.run(journal.close())


# --- F-01 ----------------------------------------------------------------------------------

def trip_agents(model, log):
    """A books a flight and hands off (``handoff(B)``) to B, which books a hotel."""

    @function_tool
    @compensable(undo=lambda ctx: log.append(("cancel_flight", ctx.result)))
    def book_flight(to: str) -> str:
        log.append(("book_flight", to))
        return "FL-1"

    @function_tool
    @compensable(undo=lambda ctx: log.append(("cancel_hotel", ctx.result)))
    def book_hotel(city: str) -> str:
        log.append(("book_hotel", city))
        return "HT-1"

    b = Agent(name="B", model=model, tools=[book_hotel])
    a = Agent(name="A", model=model, tools=[book_flight], handoffs=[handoff(b)])
    return a, b


@pytest.mark.case("F-01")
async def test_recover_finds_the_undo_of_a_tool_reached_by_a_handoff_object(journals):
    """F-01: A (book_flight) with handoffs=[handoff(B)], B (book_hotel); the run is left open
    (close=False); recover(saga_id, A) in a fresh Sagacity undoes both, hotel first."""
    log: list = []
    model = scripted([("book_flight", {"to": "Lisbon"}, "c1")], [("transfer_to_b", {}, "h1")],
                     [("book_hotel", {"city": "Lisbon"}, "c2")], "booked")
    a, b = trip_agents(model, log)
    first = await Sagacity(journals()).run(a, "trip", close=False)
    assert first.status is SagaStatus.OPEN
    assert log == [("book_flight", "Lisbon"), ("book_hotel", "Lisbon")]

    fresh_a, fresh_b = trip_agents(scripted(), log)  # fresh tool objects, as in a new process
    result = await Sagacity(journals()).recover(first.saga_id, fresh_a)
    assert result.status is SagaStatus.COMPENSATED
    assert log[2:] == [("cancel_hotel", "HT-1"), ("cancel_flight", "FL-1")]
    assert [i.tool for i in result.report.undone] == ["book_hotel", "book_flight"]
    assert not result.report.failed


# --- F-02 ----------------------------------------------------------------------------------

def wire_agent(model, sent):
    @function_tool(needs_approval=True)
    @irreversible
    def send_wire(amount_eur: int, iban: str, memo: str = "") -> str:
        sent.append((amount_eur, iban, memo))
        return "W-1"

    return Agent(name="B", model=model, tools=[send_wire])


def f02_agents(how, model, sent):
    b = wire_agent(model, sent)
    if how == "handoff":
        return Agent(name="A", model=model, handoffs=[handoff(b)]), b
    return Agent(name="A", model=model, tools=[b.as_tool("wire_desk", "Sends wires")]), b


def f02_model(how):
    raw = '{"amount_eur": "2500", "iban": "PT50"}'
    first = [("transfer_to_b", {}, "h1")] if how == "handoff" else [("wire_desk", {"input": "pay"}, "t1")]
    turns = [first, [("send_wire", raw, "w1")], "wire sent"]
    if how == "as_tool":
        turns.append("all done")
    return scripted(*turns)


@pytest.mark.case("F-02")
@pytest.mark.parametrize("how", ["handoff", "as_tool"])
async def test_approval_of_a_tool_behind_handoff_or_as_tool_hashes_validated_args(journals, how):
    """F-02: send_wire (irreversible, needs_approval) on B, reached through handoff(B) or
    B.as_tool; the model sends {"amount_eur": "2500", "iban": "PT50"}. The request shows and
    hashes {"amount_eur": 2500, "iban": "PT50", "memo": ""} with the tool's reversibility;
    approve -> resume -> COMPLETED, the wire runs exactly once."""
    sent: list = []
    model = f02_model(how)
    a, _b = f02_agents(how, model, sent)
    store = InMemoryApprovalStore()
    s = Sagacity(journals(), approvals=store)
    result = await s.run(a, "pay")
    assert result.status is SagaStatus.AWAITING_APPROVAL
    (request,) = result.approvals
    validated = {"amount_eur": 2500, "iban": "PT50", "memo": ""}
    assert request.args == validated
    assert request.args_hash == args_hash(validated)
    awaiting = [e for e in await s.journal.entries(result.saga_id) if e.phase is Phase.AWAITING_APPROVAL]
    assert awaiting[0].payload["args"] == validated
    assert awaiting[0].payload["reversibility"] == "irreversible"
    assert sent == []

    await s.approve(request.request_id, approver="alice")
    resumed_agent, _ = f02_agents(how, model, sent)
    done = await Sagacity(journals(), approvals=store).resume(result.saga_id, resumed_agent)
    assert done.status is SagaStatus.COMPLETED, done.failures
    assert sent == [(2500, "PT50", "")]
    entries = await s.journal.entries(result.saga_id)
    assert [e.phase for e in entries if e.tool == "send_wire"] == [
        Phase.AWAITING_APPROVAL, Phase.APPROVED, Phase.CONSUMED, Phase.INTENT, Phase.EXECUTED]


# --- F-03 ----------------------------------------------------------------------------------

def unapproved_wire(ran):
    @function_tool  # no needs_approval=True
    @irreversible
    def wire(amount: int) -> str:
        ran.append(amount)
        return "sent"

    return wire


def deep(tool, model, how):
    """An agent graph with ``tool`` three levels below the root, reached ``how``."""
    c = Agent(name="C", model=model, tools=[tool])
    b = Agent(name="B", model=model, tools=[c.as_tool("ask_c", "C")])
    if how == "handoff":
        return Agent(name="A", model=model, handoffs=[handoff(b)]), (b, c)
    if how == "handoff_agent":
        return Agent(name="A", model=model, handoffs=[b]), (b, c)
    return Agent(name="A", model=model, tools=[nested_agent_tool(b.as_tool("ask_b", "B"))]), (b, c)


def start_ran(ran):
    @function_tool
    @read_only
    def look(q: str) -> str:
        ran.append(q)
        return q

    return look


@pytest.mark.case("F-03")
@pytest.mark.parametrize("how", ["handoff", "handoff_agent", "as_tool"])
async def test_irreversible_tool_without_approval_anywhere_in_the_graph_is_refused(journals, how):
    """F-03: an irreversible tool without needs_approval three levels down (through a handoff
    object, a handoff agent, or as_tool agents) -> ConfigurationError before any tool runs."""
    ran: list = []
    model = scripted([("look", {"q": "x"}, "c1")], "done")
    root, keep = deep(unapproved_wire(ran), model, how)
    root.tools.append(start_ran(ran))
    journal = journals()
    with pytest.raises(ConfigurationError, match="needs_approval=True") as caught:
        await Sagacity(journal).run(root, "go")
    assert isinstance(caught.value, UserError)
    assert "C -> tool wire" in str(caught.value)
    assert ran == [] and not model.calls
    assert await journal.saga_ids() == []


@pytest.mark.case("F-03")
def test_the_same_tool_on_several_agents_and_cycles_are_fine():
    """One tool object on two agents is one tool; handoff cycles end."""
    look = start_ran([])
    model = scripted()
    b = Agent(name="B", model=model, tools=[look])
    a = Agent(name="A", model=model, tools=[look], handoffs=[handoff(b)])
    b.handoffs = [a, handoff(a)]
    graph = agent_graph(a)
    assert [g.name for g in graph.agents] == ["A", "B"]
    assert list(graph.tools()) == ["look"]
    assert [site.agent for site in graph.sites] == ["A", "B"]  # one site per agent that has it


def test_one_function_or_agent_built_into_several_tool_objects_is_one_tool():
    """function_tool(f) built twice, or B.as_tool built twice under one name, is one tool (no
    clash); two different plain functions under one name are two: allowed on two agents (M-03),
    refused on one."""

    def look(q: str) -> str:
        return q

    def other(q: str) -> str:
        return q

    model = scripted()
    b = Agent(name="B", model=model, tools=[function_tool(look)])
    c = Agent(name="C", model=model)
    a = Agent(name="A", model=model, tools=[function_tool(look), c.as_tool("ask_c", "c")],
              handoffs=[handoff(b)])
    b.tools.append(c.as_tool("ask_c", "c"))
    assert sorted(agent_graph(a).tools()) == ["ask_c", "look"]
    d = Agent(name="D", model=model, tools=[function_tool(other, name_override="look")])
    a.handoffs.append(d)
    agent_graph(a)  # D's own `look` (M-03)
    a.tools.append(function_tool(other, name_override="look"))
    with pytest.raises(ConfigurationError, match="has two different tools named 'look'"):
        agent_graph(a)


def test_tools_are_keyed_by_qualified_name():
    """Tools are keyed as the SDK keys them: ``namespace.name`` for tool_namespace()."""
    from agents import tool_namespace

    look = start_ran([])
    grouped = tool_namespace(name="crm", description="CRM tools", tools=[start_ran([])])
    a = Agent(name="A", model=scripted(), tools=[look, *grouped])
    assert sorted(agent_graph(a).tools()) == ["crm.look", "look"]


def test_a_dead_handoff_reference_is_a_configuration_error():
    """The walk reads handoff(agent)'s target from a weak reference: when it is dead, the walk
    cannot check the target and says so (never skips it silently). In agents 0.24 the handoff's
    own invoke closure also holds the agent, so the reference is made dead by hand here."""
    h = handoff(Agent(name="B", model=scripted()))
    gone = Agent(name="gone")
    h._agent_ref = weakref.ref(gone)
    del gone
    gc.collect()
    assert h._agent_ref() is None
    a = Agent(name="A", model=scripted(), handoffs=[h])
    with pytest.raises(ConfigurationError, match="garbage collected"):
        agent_graph(a)


def test_a_hand_built_handoff_warns_that_its_target_is_unseen():
    """A Handoff built without handoff(agent) names its agent only at run time: warned."""

    async def invoke(ctx, args):  # pragma: no cover - never run
        raise AssertionError

    h = Handoff(tool_name="transfer_to_x", tool_description="x", input_json_schema={},
                on_invoke_handoff=invoke, agent_name="X")
    a = Agent(name="A", model=scripted(), handoffs=[h])
    with pytest.warns(UnseenAgentWarning, match="transfer_to_x"):
        agent_graph(a)


# --- F-04 ----------------------------------------------------------------------------------

def hotel_book(log):
    @function_tool
    @compensable(undo=lambda ctx: log.append(("cancel_hotel", ctx.result)))
    def book(city: str) -> str:
        log.append(("book_hotel", city))
        return "HT-1"

    return book


def car_book(log):
    @function_tool
    @compensable(undo=lambda ctx: log.append(("cancel_car", ctx.result)))
    def book(city: str) -> str:
        log.append(("book_car", city))
        return "CAR-1"

    return book


@pytest.mark.case("F-04")
async def test_recovery_runs_only_undos_of_the_graph_it_is_given(journals):
    """F-04: each INTENT journals its declaration id. Recovering with the outer agent alone (the
    inner agent ran inside a tool body, invisible to the walk) runs no undo found elsewhere in
    the process: the car stays dirty, named; recovering with a graph that reaches the inner
    agent undoes the car with the car's own undo, found by that id."""
    log: list = []
    inner = Agent(name="cars", model=scripted([("book", {"city": "Porto"}, "i1")], "car ok"),
                  tools=[car_book(log)])

    @function_tool
    @read_only
    async def rent_car(city: str) -> str:
        return str((await Runner.run(inner, city)).final_output)

    model = scripted([("rent_car", {"city": "Porto"}, "c1")], "done")
    outer = Agent(name="trip", model=model, tools=[rent_car])
    first = await Sagacity(journals()).run(outer, "go", close=False)
    assert first.status is SagaStatus.OPEN and log == [("book_car", "Porto")]
    intent = next(e for e in await journals().entries(first.saga_id)
                  if e.phase is Phase.INTENT and e.call_id == "i1")
    assert intent.payload["declaration"].split("#")[0].endswith(":car_book.<locals>.book")

    # A fresh Sagacity that knows only the outer agent; a hotel `book` is also declared in this
    # process under the same tool name: never used for the car's effect.
    decoy = Agent(name="trip", model=scripted(), tools=[rent_car, hotel_book(log)])
    refused = await Sagacity(journals()).recover(first.saga_id, decoy)
    assert refused.status is SagaStatus.COMPENSATION_FAILED
    (dirty,) = refused.report.still_dirty
    assert "no undo registered" in dirty.detail and "car_book.<locals>.book" in dirty.detail
    assert log == [("book_car", "Porto")]
    whole = Agent(name="trip", model=scripted(), tools=[rent_car, hotel_book(log)], handoffs=[inner])
    result = await Sagacity(journals()).recover(first.saga_id, whole)
    assert result.status is SagaStatus.COMPENSATED
    assert log == [("book_car", "Porto"), ("cancel_car", "CAR-1")]


def test_weakref_contract_of_handoff_targets_is_what_the_walk_reads():
    """The walk follows handoff(agent) through the SDK's weak reference (pinned in the SDK
    contract tests); a live agent is reached."""
    b = Agent(name="B", model=scripted())
    h = handoff(b)
    assert isinstance(h._agent_ref, weakref.ref)
    assert [x.name for x in agent_graph(Agent(name="A", model=scripted(), handoffs=[h])).agents] == ["A", "B"]


async def test_namespaced_tools_of_one_name_are_two_tools_each_with_its_own_undo(journals):
    """Keyed as the SDK keys them: `crm.look` and `erp.look` (tool_namespace) are two tools,
    journaled under their qualified names, and each call is undone by its own undo."""
    from agents import tool_namespace
    from agents.testing import ScriptedModel, assistant_message, function_call

    log: list = []

    def looker(system):
        @function_tool(name_override="look")
        @compensable(undo=lambda ctx: log.append(("undo", system, ctx.result)))
        def look(q: str) -> str:
            return f"{system}:{q}"

        return look  # one factory: both declarations share an id; the bound name tells them apart

    @function_tool(failure_error_function=None)
    @read_only
    def explode() -> str:
        raise RuntimeError("boom")

    crm = tool_namespace(name="crm", description="CRM", tools=[looker("crm")])
    erp = tool_namespace(name="erp", description="ERP", tools=[looker("erp")])
    model = ScriptedModel()
    model.enqueue([function_call("look", {"q": "a"}, call_id="c1", namespace="crm")])
    model.enqueue([function_call("look", {"q": "b"}, call_id="c2", namespace="erp")])
    model.enqueue([function_call("explode", {}, call_id="c3")])
    model.enqueue([assistant_message("x")])
    a = Agent(name="A", model=model, tools=[*crm, *erp, explode])
    journal = journals()
    result = await Sagacity(journal).run(a, "go")
    assert result.status is SagaStatus.COMPENSATED
    assert log == [("undo", "erp", "erp:b"), ("undo", "crm", "crm:a")]
    intents = [e.tool for e in await journal.entries(result.saga_id) if e.phase is Phase.INTENT]
    assert intents == ["crm.look", "erp.look", "explode"]


async def test_namespaced_irreversible_call_left_pending_keeps_the_saga_awaiting_approval(journals):
    """SagaRunHooks used directly (no request_approvals call) infers a pending approval from the
    irreversible calls the model asked for: a namespaced one (`bank.wire`) is found under the
    SDK's qualified name, so the saga is AWAITING_APPROVAL, never closed COMPLETED behind it."""
    from agents import Runner, tool_namespace
    from agents.testing import ScriptedModel, assistant_message, function_call

    ran: list = []

    @function_tool(name_override="wire", needs_approval=True)
    @irreversible
    def wire(amount: int) -> str:
        ran.append(amount)
        return "sent"

    bank = tool_namespace(name="bank", description="Bank", tools=[wire])
    model = ScriptedModel()
    model.enqueue([function_call("wire", {"amount": 5}, call_id="w1", namespace="bank")])
    model.enqueue([assistant_message("x")])
    a = Agent(name="A", model=model, tools=[*bank])
    journal = journals()
    async with SagaRunHooks(journal, agent=a) as hooks:
        result = await Runner.run(a, "go", hooks=hooks)
    assert result.interruptions
    assert hooks.status is SagaStatus.AWAITING_APPROVAL
    assert ran == []


def booker(kind: str, log: list):
    """One factory for every kind of booking: its tools share a qualname."""

    @function_tool(name_override="book")
    @compensable(undo=lambda ctx: log.append(f"cancel_{kind}:{ctx.result}"))
    def book(city: str) -> str:
        log.append(f"book_{kind}")
        return f"{kind}-1"

    return book


@pytest.mark.case("F-04")
async def test_one_factory_tools_met_at_run_time_never_get_each_others_undo(journals):
    """F-04, factory-made: `booker("car")` runs inside a tool body; recovery is given an agent
    whose graph holds `booker("hotel")` under the same tool name and qualname, and reaches the
    inner agent. The ids differ by the values the factory captured, so the car is undone by the
    car's undo (never the hotel's)."""
    log: list = []
    inner = Agent(name="cars", model=scripted([("book", {"city": "Porto"}, "i1")], "car ok"),
                  tools=[booker("car", log)])

    @function_tool
    @read_only
    async def rent_car(city: str) -> str:
        return str((await Runner.run(inner, city)).final_output)

    outer = Agent(name="trip", model=scripted([("rent_car", {"city": "Porto"}, "c1")], "done"),
                  tools=[rent_car])
    first = await Sagacity(journals()).run(outer, "go", close=False)
    assert first.status is SagaStatus.OPEN
    decoy = Agent(name="trip", model=scripted(), tools=[rent_car, booker("hotel", log)],
                  handoffs=[inner])
    result = await Sagacity(journals()).recover(first.saga_id, decoy)
    assert result.status is SagaStatus.COMPENSATED
    assert log == ["book_car", "cancel_car:car-1"]


def test_lambdas_of_one_module_share_an_id_that_is_marked_ambiguous():
    """Two different tools under one id (two lambdas of one module have the qualname
    `<lambda>`): the registry refuses to name either, so recovery never guesses an undo."""
    from sagacity_agents.core.declarations import declaration_by_id, is_ambiguous

    first = compensable(undo=lambda ctx: None)(lambda city: "a")
    second = compensable(undo=lambda ctx: None)(lambda city: "b")
    ident = first.__sagacity_declaration__.declaration_id
    assert ident == second.__sagacity_declaration__.declaration_id
    assert is_ambiguous(ident) and declaration_by_id(ident) is None


async def test_factory_tools_told_apart_only_by_objects_take_explicit_ids(journals):
    """A factory whose tools differ only by an object they capture: with an explicit
    declaration_id each, recovery undoes the car with the car's undo."""
    log: list = []

    class Backend:
        def __init__(self, kind: str) -> None:
            self.kind = kind

    def object_booker(backend: Backend):
        @function_tool(name_override="book")
        @compensable(undo=lambda ctx: log.append(f"cancel_{backend.kind}"),
                     declaration_id=f"booking.{backend.kind}")
        def book(city: str) -> str:
            log.append(f"book_{backend.kind}")
            return "ok"

        return book

    inner = Agent(name="cars", model=scripted([("book", {"city": "Porto"}, "i1")], "car ok"),
                  tools=[object_booker(Backend("car"))])

    @function_tool
    @read_only
    async def rent_car(city: str) -> str:
        return str((await Runner.run(inner, city)).final_output)

    outer = Agent(name="trip", model=scripted([("rent_car", {"city": "Porto"}, "c1")], "done"),
                  tools=[rent_car])
    first = await Sagacity(journals()).run(outer, "go", close=False)
    decoy = Agent(name="trip", model=scripted(),
                  tools=[rent_car, object_booker(Backend("hotel"))], handoffs=[inner])
    result = await Sagacity(journals()).recover(first.saga_id, decoy)
    assert result.status is SagaStatus.COMPENSATED
    assert log == ["book_car", "cancel_car"]


async def test_an_explicit_declaration_id_is_journaled():
    """compensable(..., declaration_id=...) is the id journaled with each INTENT."""
    journal = InMemoryJournal()

    @function_tool
    @compensable(undo=lambda ctx: None, declaration_id="cars.book")
    def book(city: str) -> str:
        return "ok"

    agent = Agent(name="A", model=scripted([("book", {"city": "x"}, "b1")], "done"), tools=[book])
    result = await Sagacity(journal).run(agent, "go")
    intent = next(e for e in await journal.entries(result.saga_id) if e.phase is Phase.INTENT)
    assert intent.payload["declaration"] == "cars.book"
