"""The approval desk's refusals about sensitive values, each reached alone (every earlier check
passes) and told apart by ``ApprovalError.code``: a sealed snapshot without the key, an erased
key, a masked snapshot that lost the value, a request of version 1 holding a sensitive value, a
request whose version was changed in the store; the version rule of grants and of verify."""

from __future__ import annotations

import base64
import dataclasses
import sqlite3

import pytest

from sagacity_agents import Sagacity, SagaStatus
from sagacity_agents.backends import InMemoryJournal
from sagacity_agents.backends.memory.approvals import InMemoryApprovalStore
from sagacity_agents.backends.sqlite.approvals import SqliteApprovalStore
from sagacity_agents.core.approval import ApprovalRequest, args_hash
from sagacity_agents.core.approval_args import (
    committed_args, holds_sensitive, masked_snapshot, opened_snapshot, stored_snapshot,
)
from sagacity_agents.core.approval_rule import approval_problem
from sagacity_agents.core.data_keys import DataKeys, MasterKey
from sagacity_agents.core.entries import Phase
from sagacity_agents.core.grants import grant_for_call
from sagacity_agents.errors import ApprovalError, DataKeyError
from sagacity_agents.saga import Saga
from sagacity_agents.sdk import approvals as desk_module

from ..approvals import card_app
from ..approvals.test_sensitive_approvals import SharedKeyStore
from ..sdk import wire_app

pytestmark = pytest.mark.case("X-03")

KEY = base64.b64encode(bytes(range(32))).decode()
WIRE = ("transfer", '{"amount": 5, "to": "acct-9"}', "w1")


@pytest.fixture(autouse=True)
def ledgers(tmp_path, monkeypatch):
    monkeypatch.setattr(card_app, "LEDGER", tmp_path / "cards.txt")
    monkeypatch.setattr(wire_app, "LEDGER", tmp_path / "wires.txt")
    monkeypatch.delenv("SAGACITY_DATA_KEY", raising=False)


async def paused(keys: SharedKeyStore | None = None, agent=None):
    journal = InMemoryJournal()
    (keys or SharedKeyStore()).attach(journal)
    s = Sagacity(journal, approvals=InMemoryApprovalStore())
    result = await s.run(agent or card_app.paused_agent(), card_app.PROMPT)
    assert result.status is SagaStatus.AWAITING_APPROVAL
    request = result.approvals[0]
    await s.approve(request.request_id, approver="alice")
    return s, result.saga_id, request


async def refused_resume(s, saga_id, code, agent=None):
    with pytest.raises(ApprovalError) as refused:
        await s.desk.restore(Saga(s.journal, saga_id), agent or card_app.resumed_agent())
    assert refused.value.code == code, refused.value
    assert card_app.executions() == [] and wire_app.executions() == []
    return refused.value


async def test_a_sealed_snapshot_without_the_key_is_refused(monkeypatch):
    monkeypatch.setenv("SAGACITY_DATA_KEY", KEY)
    s, saga_id, _ = await paused()
    monkeypatch.delenv("SAGACITY_DATA_KEY")
    s.desk.data_keys = None  # read the environment again, as a fresh process would
    error = await refused_resume(s, saga_id, "NO_DATA_KEY")
    assert "SAGACITY_DATA_KEY" in str(error)


async def test_a_snapshot_of_a_saga_whose_key_was_erased_is_refused(monkeypatch):
    monkeypatch.setenv("SAGACITY_DATA_KEY", KEY)
    s, saga_id, _ = await paused()
    backend = getattr(s.journal, "backend", s.journal)
    assert await backend.erase_data_keys(saga_id, by="dpo", reason="request 17") == 1
    s.data_keys.forget(saga_id)  # as `sagacity saga erase` does; a fresh process holds no copy
    s.desk.data_keys = None
    await refused_resume(s, saga_id, "DATA_ERASED")


async def test_a_masked_snapshot_that_lost_the_value_is_refused():
    s, saga_id, _ = await paused()  # no master key: the snapshot is stored masked
    error = await refused_resume(s, saga_id, "SENSITIVE_NOT_STORED")
    assert "mask" in str(error)


async def test_a_masked_snapshot_without_sensitive_arguments_resumes():
    """Masking touches only sensitive values: a call without one resumes from the masked
    snapshot (the prompt's card number masked in it)."""
    s, saga_id, _ = await paused(agent=wire_app.paused_agent(WIRE))
    assert "**** **** **** 0002" in await s.approvals.load_snapshot(saga_id)
    done = await s.resume(saga_id, wire_app.resumed_agent())
    assert done.status is SagaStatus.COMPLETED and wire_app.executions() == ["5 USD -> acct-9"]


