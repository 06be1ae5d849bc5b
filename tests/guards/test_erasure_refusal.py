"""The erasure guard (``core.erasure.erasure_refusal``): which sagas may lose their data key now.
Pure: entries sealed by hand, one rule at a time, each boundary (the deadline instant itself)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from sagacity_agents.core.entries import GENESIS_HASH, Phase, seal_entry
from sagacity_agents.core.erasure import erasure_refusal

pytestmark = pytest.mark.case("X-04")

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
LATER = T0 + dt.timedelta(days=1)
TOOLS = (Phase.INTENT, Phase.EXECUTED, Phase.FAILED, Phase.COMPENSATING, Phase.COMPENSATED)


def chain(*specs: tuple[Phase, dict[str, Any] | None] | tuple[Phase, dict[str, Any] | None, dt.datetime]) -> list[Any]:
    """Entries sealed in a chain, each ``(phase, payload[, recorded at])`` (default T0)."""
    entries: list[Any] = []
    prev = GENESIS_HASH
    for seq, spec in enumerate(specs, start=1):
        phase, payload = spec[0], spec[1]
        when = spec[2] if len(spec) > 2 else T0
        tool = "pay" if phase in TOOLS else None
        entry = seal_entry(saga_id="s", seq=seq, phase=phase, tool=tool,
                           call_id="c1" if tool else None, write_key=f"k{seq}", payload=payload,
                           recorded_at=when.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), prev_hash=prev)
        entries.append(entry)
        prev = entry.hash
    return entries


OPENED = (Phase.SAGA_OPENED, {"metadata": {}})
RUN = (Phase.RUN_STARTED, {"holder": "a", "lease_seconds": 30})
INTENT = (Phase.INTENT, {"args": {}, "fence": 2, "deadline_seconds": 60})
EXECUTED = (Phase.EXECUTED, {"intent_seq": 3, "fence": 2})


def ended(status: str) -> tuple[Phase, dict[str, Any]]:
    return (Phase.RUN_ENDED, {"holder": "a", "status": status, "fence": 2})


def closed(status: str = "COMPLETED", **report: list[dict[str, Any]]) -> tuple[Phase, dict[str, Any]]:
    return (Phase.SAGA_CLOSED, {"status": status, **({"report": report} if report else {})})


def code(entries: list[Any], now: dt.datetime = LATER) -> str | None:
    refusal = erasure_refusal("s", entries, now)
    return None if refusal is None else refusal.code


def test_a_clean_closed_saga_past_its_deadlines_may_be_erased():
    assert code(chain(OPENED, RUN, INTENT, EXECUTED, ended("COMPLETED"), closed())) is None


def test_an_unknown_saga():
    assert code([]) == "UNKNOWN_SAGA"


@pytest.mark.parametrize("tail, expected", [
    ((), "OPEN"),  # a run holds it (or stopped mid-run)
    ((ended("OPEN"),), "OPEN"),  # kept open between runs
    ((ended("AWAITING_APPROVAL"),), "AWAITING_APPROVAL"),
    ((ended("AWAITING_APPROVAL"), (Phase.RUN_STARTED, {"holder": "b"})), "OPEN"),  # resumed
    ((ended("IN_DOUBT"),), "IN_DOUBT"),
    ((ended("COMPENSATION_FAILED"),), "IN_DOUBT"),
    ((ended("COMPLETED"),), "OPEN"),  # completed, not closed yet: recovery closes it
])
def test_an_open_saga_after_an_outcome(tail, expected):
    assert code(chain(OPENED, RUN, INTENT, EXECUTED, *tail)) == expected


def test_an_open_saga_with_a_call_or_an_undo_in_doubt():
    assert code(chain(OPENED, RUN, INTENT)) == "IN_DOUBT"
    assert code(chain(OPENED, RUN, INTENT, ended("OPEN"))) == "IN_DOUBT"
    undo = (Phase.COMPENSATING, {"target_seq": 4, "fence": 2})
    assert code(chain(OPENED, RUN, INTENT, EXECUTED, undo)) == "IN_DOUBT"
    assert code(chain(OPENED, RUN, INTENT, EXECUTED, undo,
                      (Phase.COMPENSATED, {"compensating_seq": 5, "fence": 2}))) == "OPEN"


def test_a_closed_saga_with_a_call_in_doubt():
    assert code(chain(OPENED, RUN, INTENT, closed("COMPENSATED"))) == "IN_DOUBT"


def test_a_reopened_saga():
    late = (Phase.EXECUTED, {"intent_seq": 3, "fence": 2, "late": True})
    entries = chain(OPENED, RUN, INTENT, closed("COMPENSATED"), late)
    assert code(entries) == "REOPENED"
    assert "(a late outcome, seq 5, landed after its SAGA_CLOSED at seq 4)" in str(
        erasure_refusal("s", entries, LATER))


ROW = {"seq": 4, "tool": "pay", "call_id": "c1", "detail": ""}


@pytest.mark.parametrize("name", ["failed", "no_undo", "in_doubt"])
def test_a_saga_closed_dirty(name):
    entries = chain(OPENED, RUN, INTENT, EXECUTED, ended("COMPENSATED"),
                    closed("COMPENSATED", undone=[], **{name: [ROW]}))
    assert code(entries) == "DIRTY"
    assert f"{name} seq 4" in str(erasure_refusal("s", entries, LATER))


@pytest.mark.parametrize("name", ["undone", "kept_irreversible", "approved_not_run", "contradicted"])
def test_what_does_not_leave_a_saga_dirty(name):
    entries = chain(OPENED, RUN, INTENT, EXECUTED, ended("COMPENSATED"),
                    closed("COMPENSATED", **{name: [ROW]}, failed=[], no_undo=[], in_doubt=[]))
    assert code(entries) is None


def test_a_call_before_its_deadline_refuses_up_to_the_instant_itself():
    entries = chain(OPENED, RUN, INTENT, EXECUTED, ended("COMPLETED"), closed())
    at = T0 + dt.timedelta(seconds=60 + 30)  # recorded_at + deadline + one lease period
    assert code(entries, at) == "BEFORE_DEADLINE"
    assert code(entries, at - dt.timedelta(microseconds=1)) == "BEFORE_DEADLINE"
    assert code(entries, at + dt.timedelta(microseconds=1)) is None
    assert code(entries, T0) == "BEFORE_DEADLINE"


def test_the_default_deadline_and_the_latest_call_count():
    no_deadline = (Phase.INTENT, {"args": {}, "fence": 2})
    entries = chain(OPENED, RUN, no_deadline, EXECUTED, ended("COMPLETED"), closed())
    default = T0 + dt.timedelta(seconds=300 + 30)
    assert code(entries, default) == "BEFORE_DEADLINE"
    assert code(entries, default + dt.timedelta(microseconds=1)) is None
    later = T0 + dt.timedelta(hours=1)
    second = (Phase.INTENT, {"args": {}, "fence": 2, "deadline_seconds": 60}, later)
    entries = chain(OPENED, RUN, INTENT, EXECUTED, second,
                    (Phase.EXECUTED, {"intent_seq": 5, "fence": 2}), ended("COMPLETED"), closed())
    assert code(entries, later + dt.timedelta(seconds=90)) == "BEFORE_DEADLINE"
    assert code(entries, later + dt.timedelta(seconds=90, microseconds=1)) is None


def test_an_undo_before_its_deadline():
    undo = (Phase.COMPENSATING, {"target_seq": 4, "fence": 2}, T0 + dt.timedelta(hours=1))
    entries = chain(OPENED, RUN, INTENT, EXECUTED, undo,
                    (Phase.COMPENSATED, {"compensating_seq": 5, "fence": 2}),
                    ended("COMPENSATED"), closed("COMPENSATED"))
    at = T0 + dt.timedelta(hours=1, seconds=60 + 30)  # the undo timeout + one lease period
    assert code(entries, at) == "BEFORE_DEADLINE"
    assert "undo at seq 5" in str(erasure_refusal("s", entries, at))
    assert code(entries, at + dt.timedelta(microseconds=1)) is None


def test_only_calls_and_undos_have_deadlines():
    """A close written long after the call does not hold the erasure back; an entry whose stamp
    does not parse is skipped (``verify`` reports it)."""
    closing = T0 + dt.timedelta(hours=2)
    entries = chain(OPENED, RUN, INTENT, EXECUTED, (*ended("COMPLETED"), closing),
                    (*closed(), closing))
    assert code(entries, T0 + dt.timedelta(seconds=91)) is None
    broken = chain(OPENED, RUN, INTENT, EXECUTED, ended("COMPLETED"), closed())
    object.__setattr__(broken[2], "recorded_at", "not a stamp")
    assert code(broken, T0) is None
