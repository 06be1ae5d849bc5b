"""N-01, N-03: MCP tool calls journaled, failures seen, undone through the server, keys in _meta."""

from __future__ import annotations

import json

import pytest
from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents import Sagacity, SagaStatus, current_idempotency_key
from sagacity_agents.backends import Phase
from sagacity_agents.backends import SqliteJournal
from sagacity_agents.core.identity import derivation_of, saga_derivation
from sagacity_agents.saga import call_idempotency_key
from sagacity_agents.sdk.mcp import IDEMPOTENCY_META_KEY, protect_mcp_server

from .conftest import POLICY, Payments, stdio_server

KEY = IDEMPOTENCY_META_KEY


def _charge_then(model: ScriptedModel, second: tuple[str, dict]) -> None:
    model.enqueue([function_call("charge", json.dumps({"customer": "ann", "amount": 2500}), call_id="c1")])
    model.enqueue([function_call(second[0], json.dumps(second[1]), call_id="c2")])
    model.enqueue([assistant_message("done")])


async def _charge_and_ship(payments: Payments, tmp_path, policy: dict = POLICY, address: str = ""):
    """One saga: charge, then ship (``isError`` for an empty address: the carrier refuses)."""
    model = ScriptedModel()
    _charge_then(model, ("ship", {"order": "o1", "address": address}))
    async with stdio_server(payments) as server:
        protect_mcp_server(server, policy=policy)
        sagacity = Sagacity(tmp_path / "j.db")
        result = await sagacity.run(Agent(name="shop", model=model, mcp_servers=[server]), "charge and ship")
        entries = await sagacity.journal.entries(result.saga_id)
        await sagacity.aclose()
    return result, entries


@pytest.mark.case("N-01")
async def test_refund_undone_through_server_after_failing_next_step(payments: Payments, tmp_path) -> None:
    result, entries = await _charge_and_ship(payments, tmp_path)
    assert result.status is SagaStatus.COMPENSATED
    charge_id = payments.rows("SELECT id FROM charges")[0][0]
    assert payments.rows("SELECT refunded FROM charges") == [(1,)]  # undone once
    refunds = payments.calls("refund")
    assert [args for _, args, _ in refunds] == [{"charge_id": charge_id}]
    phases = [(e.phase, e.tool) for e in entries if e.tool]
    assert (Phase.FAILED, "ship") in phases  # isError seen as a failure, not a result
    assert (Phase.COMPENSATED, "charge") in phases
    executed = next(e for e in entries if e.phase is Phase.EXECUTED and e.tool == "charge")
    assert executed.payload["result"]["structured_content"]["charge_id"] == charge_id


@pytest.mark.case("N-03")
async def test_meta_carries_forward_and_undo_idempotency_keys(payments: Payments, tmp_path) -> None:
    result, entries = await _charge_and_ship(payments, tmp_path)
    intent = next(e for e in entries if e.phase is Phase.INTENT and e.tool == "charge")
    compensating = next(e for e in entries if e.phase is Phase.COMPENSATING)
    (_, _, charge_meta), = payments.calls("charge")
    (_, _, refund_meta), = payments.calls("refund")
    journal = SqliteJournal(tmp_path / "j.db")
    derivation = derivation_of(entries, await journal.journal_id())
    await journal.close()
    assert derivation.version == 2 and charge_meta[KEY] == derivation.call_key(result.saga_id, intent.seq)
    assert charge_meta[KEY] != call_idempotency_key(result.saga_id, intent.seq)  # the old rule's
    assert charge_meta[KEY] != "c1"  # never the model's call id
    assert refund_meta[KEY] == compensating.payload["idempotency_key"]


@pytest.mark.case("N-03")
async def test_decorated_tool_reads_the_same_forward_key(tmp_path) -> None:
    from sagacity_agents import read_only

    seen: list[str | None] = []

    @function_tool
    @read_only
    def lookup(order: str) -> str:
        """Look an order up."""
        seen.append(current_idempotency_key())
        return "ok"

    model = ScriptedModel()
    model.enqueue([function_call("lookup", json.dumps({"order": "o"}), call_id="c1")])
    model.enqueue([assistant_message("done")])
    sagacity = Sagacity(tmp_path / "j.db")
    result = await sagacity.run(Agent(name="a", model=model, tools=[lookup]), "go")
    entries = await sagacity.journal.entries(result.saga_id)
    derivation = await saga_derivation(sagacity.journal, result.saga_id)
    await sagacity.aclose()
    intent = next(e for e in entries if e.phase is Phase.INTENT)
    assert seen == [derivation.call_key(result.saga_id, intent.seq)]
    assert current_idempotency_key() is None


