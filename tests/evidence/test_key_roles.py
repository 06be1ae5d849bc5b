"""Key roles and validity: each keyring key signs only the phases its role may (a decision key
never a run entry, a run key never an APPROVED, only a keyring admin a keyring event), and a
revoked key's tags after the saga's last signed checkpoint before the revocation are refused;
verify, resume and recovery refuse them naming the seq and the role. A keyring with no role
event keeps the old rule, so journals written before verify as they did."""

from __future__ import annotations

import asyncio

import pytest
from click.testing import CliRunner

from sagacity_agents import Sagacity, SagaStatus
from sagacity_agents.backends import Phase
from sagacity_agents.cli import cli
from sagacity_agents.core.authenticity import ADOPTION_SAGA, signing_view
from sagacity_agents.core.keyring_events import grant_roles, journal_key_roles, revoke_key
from sagacity_agents.core.signing import Keyring, generate_key
from sagacity_agents.errors import ConfigurationError, EvidenceError
from sagacity_agents.evidence import ChainFault
from sagacity_agents.stores import open_journal
from tests.sdk.test_postgres_saga import app_role_uri  # noqa: F401 - the least-privilege role fixture

from ..sdk.helpers import agent, scripted
from .test_entry_authenticity import CANCELLED, book_hotel, db, entries, far_side, in_doubt_saga  # noqa: F401

ROLES = {"writer-1": ["run_writer", "checkpoint_signer"], "alice-1": ["decision_maker"]}


@pytest.fixture
def keys(tmp_path):
    """A keyring: the agent host's key, the approver's, and an offline admin named in ADMINS."""
    root = tmp_path / "keys"
    for key_id in ("writer-1", "alice-1", "root"):
        generate_key(root, key_id)
    (root / "ADMINS").write_text("root  # offline\n", "utf-8")
    return root


def ring(keys, key_id: str) -> Keyring:
    return Keyring.load(keys, signing_key_id=key_id)


def host(db: str, keys, key_id: str = "writer-1", **kw) -> Sagacity:
    return Sagacity(db, keyring=ring(keys, key_id), **kw)


async def give_roles(db: str, keys, roles: dict[str, list[str]] = ROLES) -> None:
    journal = open_journal(db)
    try:
        for key_id, names in roles.items():
            await grant_roles(journal, ring(keys, "root"), key_id, names, reason="set up")
    finally:
        await journal.close()


async def append_as(db: str, keys, key_id: str, sid: str, phase: Phase, key: str, **fields) -> int:
    """An entry tagged by ``key_id``: what a holder of that key (stolen or not) can write."""
    journal = signing_view(open_journal(db), ring(keys, key_id))
    try:
        return (await journal.append(sid, phase, write_key=key, **fields)).seq
    finally:
        await journal.close()


async def run_signed_by(db: str, keys, key_id: str, saga: dict) -> tuple[int, int]:
    """A run (RUN_STARTED, then an EXECUTED with another customer's undo data) tagged by ``key_id``."""
    run = await append_as(db, keys, key_id, saga["sid"], Phase.RUN_STARTED, "forged:run",
                          payload={"agent": "agent", "holder": "mallory", "lease_seconds": 0.01, "took_over": None})
    outcome = await append_as(db, keys, key_id, saga["sid"], Phase.EXECUTED, "forged:outcome", tool="book_hotel",
                              call_id="c1", fence=run,
                              payload={"intent_seq": saga["intent"], "undo_data": {"booking_id": "b-bob"}})
    await asyncio.sleep(0.05)
    return run, outcome


async def refused(db: str, keys, sid: str, seq: int, *words: str) -> None:
    """verify names ``seq`` and ``words``; recovery refuses naming the seq; nothing undone or closed."""
    s = host(db, keys)
    try:
        (verdict,) = await s.verify(sid)
        assert (verdict.ok, verdict.bad_seq, verdict.fault) == (False, seq, ChainFault.BAD_SIGNATURE), verdict
        assert all(w in verdict.detail for w in words), verdict.detail
        with pytest.raises(EvidenceError, match=f"first bad seq {seq}"):
            await s.recover(sid, agent(scripted(), book_hotel))
    finally:
        await s.aclose()
    assert CANCELLED == []
    assert not any(e.phase is Phase.SAGA_CLOSED for e in await entries(db, sid))


async def test_a_decision_key_signing_a_run_is_refused_naming_the_seq_and_role(db, keys):
    """The approver's key tags RUN_STARTED and an EXECUTED carrying Bob's undo data: refused at
    the RUN_STARTED, naming the key and the role it lacks; Bob's booking is not cancelled."""
    await give_roles(db, keys)
    saga = await in_doubt_saga(db, keys)
    run, _ = await run_signed_by(db, keys, "alice-1", saga)
    await refused(db, keys, saga["sid"], run, "RUN_STARTED", "'alice-1'", "run_writer", "decision_maker")


