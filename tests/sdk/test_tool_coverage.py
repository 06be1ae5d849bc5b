"""Nothing unseen, nothing refused that the SDK accepts (issue 20: M-01, M-02, M-03).

* M-01: a function tool nobody declared is journaled (INTENT with its raw arguments, then its
  outcome) and reported ("not undone: ...: no undo declared"); ``strict=True`` refuses it.
* M-02: the decorators take and refuse exactly what ``function_tool`` takes and refuses, and
  ``*args`` / ``**kwargs`` tools journal the arguments they receive. (The SDK's own suite, with
  every tool wrapped, is ``tests/sdk_suite/run_sdk_suite.py``; a fast subset of its shape cases
  is reproduced here.)
* M-03: two agents of a graph may each have a tool of one name; each call journals its agent
  and declaration, and its undo is found by that declaration.

Journaling cases run on every backend of ``tests/backends.py``.
"""

from __future__ import annotations

import functools
import inspect
from typing import Annotated, Any, Generic, TypeVar

import pytest
from agents import (
    Agent,
    RunContextWrapper,
    RunHooks,
    Runner,
    UserError,
    function_tool,
    handoff,
)

from sagacity_agents import (
    Sagacity,
    SagaRunHooks,
    SagaStatus,
    compensable,
    nested_agent_tool,
    no_undo,
    read_only,
)
from sagacity_agents.backends import Phase
from sagacity_agents.errors import ConfigurationError
from sagacity_agents.guardrails import saga_output_guardrail
from sagacity_agents.sdk.graph import agent_graph

from .helpers import scripted, tool_outputs

T = TypeVar("T")


async def tool_entries(journal, saga_id, call_id):
    return [e for e in await journal.entries(saga_id) if e.call_id == call_id]


# --- M-01: nothing unseen -------------------------------------------------------------------

def trip(log: list, *, fail: bool = True):
    @function_tool
    @compensable(undo=lambda ctx: log.append(("cancel_hotel", ctx.result)))
    def book_hotel(city: str) -> str:
        log.append(("book_hotel", city))
        return "HT-1"

    @function_tool  # nobody declared it
    def send_email(to: str, body: str) -> str:
        log.append(("email", to))
        return "sent"

    @function_tool
    @read_only
    def charge_card(amount: int) -> str:
        if fail:
            raise RuntimeError("card declined")
        return "charged"

    return book_hotel, send_email, charge_card


@pytest.mark.case("M-01")
async def test_an_undeclared_call_is_journaled_and_reported_still_dirty(journal):
    """M-01: send_email, declared nowhere, runs: INTENT (raw arguments, ``undeclared``, its
    agent) before its body, EXECUTED with its result; once the saga fails it is reported "not
    undone ... no undo declared" and counts as still dirty, while the hotel is undone."""
    log: list = []
    model = scripted([("book_hotel", {"city": "Lisbon"}, "c1")],
                     [("send_email", {"to": "ana@example.com", "body": "booked"}, "e1")],
                     [("charge_card", {"amount": 100}, "c3")], "Your trip is booked!")
    travel = Agent(name="travel", model=model, tools=list(trip(log)),
                   output_guardrails=[saga_output_guardrail()])
    result = await Sagacity(journal, policy="continue").run(travel, "go")
    assert result.status is SagaStatus.COMPENSATED
    assert log == [("book_hotel", "Lisbon"), ("email", "ana@example.com"), ("cancel_hotel", "HT-1")]
    intent, outcome = await tool_entries(journal, result.saga_id, "e1")
    assert intent.phase is Phase.INTENT and intent.seq < outcome.seq
    assert intent.payload["reversibility"] == "undeclared"
    assert intent.payload["raw_args"] == '{"to":"ana@example.com","body":"booked"}'
    assert intent.payload["agent"] == "travel" and "declaration" not in intent.payload
    assert outcome.phase is Phase.EXECUTED and outcome.payload["result"] == "sent"
    [dirty] = result.report.still_dirty
    assert (dirty.tool, dirty.call_id, dirty.detail) == ("send_email", "e1", "no undo declared")
    assert "not undone: send_email (call e1): no undo declared" in result.withheld_reason


