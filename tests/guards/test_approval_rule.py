"""The approval rule in verify (core.approval_rule): each way an execution escapes its decision
reaches the rule alone, with the seq named; the trail a run writes passes."""

from __future__ import annotations

from typing import Any

import pytest

from sagacity_agents.backends import Phase
from sagacity_agents.core.approval import args_hash
from sagacity_agents.core.approval_rule import approval_problem, bound_arguments, raw_args_value
from sagacity_agents.core.entries import EntryFields

ARGS = {"amount": 5, "to": "acct-9"}
HASH = args_hash(ARGS)
RID = "apr-1"


def entry(phase: Phase, tool: str | None = "wire", call: str | None = "c1", **payload: Any) -> dict:
    return {"phase": phase, "tool": tool, "call_id": call, "payload": payload}


def paused(rid: str = RID, kind: str = "irreversible", args: Any = ARGS, **extra: Any) -> dict:
    return entry(Phase.AWAITING_APPROVAL, request_id=rid, args=args, args_hash=args_hash(args),
                 reversibility=kind, expires_at="2026-01-02T00:00:00.000000Z", **extra)


def decided(approved: bool = True, rid: str = RID, digest: str = HASH, **kw: Any) -> dict:
    return entry(Phase.APPROVED if approved else Phase.REJECTED, request_id=rid, args_hash=digest,
                 approver="alice", **kw)


def consumed(decision: str = "approved", rid: str = RID, digest: str = HASH,
             at: str | None = "2026-01-01T00:00:00.000000Z", **kw: Any) -> dict:
    extra = {"consumed_at": at} if at is not None else {}
    return entry(Phase.CONSUMED, request_id=rid, args_hash=digest, decision=decision, **extra, **kw)


def intent(rid: str | None = RID, args: Any = ARGS, kind: str = "irreversible", **kw: Any) -> dict:
    payload: dict[str, Any] = {"args": args, "reversibility": kind}
    if rid is not None:
        payload["request_id"] = rid
    return entry(Phase.INTENT, **{**payload, **kw})


def voided(rid: str = RID) -> dict:
    return entry(Phase.REQUEST_VOIDED, request_id=rid, reason="saga recovered")


def fields(*specs: dict) -> list[EntryFields]:
    opened = [EntryFields(1, Phase.SAGA_OPENED, None, None, "open", {"metadata": {}}, "h")]
    return opened + [EntryFields(seq, s["phase"], s["tool"], s["call_id"], f"k{seq}", s["payload"], "h")
                     for seq, s in enumerate(specs, start=2)]


def problem(*specs: dict) -> tuple[int, str] | None:
    return approval_problem(fields(*specs))


def test_the_trail_a_run_writes_passes():
    assert problem(paused(), decided(), consumed(), intent(),
                   entry(Phase.EXECUTED, intent_seq=5, result="ok")) is None


def test_a_saga_without_approvals_passes_and_a_rejection_that_runs_nothing_passes():
    assert problem(intent(None, kind="compensable"), intent(None, kind="read_only")) is None
    assert problem(paused(), decided(False), consumed("rejected")) is None
    assert problem(entry(Phase.REJECTED, request_id=None, approver="sagacity")) is None


def test_an_approved_compensable_call_needs_no_request_on_its_intent():
    assert problem(paused(kind="compensable"), decided(), consumed(), intent(None, kind="compensable")) is None


@pytest.mark.parametrize("kind", ["irreversible", "compensable", "undeclared"])
def test_an_irreversible_intent_without_its_request_is_refused(kind):
    found = problem(paused(), decided(), consumed(), intent(None, kind=kind))
    assert found is not None and found[0] == 5 and "names no approval request" in found[1]


def test_an_irreversible_intent_of_a_call_that_never_paused_is_refused():
    assert problem(intent(None))[0] == 2
    other_call = entry(Phase.AWAITING_APPROVAL, call="other", request_id="r2", reversibility="irreversible")
    assert problem(other_call, intent(None, kind="compensable")) is None


def test_an_intent_naming_a_request_id_that_is_no_string_is_refused():
    found = problem(intent(None, kind="compensable", request_id=7))
    assert found[0] == 2 and "not a request id" in found[1]


def test_an_intent_without_a_decision_is_refused():
    found = problem(paused(), intent())
    assert found[0] == 3 and "has no decision before it" in found[1]
    assert problem(intent(kind="compensable"))[0] == 2


def test_an_execution_after_a_rejection_is_refused():
    found = problem(paused(), decided(False), consumed("rejected"), intent())
    assert found[0] == 5 and "REJECTED at seq 3" in found[1]