async def test_a_decision_key_signing_only_the_outcome_is_refused_at_the_outcome(db, keys):
    """The careful forgery: the run's own INTENT and fence, an EXECUTED with Bob's undo data
    tagged by the decision key: refused at the EXECUTED."""
    await give_roles(db, keys)
    saga = await in_doubt_saga(db, keys)
    seq = await append_as(db, keys, "alice-1", saga["sid"], Phase.EXECUTED, "forged:outcome", tool="book_hotel",
                          call_id="c1", fence=saga["run"],
                          payload={"intent_seq": saga["intent"], "undo_data": {"booking_id": "b-bob"}})
    await asyncio.sleep(0.1)
    await refused(db, keys, saga["sid"], seq, "EXECUTED", "run_writer")


async def test_a_run_key_signing_an_approved_is_refused(db, keys, tmp_path):
    """The agent host's key approves its own request (tag and decision statement): verify
    refuses the APPROVED, naming the decision_maker role, and the resume does not run it."""
    from ..sdk import wire_app

    await give_roles(db, keys)
    s = host(db, keys)
    try:
        paused = await s.run(wire_app.paused_agent(("transfer", '{"amount": 5, "to": "a"}', "w1")), "go")
        await s.approve(paused.approvals[0].request_id, approver="mallory")
        (verdict,) = await s.verify(paused.saga_id)
        approved = next(e for e in await entries(db, paused.saga_id) if e.phase is Phase.APPROVED)
        assert (verdict.ok, verdict.bad_seq) == (False, approved.seq), verdict
        assert "decision_maker" in verdict.detail and "'writer-1'" in verdict.detail
        with pytest.raises(EvidenceError, match=f"first bad seq {approved.seq}"):
            await s.resume(paused.saga_id, wire_app.resumed_agent())
    finally:
        await s.aclose()
    assert wire_app.executions() == []


async def test_the_decision_key_approves_and_the_run_key_resumes(db, keys):
    """The same flow with each key in its role verifies and runs the approved transfer once."""
    from ..sdk import wire_app

    await give_roles(db, keys)
    s, approver = host(db, keys), host(db, keys, "alice-1")
    try:
        paused = await s.run(wire_app.paused_agent(("transfer", '{"amount": 5, "to": "a"}', "w1")), "go")
        await approver.approve(paused.approvals[0].request_id, approver="alice")
        done = await s.resume(paused.saga_id, wire_app.resumed_agent())
        assert done.status is SagaStatus.COMPLETED
        (verdict,) = await s.verify(paused.saga_id)
        assert verdict.ok, verdict
    finally:
        await s.aclose()
        await approver.aclose()
    assert len(wire_app.executions()) == 1


async def test_a_keyring_event_not_signed_by_an_admin_is_refused(db, keys):
    """The library refuses to write a role event with a non-admin key (nothing written); one
    written anyway (the run key tags a KEY_ROLES making the approver a run writer) changes no
    role, is listed as ignored and makes the reserved saga BROKEN at its seq."""
    await give_roles(db, keys)
    journal = open_journal(db)
    try:
        with pytest.raises(ConfigurationError, match="not a keyring admin"):
            await grant_roles(journal, ring(keys, "writer-1"), "alice-1", ["run_writer"])
        with pytest.raises(ConfigurationError, match="not a keyring admin"):
            await revoke_key(journal, ring(keys, "alice-1"), "writer-1", reason="mine now")
        before = len(await journal.entries(ADOPTION_SAGA))
    finally:
        await journal.close()
    seq = await append_as(db, keys, "writer-1", ADOPTION_SAGA, Phase.KEY_ROLES, "forged:roles",
                          payload={"key_id": "alice-1", "roles": ["run_writer"], "reason": "x",
                                   "valid_from": "2026-01-01T00:00:00.000000Z"})
    assert seq == before + 1
    journal = open_journal(db)
    try:
        roles = await journal_key_roles(journal, ring(keys, "writer-1"))
    finally:
        await journal.close()
    assert roles.roles_of("alice-1") == {"decision_maker"}
    assert any(f"seq {seq} ignored" in note and "not a keyring admin" in note for note in roles.notes)
    s = host(db, keys)
    try:
        (verdict,) = await s.verify(ADOPTION_SAGA)
    finally:
        await s.aclose()
    assert (verdict.ok, verdict.bad_seq) == (False, seq) and "keyring_admin" in verdict.detail
    saga = await in_doubt_saga(db, keys)
    run, _ = await run_signed_by(db, keys, "alice-1", saga)
    await refused(db, keys, saga["sid"], run, "run_writer")


