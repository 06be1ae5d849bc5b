"""N-02: irreversible MCP tools pause through require_approval; the approval is bound to the
arguments and the tool's definition; a server that changes the tool before resume is refused."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from agents import Agent
from agents.testing import ScriptedModel, assistant_message, function_call
from click.testing import CliRunner

from sagacity_agents import Sagacity, SagaStatus
from sagacity_agents.errors import ApprovalError
from sagacity_agents.cli import cli
from sagacity_agents.sdk.mcp import protect_mcp_server

from .conftest import POLICY, Payments, stdio_server

pytestmark = pytest.mark.case("N-02")


def _wire_model() -> ScriptedModel:
    model = ScriptedModel()
    model.enqueue([function_call("wire", json.dumps({"to": "DE89", "amount": 900}), call_id="w1")])
    return model


async def _pause(payments: Payments, journal) -> tuple[str, str]:
    async with stdio_server(payments) as server:
        protect_mcp_server(server, policy=POLICY)
        sagacity = Sagacity(journal)
        result = await sagacity.run(Agent(name="bank", model=_wire_model(), mcp_servers=[server]), "wire")
        await sagacity.aclose()
    assert result.status is SagaStatus.AWAITING_APPROVAL
    assert payments.calls("wire") == []  # paused before the server saw it
    (request,) = result.approvals
    return result.saga_id, request.request_id


async def _resume(payments: Payments, journal, saga_id: str, **env: str):
    model = ScriptedModel()
    model.enqueue([assistant_message("wired")])
    async with stdio_server(payments, **env) as server:
        protect_mcp_server(server, policy=POLICY)
        sagacity = Sagacity(journal)
        try:
            return await sagacity.resume(saga_id, Agent(name="bank", model=model, mcp_servers=[server]))
        finally:
            await sagacity.aclose()


async def test_approval_binds_arguments_and_definition_then_runs(payments: Payments, tmp_path) -> None:
    journal = tmp_path / "j.db"
    saga_id, request_id = await _pause(payments, journal)
    sagacity = Sagacity(journal)
    request = await sagacity.approvals.get(request_id)
    assert request.args["arguments"] == {"to": "DE89", "amount": 900}
    assert request.args["mcp_tool"]["name"] == "wire"
    assert request.args["mcp_tool"]["input_schema"]["required"] == ["to", "amount"]
    await sagacity.approve(request_id, approver="ops@example.com")
    await sagacity.aclose()
    result = await _resume(payments, journal, saga_id)
    assert result.status is SagaStatus.COMPLETED
    assert payments.rows("SELECT dest, amount FROM wires") == [("DE89", 900)]


async def test_rug_pull_between_approval_and_resume_is_refused(payments: Payments, tmp_path) -> None:
    journal = tmp_path / "j.db"
    saga_id, request_id = await _pause(payments, journal)
    sagacity = Sagacity(journal)
    await sagacity.approve(request_id, approver="ops@example.com")
    await sagacity.aclose()
    with pytest.raises(ApprovalError) as refused:
        await _resume(payments, journal, saga_id, PAYMENTS_VARIANT="changed")
    message = str(refused.value)
    assert "changed since it was approved" in message
    assert "description was 'Wire money to an account (irreversible).'" in message
    assert "parameters added: memo" in message
    assert payments.calls("wire") == []
    # Nothing consumed: the saga still waits, and resumes once the server is the approved one.
    result = await _resume(payments, journal, saga_id)
    assert result.status is SagaStatus.COMPLETED
    assert len(payments.calls("wire")) == 1


def test_approvals_show_prints_the_stored_definition_without_a_server(payments: Payments, tmp_path) -> None:
    journal = tmp_path / "j.db"
    _saga_id, request_id = asyncio.run(_pause(payments, journal))  # the server is gone after this
    shown = CliRunner().invoke(cli, ["approvals", "show", request_id, "--db", str(journal)])
    assert shown.exit_code == 0, shown.output
    assert '"mcp_tool"' in shown.output and "Wire money to an account" in shown.output
    assert '"input_schema"' in shown.output
    assert re.search(r"reversibility\s+irreversible", shown.output)  # the policy's, journaled
    assert "MCP tool's definition as its server listed it" in " ".join(shown.output.split())


async def test_rug_pull_is_refused_even_when_the_server_caches_its_tools_list(payments: Payments, tmp_path) -> None:
    journal = tmp_path / "j.db"
    saga_id, request_id = await _pause(payments, journal)
    sagacity = Sagacity(journal)
    await sagacity.approve(request_id, approver="ops@example.com")
    async with stdio_server(payments) as before:
        approved_listing = await before.list_tools()
    model = ScriptedModel()
    model.enqueue([assistant_message("wired")])
    async with stdio_server(payments, cache_tools_list=True, PAYMENTS_VARIANT="changed") as server:
        protect_mcp_server(server, policy=POLICY)
        # The cache still holds the approved definitions; the server now serves changed ones.
        server._tools_list, server._cache_dirty = list(approved_listing), False
        with pytest.raises(ApprovalError, match="changed since it was approved"):
            await sagacity.resume(saga_id, Agent(name="bank", model=model, mcp_servers=[server]))
    await sagacity.aclose()
    assert payments.calls("wire") == []