@pytest.mark.case("M-01")
async def test_an_undeclared_call_that_raised_fails_the_saga(journal):
    """M-01: an undeclared tool that raises (the model gets the SDK's default error text) is
    journaled FAILED, and the saga fails as for a declared tool: the hotel is undone."""
    log: list = []

    @function_tool
    def flaky(n: int) -> str:
        raise RuntimeError("boom")

    book_hotel, _email, _charge = trip(log)
    model = scripted([("book_hotel", {"city": "Porto"}, "c1")], [("flaky", {"n": 1}, "f1")], "ok")
    result = await Sagacity(journal).run(Agent(name="a", model=model, tools=[book_hotel, flaky]), "go")
    assert result.status is SagaStatus.COMPENSATED
    assert log == [("book_hotel", "Porto"), ("cancel_hotel", "HT-1")]
    _intent, failed = await tool_entries(journal, result.saga_id, "f1")
    assert failed.phase is Phase.FAILED and "An error occurred while running the tool" in failed.payload["error"]


def nested_undeclared(model):
    @function_tool
    def lookup(q: str) -> str:
        return q

    inner = Agent(name="inner", model=model, tools=[lookup])
    return Agent(name="outer", model=model, tools=[inner.as_tool("ask_inner", "Ask inner")])


@pytest.mark.case("M-01")
@pytest.mark.parametrize("via", ["facade", "hooks"])
async def test_strict_refuses_a_graph_with_undeclared_tools_naming_each(journal, via):
    """M-01: strict=True (Sagacity and SagaRunHooks) refuses, before anything is journaled or
    the model is called, every function tool of the graph nobody declared (an ``as_tool`` agent
    and the tool inside it), each named with its path and how to declare it."""
    model = scripted("never")
    root = nested_undeclared(model)
    with pytest.raises(ConfigurationError) as caught:
        if via == "facade":
            await Sagacity(journal, strict=True).run(root, "go")
        else:
            async with SagaRunHooks(journal, agent=root, strict=True) as hooks:
                await Runner.run(root, "go", hooks=hooks)
    text = str(caught.value)
    assert isinstance(caught.value, UserError)
    assert "ask_inner (outer -> tool ask_inner)" in text
    assert "lookup (outer -> as_tool ask_inner -> inner -> tool lookup)" in text
    assert "protect_tool" in text and "nested_agent_tool" in text
    assert not model.calls and await journal.saga_ids() == []


class AddsTool(RunHooks):
    """An application hook that gives the agent a tool at run time (as MCP servers do)."""

    def __init__(self, tool):
        self.tool = tool

    async def on_agent_start(self, context, agent):
        if self.tool not in agent.tools:
            agent.tools.append(self.tool)


@pytest.mark.case("M-01")
@pytest.mark.parametrize("strict", [False, True], ids=["journaled", "strict"])
async def test_a_tool_appearing_at_run_time_is_journaled_or_refused(journal, strict):
    """M-01: a tool no walk of the graph saw (added by a hook when the agent starts) is
    journaled as undeclared; under strict=True its call is refused instead: FAILED, not run,
    and the run raises the ConfigurationError."""
    ran: list = []

    @function_tool
    def late(x: int) -> str:
        ran.append(x)
        return "late ok"

    model = scripted([("late", {"x": 1}, "l1")], "ok")
    result = await Sagacity(journal, strict=strict).run(
        Agent(name="a", model=model, tools=[]), "go", hooks=AddsTool(late))
    entries = await tool_entries(journal, result.saga_id, "l1")
    if strict:
        assert ran == [] and isinstance(result.exception, ConfigurationError)
        assert [e.phase for e in entries] == [Phase.FAILED] and entries[0].payload["not_run"]
    else:
        assert ran == [1] and result.status is SagaStatus.COMPLETED
        assert [e.phase for e in entries] == [Phase.INTENT, Phase.EXECUTED]
        assert entries[0].payload["reversibility"] == "undeclared"


# --- M-02: every tool shape as the SDK has it -----------------------------------------------