async def test_a_revoked_key_is_refused_after_its_revocation_across_sagas(db, keys, tmp_path):
    """writer-1 completes a saga (checkpointed at its close) and leaves one in doubt, whose head
    is checkpointed too; then it is revoked. What it signed before stays valid in both; a
    new saga it writes afterwards is refused at seq 1, and its entry appended to the in-doubt
    saga after the revocation is refused at that seq."""
    cps = str(tmp_path / "cps")
    s = host(db, keys, checkpoints=cps)
    try:
        done = await s.run(agent(scripted([("book_hotel", {"city": "Oslo"}, "c0")], "ok"), book_hotel), "go")
        assert done.status is SagaStatus.COMPLETED
        saga = await in_doubt_saga(db, keys, "trip-2")
        await s.evidence.checkpoint(s.journal, saga["sid"])
        journal = open_journal(db)
        try:
            await revoke_key(journal, ring(keys, "root"), "writer-1", reason="laptop stolen")
        finally:
            await journal.close()
        first, second = await s.verify(done.saga_id), await s.verify(saga["sid"])
        assert first[0].ok and second[0].ok, (first, second)
    finally:
        await s.aclose()
    late = await append_as(db, keys, "writer-1", saga["sid"], Phase.EXECUTED, "stolen:outcome", tool="book_hotel",
                           call_id="c1", fence=saga["run"],
                           payload={"intent_seq": saga["intent"], "undo_data": {"booking_id": "b-bob"}})
    await append_as(db, keys, "writer-1", "trip-3", Phase.SAGA_OPENED, "open", payload={"metadata": {}})
    await asyncio.sleep(0.1)
    s = host(db, keys, "alice-1", checkpoints=cps)
    try:
        (new,) = await s.verify("trip-3")
        (old,) = await s.verify(saga["sid"])
        with pytest.raises(EvidenceError, match=f"first bad seq {late}"):
            await s.recover(saga["sid"], agent(scripted(), book_hotel))
    finally:
        await s.aclose()
    assert (new.ok, new.bad_seq) == (False, 1) and "revoked" in new.detail and "laptop stolen" in new.detail
    assert (old.ok, old.bad_seq) == (False, late), old
    assert CANCELLED == []


async def test_a_revoked_keys_entries_no_checkpoint_covers_are_refused(db, keys):
    """Without a checkpoint before the revocation nothing vouches for the key's earlier
    entries in that saga (its holder could have written them at any time): refused from seq 1,
    the window docs/threat-model.md states."""
    saga = await in_doubt_saga(db, keys)
    journal = open_journal(db)
    try:
        await revoke_key(journal, ring(keys, "root"), "writer-1", reason="rotated out")
    finally:
        await journal.close()
    s = host(db, keys, "alice-1")
    try:
        (verdict,) = await s.verify(saga["sid"])
    finally:
        await s.aclose()
    assert (verdict.ok, verdict.bad_seq) == (False, 1) and "revoked" in verdict.detail


async def test_the_default_keyring_without_role_events_verifies_as_before(db, keys):
    """No role event: every key a run writer (the approver's too: the old rule), decision
    makers as decision_keys says; the admin key is only an admin. A saga written, approved and
    resumed verifies, and so does an entry the decision key tags (give roles to close that)."""
    from ..sdk import wire_app

    journal = open_journal(db)
    try:
        roles = await journal_key_roles(journal, ring(keys, "writer-1"), frozenset({"alice-1"}))
    finally:
        await journal.close()
    assert roles.explicit is None
    assert roles.roles_of("writer-1") == {"run_writer", "checkpoint_signer"}
    assert roles.roles_of("alice-1") == {"run_writer", "checkpoint_signer", "decision_maker"}
    assert roles.roles_of("root") == {"keyring_admin"}
    s = host(db, keys, decision_keys=["alice-1"])
    approver = host(db, keys, "alice-1", decision_keys=["alice-1"])
    try:
        paused = await s.run(wire_app.paused_agent(("transfer", '{"amount": 5, "to": "a"}', "w1")), "go")
        await approver.approve(paused.approvals[0].request_id, approver="alice")
        assert (await s.resume(paused.saga_id, wire_app.resumed_agent())).status is SagaStatus.COMPLETED
        await append_as(db, keys, "alice-1", "by-approver", Phase.SAGA_OPENED, "open", payload={"metadata": {}})
        assert all(v.ok for v in await s.verify()), await s.verify()
    finally:
        await s.aclose()
        await approver.aclose()


