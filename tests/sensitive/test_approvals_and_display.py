"""Approvals, snapshots and display with sensitive values, on every backend.

A payment to a card waits for approval: the request's hash covers the *committed* arguments
(``args_version`` 2), the stored request and the RunState snapshot hold no clear card number in
any stored byte, and a resume whose snapshot was made to carry another card number (by someone
holding the master key, who can re-encrypt it) is refused: the tool never runs with it. The
approved resume runs the tool with the clear card (the process holds the key). ``journal show``
prints masks; ``--reveal`` shows the values with the key and leaves an access-log entry.
"""

from __future__ import annotations

import asyncio

import pytest
from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from click.testing import CliRunner

from sagacity_agents import SagaStatus, irreversible
from sagacity_agents.backends import Phase
from sagacity_agents.core.approval import args_hash
from sagacity_agents.core.data_keys import is_sealed_text
from sagacity_agents.core.sensitive import is_committed
from sagacity_agents.errors import ApprovalError

from .helpers import (
    CARD, MASTER_TEXT, OTHER_CARD, PASSWORD, TOKEN, data_keys, leaks, open_sagacity, payment_agent,
    stored_bytes,
)

pytestmark = pytest.mark.case("X-03")

ACCESS_SAGA = "sagacity.access"


def _payout_agent(paid: list[str], *, first: bool) -> Agent:
    """An agent whose irreversible, approval-needing payout takes a card number."""

    @function_tool(needs_approval=True)
    @irreversible(scope="sensitive-approvals")
    def payout(card_number: str, amount_eur: int) -> str:
        """Pay money out to a card."""
        paid.append(card_number)
        return "paid"

    model = ScriptedModel()
    if first:
        model.enqueue([function_call("payout", {"card_number": CARD, "amount_eur": 90},
                                     call_id="p1")])
    model.enqueue([assistant_message("done")])
    return Agent(name="payouts", model=model, tools=[payout])


async def _paused(s, paid):
    result = await s.run(_payout_agent(paid, first=True), f"refund card {CARD}")
    assert result.status is SagaStatus.AWAITING_APPROVAL, result.exception
    (request,) = result.approvals
    return result, request


async def test_the_request_binds_the_committed_card_and_stores_no_clear_value(place, master):
    paid: list[str] = []
    s = open_sagacity(place.sagacity_location(), data_keys(master))
    try:
        result, request = await _paused(s, paid)
        entries = await s.journal.entries(result.saga_id)
        awaiting = next(e for e in entries if e.phase is Phase.AWAITING_APPROVAL)
        committed = awaiting.payload["args"]
        assert is_committed(committed["card_number"]) and committed["amount_eur"] == 90
        assert awaiting.payload.get("args_version") == 2
        assert request.args_hash == args_hash(committed) == awaiting.payload["args_hash"]
        snapshot = await s.approvals.load_snapshot(result.saga_id)
        assert is_sealed_text(snapshot) == master  # encrypted with a key, masked without
        assert leaks(snapshot) == []
        assert leaks(await stored_bytes(place.name, place.location, s.journal, s.approvals)) == []
        if master:
            await s.approve(request.request_id, approver="alice", reason="known customer")
            done = await s.resume(result.saga_id, _payout_agent(paid, first=False))
            assert done.status is SagaStatus.COMPLETED, done.exception
            assert paid == [CARD]  # the tool got the clear value back
            assert leaks(await stored_bytes(place.name, place.location, s.journal, s.approvals)) == []
        for verified in await s.verify(result.saga_id):
            assert verified.ok, verified
    finally:
        await s.aclose()


async def test_a_resume_with_another_card_number_is_refused(place, with_master):
    """Someone holding the master key opens the stored snapshot, puts another card number in
    the pending call and seals it again: the approval (bound to the committed card) does not
    cover it, and the payout never runs."""
    paid: list[str] = []
    s = open_sagacity(place.sagacity_location(), data_keys(True))
    try:
        result, request = await _paused(s, paid)
        await s.approve(request.request_id, approver="alice")
        secrets = await s.data_keys.for_saga(s.journal, result.saga_id, create=False)
        other_args = {"card_number": OTHER_CARD, "amount_eur": 90}
        other, _ = secrets.protect({"args": other_args}, _defaults(), "probe")
        assert args_hash(other["args"]) != request.args_hash  # the binding tells them apart
        stored = await s.approvals.load_snapshot(result.saga_id)
        text = secrets.open_text("snapshot", stored)
        assert CARD in text
        forged = secrets.seal_text("snapshot", text.replace(CARD, OTHER_CARD))
        await s.approvals.save_snapshot(result.saga_id, forged)
        with pytest.raises(ApprovalError):
            await s.resume(result.saga_id, _payout_agent(paid, first=False))
        assert paid == []
    finally:
        await s.aclose()


def _defaults():
    from sagacity_agents.core.sensitive import DEFAULT_SENSITIVITY

    return DEFAULT_SENSITIVITY


async def test_journal_show_masks_and_reveal_is_logged(tmp_path, with_master, monkeypatch):
    """On SQLite through the command line: ``journal show`` (summary and ``--full``) and
    ``audit export`` print masks; ``--reveal`` with the key prints the values and appends a
    DATA_REVEALED entry to the access log."""
    db = str(tmp_path / "journal.db")
    s = open_sagacity(db, data_keys(True))
    try:
        result = await s.run(payment_agent([]), "pay")
        assert result.status is SagaStatus.COMPENSATED, result.exception
    finally:
        await s.aclose()
    monkeypatch.setenv("COLUMNS", "250")
    runner = CliRunner()

    def invoke(*args: str, env: dict[str, str] | None = None):
        # The command line runs its own event loop: in a thread, out of this test's.
        return asyncio.to_thread(runner.invoke, cli(), list(args), env=env)

    for args in (["journal", "show", result.saga_id], ["journal", "show", result.saga_id, "--full"],
                 ["saga", "show", result.saga_id],
                 ["audit", "export", "--out", str(tmp_path / "a.jsonl")]):
        done = await invoke(*args, "--db", db)
        assert done.exit_code == 0, done.output
        assert leaks(done.output) == [], args
    assert leaks((tmp_path / "a.jsonl").read_bytes()) == []
    assert "card_number=****" in (await invoke("journal", "show", result.saga_id, "--db", db)).output
    revealed = await invoke("journal", "show", result.saga_id, "--full", "--db", db, "--reveal",
                            "--as", "auditor", "--reason", "chargeback 17",
                            env={"SAGACITY_DATA_KEY": MASTER_TEXT})
    assert revealed.exit_code == 0, revealed.output
    assert CARD in revealed.output and TOKEN in revealed.output
    assert PASSWORD in revealed.output  # the error text's clear copy
    s = open_sagacity(db, data_keys(True))
    try:
        log = await s.journal.entries(ACCESS_SAGA)
    finally:
        await s.aclose()
    reveals = [e for e in log if e.phase is Phase.DATA_REVEALED]
    assert reveals and reveals[-1].payload["saga_id"] == result.saga_id
    assert reveals[-1].payload["by"] == "auditor" and reveals[-1].payload["paths"]


def cli():
    from sagacity_agents.cli import cli as group

    return group