def test_an_intent_under_an_approval_of_another_call_is_refused():
    found = problem(paused(), decided(), consumed(), entry(Phase.INTENT, call="c2", args=ARGS,
                                                            request_id=RID, reversibility="irreversible"))
    assert found[0] == 5 and "for another call" in found[1]
    found = problem(paused(), decided(), consumed(), entry(Phase.INTENT, tool="mint", args=ARGS,
                                                            request_id=RID, reversibility="irreversible"))
    assert found[0] == 5 and "for another call" in found[1]


def test_an_intent_under_an_approval_never_consumed_or_voided_is_refused():
    found = problem(paused(), decided(), intent())
    assert found[0] == 4 and "never consumed" in found[1]
    found = problem(paused(), decided(), voided(), intent())
    assert found[0] == 5 and "voided at seq 4" in found[1]


def test_a_request_runs_one_call():
    found = problem(paused(), decided(), consumed(), intent(), intent())
    assert found[0] == 6 and "already used by INTENT seq 5" in found[1]


def test_arguments_other_than_the_approved_ones_are_refused():
    found = problem(paused(), decided(), consumed(), intent(args={**ARGS, "to": "attacker"}))
    assert found[0] == 5 and f"approved at seq 3 for arguments hash {HASH}" in found[1]


@pytest.mark.parametrize(("at", "refused"), [
    ("2026-01-02T00:00:00.000000Z", True), ("2026-01-02T00:00:00.000001Z", True),
    ("2026-01-01T23:59:59.999999Z", False), (None, False)])
def test_a_request_consumed_at_or_after_its_expiry_runs_nothing(at, refused):
    found = problem(paused(), decided(), consumed(at=at), intent())
    assert (found is not None) is refused
    if refused:
        assert found[0] == 5 and "after it expired at 2026-01-02" in found[1]


def test_a_request_decided_twice_or_after_its_consumption_is_refused():
    found = problem(paused(), decided(False), decided())
    assert found[0] == 4 and "second decision" in found[1]
    found = problem(paused(), decided(), consumed(), decided())
    assert found[0] == 5 and "second decision" in found[1]
    found = problem(paused(), voided(), decided())
    assert found[0] == 4 and "after it was voided (seq 3)" in found[1]


def test_a_consumption_must_follow_its_decision_once():
    found = problem(paused(), decided(), consumed(), consumed())
    assert found[0] == 5 and "consumed a second time (first CONSUMED at seq 4)" in found[1]
    found = problem(paused(), consumed())
    assert found[0] == 3 and "no journaled decision" in found[1]
    found = problem(paused(), decided(False), consumed("approved"))
    assert found[0] == 4 and "says 'approved'" in found[1]
    found = problem(paused(), decided(True), consumed("rejected"))
    assert found[0] == 4 and "says 'rejected'" in found[1]
    found = problem(paused(), decided(), consumed(digest="0" * 64))
    assert found[0] == 4 and "for arguments hash " + "0" * 64 in found[1]
    found = problem(paused(), decided(), voided(), consumed())
    assert found[0] == 5 and "voided at seq 4" in found[1]


def test_a_call_journaled_from_outside_its_body_is_bound_to_its_raw_arguments():
    raw = '{"to": "acct-9", "amount": 5}'
    assert bound_arguments({"args": {}, "raw_args": raw}, ARGS) == ARGS
    assert bound_arguments({"args": ARGS, "raw_args": '{"x": 1}'}, None) == ARGS
    assert bound_arguments({"raw_args": None}, None) == {}
    mcp = {"arguments": ARGS, "mcp_tool": {"name": "pay"}}
    assert bound_arguments({"args": {}, "raw_args": raw}, mcp) == mcp
    assert bound_arguments({"args": {}, "raw_args": raw}, {"arguments": ARGS}) == ARGS
    assert raw_args_value("not json") == {"$unparsable": "not json"}
    assert raw_args_value("[1]") == {"$unparsable": "[1]"}
    assert raw_args_value("") == {}
    found = problem(paused(), decided(), consumed(), intent(args={}, raw_args=raw))
    assert found is None
    found = problem(paused(), decided(), consumed(), intent(args={}, raw_args='{"to": "x", "amount": 5}'))
    assert found[0] == 5


def test_a_plain_call_before_the_trail_does_not_end_the_check():
    found = problem(intent(None, kind="compensable"), paused(), decided(False), consumed("rejected"), intent())
    assert found is not None and found[0] == 6 and "REJECTED" in found[1]


@pytest.mark.parametrize("payload", [None, [], "text"])
def test_an_intent_whose_payload_is_no_object_is_left_to_the_other_checks(payload):
    assert problem({"phase": Phase.INTENT, "tool": "t", "call_id": "c", "payload": payload}) is None
