"""FailurePolicy.REFUSE_EFFECTS against calls of the same turn as the failing one: a call whose
INTENT lands after the saga failed does not run its body."""

from __future__ import annotations

import asyncio

import pytest
from agents import Agent, function_tool

from sagacity_agents import FailurePolicy, Sagacity, SagaStatus, no_undo
from sagacity_agents.backends import InMemoryJournal, Phase

from .helpers import scripted
from .test_guardrails import Trip


class IntentWaitsForAFailure(InMemoryJournal):
    """Holds the INTENT of ``tool`` until another call's FAILED entry is written: the call passed
    the policy's check before the saga failed, and its INTENT lands after."""

    def __init__(self, tool: str) -> None:
        super().__init__()
        self.tool = tool
        self.failed = asyncio.Event()

    async def append(self, request, **kwargs):  # type: ignore[override]
        phase = request.phase  # views hand the backend an AppendRequest
        if phase is Phase.INTENT and request.tool == self.tool:
            await self.failed.wait()
            for _ in range(5):
                await asyncio.sleep(0)  # the failure is noted after its entry is written
        entry = await super().append(request, **kwargs)
        if phase is Phase.FAILED:
            self.failed.set()
        return entry


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_refuse_effects_a_same_turn_call_whose_intent_lands_after_the_failure_does_not_run(kind):
    """Turn 1: a no-undo send and charge_card (fails) in parallel; the send's INTENT is written
    only after the charge's FAILED. Its body must not run (nothing could undo it): the call is
    journaled REFUSED after its INTENT, exactly one outcome, and the saga ends COMPENSATED."""
    trip = Trip()
    log = trip.log

    if kind == "async":
        @function_tool
        @no_undo
        async def send(text: str) -> str:
            log.append("send")
            return "sent"
    else:
        @function_tool
        @no_undo
        def send(text: str) -> str:
            log.append("send")
            return "sent"

    journal = IntentWaitsForAFailure("send")
    model = scripted([("send", {"text": "x"}, "s1"), ("charge_card", {"amount": 1}, "c1")], "done")
    agent = Agent(name="a", model=model, tools=[trip.charge_card, send])
    result = await Sagacity(journal, policy=FailurePolicy.REFUSE_EFFECTS).run(agent, "go")
    entries = await journal.entries(result.saga_id)
    assert "send" not in log
    intent, refused = [e for e in entries if e.call_id == "s1"]
    assert (intent.phase, refused.phase) == (Phase.INTENT, Phase.REFUSED)
    assert refused.payload["intent_seq"] == intent.seq and refused.payload["not_run"] is True
    assert result.status is SagaStatus.COMPENSATED and not result.in_doubt
