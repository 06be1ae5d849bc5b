"""The shop agent of examples/mcp_payments: its payments are an MCP server's tools, journaled in
the saga by ``protect_mcp_server`` with the reviewed policy ``policy.json``.

``agent()`` is also what ``sagacity saga recover|resume --app examples.mcp_payments.app:agent``
loads in another process: it re-creates the server under the same name (``payments``), which is
where journaled undos go.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from agents import Agent
from agents.mcp import MCPServerStdio
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents import protect_mcp_server

HERE = Path(__file__).resolve().parent


def payments_server() -> MCPServerStdio:
    """The payments MCP server over stdio (its state in ``$PAYMENTS_DB``), protected."""
    server = MCPServerStdio(
        name="payments",
        params={"command": sys.executable, "args": [str(HERE / "payments_server.py")],
                "env": dict(os.environ)},
        client_session_timeout_seconds=30,
    )
    protect_mcp_server(server, policy=HERE / "policy.json")
    return server


def scripted_model() -> ScriptedModel:
    """The model's turns, scripted: charge 49.00 EUR, then ship to an empty address (the server
    answers with ``isError``). Used unless a real model is asked for (``--real-model``)."""
    model = ScriptedModel()
    model.enqueue([function_call("charge", json.dumps({"customer": "ann", "amount": 4900}), call_id="c1")])
    model.enqueue([function_call("ship", json.dumps({"order": "o-17", "address": ""}), call_id="c2")])
    model.enqueue([assistant_message("Your order is on its way!")])
    return model


def agent(model: Any = None, *, real_model: bool = False) -> Agent[Any]:
    """The shop agent with its protected MCP payments server.

    Args:
        model: the model to use (default: :func:`scripted_model`, whatever the environment holds).
        real_model: use the SDK's default model instead (needs ``OPENAI_API_KEY``; its turns,
            and so the output, are then the model's own).
    """
    kwargs = {} if real_model and model is None else {"model": model or scripted_model()}
    return Agent(name="shop", instructions="Charge the customer, then ship the order.",
                 mcp_servers=[payments_server()], **kwargs)
