"""The tamper matrix (issue 8): each way of changing a SQLite or PostgreSQL journal is detected
with the first bad seq named; the last four (truncate, delete saga, re-sealed tail, appended decision) only
through signed checkpoints and decision signatures (E-08), as the chain alone passes them."""

from __future__ import annotations

import pytest
from agents import function_tool

from sagacity_agents import Sagacity, SagaStatus, compensable
from sagacity_agents.backends import Phase
from sagacity_agents.errors import ApprovalError, EvidenceError
from sagacity_agents.evidence import ChainFault
from sagacity_agents.core.canonical import canonical_bytes, sha256_hex
from sagacity_agents.evidence import Keyring
from sagacity_agents.core.checkpoints import sign_checkpoint
from sagacity_agents.core.evidence import sign_decision
from sagacity_agents.core.signing import generate_key
from sagacity_agents.settings import checkpoint_store_at
from sagacity_agents.stores import open_journal

from ..sdk import wire_app
from ..sdk.helpers import agent, scripted
from .tamper import edit_entries, reseal_from, sql

async def _no_close() -> None:
    """A directory store holds nothing open."""


WIRE = ("transfer", '{"amount": 5, "to": "acct-9"}', "w1")


@pytest.fixture
def keys(tmp_path):
    generate_key(tmp_path / "keys", "writer-1")
    return tmp_path / "keys"


def signed(checkpoints, keys, db) -> Sagacity:
    """A host that signs checkpoints into ``checkpoints`` (a directory or a postgresql:// URI)."""
    return Sagacity(db, checkpoints=checkpoints, keyring=keys)


def tools():
    @function_tool
    @compensable(undo=lambda ctx: None)
    def book(n: int) -> str:
        return f"booked {n}"

    return book


async def closed_saga(s: Sagacity) -> tuple[str, int]:
    model = scripted([("book", {"n": 1}, "1")], [("book", {"n": 2}, "2")], [("book", {"n": 3}, "3")], "ok")
    result = await s.run(agent(model, tools()), "go")
    assert result.status is SagaStatus.COMPLETED
    entries = await s.journal.entries(result.saga_id)
    return result.saga_id, len(entries)


def edit_payload(db, sid, n):
    edit_entries(db, sid, lambda o: {**o, "payload": {**o["payload"], "result": "x"}} if o["seq"] == 5 else None)
    return 5, ChainFault.HASH_MISMATCH


def edit_hash(db, sid, n):
    sql(db, "UPDATE sagacity_journal SET hash = ? WHERE saga_id = ? AND seq = 4", ("ab" * 32, sid))
    return 4, ChainFault.HASH_MISMATCH


def delete_middle(db, sid, n):
    sql(db, "DELETE FROM sagacity_journal WHERE saga_id = ? AND seq = 4", (sid,))
    return 4, ChainFault.GAP


def insert(db, sid, n):
    # A forged entry sealed and linked to seq 3, put at seq 4; the old seq 4.. move up by one.
    (prev,) = sql(db, "SELECT hash FROM sagacity_journal WHERE saga_id = ? AND seq = 3", (sid,))[0]
    sql(db, "UPDATE sagacity_journal SET seq = seq + 1000 WHERE saga_id = ? AND seq >= 4", (sid,))
    sql(db, "UPDATE sagacity_journal SET seq = seq - 999 WHERE saga_id = ? AND seq >= 1000", (sid,))
    obj = {"saga_id": sid, "seq": 4, "phase": "EXECUTED", "tool": "book", "call_id": "1", "write_key": "forged",
           "payload": {"intent_seq": 3, "result": "forged"}, "recorded_at": "2026-01-01T00:00:00.000000Z",
           "prev_hash": prev}
    data = canonical_bytes(obj)
    sql(db, "INSERT INTO sagacity_journal (saga_id, seq, phase, tool, call_id, write_key, recorded_at, prev_hash, "
            "hash, canonical) VALUES (?,?,?,?,?,?,?,?,?,?)",
        (sid, 4, "EXECUTED", "book", "1", "forged", obj["recorded_at"], prev, sha256_hex(data), data))
    return 5, ChainFault.REORDERED


def swap(db, sid, n):
    sql(db, "UPDATE sagacity_journal SET seq = 9999 WHERE saga_id = ? AND seq = 4", (sid,))
    sql(db, "UPDATE sagacity_journal SET seq = 4 WHERE saga_id = ? AND seq = 5", (sid,))
    sql(db, "UPDATE sagacity_journal SET seq = 5 WHERE saga_id = ? AND seq = 9999", (sid,))
    return 4, ChainFault.REORDERED


def truncate(db, sid, n):
    sql(db, "DELETE FROM sagacity_journal WHERE saga_id = ? AND seq >= ?", (sid, n - 1))
    return n - 1, ChainFault.TRUNCATED


def delete_close(db, sid, n):
    sql(db, "DELETE FROM sagacity_journal WHERE saga_id = ? AND phase = 'SAGA_CLOSED'", (sid,))
    return n, ChainFault.TRUNCATED


