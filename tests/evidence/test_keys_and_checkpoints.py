"""Keyring and checkpoint store: loading, rotation, refusals."""

from __future__ import annotations

import shutil

import pytest
from agents import function_tool

from sagacity_agents import Sagacity, SagaStatus, compensable
from sagacity_agents.backends import DirectoryCheckpointStore
from sagacity_agents.errors import ConfigurationError, EvidenceError
from sagacity_agents.evidence import ChainFault, Keyring
from sagacity_agents.core.signing import generate_key

from ..sdk.helpers import agent, scripted
from .tamper import sql


@function_tool
@compensable(undo=lambda ctx: None)
def book(n: int) -> str:
    return f"booked {n}"


async def closed(s: Sagacity) -> str:
    result = await s.run(agent(scripted([("book", {"n": 1}, "1")], "ok"), book), "go")
    assert result.status is SagaStatus.COMPLETED
    return result.saga_id


def test_keyring_refuses_what_it_cannot_use(tmp_path):
    with pytest.raises(ConfigurationError, match="not a directory"):
        Keyring.load(tmp_path / "nope")
    generate_key(tmp_path, "a")
    generate_key(tmp_path, "b")
    with pytest.raises(ConfigurationError, match="several private keys"):
        Keyring.load(tmp_path)
    with pytest.raises(ConfigurationError, match="exists already"):
        generate_key(tmp_path, "a")
    with pytest.raises(ConfigurationError, match="bad key id"):
        generate_key(tmp_path, "../x")
    (tmp_path / "c.pub").write_text("not a key")
    with pytest.raises(ConfigurationError, match="cannot read key"):
        Keyring.load(tmp_path, signing_key_id="a")
    assert (tmp_path / "a.key").stat().st_mode & 0o777 == 0o600
    with pytest.raises(ConfigurationError, match="need a keyring"):
        Sagacity(":memory:", checkpoints=tmp_path / "cps")


async def test_keys_rotate_old_checkpoints_still_verify(tmp_path, checkpoints_at):
    """Rotation: `k1` signs, is retired (private key moved away, public key kept), `k2` signs
    from then on; both generations of checkpoints verify. Dropping `k1.pub` makes the old
    checkpoints unverifiable, which is refused (fail closed), never ignored."""
    keys, cps, db = tmp_path / "keys", checkpoints_at, str(tmp_path / "j.db")
    generate_key(keys, "k1")
    s = Sagacity(db, checkpoints=cps, keyring=keys)
    first = await closed(s)
    await s.aclose()
    shutil.move(keys / "k1.key", tmp_path / "k1.key.retired")
    generate_key(keys, "k2")
    s = Sagacity(db, checkpoints=cps, keyring=keys)
    try:
        second = await closed(s)
        await s.checkpoint(first)  # re-signed with the new key
        assert {c.key_id for c in await s.evidence.checkpoints.list(first)} == {"k1", "k2"}
        assert all(r.ok for r in await s.verify())
    finally:
        await s.aclose()
    (keys / "k1.pub").unlink()
    s = Sagacity(db, checkpoints=cps, keyring=keys)
    try:
        (result,) = await s.verify(first)
        assert result.fault is ChainFault.BAD_SIGNATURE and "unknown key 'k1'" in result.detail
        assert (await s.verify(second))[0].ok
    finally:
        await s.aclose()


async def test_recover_and_reuse_of_a_deleted_checkpointed_saga_are_refused(tmp_path, checkpoints_at):
    """A saga checkpointed on demand, then deleted from the journal: recover and a new run
    under its id are refused as "missing saga", not treated as a fresh, empty saga."""
    keys, cps, db = tmp_path / "keys", checkpoints_at, str(tmp_path / "j.db")
    generate_key(keys, "k1")
    s = Sagacity(db, checkpoints=cps, keyring=keys)
    try:
        result = await s.run(agent(scripted([("book", {"n": 1}, "1")], "ok"), book), "go", close=False)
        await s.checkpoint(result.saga_id)
        sql(db, "DELETE FROM sagacity_journal WHERE saga_id = ?", (result.saga_id,))
        with pytest.raises(EvidenceError, match="missing saga") as caught:
            await s.recover(result.saga_id, agent(scripted(), book))
        assert caught.value.bad_seq == 1
        with pytest.raises(EvidenceError, match="missing saga"):
            await s.run(agent(scripted("ok"), book), "again", saga_id=result.saga_id)
    finally:
        await s.aclose()