def test_audit_keys_revoke_list_and_role_on_the_command_line(tmp_path):
    """`audit keygen --admin` names the admin; `audit keys role` and `revoke` need an admin key
    (exit 1, nothing written, otherwise) and a reason (exit 2); `audit keys list` shows roles and
    validity; `journal verify` then refuses the revoked key's new saga."""
    keys, db = str(tmp_path / "keys"), str(tmp_path / "j.db")
    run = CliRunner().invoke
    for args in (["writer-1"], ["root", "--admin"]):
        assert run(cli, ["audit", "keygen", *args, "--keyring", keys]).exit_code == 0
    assert open(f"{keys}/ADMINS").read() == "root\n"
    base = ["--db", db, "--keyring", keys]
    asyncio.run(append_as(db, keys, "writer-1", "early", Phase.SAGA_OPENED, "open", payload={"metadata": {}}))
    listed = run(cli, ["audit", "keys", "list", *base, "--key-id", "writer-1"])
    assert listed.exit_code == 0 and "the default" in listed.output, listed.output
    denied = run(cli, ["audit", "keys", "revoke", "root", "--reason", "x", *base, "--key-id", "writer-1"])
    assert denied.exit_code == 1 and "not a keyring admin" in denied.output, denied.output
    assert run(cli, ["audit", "keys", "revoke", "writer-1", *base, "--key-id", "root"]).exit_code == 2
    role = run(cli, ["audit", "keys", "role", "writer-1", "--role", "run_writer", "--reason", "host",
                     *base, "--key-id", "root"])
    assert role.exit_code == 0, role.output
    done = run(cli, ["audit", "keys", "revoke", "writer-1", "--reason", "laptop stolen", *base, "--key-id", "root"])
    assert done.exit_code == 0 and "REVOKED" in done.output, done.output
    listed = run(cli, ["audit", "keys", "list", *base, "--key-id", "writer-1"])
    assert "from keyring events" in listed.output and "laptop stolen" in listed.output
    assert "writer-1: run_writer; valid from 20" in listed.output, listed.output
    (tmp_path / "keys" / "root.key").unlink()  # the admin key goes back offline
    asyncio.run(append_as(db, keys, "writer-1", "late", Phase.SAGA_OPENED, "open", payload={"metadata": {}}))
    verified = run(cli, ["journal", "verify", "late", "--db", db, "--keyring", keys])
    assert verified.exit_code == 1 and "revoked" in verified.output, verified.output


async def test_a_host_whose_key_may_not_sign_checkpoints_stores_none(db, keys, tmp_path):
    """With roles journaled, a run key without the checkpoint_signer role closes its saga without
    a checkpoint rather than storing one every verify would refuse; asked for one, it says why."""
    await give_roles(db, keys, {"writer-1": ["run_writer"], "alice-1": ["decision_maker"]})
    s = host(db, keys, checkpoints=str(tmp_path / "cps"))
    try:
        done = await s.run(agent(scripted([("book_hotel", {"city": "Oslo"}, "c0")], "ok"), book_hotel), "go")
        assert done.status is SagaStatus.COMPLETED
        assert await s.evidence.checkpoints.list(done.saga_id) == []
        (verdict,) = await s.verify(done.saga_id)
        assert verdict.ok, verdict
        with pytest.raises(ConfigurationError, match="may not sign checkpoints"):
            await s.evidence.checkpoint(s.journal, done.saga_id)
    finally:
        await s.aclose()


async def test_an_answer_carrying_undo_data_needs_a_run_writers_key_and_writes_nothing_without(db, keys):
    """Under explicit roles, an approver's host (decision maker only) may answer "ran", but not
    give the undo data a compensation acts on: refused before anything is written, so the saga
    stays verifiable (such an answer needs a key with both roles)."""
    await give_roles(db, keys)
    saga = await in_doubt_saga(db, keys)
    before = len(await entries(db, saga["sid"]))
    alice = host(db, keys, "alice-1")
    try:
        with pytest.raises(ConfigurationError, match="not a run_writer.*undo data"):
            await alice.resolve(saga["sid"], saga["intent"], ran=True, resolver="alice", reason="seen",
                                undo_data={"booking_id": "b-1"}, force=True)
    finally:
        await alice.aclose()
    assert len(await entries(db, saga["sid"])) == before
    writer = host(db, keys)
    try:
        (verdict,) = await writer.verify(saga["sid"])
        assert verdict.ok, verdict
    finally:
        await writer.aclose()
