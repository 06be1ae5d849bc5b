"""Issue 23: a failing observer or trace-id source never changes what the saga does (the call
runs, its entries are written) and is reported in the log; and the observability tests run
with no observer failing silently."""

from __future__ import annotations

import logging

import pytest

from sagacity_agents import FailurePolicy, Sagacity, SagaStatus
from sagacity_agents.core import observe
from sagacity_agents.demo.booking import BookingSystem
from sagacity_agents.demo.trip import TRIP_REQUEST, build_agent

pytestmark = pytest.mark.case("O-23")


class Broken:
    def follows(self, kind):
        return True

    def start(self, kind, attrs):
        raise RuntimeError("exporter down")

    def end(self, handle, attrs, error, sensitive):
        raise AssertionError("never started")


@pytest.fixture
def broken():
    observer, source = Broken(), lambda: 1 / 0
    observe.add_observer(observer)
    observe.add_link_source(source)
    yield
    observe.remove_observer(observer)
    observe.remove_link_source(source)


async def test_a_failing_observer_changes_nothing_and_is_logged(tmp_path, broken, caplog):
    caplog.set_level(logging.WARNING, logger="sagacity_agents.observe")
    sagacity = Sagacity(":memory:", policy=FailurePolicy.CONTINUE)
    result = await sagacity.run(build_agent(BookingSystem(tmp_path / "b.db", reset=True)),
                                TRIP_REQUEST, max_turns=12)
    entries = await sagacity.journal.entries(result.saga_id)
    assert result.status is SagaStatus.COMPENSATED and len(entries) == 15
    assert all("trace" not in e.payload for e in entries)
    messages = [r.getMessage() for r in caplog.records]
    assert any("failed to start a call step" in m for m in messages)
    assert any("trace-id source" in m for m in messages)
