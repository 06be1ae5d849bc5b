"""An MCP undo is checked like a forward call: after the charge the payments server turns
``refund`` into a payout to an account (``PAYMENTS_VARIANT=payout``); the recovery that would send
the undo lists the tool fresh, finds its definition no longer the one the policy pins, does not
send it, and reports the charge still dirty naming what changed. The same server unchanged is
undone. On SQLite and PostgreSQL."""

from __future__ import annotations

import copy
import json

import pytest
from agents import Agent
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents import Sagacity, SagaStatus
from sagacity_agents.backends import Phase
from sagacity_agents.sdk.mcp import protect_mcp_server
from sagacity_agents.sdk.mcp.policy import definition_digest
from tests.backends import BACKENDS

from .conftest import POLICY, Payments, stdio_server

pytestmark = pytest.mark.case("I-35")


@pytest.fixture(params=[b for b in BACKENDS if b.name != "memory"], ids=str)
def location(request) -> str:
    return request.param.location(request)


async def _pinned_policy(payments: Payments) -> dict:
    """The conftest policy with ``refund`` pinned to its definition as the server lists it."""
    async with stdio_server(payments) as server:
        listed = await protect_mcp_server(server, policy=POLICY).definition_of("refund", fresh=True)
    policy = copy.deepcopy(POLICY)
    policy["tools"]["refund"]["definition_sha256"] = definition_digest(listed)
    return policy


async def _charged_and_left_open(payments: Payments, location: str, policy: dict) -> str:
    model = ScriptedModel()
    model.enqueue([function_call("charge", json.dumps({"customer": "ann", "amount": 2500}), call_id="c1")])
    model.enqueue([assistant_message("charged")])
    async with stdio_server(payments) as server:
        protect_mcp_server(server, policy=policy)
        sagacity = Sagacity(location)
        try:
            result = await sagacity.run(Agent(name="shop", model=model, mcp_servers=[server]),
                                        "charge", close=False)
        finally:
            await sagacity.aclose()
    assert result.status is SagaStatus.OPEN
    assert payments.rows("SELECT refunded FROM charges") == [(0,)]
    return result.saga_id


async def _recover(payments: Payments, location: str, saga_id: str, policy: dict, **env: str):
    async with stdio_server(payments, **env) as server:
        protect_mcp_server(server, policy=policy)
        sagacity = Sagacity(location)
        try:
            result = await sagacity.recover(saga_id, Agent(name="shop", mcp_servers=[server]))
            entries = await sagacity.journal.entries(saga_id)
        finally:
            await sagacity.aclose()
    return result, entries


async def test_undo_to_a_changed_tool_is_not_sent_and_stays_dirty(payments: Payments, location) -> None:
    policy = await _pinned_policy(payments)
    saga_id = await _charged_and_left_open(payments, location, policy)
    result, entries = await _recover(payments, location, saga_id, policy, PAYMENTS_VARIANT="payout")
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert payments.calls("refund") == []                       # never sent
    assert payments.rows("SELECT dest FROM wires") == []        # no money left
    assert payments.rows("SELECT refunded FROM charges") == [(0,)]
    (dirty,) = result.report.still_dirty
    assert dirty.tool == "charge"
    detail = " ".join(dirty.detail.split())
    assert "undo tool 'refund' of MCP server 'payments' changed" in detail
    assert "the policy pins" in detail and "Pay a charge's amount out to an account." in detail
    assert "iban" in detail and "was not sent" in detail
    failed = next(e for e in entries if e.phase is Phase.COMPENSATION_FAILED)
    assert "the undo was not sent" in failed.payload["error"]
    # The server back as it was: the same saga is undone (same idempotency key).
    again, _ = await _recover(payments, location, saga_id, policy)
    assert again.status is SagaStatus.COMPENSATED
    assert payments.rows("SELECT refunded FROM charges") == [(1,)]


async def test_undo_changed_within_the_process_that_saw_it_is_not_sent(payments: Payments, tmp_path) -> None:
    """Without a pin, the protection that listed ``refund`` before the charge refuses to send an
    undo to a different ``refund``, naming the change in words."""
    from sagacity_agents.sdk.mcp.protect import McpProtection

    async with stdio_server(payments) as server:
        protection = protect_mcp_server(server, policy=POLICY)
        assert await protection.missing_undo_tools() == []
        assert await protection.undo_refusal("refund") is None
        seen = await protection.definition_of("refund", fresh=True)
    assert isinstance(protection, McpProtection) and seen is not None
    async with stdio_server(payments, PAYMENTS_VARIANT="payout") as changed:
        protection.server = changed  # the same protection, the server now listing a payout
        refusal = await protection.undo_refusal("refund")
    assert refusal is not None
    assert f"description was {seen['description']!r}" in refusal
    assert "parameters added: iban" in refusal
