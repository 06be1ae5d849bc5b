"""Contract tests: the openai-agents facts (../shared/sdk-notes.md) this library relies on.

If an SDK upgrade breaks one of these, the saga layer's guarantees may silently change: each
test names the fact it pins.
"""

from __future__ import annotations

import contextvars

import pytest
from agents import Agent, RunContextWrapper, Runner, UserError, function_tool
from agents.tool_context import ToolContext

from sagacity_agents import Sagacity, SagaStatus, compensable, no_undo, read_only
from sagacity_agents.backends import InMemoryJournal, Phase

from .helpers import agent, phases, scripted, tool_outputs

DEFAULT_ERROR = "An error occurred while running the tool. Please try again."


async def test_sdk_swallows_a_raising_tool_into_a_message():
    """Fact: a plain @function_tool that raises does not fail the run; the model gets a fixed
    text. This is the failure the saga layer exists to catch."""

    @function_tool
    def explode() -> str:
        raise RuntimeError("boom")

    model = scripted([("explode", {}, "x1")], "all fine")
    result = await Runner.run(agent(model, explode), "go")
    assert result.final_output == "all fine"
    assert tool_outputs(model) == [DEFAULT_ERROR]


async def test_saga_detects_tool_failure_even_when_the_sdk_swallows_it():
    """The original's headline regression: the SDK converts the exception to a message, yet the
    saga is marked failed and compensates (policy CONTINUE lets the model carry on)."""
    from sagacity_agents import FailurePolicy

    undone: list[str] = []

    @function_tool
    @compensable(undo=lambda ctx: undone.append("hotel"))
    async def book_hotel(city: str) -> str:
        return "H1"

    @function_tool
    @no_undo
    async def charge(amount: int) -> str:
        raise RuntimeError("card declined")

    model = scripted([("book_hotel", {"city": "Rome"}, "a")], [("charge", {"amount": 5}, "b")], "booked!")
    result = await Sagacity(InMemoryJournal(), policy=FailurePolicy.CONTINUE).run(
        agent(model, book_hotel, charge), "go"
    )
    assert tool_outputs(model)[-1] == DEFAULT_ERROR  # the SDK hid it from the model
    assert result.run_result.final_output == "booked!"  # and the model carried on
    assert result.status is SagaStatus.COMPENSATED
    assert undone == ["hotel"]
    assert isinstance(result.root_cause, RuntimeError)


async def test_failure_error_function_none_raises_user_error_with_cause():
    """Fact: failure_error_function=None makes the run raise UserError from the raw exception."""

    @function_tool(failure_error_function=None)
    def explode() -> str:
        raise KeyError("k")

    with pytest.raises(UserError) as info:
        await Runner.run(agent(scripted([("explode", {}, "x1")], "x"), explode), "go")
    assert isinstance(info.value.__cause__, KeyError)


def _schema_facts(tool):
    return (
        tool.name,
        tool.description,
        tool.params_json_schema,
        tool.strict_json_schema,
        tool.needs_approval,
        tool.timeout_seconds,
        tool.timeout_behavior,
        tool.is_enabled,
    )


def test_decorated_tool_is_identical_to_function_tool_alone():
    """Name, description, JSON schema and every function_tool option are the SDK's own."""

    def make(decorate):
        async def lookup(ctx: RunContextWrapper, city: str, nights: int = 2) -> str:
            """Look up a hotel.

            Args:
                city: The city to search.
                nights: How many nights.
            """
            return city

        return function_tool(
            decorate(lookup), name_override="find_hotel", timeout=3, needs_approval=False,
            strict_mode=True,
        )

    plain = make(lambda f: f)
    wrapped = make(read_only)
    assert _schema_facts(wrapped) == _schema_facts(plain)
    assert "city" in wrapped.params_json_schema["properties"]
    assert wrapped.params_json_schema["properties"]["city"]["description"] == "The city to search."


def test_wrapper_adds_a_context_parameter_the_sdk_strips():
    """Fact: a leading ctx: ToolContext added through __signature__ is stripped from the schema."""

    def sync_tool(amount: int, to: str, currency: str = "USD") -> str:
        """Send money."""
        return "ok"

    plain = function_tool(sync_tool)
    wrapped = function_tool(no_undo(sync_tool))
    assert _schema_facts(wrapped) == _schema_facts(plain)


