"""One irreversible tool name on two agents: each approval belongs to its agent's tool (M-03).

Two desks, ``eu`` and ``us``, each have their own irreversible ``transfer`` with different
arguments (the US one fills in a default). One outer turn calls both desks; both nested runs
pause. The approval request, the resume check and the execution check must each use the tool of
the agent that made the call: the first ``transfer`` of the graph is the other desk's, whose
schema would reject (or hash differently) the arguments.

Runs on every backend of ``tests/backends.py`` (journal and approval store of one backend).
"""

from __future__ import annotations

from typing import Any

import pytest
from agents import Agent, function_tool

from sagacity_agents import Sagacity, SagaStatus, irreversible, nested_agent_tool
from sagacity_agents.backends import Phase
from sagacity_agents.core.approval import args_hash
from tests.backends import BACKENDS

from .helpers import scripted

pytestmark = pytest.mark.case("M-03")


@pytest.fixture(params=BACKENDS, ids=str)
async def stores(request):
    """A journal and an approval store of each backend, at one fresh location."""
    backend = request.param
    location = backend.location(request)
    journal, approvals = backend.journal(location), backend.approvals(location)
    yield journal, approvals
    for opened in (approvals, journal):
        close = getattr(opened, "close", None)
        if close is not None:
            await close()


def bank(ran: list[Any], *, first: bool) -> Agent[Any]:
    """Fresh agents; ``first`` scripts the calls, otherwise only the final answers."""

    @function_tool(needs_approval=True)
    @irreversible
    def eu_transfer(amount_eur: int, iban: str) -> str:
        ran.append(("eu", amount_eur, iban))
        return f"sent {amount_eur} EUR"

    @function_tool(needs_approval=True)
    @irreversible
    def us_transfer(amount_usd: int, routing: str, account: str = "checking") -> str:
        ran.append(("us", amount_usd, routing, account))
        return f"sent {amount_usd} USD"

    eu_transfer.name = us_transfer.name = "transfer"  # one name, as two teams would write it

    def model(call: tuple[str, Any, str], final: str) -> Any:
        return scripted([call], final) if first else scripted(final)

    eu = Agent(name="eu", model=model(("transfer", {"amount_eur": 5, "iban": "PT50"}, "t-eu"), "eu done"),
               tools=[eu_transfer])
    us = Agent(name="us", model=model(("transfer", {"amount_usd": 7, "routing": "021"}, "t-us"), "us done"),
               tools=[us_transfer])
    turn = [("eu_desk", {"input": "pay 5 EUR"}, "d-eu"), ("us_desk", {"input": "pay 7 USD"}, "d-us")]
    return Agent(name="bank", model=scripted(turn, "bank done") if first else scripted("bank done"),
                 tools=[nested_agent_tool(eu.as_tool("eu_desk", "EU payments")),
                        nested_agent_tool(us.as_tool("us_desk", "US payments"))])


async def test_approvals_use_the_tool_of_the_agent_that_made_the_call(stores):
    """M-03: both ``transfer`` calls pause, each request holding its own tool's validated
    arguments (the US default filled in, nothing auto-rejected); approving the US one and
    rejecting the EU one runs the US tool once, with the approved hash, and never the EU tool."""
    journal, approvals = stores
    ran: list[Any] = []
    sagacity = Sagacity(journal, approvals=approvals)
    paused = await sagacity.run(bank(ran, first=True), "pay both")
    assert paused.status is SagaStatus.AWAITING_APPROVAL and ran == []
    requests = {r.call_id: r for r in paused.approvals}
    assert set(requests) == {"t-eu", "t-us"}
    assert requests["t-eu"].args == {"amount_eur": 5, "iban": "PT50"}
    assert requests["t-us"].args == {"amount_usd": 7, "routing": "021", "account": "checking"}
    entries = await journal.entries(paused.saga_id)
    assert not [e for e in entries if e.phase is Phase.REJECTED]  # nothing auto-rejected
    kinds = {e.call_id: e.payload["reversibility"] for e in entries
             if e.phase is Phase.AWAITING_APPROVAL}
    assert kinds == {"t-eu": "irreversible", "t-us": "irreversible"}

    await sagacity.approve(requests["t-us"].request_id, approver="ana")
    await sagacity.reject(requests["t-eu"].request_id, approver="ana", reason="wrong IBAN")
    done = await Sagacity(journal, approvals=approvals).resume(paused.saga_id, bank(ran, first=False))
    assert done.status is SagaStatus.COMPLETED
    assert ran == [("us", 7, "021", "checking")]
    entries = await journal.entries(paused.saga_id)
    [intent] = [e for e in entries if e.phase is Phase.INTENT and e.tool == "transfer"]
    assert intent.call_id == "t-us" and intent.payload["agent"] == "us"
    assert intent.payload["request_id"] == requests["t-us"].request_id
    assert args_hash(intent.payload["args"]) == requests["t-us"].args_hash
    assert [e.phase for e in entries if e.call_id == "t-eu"] == [
        Phase.AWAITING_APPROVAL, Phase.REJECTED, Phase.CONSUMED]