@pytest.mark.case("M-02")
async def test_varargs_tools_journal_the_arguments_they_receive(journal):
    """M-02: ``*args``, ``**kwargs`` (only) and a mix with a context, keyword-only parameter and
    defaults run inside a saga and journal exactly what the body received (``args=[1, 2]``,
    not ``{'ctx': 1, 'args': [2]}``); the ``**kwargs`` tool no longer fails on every call."""
    got: dict[str, Any] = {}

    @function_tool
    @no_undo
    def numbers(*args: int) -> str:
        got["numbers"] = args
        return "ok"

    @function_tool(strict_mode=False)
    @no_undo
    async def options(**kwargs: int) -> str:
        got["options"] = kwargs
        return "ok"

    @function_tool
    @no_undo
    def mixed(ctx: RunContextWrapper[Any], first: int, *rest: int, flag: bool = False) -> str:
        got["mixed"] = (first, rest, flag)
        return "ok"

    model = scripted([("numbers", {"args": [1, 2]}, "v1"),
                      ("options", {"kwargs": {"x": 1, "y": 2}}, "k1"),
                      ("mixed", {"first": 1, "rest": [2, 3], "flag": True}, "m1")], "done")
    result = await Sagacity(journal).run(Agent(name="a", model=model, tools=[numbers, options, mixed]), "go")
    assert result.status is SagaStatus.COMPLETED
    assert got == {"numbers": (1, 2), "options": {"x": 1, "y": 2}, "mixed": (1, (2, 3), True)}
    assert tool_outputs(model) == ["ok", "ok", "ok"]
    args = {e.call_id: e.payload["args"] for e in await journal.entries(result.saga_id)
            if e.phase is Phase.INTENT}
    assert args == {"v1": {"args": [1, 2]}, "k1": {"kwargs": {"x": 1, "y": 2}},
                    "m1": {"first": 1, "rest": [2, 3], "flag": True}}


class Plain:
    """Class doc."""

    def __call__(self, x: int) -> int:
        """Call doc.

        Args:
            x: the x.
        """
        return x


class OnlyCallDoc:
    async def __call__(self, x: int, *, scale: int = 2) -> int:
        """Scales x."""
        return x * scale


class Static:
    @staticmethod
    def __call__(x: int) -> int:
        return x


class ClassMethod:
    @classmethod
    def __call__(cls, x: int) -> int:
        return x


class SingleDispatch:
    @functools.singledispatchmethod
    def __call__(self, x: int) -> int:
        return x


class PartialMethod:
    def _f(self, a: int, x: int) -> int:
        return x

    __call__ = functools.partialmethod(_f, 1)


class Descriptor:
    class _D:
        def __get__(self, obj, owner=None):
            return lambda x: x

    __call__ = _D()


class WrapsCall:
    @functools.wraps(lambda x: x)
    def __call__(self, x: int) -> int:
        return x


class SignatureCall:
    def __call__(self, x: int) -> int:
        return x

    __call__.__signature__ = inspect.Signature()  # type: ignore[attr-defined]


class KeywordContext:
    def __call__(self, x: int, *, ctx: RunContextWrapper[Any]) -> int:
        return x


class VariadicContext:
    def __call__(self, *ctx: RunContextWrapper[Any]) -> int:
        return 1


class Generic_(Generic[T]):
    def __call__(self, x: int) -> int:
        return x


class NotAName_é:
    def __call__(self, x: int) -> int:
        return x


def annotated_context(ctx: Annotated[RunContextWrapper[Any], "the run"], x: int) -> int:
    """Reads the context."""
    return x


def only_kwargs(**kw: int) -> int:
    return len(kw)


SHAPE_CASES = {
    "plain-object": Plain, "async-object": OnlyCallDoc, "staticmethod": Static,
    "classmethod": ClassMethod, "singledispatchmethod": SingleDispatch,
    "partialmethod": PartialMethod, "descriptor": Descriptor, "wraps-on-call": WrapsCall,
    "signature-on-call": SignatureCall, "keyword-only-context": KeywordContext,
    "variadic-context": VariadicContext, "generic": Generic_, "bad-class-name": NotAName_é,
    "partial": lambda: functools.partial(annotated_context), "builtin-len": lambda: len,
    "builtin-print": lambda: print, "builtin-type": lambda: dict, "method-descriptor": lambda: str.upper,
    "annotated-context": lambda: annotated_context, "only-kwargs": lambda: only_kwargs,
    "a-class": lambda: Plain,
}
OPTIONS = {"default": {}, "no-docstring": {"use_docstring_info": False},
           "name-override": {"name_override": "renamed"}, "not-strict": {"strict_mode": False}}