def delete_saga(db, sid, n):
    sql(db, "DELETE FROM sagacity_journal WHERE saga_id = ?", (sid,))
    return 1, ChainFault.MISSING_SAGA


def resealed_tail(db, sid, n):
    reseal_from(db, sid, 5, lambda o: {**o, "payload": {**o["payload"], "result": "rewritten"}})
    return n, ChainFault.HEAD_MISMATCH


CHAIN = [edit_payload, edit_hash, delete_middle, insert, swap]
CHECKPOINTED = [truncate, delete_close, delete_saga, resealed_tail]


@pytest.mark.parametrize("tamper", CHAIN + CHECKPOINTED, ids=lambda f: f.__name__)
async def test_tamper_matrix_first_bad_seq_named(checkpoints_at, keys, tamper, journal_db):
    """Every journal backend with every checkpoint store (a directory, a PostgreSQL table)."""
    db = journal_db
    s = signed(checkpoints_at, keys, db)
    sid, n = await closed_saga(s)
    await s.aclose()
    bad_seq, fault = tamper(db, sid, n)
    plain = Sagacity(db)  # the chain alone
    s = signed(checkpoints_at, keys, db)
    try:
        (chain_only,) = [r for r in await plain.verify() if r.saga_id == sid] or [None]
        (result,) = [r for r in await s.verify() if r.saga_id == sid]
        assert not result.ok
        assert (result.bad_seq, result.fault) == (bad_seq, fault), str(result)
        if tamper in CHECKPOINTED:
            assert chain_only is None or chain_only.ok  # only the signed checkpoint sees it
        else:
            assert not chain_only.ok and chain_only.bad_seq == bad_seq
    finally:
        await plain.aclose()
        await s.aclose()


@pytest.mark.case("E-08")
async def test_approval_appended_without_the_key_is_detected_and_refused(tmp_path, keys, journal_db):
    """E-08: someone with write access to the journal appends an APPROVED entry through the
    library (a valid chain extension, right request id and hash) without the decision key:
    verify names its seq (bad signature) and resume refuses; nothing is paid. The same decision
    made by a key holder resumes and pays once."""
    db = journal_db
    s = signed(tmp_path / "checkpoints", keys, db)
    result = await s.run(wire_app.paused_agent(WIRE), "go")
    (request,) = result.approvals
    await s.aclose()
    forger = open_journal(db)
    forged = await forger.append(result.saga_id, Phase.APPROVED, write_key=f"decision:{request.request_id}",
                                 tool="transfer", call_id="w1",
                                 payload={"request_id": request.request_id, "args_hash": request.args_hash,
                                          "approver": "alice", "reason": None})
    await forger.close()
    sql(db, "UPDATE sagacity_approval_requests SET decision = 'approved', approver = 'alice' WHERE request_id = ?",
        (request.request_id,))
    s = signed(tmp_path / "checkpoints", keys, db)
    try:
        (verdict,) = await s.verify(result.saga_id)
        # Issue 19: the forged entry carries no tag either, and that is what is named first.
        assert (verdict.ok, verdict.bad_seq, verdict.fault) == (False, forged.seq, ChainFault.UNAUTHENTICATED)
        with pytest.raises(EvidenceError, match=f"first bad seq {forged.seq}"):
            await s.resume(result.saga_id, wire_app.resumed_agent())
    finally:
        await s.aclose()
    assert wire_app.executions() == []


async def test_signed_decision_resumes_and_checkpoints_are_written(tmp_path, keys, checkpoints_at):
    db = str(tmp_path / "j.db")
    s = signed(checkpoints_at, keys, db)
    try:
        result = await s.run(wire_app.paused_agent(WIRE), "go")
        (request,) = result.approvals
        await s.approve(request.request_id, approver="alice")
        done = await s.resume(result.saga_id, wire_app.resumed_agent())
        assert done.status is SagaStatus.COMPLETED and wire_app.executions() == ["5 USD -> acct-9"]
        entries = await s.journal.entries(result.saga_id)
        approved = next(e for e in entries if e.phase is Phase.APPROVED)
        assert approved.payload["signature"]["key_id"] == "writer-1"
        checkpoints = await s.evidence.checkpoints.list(result.saga_id)
        # One at the pause, one at the close (the head then).
        assert [c.seq for c in checkpoints][-1] == entries[-1].seq and len(checkpoints) == 2
        assert (await s.verify(result.saga_id))[0].ok
    finally:
        await s.aclose()


async def test_a_checkpoint_signed_by_an_unknown_key_is_refused(tmp_path, keys, checkpoints_at):
    db = str(tmp_path / "j.db")
    s = signed(checkpoints_at, keys, db)
    sid, n = await closed_saga(s)
    await s.aclose()
    # Another key signs a checkpoint for a rewritten chain; this keyring does not know it.
    generate_key(tmp_path / "other", "intruder")
    store = checkpoint_store_at(checkpoints_at)
    await store.put(sign_checkpoint(Keyring.load(tmp_path / "other"), sid, n, "ab" * 32, "2026-01-01T00:00:00.000000Z"))
    await getattr(store, "close", _no_close)()
    s = signed(checkpoints_at, keys, db)
    try:
        (result,) = await s.verify(sid)
        assert result.fault is ChainFault.BAD_SIGNATURE and "unknown key 'intruder'" in result.detail
    finally:
        await s.aclose()