@pytest.mark.case("N-01")
async def test_enforce_refuses_a_tool_the_policy_does_not_name(payments: Payments, tmp_path) -> None:
    policy = {"tools": {k: v for k, v in POLICY["tools"].items() if k != "ship"}}
    result, entries = await _charge_and_ship(payments, tmp_path, policy, address="x")
    assert payments.calls("ship") == []  # never reached the server
    assert result.status is SagaStatus.COMPENSATED
    failed = next(e for e in entries if e.phase is Phase.FAILED and e.tool == "ship")
    assert failed.payload.get("not_run") is True
    assert payments.rows("SELECT refunded FROM charges") == [(1,)]


@pytest.mark.case("N-01")
async def test_an_undo_answered_with_isError_is_compensation_failed(payments: Payments, tmp_path) -> None:
    policy = json.loads(json.dumps(POLICY))
    policy["tools"]["charge"]["undo"]["arguments"] = {"charge_id": "$.args.customer"}  # a wrong id
    result, _entries = await _charge_and_ship(payments, tmp_path, policy)
    assert result.status is SagaStatus.COMPENSATION_FAILED
    (failed,) = result.report.failed
    assert "refund" in failed.detail and "isError" in failed.detail
    assert payments.rows("SELECT refunded FROM charges") == [(0,)]  # still dirty, and said so


@pytest.mark.case("N-01")
async def test_strict_runs_tools_the_policy_names_and_refuses_an_unprotected_server(
        payments: Payments, tmp_path) -> None:
    for protect in (True, False):
        model = ScriptedModel()
        model.enqueue([function_call("balance", json.dumps({"customer": "ann"}), call_id="b1")])
        model.enqueue([assistant_message("done")])
        async with stdio_server(payments) as server:
            if protect:
                protect_mcp_server(server, policy=POLICY)
            sagacity = Sagacity(tmp_path / f"j{protect}.db", strict=True)
            result = await sagacity.run(Agent(name="a", model=model, mcp_servers=[server]), "go")
            entries = await sagacity.journal.entries(result.saga_id)
            await sagacity.aclose()
        intents = [e for e in entries if e.phase is Phase.INTENT]
        if protect:
            assert result.status is SagaStatus.COMPLETED
            assert [e.payload["reversibility"] for e in intents] == ["read_only"]
        else:
            assert result.status is not SagaStatus.COMPLETED
            assert intents == []  # refused before the server was called
    assert len(payments.calls("balance")) == 1


@pytest.mark.case("N-01")
async def test_a_call_whose_server_died_mid_call_is_left_in_doubt_not_failed(payments: Payments, tmp_path) -> None:
    model = ScriptedModel()
    model.enqueue([function_call("charge", json.dumps({"customer": "ann", "amount": 2500}), call_id="c1")])
    model.enqueue([assistant_message("done")])
    async with stdio_server(payments, PAYMENTS_CHARGE_DIES="1") as server:
        protect_mcp_server(server, policy=POLICY)
        sagacity = Sagacity(tmp_path / "j.db")
        result = await sagacity.run(Agent(name="shop", model=model, mcp_servers=[server]), "charge")
        entries = await sagacity.journal.entries(result.saga_id)
        await sagacity.aclose()
    assert payments.rows("SELECT refunded FROM charges") == [(0,)]  # the effect exists
    intent = next(e for e in entries if e.phase is Phase.INTENT and e.tool == "charge")
    assert not [e.payload for e in entries if e.phase in (Phase.EXECUTED, Phase.FAILED)]  # no outcome
    assert result.status is SagaStatus.IN_DOUBT  # reported to a human, not closed
    assert [i.seq for i in result.report.in_doubt] == [intent.seq]
    assert payments.calls("refund") == []  # never undone blindly