def build(make, decorate: bool, options: dict[str, Any]) -> tuple[Any, ...]:
    try:
        target = make()
        tool = function_tool(read_only(target) if decorate else target, **options)
    except Exception as exc:  # noqa: BLE001 - the refusal itself is what is compared
        return ("refused", type(exc), str(exc))
    return ("taken", tool.name, tool.description, tool.params_json_schema, tool.strict_json_schema)


@pytest.mark.case("M-02")
@pytest.mark.parametrize("options", list(OPTIONS), ids=list(OPTIONS))
@pytest.mark.parametrize("shape", list(SHAPE_CASES), ids=list(SHAPE_CASES))
def test_shapes_taken_and_refused_exactly_as_function_tool(shape, options):
    """M-02 (the SDK suite's shape cases): for each shape and option set, the decorated
    callable is taken by function_tool with the same name, description, schema and strictness,
    or refused with the same exception type and message, as the undecorated one."""
    plain = build(SHAPE_CASES[shape], False, OPTIONS[options])
    ours = build(SHAPE_CASES[shape], True, OPTIONS[options])
    assert ours == plain


@pytest.mark.case("M-02")
async def test_callable_objects_and_annotated_contexts_run_inside_a_saga(journal):
    """M-02: a callable object (documented by its class, async, keyword-only default) and a
    function whose context is written ``Annotated[RunContextWrapper, ...]`` run in a saga: the
    body gets the context, the journal gets the arguments the body received."""
    model = scripted([("OnlyCallDoc", {"x": 4}, "o1"), ("annotated_context", {"x": 7}, "a1")], "done")
    tools = [function_tool(read_only(OnlyCallDoc())), function_tool(read_only(annotated_context))]
    assert tools[1].params_json_schema == function_tool(annotated_context).params_json_schema
    result = await Sagacity(journal).run(Agent(name="a", model=model, tools=tools), "go")
    assert result.status is SagaStatus.COMPLETED and tool_outputs(model) == ["8", "7"]
    args = {e.call_id: e.payload["args"] for e in await journal.entries(result.saga_id)
            if e.phase is Phase.INTENT}
    assert args == {"o1": {"x": 4, "scale": 2}, "a1": {"x": 7}}


@pytest.mark.case("M-02")
def test_no_docstring_is_read_with_use_docstring_info_false():
    """M-02 (from the SDK suite): with ``use_docstring_info=False`` neither the SDK nor the
    decorator reads the callable object's class docstring (here a descriptor that raises)."""

    class RaisingDoc:
        def __get__(self, instance, owner=None):
            raise AssertionError("the docstring was read")

    class Handler:
        def __call__(self, value: int) -> int:
            return value * 2

    Handler.__doc__ = RaisingDoc()  # type: ignore[assignment]
    tool = function_tool(read_only(Handler()), name_override="handler", use_docstring_info=False)
    assert tool.description == ""
    assert tool.params_json_schema["properties"]["value"]["type"] == "integer"


@pytest.mark.case("M-02")
def test_wrapped_stays_our_wrapper():
    """M-02, the one documented difference: ``FunctionTool.__wrapped__`` is our wrapper (it
    journals inside a saga), not the user's function, which ``inspect.unwrap`` still reaches."""

    def look(q: str) -> str:
        return q

    tool = function_tool(read_only(look))
    assert tool.__wrapped__ is not look and inspect.unwrap(tool.__wrapped__) is look


# --- M-03: one tool name on several agents --------------------------------------------------

def booker(kind: str, log: list):
    @function_tool(name_override="book")
    @compensable(undo=lambda ctx: log.append((f"cancel_{kind}", ctx.result)))
    def book(city: str) -> str:
        log.append((f"book_{kind}", city))
        return f"{kind.upper()}-1"

    return book


def declined():
    @function_tool
    @read_only
    def charge(amount: int) -> str:
        raise RuntimeError("card declined")

    return charge


