"""Transparent to every tool shape the SDK accepts (issue 7, item 7: F-08, F-09).

Decorating accepts what ``function_tool`` accepts, the decorated tool looks the same to the SDK
and the model, and outside a saga it behaves exactly as the undecorated one.
"""

from __future__ import annotations

import inspect

import pytest
from agents import AgentHooks, Runner, UserError, function_tool

from sagacity_agents import (
    SagaRunHooks,
    Sagacity,
    SagaStatus,
    compensable,
    irreversible,
    no_undo,
    read_only,
)
from sagacity_agents.backends import Phase
from sagacity_agents.errors import ConfigurationError, DeclarationError

from .helpers import agent, scripted, tool_outputs


class Doubler:
    """Doubles numbers."""

    def __call__(self, x: int) -> int:
        return 2 * x


class AsyncDoubler:
    async def __call__(self, x: int) -> int:
        """Double x, asynchronously."""
        return 2 * x


def add(x: int, /, y: int) -> int:
    """Add two numbers."""
    return x + y


def shift(ctx: int, by: int) -> int:
    """A user parameter named ctx that is not a context."""
    return ctx + by


SHAPES = {
    # F-08: callable objects, sync and async __call__, with name_override
    "F-08-sync": (lambda: Doubler(), {"name_override": "double"}, {"x": 21}, 42),
    "F-08-async": (lambda: AsyncDoubler(), {"name_override": "double"}, {"x": 21}, 42),
    # F-09: positional-only parameters
    "F-09": (lambda: add, {}, {"x": 1, "y": 2}, 3),
    "ctx-param": (lambda: shift, {}, {"ctx": 1, "by": 2}, 3),
}


def built(shape, decorated: bool):
    make, options, _args, _result = SHAPES[shape]
    target = make()
    return function_tool(no_undo(target) if decorated else target, **options)


@pytest.mark.case("F-08", "F-09")
@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_sdk_sees_the_same_tool(shape):
    """F-08 / F-09: name, description, JSON schema and sync/async kind are those of the
    undecorated tool."""
    plain, ours = built(shape, False), built(shape, True)
    assert ours.name == plain.name
    assert ours.description == plain.description
    assert ours.params_json_schema == plain.params_json_schema
    assert ours.strict_json_schema == plain.strict_json_schema


@pytest.mark.case("F-08", "F-09")
@pytest.mark.parametrize("shape", list(SHAPES))
async def test_outside_a_saga_the_tool_behaves_as_the_undecorated_one(shape):
    """F-08 / F-09: outside a saga, the model gets the same output from both."""
    _make, _options, args, result = SHAPES[shape]
    outputs = []
    for decorated in (False, True):
        tool = built(shape, decorated)
        model = scripted([(tool.name, args, "c1")], "done")
        run = await Runner.run(agent(model, tool), "go")
        assert run.final_output == "done"
        outputs.append(tool_outputs(model))
    assert outputs[0] == outputs[1] == [str(result)]


@pytest.mark.case("F-08", "F-09")
@pytest.mark.parametrize("shape", list(SHAPES))
async def test_inside_a_saga_the_call_is_journaled_with_its_arguments(any_journal, shape):
    """F-08: function_tool(no_undo(Doubler()), name_override="double") with {"x": 21} journals
    INTENT {"x": 21} and EXECUTED 42 (sync and async __call__); F-09: add(x, /, y) with
    {"x": 1, "y": 2} journals {"x": 1, "y": 2} and 3. Both COMPLETED."""
    _make, _options, args, result = SHAPES[shape]
    tool = built(shape, True)
    model = scripted([(tool.name, args, "c1")], "done")
    outcome = await Sagacity(any_journal).run(agent(model, tool), "go")
    assert outcome.status is SagaStatus.COMPLETED
    entries = [e for e in await any_journal.entries(outcome.saga_id) if e.tool == tool.name]
    assert [e.phase for e in entries] == [Phase.INTENT, Phase.EXECUTED]
    assert entries[0].payload["args"] == args
    assert entries[1].payload["result"] == result
    assert tool_outputs(model) == [str(result)]


def test_unwrap_reaches_the_users_function_and_its_own_signature():
    """inspect.unwrap on the tool's function reaches the user's function, whose signature is the
    user's own. A callable object's wrapper is itself a callable object (the SDK refuses
    instances carrying ``__wrapped__``): named as the user's class, with the user's parameters
    behind the added context."""
    tool = function_tool(read_only(add))
    assert inspect.unwrap(tool.__wrapped__) is add
    assert inspect.signature(inspect.unwrap(tool.__wrapped__)) == inspect.signature(add)
    doubler = Doubler()
    tool = function_tool(read_only(doubler), name_override="double")
    wrapper = tool.__wrapped__
    assert type(wrapper).__name__ == "Doubler" and wrapper is not doubler
    assert list(inspect.signature(wrapper).parameters)[1:] == list(inspect.signature(doubler).parameters)


def test_a_decorated_function_called_directly_is_the_users_function():
    """Outside a saga, calling the decorated function in Python is calling the user's."""
    assert read_only(add)(1, y=2) == 3
    assert read_only(shift)(1, 2) == 3


def test_configuration_mistakes_of_the_sdk_layer_are_also_user_errors():
    """`except UserError` keeps working for the saga layer's own mistakes."""

    @function_tool
    def done() -> str:
        return "x"

    for mistake in (lambda: read_only(done), lambda: compensable(undo=None),  # type: ignore[arg-type]
                    lambda: read_only(42), lambda: read_only(classify=42)(add)):
        with pytest.raises(DeclarationError) as caught:
            mistake()
        assert isinstance(caught.value, UserError)


async def test_an_irreversible_tool_without_approval_is_a_user_error(any_journal):
    @function_tool
    @irreversible
    def wire(amount: int) -> str:
        return "sent"

    with pytest.raises(ConfigurationError) as caught:
        await Sagacity(any_journal).run(agent(scripted(), wire), "go")
    assert isinstance(caught.value, UserError)


async def test_agent_hooks_passed_as_run_hooks_are_refused_with_the_sdks_type_error(any_journal):
    """An AgentHooks given as run hooks raises the SDK's own TypeError before anything runs
    (nothing journaled, the model never called)."""
    model = scripted("never")
    with pytest.raises(TypeError, match="Run hooks must be instances of RunHooks") as caught:
        await Sagacity(any_journal).run(agent(model), "go", hooks=AgentHooks())
    with pytest.raises(TypeError) as direct:
        await Runner.run(agent(scripted("x")), "go", hooks=AgentHooks())
    assert str(caught.value) == str(direct.value)
    with pytest.raises(TypeError, match="Run hooks must be instances of RunHooks"):
        SagaRunHooks(any_journal, hooks=AgentHooks())
    assert not model.calls
    assert await any_journal.saga_ids() == []