@pytest.mark.case("N-04")
async def test_undo_goes_to_the_server_that_made_the_call_and_a_second_live_one_of_that_name_is_refused(
        tmp_path) -> None:
    from agents.exceptions import UserError

    tenant_a, tenant_b = Payments(tmp_path / "a.db"), Payments(tmp_path / "b.db")
    a, b = stdio_server(tenant_a), stdio_server(tenant_b)  # one name, two servers
    protect_mcp_server(a, policy=POLICY)
    protect_mcp_server(b, policy=POLICY)  # allowed: neither is connected yet
    model = ScriptedModel()
    _charge_then(model, ("ship", {"order": "o1", "address": ""}))  # ship fails: undo the charge
    async with a, b:
        with pytest.raises(UserError, match="another MCP server object named 'payments'"):
            protect_mcp_server(stdio_server(Payments(tmp_path / "c.db")), policy=POLICY)
        sagacity = Sagacity(tmp_path / "j.db")
        result = await sagacity.run(Agent(name="shopA", model=model, mcp_servers=[a]), "go")
        await sagacity.aclose()
    assert result.status is SagaStatus.COMPENSATED, result.report
    assert len(tenant_a.calls("refund")) == 1 and tenant_a.rows("SELECT refunded FROM charges") == [(1,)]
    assert tenant_b.calls() == []  # the other tenant's server saw nothing


@pytest.mark.case("N-01")
async def test_policy_applies_by_the_servers_own_names_when_the_agent_prefixes_them(
        payments: Payments, tmp_path) -> None:
    prefixed = {"include_server_in_tool_names": True}
    model = ScriptedModel()
    model.enqueue([function_call("mcp_payments__charge", json.dumps({"customer": "ann", "amount": 2500}), call_id="c1")])
    model.enqueue([function_call("mcp_payments__ship", json.dumps({"order": "o1", "address": ""}), call_id="c2")])
    model.enqueue([assistant_message("done")])
    wire = ScriptedModel()
    wire.enqueue([function_call("mcp_payments__wire", json.dumps({"to": "DE89", "amount": 9}), call_id="w1")])
    async with stdio_server(payments) as server:
        protect_mcp_server(server, policy=POLICY)
        sagacity = Sagacity(tmp_path / "j.db")
        result = await sagacity.run(Agent(name="shop", model=model, mcp_servers=[server], mcp_config=prefixed), "go")
        paused = await sagacity.run(Agent(name="bank", model=wire, mcp_servers=[server], mcp_config=prefixed), "go")
        request = await sagacity.approvals.get(paused.approvals[0].request_id)
        await sagacity.aclose()
    assert result.status is SagaStatus.COMPENSATED, result.report  # charge declared, undone
    assert payments.rows("SELECT refunded FROM charges") == [(1,)]
    assert paused.status is SagaStatus.AWAITING_APPROVAL  # wire is irreversible under its prefix too
    assert request.args["mcp_tool"]["name"] == "wire" and payments.calls("wire") == []


@pytest.mark.case("N-01")
async def test_an_undo_tool_the_server_does_not_list_is_an_error_naming_it_before_any_call(
        payments: Payments, tmp_path) -> None:
    policy = json.loads(json.dumps(POLICY))
    policy["tools"]["charge"]["undo"]["tool"] = "refnud"
    model = ScriptedModel()
    _charge_then(model, ("ship", {"order": "o1", "address": "x"}))
    async with stdio_server(payments) as server:
        protect_mcp_server(server, policy=policy)
        sagacity = Sagacity(tmp_path / "j.db")
        result = await sagacity.run(Agent(name="shop", model=model, mcp_servers=[server]), "go")
        await sagacity.aclose()
    assert result.status is SagaStatus.COMPENSATED  # failed, with nothing to undo
    assert "does not list: refnud (undo of charge)" in result.failures[0].error
    assert payments.calls() == []  # nothing ran


@pytest.mark.case("N-01")
async def test_enforce_refusal_names_the_policy_and_how_to_add_the_tool_not_decorators(
        payments: Payments, tmp_path) -> None:
    policy = {"tools": {k: v for k, v in POLICY["tools"].items() if k != "ship"}}
    _result, entries = await _charge_and_ship(payments, tmp_path, policy, address="x")
    error = next(e for e in entries if e.phase is Phase.FAILED and e.tool == "ship").payload["error"]
    assert "MCP tool 'ship' of server 'payments' is not named by the server's policy (enforce mode)" in error
    assert '"ship": {"reversibility": "read_only"}' in error and 'mode="observe"' in error
    assert "strict=True" not in error and "decorator" not in error