async def test_a_decision_signed_by_a_key_not_allowed_for_decisions_is_refused(tmp_path, keys):
    """The agent's host holds the checkpoint key `writer-1`; only `alice-1` may sign decisions:
    an approval signed on the agent's host is refused at resume, nothing is paid."""
    generate_key(keys, "alice-1")
    db = str(tmp_path / "j.db")
    writer = Sagacity(db, checkpoints=tmp_path / "checkpoints", keyring=Keyring.load(keys, signing_key_id="writer-1"),
                      decision_keys=["alice-1"])
    try:
        result = await writer.run(wire_app.paused_agent(WIRE), "go")
        (request,) = result.approvals
        # The library refuses to sign with writer-1 (see the test below); someone holding the
        # agent host's key appends the approval it signs through the journal instead.
        signature = sign_decision(writer.evidence.keyring, saga_id=result.saga_id,
                                  request_id=request.request_id, call_id="w1",
                                  args_hash=request.args_hash, approved=True, approver="alice")
        await writer.journal.append(
            result.saga_id, Phase.APPROVED, write_key=f"decision:{request.request_id}", tool="transfer",
            call_id="w1", payload={"request_id": request.request_id, "args_hash": request.args_hash,
                                   "approver": "alice", "reason": None, "signature": signature})
        with pytest.raises(EvidenceError, match="may not sign decisions"):
            await writer.resume(result.saga_id, wire_app.resumed_agent())
        assert wire_app.executions() == []
        # The same flow with the approver's own key resumes and pays once.
        second = await writer.run(wire_app.paused_agent(WIRE), "go")
        approver = Sagacity(db, checkpoints=tmp_path / "checkpoints",
                            keyring=Keyring.load(keys, signing_key_id="alice-1"), decision_keys=["alice-1"])
        try:
            await approver.approve(second.approvals[0].request_id, approver="alice")
        finally:
            await approver.aclose()
        done = await writer.resume(second.saga_id, wire_app.resumed_agent())
        assert done.status is SagaStatus.COMPLETED and wire_app.executions() == ["5 USD -> acct-9"]
    finally:
        await writer.aclose()


@pytest.mark.parametrize("keyring", ["verify only", "key not allowed for decisions"])
async def test_an_approval_this_host_cannot_sign_as_required_is_refused_before_it_is_journaled(
        tmp_path, keys, keyring):
    """With a verify keyring, an approval must carry a signature by an allowed decision key. A
    host that cannot make one (no private key, or only the checkpoint key) is refused before
    anything is journaled: an unsigned approval in the chain would fail verification and leave
    the saga impossible to resume, recover or close, its earlier effects never undone. A
    rejection from a host that holds a key (not a decision key) is journaled unsigned, tagged,
    and verifies; a host with no private key at all writes nothing under a keyring (issue 19: an
    untagged entry would be refused), so its rejection is refused too."""
    generate_key(keys, "alice-1")
    db = str(tmp_path / "j.db")
    writer = Keyring.load(keys, signing_key_id="writer-1")
    if keyring == "verify only":
        verify_keys = Keyring.load(keys, signing_key_id="alice-1").verify_keys
        ring, allowed = Keyring(verify_keys), None
    else:
        ring, allowed = writer, ["alice-1"]
    runner = Sagacity(db, keyring=writer, decision_keys=allowed)
    host = Sagacity(db, keyring=ring, decision_keys=allowed)
    try:
        model = scripted([("note", {"text": "hi"}, "n1")], [("transfer", {"amount": 5, "to": "acct-9"}, "w1")],
                         "done")
        paused = await runner.run(agent(model, wire_app.note, wire_app.transfer), "go")
        (request,) = paused.approvals
        before = len(await host.journal.entries(paused.saga_id))
        with pytest.raises(ApprovalError, match="nothing was journaled"):
            await host.approve(request.request_id, approver="alice")
        assert len(await host.journal.entries(paused.saga_id)) == before
        assert (await host.verify(paused.saga_id))[0].ok
        if keyring == "verify only":
            with pytest.raises(ApprovalError, match="holds no private key"):
                await host.reject(request.request_id, approver="bob", reason="no")
            assert len(await host.journal.entries(paused.saga_id)) == before
            await host.aclose()
            host = runner
        await host.reject(request.request_id, approver="bob", reason="no")
        assert (await host.verify(paused.saga_id))[0].ok
        recovered = await host.recover(paused.saga_id, agent(scripted(), wire_app.note, wire_app.transfer))
        assert recovered.status is SagaStatus.COMPENSATED and len(recovered.report.undone) == 1
    finally:
        await host.aclose()
        await runner.aclose()
    assert wire_app.executions() == []