@pytest.mark.case("M-03")
@pytest.mark.parametrize("how", ["as_tool", "nested_agent_tool", "handoff"])
async def test_same_name_on_two_agents_each_call_undone_by_its_own_undo(journal, how):
    """M-03: the trip agent's ``book`` (a hotel) and the cars agent's ``book`` (a car), reached
    through as_tool, nested_agent_tool or a handoff, both run; each INTENT journals its agent
    and its own declaration; when the card is declined each is undone by its own undo, newest
    first."""
    log: list = []
    if how == "handoff":
        model = scripted([("book", {"city": "Porto"}, "c1")], [("transfer_to_cars", {}, "h1")],
                         [("book", {"city": "Porto"}, "i1")], [("charge", {"amount": 5}, "c3")], "ok")
        cars = Agent(name="cars", model=model, tools=[booker("car", log), declined()])
        trip = Agent(name="trip", model=model, tools=[booker("hotel", log)], handoffs=[handoff(cars)])
    else:
        cars = Agent(name="cars", model=scripted([("book", {"city": "Porto"}, "i1")], "car ok"),
                     tools=[booker("car", log)])
        rent = cars.as_tool("rent_car", "Rents a car")
        if how == "nested_agent_tool":
            rent = nested_agent_tool(rent)
        model = scripted([("book", {"city": "Porto"}, "c1")], [("rent_car", {"input": "Porto"}, "c2")],
                         [("charge", {"amount": 5}, "c3")], "ok")
        trip = Agent(name="trip", model=model, tools=[booker("hotel", log), rent, declined()])
    result = await Sagacity(journal, policy="continue").run(trip, "go")
    assert result.status is SagaStatus.COMPENSATED
    assert log == [("book_hotel", "Porto"), ("book_car", "Porto"), ("cancel_car", "CAR-1"),
                   ("cancel_hotel", "HOTEL-1")]
    intents = {e.call_id: e.payload for e in await journal.entries(result.saga_id)
               if e.phase is Phase.INTENT and e.tool == "book"}
    assert intents["c1"]["agent"] == "trip" and intents["i1"]["agent"] == "cars"
    assert intents["c1"]["declaration"] != intents["i1"]["declaration"]


@pytest.mark.case("M-03")
def test_two_tools_of_one_name_on_one_agent_are_refused_naming_both_paths():
    """M-03: the one real ambiguity, two different tools of one name on one agent (the SDK warns
    and lets the last win), is refused by the graph walk, naming both paths once; the same name
    on two agents is not."""
    log: list = []
    model = scripted()
    cars = Agent(name="cars", model=model, tools=[booker("car", log)])
    trip = Agent(name="trip", model=model, tools=[booker("hotel", log)], handoffs=[cars])
    assert [site.agent for site in agent_graph(trip).sites] == ["trip", "cars"]
    trip.tools.append(booker("boat", log))
    with pytest.raises(ConfigurationError) as caught:
        agent_graph(trip)
    assert isinstance(caught.value, UserError)
    assert str(caught.value).count("trip -> tool book") == 2
    # the two paths read alike; each names its place in agent.tools and its declaration
    assert "(tools[0], declared " in str(caught.value) and "(tools[1], declared " in str(caught.value)
    assert "agent 'trip' has two different tools named 'book'" in str(caught.value)


@pytest.mark.case("M-03")
async def test_same_name_met_only_at_run_time_is_undone_by_its_own_undo(journal):
    """M-03: an agent run with a plain Runner.run inside a tool body (no walk sees it) has its own
    ``book``: it runs (it used to be refused), and its effect is undone by the car's undo while
    the hotel's is undone by the hotel's."""
    log: list = []
    cars = Agent(name="cars", model=scripted([("book", {"city": "Porto"}, "i1")], "car ok"),
                 tools=[booker("car", log)])

    @function_tool
    @read_only
    async def rent_car(city: str) -> str:
        return str((await Runner.run(cars, f"car in {city}")).final_output)

    model = scripted([("book", {"city": "Porto"}, "c1")], [("rent_car", {"city": "Porto"}, "c2")],
                     [("charge", {"amount": 5}, "c3")], "ok")
    trip = Agent(name="trip", model=model, tools=[booker("hotel", log), rent_car, declined()])
    result = await Sagacity(journal).run(trip, "go")
    assert result.status is SagaStatus.COMPENSATED
    assert log == [("book_hotel", "Porto"), ("book_car", "Porto"), ("cancel_car", "CAR-1"),
                   ("cancel_hotel", "HOTEL-1")]
