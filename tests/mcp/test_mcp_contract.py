"""The SDK facts protect_mcp_server is built on (agents 0.24, a real stdio MCP server), and N-01's
chaining of the application's own guardrails, extractor, meta resolver and approval policy."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agents import Agent, RunHooks
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tool_guardrails import (
    ToolGuardrailFunctionOutput,
    tool_input_guardrail,
    tool_output_guardrail,
)

from sagacity_agents import Sagacity, SagaStatus
from sagacity_agents.backends import Phase
from sagacity_agents.sdk import _sdk_internals as sdk
from sagacity_agents.sdk.mcp import protect_mcp_server

from .conftest import POLICY, Payments, stdio_server

pytestmark = pytest.mark.case("N-01")


async def test_contract_one_tool_context_through_every_seam_in_order(payments: Payments) -> None:
    seen: list[tuple[str, int]] = []

    @tool_input_guardrail
    async def inp(data: Any) -> ToolGuardrailFunctionOutput:
        seen.append(("input", id(data.context)))
        return ToolGuardrailFunctionOutput.allow()

    @tool_output_guardrail
    async def out(data: Any) -> ToolGuardrailFunctionOutput:
        seen.append(("output", id(data.context)))
        return ToolGuardrailFunctionOutput.allow()

    class Hooks(RunHooks[Any]):
        async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
            seen.append(("start", id(context)))

    def meta(ctx: Any) -> None:
        seen.append(("meta", id(ctx.run_context)))

    def extract(ctx: Any) -> None:
        seen.append(("extract", id(ctx.run_context)))

    model = ScriptedModel()
    model.enqueue([function_call("balance", json.dumps({"customer": "a"}), call_id="b1")])
    model.enqueue([assistant_message("ok")])
    from agents import Runner

    async with stdio_server(payments) as server:
        server.tool_input_guardrails = [inp]
        server.tool_output_guardrails = [out]
        server.tool_meta_resolver = meta
        server.custom_data_extractor = extract
        await Runner.run(Agent(name="a", model=model, mcp_servers=[server]), "go", hooks=Hooks())
    assert [name for name, _ in seen] == ["input", "start", "meta", "extract", "output"]
    assert len({ident for _, ident in seen}) == 1  # the same ToolContext object throughout
    assert sdk.mcp_approval_policy(server) is False  # require_approval=None, normalized


async def test_the_applications_own_seams_are_chained(payments: Payments, tmp_path) -> None:
    extracted: list[Any] = []

    @tool_input_guardrail
    async def no_ship(data: Any) -> ToolGuardrailFunctionOutput:
        if data.context.tool_name == "ship":
            return ToolGuardrailFunctionOutput.reject_content("shipping is closed")
        return ToolGuardrailFunctionOutput.allow()

    def own_meta(ctx: Any) -> dict[str, Any]:
        return {"tenant": "t1"}

    def own_extractor(ctx: Any) -> dict[str, Any]:
        extracted.append(ctx.tool_name)
        return {"mine": True}

    model = ScriptedModel()
    model.enqueue([function_call("balance", json.dumps({"customer": "a"}), call_id="b1"),
                   function_call("ship", json.dumps({"order": "o", "address": "x"}), call_id="s1")])
    model.enqueue([assistant_message("ok")])
    async with stdio_server(payments) as server:
        server.tool_input_guardrails = [no_ship]
        server.tool_meta_resolver = own_meta
        server.custom_data_extractor = own_extractor
        protect_mcp_server(server, policy=POLICY)
        assert server.tool_input_guardrails[0] is no_ship  # ours is appended, last
        sagacity = Sagacity(tmp_path / "j.db")
        result = await sagacity.run(Agent(name="a", model=model, mcp_servers=[server]), "go")
        entries = await sagacity.journal.entries(result.saga_id)
        await sagacity.aclose()
    assert result.status is SagaStatus.COMPLETED
    assert extracted == ["balance"]
    (_, _, meta), = payments.calls("balance")
    assert meta["tenant"] == "t1" and meta["sagacity/idempotency_key"].startswith("sgc-call-")
    assert payments.calls("ship") == []
    # The application's guardrail rejected ship before ours: no INTENT of it, REFUSED at most.
    assert not any(e.phase is Phase.INTENT and e.tool == "ship" for e in entries)


def test_contract_prefixed_mcp_tool_names_are_the_ones_the_sdk_gives() -> None:
    from types import SimpleNamespace

    from agents.mcp.util import MCPUtil

    from sagacity_agents.sdk._sdk_internals import mcp_prefixed_tool_names

    server = SimpleNamespace(name="payments")
    tools = [SimpleNamespace(name="charge"), SimpleNamespace(name="x" * 80)]  # the long one is hashed
    given = MCPUtil._build_prefixed_tool_name_overrides([(0, server, tools)], reserved_names=set())
    for index, tool in enumerate(tools):
        assert given[(0, index)] in mcp_prefixed_tool_names("payments", tool.name)
