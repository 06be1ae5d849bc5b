"""T-02, compensation order (core.compensation.undo_order) and the guardrail verdict
(core.saga.verdict: what trips the output guardrail and which tools the tool guardrail stops)."""

from __future__ import annotations

import pytest

from sagacity_agents.backends import Phase
from sagacity_agents.core.compensation import CompensationItem, SagaLedger, undo_order
from sagacity_agents.core.declarations import Reversibility, ToolDeclaration
from sagacity_agents.core.saga.status import FailureRecord
from sagacity_agents.core.saga.verdict import SagaVerdict, changes_world

from .support import journal_of

pytestmark = pytest.mark.case("T-02")


def intent(call: str):
    return (Phase.INTENT, {"tool": "t", "call_id": call, "payload": {"reversibility": "compensatable"}})


def outcome(phase: Phase, intent_seq: int, call: str, **payload):
    return (phase, {"tool": "t", "call_id": call, "payload": {"intent_seq": intent_seq, **payload}})


def resolved(target: int, answer: str):
    return (Phase.RESOLVED, {"payload": {"target": "call", "target_seq": target, "answer": answer}})


async def test_compensation_walks_possible_effects_newest_outcome_first():
    _, entries = await journal_of(
        intent("a"),                                   # 1
        intent("b"),                                   # 2
        outcome(Phase.EXECUTED, 2, "b"),               # 3: b's effect
        outcome(Phase.EXECUTED, 1, "a"),               # 4: a's effect, newer outcome
        intent("c"),                                   # 5
        outcome(Phase.FAILED, 5, "c", undo_data={"id": 1}),  # 6: failed after making a change
        intent("d"),                                   # 7
        outcome(Phase.FAILED, 7, "d"),                 # 8: failed, nothing recorded: no effect
        intent("e"),                                   # 9
        resolved(9, "ran"),                            # 10: a human says it ran
        intent("f"),                                   # 11
        resolved(11, "not_run"),                       # 12
        intent("g"),                                   # 13: no outcome (in doubt, not walked)
        outcome(Phase.REFUSED, 13, "g"),               # 14: refused: no effect
    )
    order = [call.intent.call_id for call in undo_order(SagaLedger(entries))]
    assert order == ["e", "c", "a", "b"]


def verdict(**fields) -> SagaVerdict:
    return SagaVerdict("s", fields.pop("status", "RUNNING"), **fields)


def test_the_verdict_blocks_output_on_each_ground_alone():
    item = CompensationItem(3, "t", "c")
    failure = FailureRecord(3, "t", "c", "boom", None)
    assert not verdict().failed and not verdict().blocks_output
    assert verdict(kept=(item,), undone=(item,), to_undo=(item,)).blocks_output is False
    for grounds in ({"failures": (failure,)}, {"status": "FAILED"}, {"status": "COMPENSATED"},
                    {"status": "COMPENSATION_FAILED"}, {"status": "IN_DOUBT"}, {"journal_error": "x"}):
        assert verdict(**grounds).failed and verdict(**grounds).blocks_output, grounds
    doubt = verdict(in_doubt=(item,))
    assert not doubt.failed and doubt.blocks_output


def test_only_read_only_tools_are_let_through_after_a_failure():
    assert changes_world(None)
    for kind in Reversibility:
        decl = ToolDeclaration("t", kind, undo=(lambda ctx: None) if kind is Reversibility.COMPENSATABLE else None)
        assert changes_world(decl) is (kind is not Reversibility.READ_ONLY), kind