def test_future_annotations_module_keeps_schema(tmp_path, monkeypatch):
    """Same with `from __future__ import annotations` (string annotations)."""
    src = tmp_path / "fut_tools.py"
    src.write_text(
        "from __future__ import annotations\n"
        "from agents import function_tool\n"
        "from sagacity_agents import read_only\n"
        "def f(x: int, y: list[str] | None = None) -> str:\n    '''Doc.'''\n    return ''\n"
        "plain = function_tool(f)\n"
        "wrapped = function_tool(read_only(f))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    mod = importlib.import_module("fut_tools")
    assert _schema_facts(mod.wrapped) == _schema_facts(mod.plain)


async def test_contextvar_reaches_sync_async_and_parallel_tools():
    """Fact: a ContextVar set before Runner.run is visible in async tools, sync tools (worker
    threads) and parallel calls: the saga scope relies on it."""
    var: contextvars.ContextVar[str] = contextvars.ContextVar("v", default="unset")
    seen: list[str] = []

    @function_tool
    async def a() -> str:
        seen.append(var.get())
        return "a"

    @function_tool
    def s() -> str:
        seen.append(var.get())
        return "s"

    var.set("saga")
    await Runner.run(agent(scripted([("a", {}, "1"), ("s", {}, "2")], "x"), a, s), "go")
    assert seen == ["saga", "saga"] or sorted(seen) == ["saga", "saga"]


async def test_invalid_arguments_never_reach_the_body():
    """Fact: malformed arguments are rejected by the SDK before the function runs: no INTENT and
    no saga failure (C-06 (b), (c), journaling part)."""
    journal = InMemoryJournal()
    ran: list[int] = []

    @function_tool
    @no_undo
    def transfer(amount: int, to: str, currency: str = "USD") -> str:
        ran.append(amount)
        return "sent"

    model = scripted(
        [("transfer", '{"amount": "100", "to": "acct', "t1")],
        [("transfer", '{"amount": NaN, "to": "acct-9"}', "t2")],
        "done",
    )
    result = await Sagacity(journal).run(agent(model, transfer), "go")
    entries = await journal.entries(result.saga_id)
    assert ran == []
    assert phases(entries) == []
    assert result.status is SagaStatus.COMPLETED


@pytest.mark.case("C-06")
async def test_intent_holds_the_validated_values_the_body_receives():
    """C-06 (a): INTENT args are what the body gets: amount 100 as an int, currency filled in."""
    journal = InMemoryJournal()
    got: list[tuple] = []

    @function_tool
    @no_undo
    def transfer(amount: int, to: str, currency: str = "USD") -> str:
        got.append((amount, to, currency))
        return "sent"

    model = scripted([("transfer", '{"amount":"100","to":"acct-9"}', "t1")], "done")
    result = await Sagacity(journal).run(agent(model, transfer), "go")
    intent = next(e for e in await journal.entries(result.saga_id) if e.phase is Phase.INTENT)
    assert got == [(100, "acct-9", "USD")]
    assert intent.payload["args"] == {"amount": 100, "to": "acct-9", "currency": "USD"}
    assert type(intent.payload["args"]["amount"]) is int


async def test_tool_context_param_gives_call_id_and_is_passed_through():
    """A tool that already takes ctx: ToolContext keeps receiving it; the journal has its call id."""
    journal = InMemoryJournal()
    ids: list[str] = []

    @function_tool
    @read_only
    async def who(ctx: ToolContext, x: int) -> str:
        ids.append(ctx.tool_call_id)
        return "me"

    model = scripted([("who", {"x": 1}, "call-7")], "done")
    result = await Sagacity(journal).run(agent(model, who), "go")
    intent = next(e for e in await journal.entries(result.saga_id) if e.phase is Phase.INTENT)
    assert ids == ["call-7"] and intent.call_id == "call-7"
    assert intent.payload["args"] == {"x": 1}


def test_as_tool_has_no_wrapped_function():
    """Fact: agent.as_tool returns a FunctionTool without __wrapped__ (hence the fallback)."""
    inner = Agent(name="inner", model=scripted("x"))
    tool = inner.as_tool(tool_name="inner", tool_description="d")
    assert getattr(tool, "__wrapped__", None) is None


async def test_agents_exception_from_a_hook_passes_through_unwrapped():
    """Fact: an AgentsException subclass raised from a RunHooks callback leaves Runner.run as
    itself (SagaStopped relies on it to stop a run at the first failure)."""
    from agents import AgentsException, RunHooks

    class Stop(AgentsException):
        pass

    class Hooks(RunHooks):
        async def on_tool_end(self, context, agent, tool, result):
            raise Stop("stop here")

    @function_tool
    def ping() -> str:
        return "pong"

    with pytest.raises(Stop, match="stop here"):
        await Runner.run(agent(scripted([("ping", {}, "p1")], "x"), ping), "go", hooks=Hooks())


async def test_protect_tool_journals_a_hand_built_tool_through_its_failure_formatter():
    """Fact pinned for the fallback: a copy of a FunctionTool with its failure formatter swapped
    (the SDK's internal set_function_tool_failure_error_function) still converts the error for
    the model, and our formatter sees the raw exception first."""
    from sagacity_agents import protect_tool
    from sagacity_agents.saga import Reversibility

    @function_tool
    def legacy(x: int) -> str:
        raise ValueError("legacy broke")

    journal = InMemoryJournal()
    protected = protect_tool(legacy, reversibility=Reversibility.NO_UNDO)
    assert protected is not legacy and legacy.tool_input_guardrails in (None, [])
    model = scripted([("legacy", '{"x": 1}', "l1")], "x")
    from sagacity_agents import FailurePolicy

    result = await Sagacity(journal, policy=FailurePolicy.CONTINUE).run(agent(model, protected), "go")
    entries = await journal.entries(result.saga_id)
    tool_entries = [e for e in entries if e.tool == "legacy"]
    assert [e.phase for e in tool_entries] == [Phase.INTENT, Phase.FAILED]
    assert tool_entries[0].payload["raw_args"] == '{"x": 1}'
    assert "legacy broke" in tool_entries[1].payload["error"]
    assert tool_outputs(model) == [DEFAULT_ERROR]
    assert result.status is SagaStatus.COMPENSATED


# --- private SDK names read by sagacity_agents/sdk/_sdk_internals.py (one test each) ----------

def test_private_handoff_agent_ref_is_a_weak_reference_to_the_target():
    """Pinned: ``handoff(agent)`` keeps its target in ``Handoff._agent_ref``, a weakref.ref
    (graph walk: handoff objects)."""
    import weakref

    from agents import handoff

    from sagacity_agents.sdk import _sdk_internals as sdk

    target = Agent(name="B", model=scripted())
    made = handoff(target)
    assert isinstance(made._agent_ref, weakref.ref) and made._agent_ref() is target
    assert sdk.handoff_target(made) is target


def test_private_is_agent_tool_flag_is_set_by_as_tool_and_kept_by_copies():
    """Pinned: ``Agent.as_tool`` sets ``FunctionTool._is_agent_tool = True``; ``copy.copy`` (as
    ``nested_agent_tool`` makes) keeps it; a plain function tool has it False."""
    import copy

    from sagacity_agents import nested_agent_tool

    inner = Agent(name="inner", model=scripted())
    tool = inner.as_tool(tool_name="inner", tool_description="d")
    assert tool._is_agent_tool is True
    assert copy.copy(tool)._is_agent_tool is True
    assert nested_agent_tool(tool)._is_agent_tool is True

    @function_tool
    def plain() -> str:
        return "x"

    assert plain._is_agent_tool is False


def test_private_agent_instance_is_the_agent_behind_as_tool():
    """Pinned: ``FunctionTool._agent_instance`` is the agent ``as_tool`` was called on (a strong
    reference), also on a protected copy (graph walk: agents as tools)."""
    from sagacity_agents import nested_agent_tool
    from sagacity_agents.sdk import _sdk_internals as sdk

    inner = Agent(name="inner", model=scripted())
    tool = inner.as_tool(tool_name="inner", tool_description="d")
    assert tool._agent_instance is inner
    assert sdk.agent_of_tool(nested_agent_tool(tool)) is inner


def test_internal_failure_formatter_seam_reads_and_sets_the_formatter():
    """Pinned: ``agents.tool.resolve_/set_function_tool_failure_error_function`` (internal,
    re-exported by ``_sdk_internals``) read and replace a tool's failure formatter."""
    import copy

    from sagacity_agents.sdk._sdk_internals import (
        resolve_function_tool_failure_error_function,
        set_function_tool_failure_error_function,
    )

    @function_tool
    def plain() -> str:
        return "x"

    assert resolve_function_tool_failure_error_function(plain) is not None
    other = copy.copy(plain)

    def formatter(ctx, error):
        return "formatted"

    set_function_tool_failure_error_function(other, formatter)
    assert resolve_function_tool_failure_error_function(other) is formatter
    assert resolve_function_tool_failure_error_function(plain) is not formatter


def test_internal_validate_run_hooks_refuses_agent_hooks_with_a_type_error():
    """Pinned: ``agents.run_internal.turn_preparation.validate_run_hooks`` (internal) raises the
    SDK's TypeError for AgentHooks and accepts RunHooks (SagaRunHooks checks user hooks with it
    before anything runs)."""
    from agents import AgentHooks, RunHooks

    from sagacity_agents.sdk._sdk_internals import validate_run_hooks

    hooks = RunHooks()
    assert validate_run_hooks(hooks) is hooks
    with pytest.raises(TypeError, match="Attach AgentHooks to an Agent"):
        validate_run_hooks(AgentHooks())


def test_public_qualified_names_key_tools_calls_and_approvals_alike():
    """Pinned (public): ``FunctionTool.qualified_name``, ``ToolContext.qualified_tool_name`` and
    ``ToolApprovalItem.qualified_name`` are ``namespace.name`` for a tool_namespace() tool, so the
    graph, the journal and approvals key a tool the same way."""
    from agents import tool_namespace
    from agents.items import ToolApprovalItem
    from agents.tool_context import ToolContext

    @function_tool
    def look(q: str) -> str:
        return q

    (grouped,) = tool_namespace(name="crm", description="CRM", tools=[look])
    assert look.qualified_name == "look" and grouped.qualified_name == "crm.look"
    ctx = ToolContext(context=None, tool_name="look", tool_call_id="c1", tool_arguments="{}",
                      tool_namespace="crm")
    assert ctx.qualified_tool_name == "crm.look"
    item = ToolApprovalItem(agent=Agent(name="A"), raw_item={
        "type": "function_call", "name": "look", "call_id": "c1", "arguments": "{}",
        "namespace": "crm"})
    assert item.qualified_name == "crm.look"


def test_normalize_callable_object_is_the_sdks_own_adapter_and_refusal():
    """Fact (M-02): ``agents.tool._normalize_function_tool_callable`` adapts a plain callable
    object into a function with the object's ``__signature__`` (self bound) and resolved
    ``__annotations__``, and raises the SDK's ``UserError`` for a partial; the decorators ask it
    (``_sdk_internals.normalize_callable_object``) which callable objects to take."""
    import functools

    from agents import UserError

    from sagacity_agents.sdk._sdk_internals import normalize_callable_object

    class Halver:
        def __call__(self, x: int) -> float:
            return x / 2

    adapter = normalize_callable_object(Halver())
    assert list(adapter.__signature__.parameters) == ["x"]
    assert adapter.__annotations__ == {"x": int, "return": float}
    assert adapter(3) == 1.5
    with pytest.raises(UserError, match="functools.partial"):
        normalize_callable_object(functools.partial(Halver()))


async def test_internal_default_runner_runs_every_run_as_tool_and_streamed_included():
    """Fact (sdk/nested.py's seam): ``Runner.run``, ``Runner.run_streamed`` and the nested run of
    an ``Agent.as_tool`` tool (plain and with ``on_stream``) all go through
    ``get_default_agent_runner()``, with the run's hooks and, for ``as_tool``, a ``ToolContext``
    carrying the outer call's id as the nested run's context."""
    from agents.run import AgentRunner, get_default_agent_runner, set_default_agent_runner

    seen: list = []
    previous = get_default_agent_runner()

    class Spy(AgentRunner):
        async def run(self, starting_agent, input, **kwargs):
            context = kwargs.get("context")
            seen.append(("run", starting_agent.name, getattr(context, "tool_call_id", None)))
            return await previous.run(starting_agent, input, **kwargs)

        def run_streamed(self, starting_agent, input, **kwargs):
            context = kwargs.get("context")
            seen.append(("streamed", starting_agent.name, getattr(context, "tool_call_id", None)))
            return previous.run_streamed(starting_agent, input, **kwargs)

    inner = Agent(name="inner", model=scripted("a", "b"))
    outer = Agent(name="outer", model=scripted(
        [("ask", {"input": "x"}, "q1"), ("ask_streamed", {"input": "y"}, "q2")], "done"),
        tools=[inner.as_tool("ask", "Ask"), inner.as_tool("ask_streamed", "Ask", on_stream=lambda e: None)])
    set_default_agent_runner(Spy())
    try:
        await Runner.run(outer, "go")
        stream = Runner.run_streamed(Agent(name="plain", model=scripted("hi")), "go")
        async for _ in stream.stream_events():
            pass
    finally:
        set_default_agent_runner(previous)
    assert seen[0] == ("run", "outer", None)
    assert sorted(seen[1:3]) == [("run", "inner", "q1"), ("streamed", "inner", "q2")]
    assert seen[3] == ("streamed", "plain", None)
