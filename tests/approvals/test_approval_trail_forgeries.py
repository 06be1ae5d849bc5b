"""Approvals checked by ``verify``, not only at run time: copies of an approved-wire and a
rejected-wire journal (examples/wire_transfer, its scripted model), edited and re-sealed with the
documented hash rule by a writer with database access and no key, are refused on SQLite and
PostgreSQL with the seq named: by ``verify`` (read speed and entry by entry) and before a
resume or recovery acts. With a keyring, a trail rewritten consistently is refused too, for the
decision signature the forger cannot make. (Issue 35, scenario 8; an independent approval-trace
checker flags the four as ACK003, ACK002, ACK004 and ACK001.) A recovery journals what it does with an open
request, and its report names the approved call that never ran."""

from __future__ import annotations

import asyncio

import pytest
from click.testing import CliRunner

from examples.wire_transfer import app as wire
from sagacity_agents import Sagacity, SagaStatus
from sagacity_agents.cli import cli
from sagacity_agents.core.chain import verify_entries
from sagacity_agents.core.evidence import Evidence, verify_sagas
from sagacity_agents.core.signing import generate_key
from sagacity_agents.errors import EvidenceError
from sagacity_agents.evidence import ChainFault

from .forger import Rows, forge, index, read

ATTACKER = "GB33BUKB20201555555555"


@pytest.fixture(params=["sqlite", "postgres"])
def journal_db(request, tmp_path, monkeypatch):
    """A SQLite file or this test's PostgreSQL schema; the example's bank in the test's directory."""
    monkeypatch.setattr(wire, "BANK_DB", tmp_path / "bank.db")
    if request.param == "postgres":
        return request.getfixturevalue("pg_uri")
    return str(tmp_path / "wire.db")


async def wire_saga(db: str, *, approve: bool, **options) -> str:
    """The example's run: paused on the wire, decided, resumed to its close."""
    sagacity = Sagacity(db, **options)
    try:
        paused = await sagacity.run(wire.agent(), "Pay invoice 42 to our supplier.")
        (request,) = paused.approvals
        if approve:
            await sagacity.approve(request.request_id, approver="alice", reason="invoice checked")
        else:
            await sagacity.reject(request.request_id, approver="bob", reason="unknown IBAN")
        done = await sagacity.resume(paused.saga_id, wire.agent())
        assert done.status is SagaStatus.COMPLETED
        return paused.saga_id
    finally:
        await sagacity.aclose()


async def refused(db: str, saga_id: str, evidence: Evidence | None = None) -> tuple[int, ChainFault, str]:
    """The fault ``verify`` reports (read speed, and entry by entry), checked to be the one a
    resume or recovery refuses on; the chain itself verifies (the forger re-sealed it)."""
    sagacity = Sagacity(db)
    try:
        entries = await sagacity.journal.entries(saga_id)
        assert verify_entries(saga_id, entries).ok  # re-sealed: the chain alone passes
        (quick,) = await verify_sagas(sagacity.journal, saga_id)
        full = (evidence or Evidence()).check(saga_id, entries, None)  # entry by entry
        with pytest.raises(EvidenceError) as caught:
            await (evidence or Evidence()).verified_entries(sagacity.journal, saga_id)
    finally:
        await sagacity.aclose()
    assert not quick.ok and not full.ok
    assert (quick.bad_seq, quick.fault, quick.detail) == (full.bad_seq, full.fault, full.detail)
    assert caught.value.bad_seq == quick.bad_seq
    return quick.bad_seq, quick.fault, quick.detail


def the_intent(rows: Rows) -> dict:
    return rows[index(rows, "INTENT", "send_wire")]


async def test_the_approved_and_the_rejected_wire_verify_as_written(journal_db):
    approved = await wire_saga(journal_db, approve=True)
    rejected = await wire_saga(journal_db, approve=False)
    sagacity = Sagacity(journal_db)
    try:
        results = await sagacity.verify()
    finally:
        await sagacity.aclose()
    assert {r.saga_id for r in results} == {approved, rejected} and all(r.ok for r in results)


