"""Every public way to verify a journal (issue 37) takes the one read path and gives the strict
path's results on a tampered journal: the module functions (``sagacity_agents.evidence.
verify_journal``, ``verify_entries``), ``Sagacity.verify``, ``Evidence.verify`` /
``verify_all`` and the CLI (``journal verify``, ``journal heads``), on SQLite and PostgreSQL.

The strict path is the entry-by-entry reading: ``verify_entries`` on ``Journal.entries`` for the
chain (what ``verify_journal`` checks), ``Evidence.verify`` of one saga for the full check (what
``journal verify`` and ``Sagacity.verify`` report). With a keyring, tags proven on a pool of
threads (``core.tag_proofs``) change no result: a forged tag is named at its seq as without it,
and a row whose hash is not its bytes' never has its tag remembered as verified."""

from __future__ import annotations

import asyncio
import base64
import re

import pytest
from click.testing import CliRunner

from sagacity_agents import Sagacity
from sagacity_agents.backends import Phase
from sagacity_agents.cli import cli
from sagacity_agents.core import tag_proofs
from sagacity_agents.core.authenticity import TagCache, prove_tags, signing_view
from sagacity_agents.core.chain import ChainFault, ChainHead
from sagacity_agents.core.evidence import Evidence, verify_sagas
from sagacity_agents.core.identity import derivation_of, journal_id_of
from sagacity_agents.core.signing import Keyring, generate_key
from sagacity_agents.evidence import verify_entries, verify_journal
from sagacity_agents.stores import open_journal

from .tamper import sql
from .test_verify_read_speed import tampered

_LINE = re.compile(r"saga (.+?)  at seq (\d+): ([^:]+):")


def _broken_lines(output: str) -> dict[str, tuple[int, str]]:
    """``{saga: (bad seq, fault)}`` of the BROKEN lines ``journal verify`` printed."""
    return {m[1]: (int(m[2]), m[3]) for m in _LINE.finditer(output)}


async def test_every_entry_point_gives_the_strict_results(journal_db):
    db = journal_db
    ids = await tampered(db)
    heads = {"sound": ChainHead(6, "f" * 64), "gap": ChainHead(6, "f" * 64), "gone": ChainHead(2, "e" * 64)}
    journal = open_journal(db)
    try:
        for anchors in ({}, heads):
            chain_strict = [verify_entries(sid, await journal.entries(sid), anchors.get(sid))
                            for sid in [*ids, *(s for s in anchors if s not in ids)]]
            assert await verify_journal(journal, heads=anchors) == chain_strict
            for sid in ids:
                assert await verify_journal(journal, sid, heads=anchors) == [
                    r for r in chain_strict if r.saga_id == sid]
            if not anchors:
                chain_plain = chain_strict
        strict = {sid: await Evidence().verify(journal, sid) for sid in ids}
        assert not any(r.ok for sid, r in strict.items() if sid != "sound")
        assert await verify_sagas(journal) == list(strict.values())
        assert await Evidence().verify_all(journal) == list(strict.values())
        sagacity = Sagacity(journal)
        assert await sagacity.verify() == list(strict.values())
        for sid in ids:
            assert await sagacity.verify(sid) == [strict[sid]]
        assert strict["outcome of another call"].fault is ChainFault.STRUCTURE  # not the chain's
    finally:
        await journal.close()
    runner = CliRunner(env={"COLUMNS": "1000"})  # one line per saga
    # The commands run their own event loop: on a thread of their own here.
    shown = await asyncio.to_thread(runner.invoke, cli, ["journal", "verify", "--db", db])
    assert shown.exit_code == 1, shown.output
    assert _broken_lines(shown.output) == {
        sid: (r.bad_seq, r.fault.value) for sid, r in strict.items() if not r.ok}
    refused = await asyncio.to_thread(runner.invoke, cli, ["journal", "heads", "--db", db])
    assert refused.exit_code == 1
    assert _broken_lines(refused.output) == {
        sid: (r.bad_seq, r.fault.value) for sid, r in zip(ids, chain_plain) if not r.ok}


