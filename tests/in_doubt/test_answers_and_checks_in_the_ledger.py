"""How the ledger reads answers to an in-doubt call: a human's RESOLVED and a far-side check's
CHECKED, and the call's own outcome, which outranks either when they say "not run".

* RESOLVED or CHECKED "ran" with ``undo_data``: the call is undone with that data (result
  ``None``);
* CHECKED "not run" reads like RESOLVED "not run" (nothing to undo), CHECKED "unknown" leaves the
  call in doubt;
* an EXECUTED (or a CHECKED "ran") after a "not run" answer is the call's outcome: the
  contradiction (intent seq, answer seq, outcome seq) is derived when the ledger reads, and the
  compensation report names it.
"""

from __future__ import annotations

from typing import Any

from sagacity_agents.backends import Phase
from sagacity_agents.core.compensation import compensate, undo_order
from sagacity_agents.core.declarations import Reversibility, ToolDeclaration
from sagacity_agents.core.ledger import Contradiction, SagaLedger
from sagacity_agents.core.structure import structure_problem
from tests.guards.support import SAGA, journal_of


def intent(call: str) -> tuple[Phase, dict[str, Any]]:
    return (Phase.INTENT, {"tool": "t", "call_id": call,
                           "payload": {"reversibility": "compensatable", "args": {"n": call}}})


def executed(intent_seq: int, call: str, **payload: Any) -> tuple[Phase, dict[str, Any]]:
    return (Phase.EXECUTED, {"tool": "t", "call_id": call,
                             "payload": {"intent_seq": intent_seq, **payload}})


def resolved(target: int, answer: str, **payload: Any) -> tuple[Phase, dict[str, Any]]:
    return (Phase.RESOLVED, {"payload": {"target": "call", "target_seq": target, "answer": answer,
                                         **payload}})


def checked(target: int, verdict: str, **payload: Any) -> tuple[Phase, dict[str, Any]]:
    return (Phase.CHECKED, {"payload": {"target_seq": target, "verdict": verdict, "saw": {},
                                        "checker": "lookup", **payload}})


async def test_checks_read_like_answers_and_unknown_leaves_the_call_in_doubt():
    _, entries = await journal_of(
        intent("a"), checked(1, "ran", undo_data={"id": "A"}),   # 1, 2
        intent("b"), checked(3, "not_run"),                      # 3, 4
        intent("c"), checked(5, "unknown"),                      # 5, 6
    )
    ledger = SagaLedger(entries)
    assert [c.intent.call_id for c in undo_order(ledger)] == ["a"]
    assert [e.seq for e in ledger.in_doubt()] == [5]
    assert ledger.contradictions == []


async def test_an_answer_ran_with_undo_data_gives_the_undo_that_data():
    seen: list[Any] = []
    decl = ToolDeclaration(name="t", reversibility=Reversibility.COMPENSATABLE,
                           undo=lambda ctx: seen.append((ctx.call_id, ctx.undo_data, ctx.result)))
    journal, _ = await journal_of(
        intent("a"), resolved(1, "ran", undo_data={"booking_id": "B1"}),
        intent("b"), checked(3, "ran", undo_data={"booking_id": "B2"}),
    )
    report = await compensate(journal, SAGA, {"t": decl})
    assert seen == [("b", {"booking_id": "B2"}, None), ("a", {"booking_id": "B1"}, None)]
    assert [i.seq for i in report.undone] == [4, 2] and report.clean


async def test_the_calls_own_outcome_outranks_a_not_run_answer():
    seen: list[Any] = []
    decl = ToolDeclaration(name="t", reversibility=Reversibility.COMPENSATABLE,
                           undo=lambda ctx: seen.append((ctx.call_id, ctx.undo_data, ctx.result, ctx.seq)))
    journal, entries = await journal_of(
        intent("a"), resolved(1, "not_run"), executed(1, "a", result="H1", undo_data={"id": "A"}),
        intent("b"), checked(4, "not_run"), checked(4, "ran", undo_data={"id": "B"}),
        intent("c"), resolved(7, "not_run"), (Phase.REFUSED, {"tool": "t", "call_id": "c",
                                                                "payload": {"intent_seq": 7}}),
    )
    ledger = SagaLedger(entries)
    assert ledger.contradictions == [Contradiction(1, 2, 3), Contradiction(4, 5, 6)]
    assert [c.outcome.seq for c in undo_order(ledger)] == [6, 3]  # c refused: no effect
    assert structure_problem(entries) is None
    report = await compensate(journal, SAGA, {"t": decl})
    assert seen == [("b", {"id": "B"}, None, 6), ("a", {"id": "A"}, "H1", 3)]
    assert [(i.seq, i.tool) for i in report.contradicted] == [(3, "t"), (6, "t")]
    assert report.contradicted[0].detail == (
        'the answer "not run" (seq 2) was contradicted by the call\'s own outcome (seq 3)')
    assert report.to_dict()["contradicted"][1]["seq"] == 6
    # read again, the undone calls stay undone; the contradiction is still derived, not written
    again = SagaLedger(await journal.entries(SAGA))
    assert len(again.contradictions) == 2
    assert not any(e.phase is Phase.CHECKED and e.seq > 9 for e in again.entries)


async def test_a_real_outcome_after_a_ran_answer_replaces_it_until_an_undo_ran():
    _, entries = await journal_of(
        intent("a"), resolved(1, "ran"), executed(1, "a", undo_data={"id": "A"}),
    )
    (call,) = SagaLedger(entries).calls.values()
    assert call.outcome.seq == 3 and call.contradiction is None


def test_a_close_after_a_check_that_says_unknown_is_structure_no_run_writes():
    from tests.in_doubt.test_late_outcome_after_close import _chain

    opened = [(Phase.SAGA_OPENED, {"metadata": {}}), (Phase.RUN_STARTED, {"holder": "a"}),
              (Phase.INTENT, {"args": {}, "fence": 2})]
    for verdict, problem in (("unknown", True), ("ran", False), ("not_run", False)):
        entries = _chain(*opened, (Phase.CHECKED, {"target_seq": 3, "verdict": verdict, "fence": 2}),
                         (Phase.SAGA_CLOSED, {"status": "COMPENSATED", "fence": 2}))
        found = structure_problem(entries)
        assert (found is not None) is problem, (verdict, found)
        if problem:
            assert found[0] == 5 and "seq 3 is in doubt" in found[1]
