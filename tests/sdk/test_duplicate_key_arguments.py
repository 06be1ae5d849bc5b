"""C-11: tool arguments with a duplicate key never reach a declared tool's body inside a saga.

The SDK parses the model's argument text with ``json.loads`` (the last value wins), so without
this check a compensatable ``pay`` given ``{"to":"alice","to":"mallory"}`` paid mallory, and its
INTENT recorded only ``mallory``: the ambiguity the model produced was neither refused nor visible.
Irreversible calls were already rejected at the pause (docs/approvals.md).
"""

from __future__ import annotations

import pytest
from agents import function_tool, set_tracing_disabled

from sagacity_agents import Sagacity, SagaStatus, compensable

from .helpers import agent, phases, scripted, tool_outputs

pytestmark = pytest.mark.case("C-11")

set_tracing_disabled(True)

DUPLICATE = '{"to":"alice","to":"mallory"}'


def _tools(paid: list[str]) -> list:
    @function_tool
    @compensable(undo=lambda ctx: None, scope="payments")
    async def pay(to: str) -> str:
        paid.append(to)
        return f"paid {to}"

    @function_tool
    @compensable(undo=lambda ctx: None, scope="payments")
    def pay_sync(to: str) -> str:
        paid.append(to)
        return f"paid {to}"

    return [pay, pay_sync]


async def test_duplicate_key_arguments_do_not_run_async_or_sync_tool_body() -> None:
    """C-11: body not run, nothing journaled for the call, the SDK's usual error text to the model
    (as for invalid JSON), saga not failed."""
    for name in ("pay", "pay_sync"):
        paid: list[str] = []
        model = scripted([(name, DUPLICATE, "c1")], "done")
        sagacity = Sagacity(":memory:")
        result = await sagacity.run(agent(model, *_tools(paid)), "go")
        assert paid == [], name
        assert phases(await sagacity.journal.entries(result.saga_id)) == [], name
        assert result.status is SagaStatus.COMPLETED, name
        (output,) = tool_outputs(model)
        assert output.startswith("An error occurred while running the tool"), name


async def test_duplicate_key_outside_a_saga_behaves_like_the_sdk() -> None:
    """Outside a saga a decorated tool behaves exactly like the undecorated one (last value)."""
    from agents import Runner

    paid: list[str] = []
    model = scripted([("pay", DUPLICATE, "c1")], "done")
    await Runner.run(agent(model, *_tools(paid)), "go")
    assert paid == ["mallory"]