async def _tagged_saga(db: str, keyring: Keyring, sid: str, calls: int) -> None:
    """A run's shape with ``calls`` calls, every entry tagged by ``keyring``'s writer."""
    journal = signing_view(open_journal(db), keyring)
    try:
        await journal.append(sid, Phase.SAGA_OPENED, write_key="open", payload={"metadata": {}})
        run = await journal.append(sid, Phase.RUN_STARTED, write_key="run", payload={"holder": "h"})
        for i in range(calls):
            intent = await journal.append(sid, Phase.INTENT, write_key=f"in-{i}", tool="t", call_id=f"c{i}",
                                          payload={"args": {"n": i}}, fence=run.seq)
            await journal.append(sid, Phase.EXECUTED, write_key=f"out-{i}", tool="t", call_id=f"c{i}",
                                 payload={"intent_seq": intent.seq, "result": "ok"}, fence=run.seq)
    finally:
        await journal.close()


@pytest.fixture
def keyring(tmp_path):
    generate_key(tmp_path / "keys", "writer-1")
    return Keyring.load(tmp_path / "keys")


@pytest.mark.parametrize("workers", [1, 4])
async def test_tags_proven_on_threads_change_no_result(journal_db, keyring, monkeypatch, workers):
    """A forged tag (another entry's), an edited row and a sound saga: the same results with the
    pool (4 threads, whatever the machine's cores) as with the check alone (1)."""
    monkeypatch.setattr(tag_proofs, "proof_workers", lambda: workers)
    db = journal_db
    for sid in ("sound", "forged", "edited"):
        await _tagged_saga(db, keyring, sid, 20)  # 42 entries: enough for the pool
    (other,) = sql(db, "SELECT tag FROM sagacity_journal WHERE saga_id = 'forged' AND seq = 31")[0]
    sql(db, "UPDATE sagacity_journal SET tag = ? WHERE saga_id = 'forged' AND seq = 30", (other,))
    sql(db, "UPDATE sagacity_journal SET tool = 'x' WHERE saga_id = 'edited' AND seq = 12")
    journal = open_journal(db)
    try:
        found = {r.saga_id: r for r in await verify_sagas(journal, evidence=Evidence(keyring=keyring))}
        one = {sid: await Evidence(keyring=keyring).verify(journal, sid) for sid in found}
    finally:
        await journal.close()
    assert found == one
    assert found["sound"].ok
    assert (found["forged"].bad_seq, found["forged"].fault) == (30, ChainFault.BAD_SIGNATURE)
    assert (found["edited"].bad_seq, found["edited"].fault) == (12, ChainFault.COLUMN_MISMATCH)


async def test_a_tag_is_remembered_only_for_the_bytes_of_its_hash(tmp_path, keyring):
    """A row whose stored hash is another entry's, carrying a tag valid for its own bytes: the
    tag is not claimed (remembering it under that hash would pass the other entry's bytes under
    a tag that never signed them); a forged tag is claimed but never proven."""
    db = str(tmp_path / "j.db")
    await _tagged_saga(db, keyring, "s", 20)
    journal = open_journal(db)
    try:
        entries = await journal.entries("s")
        derivation = derivation_of(entries, await journal_id_of(journal))
    finally:
        await journal.close()
    cache = TagCache()
    claims = cache.unproven(entries, keyring, derivation)
    assert len(claims) == len(entries)
    moved = entries[5].__class__.from_row((*(getattr(entries[5], c) for c in (
        "saga_id", "seq", "phase", "tool", "call_id", "write_key", "recorded_at", "prev_hash")),
        entries[6].hash, entries[5].canonical, entries[5].tag_key, entries[5].tag))
    assert cache.unproven([moved], keyring, derivation) == []
    seen, key, _signature, statement = claims[7]
    forged = (seen, key, base64.b64decode(entries[8].tag), statement)
    assert prove_tags([forged, claims[9]]) == [claims[9][0]]
    cache.proven(prove_tags(claims))
    assert cache.unproven(entries, keyring, derivation) == []
