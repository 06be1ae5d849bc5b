"""R-04 c (issue 18): an inline approver that returns ``True`` gets a clear ``TypeError`` naming
``Decision`` (not an ``AttributeError`` from deep in the run), the wire does not run, and the
request of the saga that ended is never listed as pending (``sagacity approvals list``), on
every backend of ``tests/backends.py`` that a second process can read (SQLite, PostgreSQL)."""

from __future__ import annotations

import asyncio

import pytest
from click.testing import CliRunner

from sagacity_agents import Decision, Sagacity, SagaStatus
from sagacity_agents.errors import SagaStateError
from sagacity_agents.cli import cli
from tests.backends import BACKENDS

from . import wire_app

pytestmark = pytest.mark.case("R-04c")

WIRE = ("transfer", '{"amount": 5, "to": "acct-9"}', "w1")


@pytest.fixture(autouse=True)
def ledger(tmp_path, monkeypatch):
    monkeypatch.setattr(wire_app, "LEDGER", tmp_path / "ledger.txt")


@pytest.fixture(params=[b for b in BACKENDS if b.name != "memory"], ids=str)
def location(request) -> str:
    return request.param.location(request)


def listed(location: str, *extra: str) -> str:
    out = CliRunner().invoke(cli, ["approvals", "list", "--db", location, *extra])
    assert out.exit_code == 0, out.output
    return out.output


def run_wire(location: str, **options):
    """One run of the wire agent (the CLI checks below run outside any event loop); returns
    (result, the saga's approval requests)."""

    async def work():
        s = Sagacity(location)
        try:
            result = await s.run(wire_app.paused_agent(WIRE), "go", **options)
            return result, await s.approvals.list(result.saga_id)
        finally:
            await s.aclose()

    return asyncio.run(work())


def test_approver_returning_true_is_a_type_error_naming_decision(location):
    """The approver answers ``True``: the run fails with a ``TypeError`` naming ``Decision`` and
    the request, the wire does not run, the saga is compensated; its request, still undecided
    in the store, is not listed as pending (``--all`` and ``show`` say void: saga closed)."""

    async def approve_everything(request):
        return True

    result, (request,) = run_wire(location, approver=approve_everything)
    assert isinstance(result.exception, TypeError)
    message = str(result.exception)
    assert "the approver returned True" in message and "Decision(approved=True, approver=" in message
    assert request.request_id in message
    assert result.status is SagaStatus.COMPENSATED and wire_app.executions() == []
    assert request.pending  # the store alone still says undecided...
    assert request.request_id not in listed(location)        # ...the listing never says pending
    assert "no pending approval requests" in listed(location)
    every = listed(location, "--all")
    assert request.request_id in every and "void: saga closed" in every
    shown = CliRunner().invoke(cli, ["approvals", "show", request.request_id, "--db", location])
    assert "void: saga closed" in shown.output

    async def run_again() -> str:
        s = Sagacity(location)
        try:
            with pytest.raises(SagaStateError) as refused:
                await s.run(wire_app.paused_agent(WIRE), "go", saga_id=result.saga_id)
            return str(refused.value)
        finally:
            await s.aclose()

    refusal = asyncio.run(run_again())  # the saga is closed, not "waiting for approval"
    assert "closed" in refusal and "waiting for approval" not in refusal


def test_a_sync_approver_returning_a_decision_is_accepted(location):
    """A plain function returning a ``Decision`` works as an async one does."""
    result, _ = run_wire(location, approver=lambda request: Decision(approved=True, approver="alice"))
    assert result.status is SagaStatus.COMPLETED, result.exception
    assert wire_app.executions() == ["5 USD -> acct-9"]


def test_a_waiting_request_is_still_listed_pending(location):
    """The listing's journal check hides only what is over: a saga waiting for a decision is
    listed as pending."""
    result, (request,) = run_wire(location)
    assert result.status is SagaStatus.AWAITING_APPROVAL
    assert request.request_id in listed(location)
    assert "pending" in listed(location)
