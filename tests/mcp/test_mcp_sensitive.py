"""An MCP tool's sensitive fields, declared in the server's policy (``"sensitive"``) or found by
the defaults, are committed in its entries: the raw argument text holds the mask, never the
value (issue: sensitive values committed, encrypted, shreddable)."""

from __future__ import annotations

import json

import pytest
from agents import Agent
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents import Sagacity, SagaStatus
from sagacity_agents.backends import Phase
from sagacity_agents.core.sensitive import is_committed
from sagacity_agents.sdk.mcp import protect_mcp_server

from .conftest import POLICY, Payments, stdio_server

ADDRESS = "221B Baker Street, London"


@pytest.mark.case("X-01")
async def test_a_field_the_policy_declares_is_masked_in_the_raw_arguments(payments: Payments, tmp_path):
    policy = json.loads(json.dumps(POLICY))
    policy["tools"]["ship"]["sensitive"] = ["address"]
    model = ScriptedModel()
    model.enqueue([function_call("ship", json.dumps({"order": "o1", "address": ADDRESS}), call_id="c1")])
    model.enqueue([assistant_message("done")])
    async with stdio_server(payments) as server:
        protection = protect_mcp_server(server, policy=policy)
        assert protection.declarations["ship"].sensitivity.fields == {"address"}
        sagacity = Sagacity(tmp_path / "j.db")
        result = await sagacity.run(Agent(name="shop", model=model, mcp_servers=[server]), "ship it")
        entries = await sagacity.journal.entries(result.saga_id)
        verdicts = await sagacity.verify(result.saga_id)
        await sagacity.aclose()
    assert result.status is SagaStatus.COMPLETED and all(v.ok for v in verdicts)
    assert payments.calls("ship")[0][1]["address"] == ADDRESS  # the server got the real value
    intent, = [e for e in entries if e.phase is Phase.INTENT and e.tool == "ship"]
    raw = intent.payload["raw_args"]
    assert is_committed(raw) and "****" in raw["mask"] and "o1" in raw["mask"]
    assert all(ADDRESS.encode() not in e.canonical for e in entries)