async def test_a_version_1_request_holding_a_sensitive_value_is_refused(monkeypatch):
    """A request made by the previous release: clear arguments, hashed clear, no version."""
    monkeypatch.setenv("SAGACITY_DATA_KEY", KEY)
    with pytest.MonkeyPatch.context() as previous_release:
        previous_release.setattr(desk_module, "ARGS_VERSION", 1)
        previous_release.setattr(desk_module, "committed_args", lambda secrets, args, spec: args)
        s, saga_id, request = await paused()
    assert request.args_version == 1 and request.args["card_number"] == card_app.CARD
    await refused_resume(s, saga_id, "REQUEST_VERSION_SENSITIVE")


async def test_a_version_1_request_without_sensitive_values_keeps_its_rule():
    with pytest.MonkeyPatch.context() as previous_release:
        previous_release.setattr(desk_module, "ARGS_VERSION", 1)
        s, saga_id, request = await paused(agent=wire_app.paused_agent(WIRE))
    assert request.args_version == 1
    done = await s.resume(saga_id, wire_app.resumed_agent())
    assert done.status is SagaStatus.COMPLETED and wire_app.executions() == ["5 USD -> acct-9"]


async def test_a_request_whose_version_was_changed_in_the_store_is_refused(monkeypatch):
    monkeypatch.setenv("SAGACITY_DATA_KEY", KEY)
    s, saga_id, request = await paused()
    stored = await s.approvals.get(request.request_id)
    s.approvals._requests[request.request_id] = dataclasses.replace(stored, args_version=1)
    await refused_resume(s, saga_id, "REQUEST_VERSION_CHANGED")


async def test_deciding_a_request_whose_version_was_changed_is_refused(monkeypatch):
    monkeypatch.setenv("SAGACITY_DATA_KEY", KEY)
    journal = InMemoryJournal()
    SharedKeyStore().attach(journal)
    s = Sagacity(journal, approvals=InMemoryApprovalStore())
    result = await s.run(card_app.paused_agent(), card_app.PROMPT)
    request = result.approvals[0]
    s.approvals._requests[request.request_id] = dataclasses.replace(request, args_version=1)
    with pytest.raises(ApprovalError) as refused:
        await s.approve(request.request_id, approver="alice")
    assert refused.value.code == "REQUEST_VERSION_CHANGED"


# --- the pure rules ---------------------------------------------------------------------------


def _secrets():
    return DataKeys(MasterKey.from_text(KEY))._ephemeral("j", "s")


def test_commitments_bind_the_value_and_the_call_text_masks_it():
    secrets = _secrets()
    args = {"card_number": card_app.CARD, "amount": 5, "note": "pw hunter22", "password": "hunter22"}
    once = committed_args(secrets, args)
    assert once["note"]["mask"] == "pw ****"  # the call's own text, masked like its INTENT's
    assert committed_args(secrets, args) == once
    assert committed_args(secrets, {**args, "card_number": card_app.OTHER_CARD}) != once
    assert committed_args(secrets, {"amount": 5}) == {"amount": 5}
    assert holds_sensitive(args) and not holds_sensitive({"amount": 5})


def test_snapshots_are_sealed_or_masked_and_open_only_with_the_key():
    secrets = _secrets()
    secrets.known.add("hunter22")
    snapshot = {"input": card_app.PROMPT, "calls": [{"arguments": '{"password": "hunter22"}'}]}
    masked = masked_snapshot(snapshot, secrets.known)
    assert masked == {"input": "charge 5 EUR to my card **** **** **** 0002",
                      "calls": [{"arguments": '{"password": "****"}'}]}
    assert opened_snapshot(None, stored_snapshot(secrets, snapshot)) == (
        stored_snapshot(secrets, snapshot), False)  # not stored: masked text, as is
    stored = DataKeys(MasterKey.from_text(KEY))
    sealing = dataclasses.replace(secrets, stored=True)
    text = stored_snapshot(sealing, snapshot)
    assert card_app.CARD not in text and opened_snapshot(sealing, text)[1] is True
    with pytest.raises(DataKeyError):
        opened_snapshot(None, text)
    with pytest.raises(DataKeyError):
        opened_snapshot(stored._ephemeral("j", "s"), text)


def _trail(version, *, intent_args, intent_raw=None, paused_raw=None, digest="h" * 64):
    entries = []

    def add(phase, payload, tool="charge", call_id="c1"):
        entries.append(type("E", (), {"seq": len(entries) + 1, "phase": phase, "tool": tool,
                                      "call_id": call_id, "payload": payload,
                                      "write_key": f"k{len(entries)}"})())

    paused_payload = {"request_id": "r", "args": {}, "args_hash": digest,
                      "reversibility": "irreversible", "raw_args": paused_raw}
    if version is not None:
        paused_payload["args_version"] = version
    add(Phase.AWAITING_APPROVAL, paused_payload)
    add(Phase.APPROVED, {"request_id": "r", "args_hash": digest})
    add(Phase.CONSUMED, {"request_id": "r", "args_hash": digest, "decision": "approved"})
    intent = {"request_id": "r", "args": intent_args, "reversibility": "irreversible"}
    if intent_raw is not None:
        intent["raw_args"] = intent_raw
    add(Phase.INTENT, intent)
    return entries


