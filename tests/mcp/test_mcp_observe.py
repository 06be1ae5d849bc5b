"""N-01: observe journals every call as undeclared and writes a policy skeleton that enforce then
accepts; a tool whose definition changes after the policy pinned it is undeclared again. Over
streamable HTTP on 127.0.0.1 as well as stdio."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
from agents import Agent
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents import Sagacity, SagaStatus
from sagacity_agents.backends import Phase
from sagacity_agents.sdk.mcp import McpPolicy, protect_mcp_server

from .conftest import SERVER, Payments, stdio_server
from tests.forked import python_command

pytestmark = pytest.mark.case("N-01")


def _model() -> ScriptedModel:
    model = ScriptedModel()
    model.enqueue([function_call("balance", json.dumps({"customer": "ann"}), call_id="b1")])
    model.enqueue([assistant_message("done")])
    return model


async def test_observe_writes_a_skeleton_that_enforce_accepts(payments: Payments, tmp_path: Path) -> None:
    skeleton = tmp_path / "payments.policy.json"
    async with stdio_server(payments) as server:
        protect_mcp_server(server, mode="observe", skeleton=skeleton)
        sagacity = Sagacity(tmp_path / "j.db")
        result = await sagacity.run(Agent(name="a", model=_model(), mcp_servers=[server]), "go")
        entries = await sagacity.journal.entries(result.saga_id)
        await sagacity.aclose()
    intent = next(e for e in entries if e.phase is Phase.INTENT)
    assert intent.payload["reversibility"] == "undeclared"
    written = json.loads(skeleton.read_text())
    assert set(written["tools"]) == {"balance", "charge", "find_charge", "refund", "ship", "wire"}
    assert written["tools"]["balance"]["calls_seen"] == 1
    assert all(t["reversibility"] == "irreversible" for t in written["tools"].values())  # fail safe
    written["tools"]["balance"]["reversibility"] = "read_only"  # the human's review
    skeleton.write_text(json.dumps(written))
    async with stdio_server(payments) as server:
        protect_mcp_server(server, policy=McpPolicy.load(skeleton))
        sagacity = Sagacity(tmp_path / "j.db")
        result = await sagacity.run(Agent(name="a", model=_model(), mcp_servers=[server]), "go")
        entries = await sagacity.journal.entries(result.saga_id)
        await sagacity.aclose()
    assert result.status is SagaStatus.COMPLETED
    intent = next(e for e in entries if e.phase is Phase.INTENT)
    assert intent.payload["reversibility"] == "read_only"
    assert intent.payload["declaration"].startswith("mcp:payments:balance#")


async def test_a_changed_definition_is_undeclared_until_the_policy_names_it(
        payments: Payments, tmp_path: Path) -> None:
    skeleton = tmp_path / "p.json"
    async with stdio_server(payments) as server:
        await protect_mcp_server(server, mode="observe").write_skeleton(skeleton)
    model = ScriptedModel()
    model.enqueue([function_call("wire", json.dumps({"to": "x", "amount": 1}), call_id="w1")])
    model.enqueue([assistant_message("done")])
    async with stdio_server(payments, PAYMENTS_VARIANT="changed") as server:
        protect_mcp_server(server, policy=skeleton)
        sagacity = Sagacity(tmp_path / "j.db")
        result = await sagacity.run(Agent(name="a", model=model, mcp_servers=[server]), "go")
        entries = await sagacity.journal.entries(result.saga_id)
        await sagacity.aclose()
    # wire is irreversible by name, so it paused; once approved it would still be refused. Here
    # the pause itself is bound to the changed definition the server lists now.
    assert result.status is SagaStatus.AWAITING_APPROVAL
    assert payments.calls("wire") == []
    paused = next(e for e in entries if e.phase is Phase.AWAITING_APPROVAL)
    assert "memo" in paused.payload["args"]["mcp_tool"]["input_schema"]["properties"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server(payments: Payments):
    port = _free_port()
    proc = subprocess.Popen(python_command(str(SERVER), "http", str(port)),
                            env={**os.environ, "PAYMENTS_DB": str(payments.path)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.2)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(timeout=10)


async def test_streamable_http_refund_undone_through_the_server(payments: Payments, http_server: str,
                                                                  tmp_path: Path) -> None:
    from agents.mcp import MCPServerStreamableHttp

    from .conftest import POLICY

    model = ScriptedModel()
    model.enqueue([function_call("charge", json.dumps({"customer": "ann", "amount": 10}), call_id="c1")])
    model.enqueue([function_call("ship", json.dumps({"order": "o", "address": ""}), call_id="c2")])
    model.enqueue([assistant_message("done")])
    async with MCPServerStreamableHttp(name="payments", params={"url": http_server}) as server:
        protect_mcp_server(server, policy=POLICY)
        sagacity = Sagacity(tmp_path / "j.db")
        result = await sagacity.run(Agent(name="a", model=model, mcp_servers=[server]), "go")
        await sagacity.aclose()
    assert result.status is SagaStatus.COMPENSATED, result.report
    assert payments.rows("SELECT refunded FROM charges") == [(1,)]
    (_, _, meta), = payments.calls("refund")
    assert meta["sagacity/idempotency_key"].startswith("sgc-")