async def test_checkpoint_files_swapped_between_sagas_are_reported_not_ignored(tmp_path):
    """Someone with write access to the checkpoint directory swaps two sagas' files (so that
    neither saga seems to have a checkpoint, and both tails could be cut unseen): both sagas
    fail verification and recover refuses, instead of the misplaced lines being dropped."""
    keys, cps, db = tmp_path / "keys", tmp_path / "cps", str(tmp_path / "j.db")
    generate_key(keys, "k1")
    s = Sagacity(db, checkpoints=cps, keyring=keys)
    try:
        first = (await s.run(agent(scripted([("book", {"n": 1}, "1")], "ok"), book), "go", close=False)).saga_id
        second = (await s.run(agent(scripted([("book", {"n": 2}, "2")], "ok"), book), "go", close=False)).saga_id
        await s.checkpoint(first)
        await s.checkpoint(second)
        store = DirectoryCheckpointStore(cps)
        a, b = store._file(first), store._file(second)
        a_text, b_text = a.read_text(), b.read_text()
        a.write_text(b_text)
        b.write_text(a_text)
        results = {r.saga_id: r for r in await s.verify()}
        for sid in (first, second):
            assert results[sid].fault is ChainFault.BAD_SIGNATURE and "swapped" in results[sid].detail
        with pytest.raises(EvidenceError, match="swapped"):
            await s.recover(first, agent(scripted(), book))
    finally:
        await s.aclose()


def test_a_signing_key_whose_pub_file_is_another_key_is_refused_at_load(tmp_path):
    """`k1.key` regenerated (or copied in) while the old `k1.pub` stays: everything this host
    signs would fail to verify and lock every saga it checkpoints; the keyring refuses to load."""
    generate_key(tmp_path / "a", "k1")
    generate_key(tmp_path / "b", "k1")
    shutil.copy(tmp_path / "b" / "k1.key", tmp_path / "a" / "k1.key")
    with pytest.raises(ConfigurationError, match="k1.pub is not the public key of k1.key"):
        Keyring.load(tmp_path / "a")
    assert Keyring.load(tmp_path / "b").can_sign


async def test_a_checkpoint_store_down_at_a_pause_does_not_fail_the_saga(tmp_path):
    """The checkpoint volume is unavailable when a run pauses for approval: as at close, the
    pause stands (the note is not undone, the request is decided and resumed) and the missing
    checkpoint goes to the saga's journal errors. Before, the saga was compensated and closed
    and its request left pending for ever."""
    from ..sdk import wire_app

    class Down(DirectoryCheckpointStore):
        async def put(self, checkpoint):
            raise OSError("checkpoint volume unavailable")

    generate_key(tmp_path / "keys", "k1")
    s = Sagacity(str(tmp_path / "j.db"), checkpoints=Down(tmp_path / "cps"), keyring=tmp_path / "keys")
    try:
        paused = await s.run(wire_app.paused_agent(("note", '{"text": "x"}', "n1"),
                                                   ("transfer", '{"amount": 5, "to": "a"}', "w1")), "go")
        assert paused.status is SagaStatus.AWAITING_APPROVAL and len(paused.approvals) == 1
        await s.approve(paused.approvals[0].request_id, approver="alice")
        done = await s.resume(paused.saga_id, wire_app.resumed_agent())
        assert done.status is SagaStatus.COMPLETED and wire_app.executions() == ["5 USD -> a"]
    finally:
        await s.aclose()
