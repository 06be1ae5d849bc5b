"""T-02, call-time grant (core.grants): each refusal reached alone, named by its code."""

from __future__ import annotations

from typing import Any

import pytest

from sagacity_agents.backends import Phase
from sagacity_agents.core.grants import (
    consumed_decisions,
    grant_for_call,
    requests_void,
)

from .support import journal_of

pytestmark = pytest.mark.case("T-02")

H = "a" * 64
OTHER = "b" * 64


def decided(rid: str = "r1", *, approved: bool = True, decided_hash: str = H, consumed_hash: str = H,
            call_id: str = "c1", tool: str = "wire") -> list[tuple[Phase, dict[str, Any]]]:
    phase = Phase.APPROVED if approved else Phase.REJECTED
    return [
        (phase, {"tool": tool, "call_id": call_id, "payload": {"request_id": rid, "args_hash": decided_hash}}),
        (Phase.CONSUMED, {"tool": tool, "call_id": call_id, "payload": {
            "request_id": rid, "args_hash": consumed_hash,
            "decision": "approved" if approved else "rejected"}}),
    ]


async def grant(*specs, args_hash: str = H, claimed=frozenset(), call_id: str = "c1", tool: str = "wire"):
    _, entries = await journal_of(*specs)
    return grant_for_call(entries, tool=tool, call_id=call_id, args_hash=args_hash, claimed=claimed)


async def test_grant_runs_on_a_consumed_approval_of_the_same_hash():
    assert await grant(*decided()) == ("r1", "", None)


async def test_grant_without_consumed_approval_is_refused_as_such():
    check = await grant((Phase.APPROVED, {"tool": "wire", "call_id": "c1",
                                          "payload": {"request_id": "r1", "args_hash": H}}))
    assert check.request_id is None and check.code == "NO_CONSUMED_APPROVAL"


async def test_grant_of_another_call_or_tool_does_not_count():
    assert (await grant(*decided(), call_id="c2")).code == "NO_CONSUMED_APPROVAL"
    assert (await grant(*decided(), tool="refund")).code == "NO_CONSUMED_APPROVAL"


async def test_arguments_differing_from_the_approved_hash_are_refused_at_call_time():
    """Approved, consumed, unused, same call: only the arguments hash differs."""
    check = await grant(*decided(), args_hash=OTHER)
    assert check.request_id is None
    assert check.code == "ARGS_HASH_MISMATCH_AT_CALL"
    assert OTHER in check.why and H in check.why


async def test_a_rejected_decision_is_refused_as_not_approved():
    check = await grant(*decided(approved=False))
    assert (check.request_id, check.code) == (None, "NOT_APPROVED")


async def test_a_consumed_decision_with_no_approved_entry_of_that_hash_is_not_approved():
    check = await grant(*decided(decided_hash=OTHER))
    assert (check.request_id, check.code) == (None, "NOT_APPROVED")


async def test_a_consumed_entry_saying_rejected_is_not_approved_even_with_an_approved_entry():
    specs = decided()
    specs[1][1]["payload"]["decision"] = "rejected"
    assert (await grant(*specs)).code == "NOT_APPROVED"


async def test_an_approval_used_by_an_intent_is_refused_as_used():
    specs = [*decided(), (Phase.INTENT, {"tool": "wire", "call_id": "c1", "payload": {"request_id": "r1"}})]
    check = await grant(*specs)
    assert (check.request_id, check.code) == (None, "APPROVAL_ALREADY_USED")
    assert "INTENT seq 3" in check.why


async def test_an_approval_claimed_in_this_process_is_refused_as_used():
    check = await grant(*decided(), claimed={"r1"})
    assert (check.request_id, check.code) == (None, "APPROVAL_ALREADY_USED")
    assert "INTENT seq" not in check.why


async def test_the_newest_decision_is_used_and_its_refusal_reported():
    """Two decisions for one call: the newest usable one wins; if none is, the newest's reason."""
    older, newer = decided("r1"), decided("r2")
    assert (await grant(*older, *newer)).request_id == "r2"
    used = (Phase.INTENT, {"tool": "wire", "call_id": "c1", "payload": {"request_id": "r2"}})
    assert (await grant(*older, *newer, used)).request_id == "r1"
    both = await grant(*decided("r1", approved=False), *decided("r2", decided_hash=OTHER, consumed_hash=OTHER))
    assert both.code == "ARGS_HASH_MISMATCH_AT_CALL"


async def test_consumed_decisions_read_exactly_the_journal():
    specs = [
        *decided("r1"),
        (Phase.INTENT, {"tool": "wire", "call_id": "c1", "payload": {"request_id": "r1"}}),
        (Phase.INTENT, {"tool": "wire", "call_id": "c1", "payload": {"request_id": "r1"}}),
        (Phase.CONSUMED, {"tool": "wire", "call_id": "c9", "payload": {"request_id": "", "args_hash": H}}),
        (Phase.APPROVED, {"tool": "wire", "call_id": "c9", "payload": ["not", "a", "dict"]}),
        *decided("r2", approved=False, call_id="c2"),
    ]
    _, entries = await journal_of(*specs)
    got = consumed_decisions(entries)
    assert [(d.request_id, d.call_id, d.args_hash, d.approved, d.used_by) for d in got] == [
        ("r1", "c1", H, True, 3), ("r2", "c2", H, False, None)]


async def test_requests_are_void_once_the_saga_is_closed_or_failed():
    _, open_ = await journal_of((Phase.SAGA_OPENED, {}))
    assert requests_void(open_) is None
    _, failed = await journal_of((Phase.SAGA_OPENED, {}), (Phase.SAGA_FAILED, {}))
    assert requests_void(failed) == "saga failed"
    _, closed = await journal_of((Phase.SAGA_OPENED, {}), (Phase.SAGA_FAILED, {}), (Phase.SAGA_CLOSED, {}))
    assert requests_void(closed) == "saga closed"