async def test_an_execution_with_arguments_other_than_the_approved_ones_is_refused(journal_db):
    saga_id = await wire_saga(journal_db, approve=True)

    def edit(rows: Rows) -> Rows:
        the_intent(rows)["payload"]["args"].update(amount_eur=250000, iban=ATTACKER)
        return rows

    rows = forge(journal_db, saga_id, edit)
    seq, fault, detail = await refused(journal_db, saga_id)
    assert (seq, fault) == (the_intent(rows)["seq"], ChainFault.APPROVAL)
    assert "was approved at seq" in detail and "arguments hash" in detail
    shown = await asyncio.to_thread(CliRunner(env={"COLUMNS": "400"}).invoke, cli,
                                    ["journal", "verify", "--db", journal_db])
    assert shown.exit_code != 0
    assert f"BROKEN  saga {saga_id}  at seq {seq}: approval trail broken" in shown.output


async def test_an_execution_after_a_rejection_is_refused(journal_db):
    saga_id = await wire_saga(journal_db, approve=False)
    paused = read(journal_db, saga_id)[index(read(journal_db, saga_id), "AWAITING_APPROVAL")]
    rid = paused["payload"]["request_id"]

    def edit(rows: Rows) -> Rows:
        at = index(rows, "CONSUMED") + 1
        fence = rows[at - 1]["payload"]["fence"]
        intent = {"phase": "INTENT", "tool": "send_wire", "call_id": "call_wire_1",
                  "write_key": "forged:intent", "recorded_at": rows[at - 1]["recorded_at"],
                  "payload": {"args": paused["payload"]["args"], "request_id": rid,
                              "reversibility": "irreversible", "fence": fence}}
        executed = {**intent, "phase": "EXECUTED", "write_key": "forged:outcome",
                    "payload": {"intent_seq": at + 1, "result": "wire #9 sent", "fence": fence}}
        return rows[:at] + [intent, executed] + rows[at:]

    rows = forge(journal_db, saga_id, edit)
    seq, fault, detail = await refused(journal_db, saga_id)
    assert (seq, fault) == (the_intent(rows)["seq"], ChainFault.APPROVAL)
    assert f"request {rid}, REJECTED at seq" in detail


async def test_a_second_consumption_with_a_replayed_execution_is_refused(journal_db):
    saga_id = await wire_saga(journal_db, approve=True)

    def edit(rows: Rows) -> Rows:
        consumed, intent = rows[index(rows, "CONSUMED")], the_intent(rows)
        at = index(rows, "EXECUTED") + 1
        again = {**consumed, "write_key": "consumed-again", "payload": {**consumed["payload"], "claimant": "x"}}
        replay = {**intent, "write_key": "replay:intent"}
        outcome = {**rows[at - 1], "write_key": "replay:outcome",
                   "payload": {**rows[at - 1]["payload"], "intent_seq": at + 2}}
        return rows[:at] + [again, replay, outcome] + rows[at:]

    rows = forge(journal_db, saga_id, edit)
    second = [e["seq"] for e in rows if e["phase"] == "CONSUMED"][1]
    seq, fault, detail = await refused(journal_db, saga_id)
    assert (seq, fault) == (second, ChainFault.APPROVAL)
    assert "consumed a second time" in detail


@pytest.mark.parametrize("reversibility", ["irreversible", "compensable"])
async def test_an_irreversible_call_without_its_request_id_is_refused(journal_db, reversibility):
    saga_id = await wire_saga(journal_db, approve=True)

    def edit(rows: Rows) -> Rows:
        payload = the_intent(rows)["payload"]
        del payload["request_id"]
        payload["reversibility"] = reversibility  # "compensable": it also hides what it is
        return rows

    rows = forge(journal_db, saga_id, edit)
    seq, fault, detail = await refused(journal_db, saga_id)
    assert (seq, fault) == (the_intent(rows)["seq"], ChainFault.APPROVAL)
    assert "names no approval request" in detail


