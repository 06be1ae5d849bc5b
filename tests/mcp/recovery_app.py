"""The application of the N-04 test: an agent whose MCP payments server (named ``payments``) is
protected by the policy; ``python -m tests.mcp.recovery_app JOURNAL`` runs a saga whose process
is killed after the charge (``os._exit`` when the model is asked for its next step), leaving it
for ``recover``. Its journal's clock is an hour behind (a ``FrozenClock``): the killed run's 1 s
lease has expired when the test recovers, with no test sleeping for it."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import sys
from typing import Any

from agents import Agent, RunHooks, set_tracing_disabled
from agents.testing import ScriptedModel, function_call

from sagacity_agents import Sagacity
from sagacity_agents.backends.sqlite.journal import SqliteJournal
from sagacity_agents.sdk.mcp import protect_mcp_server
from sagacity_agents.testing import FrozenClock

from .conftest import POLICY, SERVER


class KillAfterFirstStep(RunHooks[Any]):
    """Kills the process when the model is asked for its second step (after the charge ran)."""

    def __init__(self) -> None:
        self.steps = 0

    async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
        self.steps += 1
        if self.steps == 2:
            os._exit(9)


def agent(model: Any = None) -> Agent[Any]:
    """The agent, its MCP server re-created and protected under the name ``payments``."""
    from agents.mcp import MCPServerStdio

    server = MCPServerStdio(name=os.environ.get("PAYMENTS_SERVER_NAME", "payments"), params={
        "command": sys.executable, "args": [str(SERVER)], "env": dict(os.environ)},
        client_session_timeout_seconds=30)
    protect_mcp_server(server, policy=POLICY)
    return Agent(name="shop", model=model or ScriptedModel(), mcp_servers=[server])


async def main(journal: str) -> None:
    set_tracing_disabled(True)
    model = ScriptedModel()
    model.enqueue([function_call("charge", json.dumps({"customer": "ann", "amount": 700}), call_id="c1")])
    shop = agent(model)
    async with shop.mcp_servers[0]:
        an_hour_ago = FrozenClock(dt.datetime.now(dt.UTC) - dt.timedelta(hours=1), tick=0.001)
        sagacity = Sagacity(SqliteJournal(journal, clock=an_hour_ago), lease_seconds=1)
        print(json.dumps({"started": True}), flush=True)
        await sagacity.run(shop, "charge then crash", hooks=KillAfterFirstStep())


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
