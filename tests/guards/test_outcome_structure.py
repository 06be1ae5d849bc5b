"""T-02, structure no run writes (core.structure, A-03), and its one exception: a call carried
across an approval pause gets its outcome under the resuming run's fence (issue 20). Each case
reaches the rule alone; the refusal names the rule."""

from __future__ import annotations

import pytest

from sagacity_agents.backends import Phase
from sagacity_agents.core.structure import structure_problem

from .support import journal_of

pytestmark = pytest.mark.case("T-02")

OPENED = (Phase.SAGA_OPENED, {})


def run_started():
    return (Phase.RUN_STARTED, {"payload": {"holder": "h", "lease_seconds": 30.0}})


def intent(fence: int, call: str = "c"):
    return (Phase.INTENT, {"tool": "t", "call_id": call,
                           "payload": {"args": {}, "reversibility": "compensatable", "fence": fence}})


def run_ended(fence: int, status: str):
    return (Phase.RUN_ENDED, {"payload": {"holder": "h", "status": status, "fence": fence}})


def outcome(intent_seq: int, fence: int, call: str = "c", **extra):
    return (Phase.EXECUTED, {"tool": "t", "call_id": call,
                             "payload": {"intent_seq": intent_seq, "result": "ok", "fence": fence, **extra}})


async def test_an_outcome_after_an_approval_pause_under_the_resuming_lease_is_accepted():
    _, entries = await journal_of(OPENED, run_started(), intent(2), run_ended(2, "AWAITING_APPROVAL"),
                                  run_started(), outcome(3, 5))
    assert structure_problem(entries) is None


@pytest.mark.parametrize("status", ["COMPLETED", "COMPENSATED", "IN_DOUBT"])
async def test_an_outcome_under_another_lease_without_a_pause_is_refused(status):
    _, entries = await journal_of(OPENED, run_started(), intent(2), run_ended(2, status),
                                  run_started(), outcome(3, 5))
    seq, why = structure_problem(entries)
    assert seq == 6 and "outcome written under another lease than its INTENT (seq 3)" in why


async def test_a_pause_before_the_intent_does_not_carry_it():
    """The run paused, then (same lease, no resume) wrote the INTENT: no pause lies between the
    INTENT and the other lease's outcome."""
    _, entries = await journal_of(OPENED, run_started(), run_ended(2, "AWAITING_APPROVAL"), intent(2),
                                  run_started(), outcome(4, 5))
    seq, why = structure_problem(entries)
    assert seq == 6 and "another lease" in why


async def test_a_late_outcome_is_not_carried_across_a_pause():
    _, entries = await journal_of(OPENED, run_started(), intent(2), run_ended(2, "AWAITING_APPROVAL"),
                                  run_started(), outcome(3, 5, late=True))
    seq, why = structure_problem(entries)
    assert seq == 6 and "another lease" in why


async def test_an_outcome_of_another_call_is_refused_even_after_a_pause():
    _, entries = await journal_of(OPENED, run_started(), intent(2), run_ended(2, "AWAITING_APPROVAL"),
                                  run_started(), outcome(3, 5, call="c2"))
    seq, why = structure_problem(entries)
    assert seq == 6 and why.startswith("EXECUTED names INTENT seq 3 of another call ('t', call 'c'")


async def test_a_pause_of_another_run_does_not_carry_the_intent():
    """The INTENT's run (fence 2) ended COMPLETED; a later run (fence 5) paused; the outcome under
    fence 7 is still another lease's."""
    _, entries = await journal_of(OPENED, run_started(), intent(2), run_ended(2, "COMPLETED"),
                                  run_started(), run_ended(5, "AWAITING_APPROVAL"), run_started(),
                                  outcome(3, 7))
    seq, why = structure_problem(entries)
    assert seq == 8 and "another lease" in why