def test_the_approval_rule_accepts_a_committed_raw_text_only_as_paused():
    committed = {"$sensitive": "a" * 64, "mask": '{"card": "**** **** **** 0002"}'}
    assert approval_problem(_trail(2, intent_args={}, intent_raw=committed, paused_raw=committed)) is None
    other = {**committed, "$sensitive": "b" * 64}
    assert approval_problem(_trail(2, intent_args={}, intent_raw=other, paused_raw=committed))
    assert approval_problem(_trail(None, intent_args={}, intent_raw=committed, paused_raw=committed))
    assert approval_problem(_trail(2, intent_args={}, intent_raw=committed, paused_raw=committed,
                                   digest="c" * 64)[:-1] + _trail(2, intent_args={"x": 1},
                                   intent_raw=committed, paused_raw=committed, digest="c" * 64)[-1:])
    args = {"card_number": {"$sensitive": "d" * 64, "mask": "****"}}
    assert approval_problem(_trail(2, intent_args=args, digest=args_hash(args))) is None


def test_grants_compare_the_hash_of_the_request_version():
    def trail(version, digest):
        return [e for e in _trail(version, intent_args={}, digest=digest) if e.phase is not Phase.INTENT]

    assert grant_for_call(trail(2, "v2"), tool="charge", call_id="c1", args_hash="v1",
                          committed_hash="v2").request_id == "r"
    assert grant_for_call(trail(2, "v1"), tool="charge", call_id="c1", args_hash="v1",
                          committed_hash="v2").code == "ARGS_HASH_MISMATCH_AT_CALL"
    assert grant_for_call(trail(None, "v1"), tool="charge", call_id="c1", args_hash="v1",
                          committed_hash="v2").code == "REQUEST_VERSION_SENSITIVE"
    assert grant_for_call(trail(None, "v2"), tool="charge", call_id="c1", args_hash="v1",
                          committed_hash="v2").code == "REQUEST_VERSION_SENSITIVE"
    assert grant_for_call(trail(None, "x"), tool="charge", call_id="c1", args_hash="v1",
                          committed_hash="v1").code == "ARGS_HASH_MISMATCH_AT_CALL"
    assert grant_for_call(trail(2, "v1"), tool="charge", call_id="c1",
                          args_hash="v1").request_id == "r"  # no secrets: the INTENT is clear
    assert grant_for_call(trail(None, "v1"), tool="charge", call_id="c1",
                          args_hash="v1").request_id == "r"
    assert grant_for_call(trail(None, "v1"), tool="charge", call_id="c1", args_hash="v1",
                          committed_hash="v1").request_id == "r"  # nothing sensitive


def test_an_older_sqlite_store_gains_the_version_columns(tmp_path):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE sagacity_approval_requests (request_id TEXT PRIMARY KEY, saga_id TEXT NOT NULL,
            call_id TEXT, tool TEXT NOT NULL, args TEXT NOT NULL, raw_args TEXT,
            args_hash TEXT NOT NULL, created_at TEXT NOT NULL, expires_at TEXT, decision TEXT,
            approver TEXT, reason TEXT, decided_at TEXT, consumed_at TEXT);
        CREATE TABLE sagacity_snapshots (saga_id TEXT PRIMARY KEY, snapshot TEXT NOT NULL);
        INSERT INTO sagacity_approval_requests VALUES ('r1', 's', 'c1', 'transfer',
            '{"amount":5}', NULL, 'h', '2026-01-01T00:00:00.000000Z', NULL, NULL, NULL, NULL,
            NULL, NULL);""")
    conn.close()

    async def read():
        store = SqliteApprovalStore(path)
        try:
            return await store.get("r1")
        finally:
            await store.close()

    import asyncio

    old: ApprovalRequest = asyncio.run(read())
    assert old.args_version == 1 and old.args_sealed is None and old.args == {"amount": 5}


def test_masking_a_snapshot_leaves_what_the_sdk_made_readable():
    """A digit run inside a hash or an id is no card number (it would be masked 1 time in 10 by
    Luhn alone and the snapshot would no longer restore); ids and hashes are never free text."""
    scope = "43e8db82200335436ee72a7938e38ddd80cdf2be39238eccf065161663265249"
    snapshot = {"approval_scope": scope, "call_id": "4000000000000002", "text": f"hash {scope}",
                "input": "card 4000000000000002."}
    assert masked_snapshot(snapshot) == {**snapshot, "input": "card **** **** **** 0002."}