async def test_with_a_keyring_a_consistent_rewrite_lacks_the_decision_key(journal_db, tmp_path):
    generate_key(tmp_path / "keys", "host-1")
    saga_id = await wire_saga(journal_db, approve=True, keyring=tmp_path / "keys")

    def edit(rows: Rows) -> Rows:
        # The whole trail rewritten for other arguments: pause, decision, consumption, call.
        from sagacity_agents.core.approval import args_hash

        args = {**the_intent(rows)["payload"]["args"], "iban": ATTACKER}
        for e in rows:
            if e["tool"] == "send_wire" and "args_hash" in e["payload"]:
                e["payload"]["args_hash"] = args_hash(args)
        rows[index(rows, "AWAITING_APPROVAL")]["payload"]["args"] = args
        the_intent(rows)["payload"]["args"] = args
        return rows

    rows = forge(journal_db, saga_id, edit)
    sagacity = Sagacity(journal_db)
    try:
        (unkeyed,) = await sagacity.verify(saga_id)
    finally:
        await sagacity.aclose()
    assert unkeyed.ok  # consistent: only a key tells it from the real trail
    keyed = Sagacity(journal_db, keyring=tmp_path / "keys")
    try:
        (result,) = await keyed.verify(saga_id)
    finally:
        await keyed.aclose()
    assert not result.ok and result.bad_seq <= index(rows, "APPROVED") + 1
    assert result.fault in (ChainFault.UNAUTHENTICATED, ChainFault.BAD_SIGNATURE)


async def test_recovery_voids_an_approved_request_and_reports_the_call_never_ran(journal_db):
    sagacity = Sagacity(journal_db)
    try:
        paused = await sagacity.run(wire.agent(), "Pay invoice 42 to our supplier.")
        (request,) = paused.approvals
        await sagacity.approve(request.request_id, approver="alice", reason="invoice checked")
        recovered = await sagacity.recover(paused.saga_id, wire.agent())
        entries = await sagacity.journal.entries(paused.saga_id)
        (verdict,) = await sagacity.verify(paused.saga_id)
        stored = await sagacity.approvals.get(request.request_id)
    finally:
        await sagacity.aclose()
    assert recovered.status is SagaStatus.COMPENSATED and verdict.ok
    (voided,) = [e for e in entries if e.phase.value == "REQUEST_VOIDED"]
    assert voided.payload["request_id"] == request.request_id and voided.payload["reason"]
    assert voided.payload["decision"] == "approved" and stored.consumed_at is not None
    (never,) = recovered.report.approved_not_run
    assert (never.tool, never.call_id) == ("send_wire", "call_wire_1")
    assert request.request_id in never.detail
    closed = entries[-1].payload["report"]["approved_not_run"]
    assert [i["tool"] for i in closed] == ["send_wire"]

    def edit(rows: Rows) -> Rows:  # a call forged under the voided request
        at = index(rows, "REQUEST_VOIDED") + 1
        intent = {"phase": "INTENT", "tool": "send_wire", "call_id": "call_wire_1",
                  "write_key": "forged:intent", "recorded_at": rows[at - 1]["recorded_at"],
                  "payload": {"args": rows[index(rows, "AWAITING_APPROVAL")]["payload"]["args"],
                              "request_id": request.request_id, "reversibility": "irreversible",
                              "fence": rows[at - 1]["payload"]["fence"]}}
        return rows[:at] + [intent] + rows[at:]

    rows = forge(journal_db, paused.saga_id, edit)
    seq, fault, detail = await refused(journal_db, paused.saga_id)
    assert (seq, fault) == (the_intent(rows)["seq"], ChainFault.APPROVAL)
    assert "never consumed" in detail or "voided" in detail


async def test_recovery_voids_an_undecided_request_and_lists_no_approved_call(journal_db):
    sagacity = Sagacity(journal_db)
    try:
        paused = await sagacity.run(wire.agent(), "Pay invoice 42 to our supplier.")
        (request,) = paused.approvals
        recovered = await sagacity.recover(paused.saga_id, wire.agent())
        entries = await sagacity.journal.entries(paused.saga_id)
        (verdict,) = await sagacity.verify(paused.saga_id)
    finally:
        await sagacity.aclose()
    assert recovered.status is SagaStatus.COMPENSATED and verdict.ok
    (voided,) = [e for e in entries if e.phase.value == "REQUEST_VOIDED"]
    assert voided.payload["request_id"] == request.request_id and "decision" not in voided.payload
    assert voided.payload["fence"] == max(e.seq for e in entries if e.phase.value == "RUN_STARTED")
    assert recovered.report.approved_not_run == ()
