"""``verify`` at read speed (issue 22, item 4): on SQLite and PostgreSQL, without a keyring,
``verify_sagas`` checks sound sagas from their stored rows (``core.chain.verify_rows``); every
saga that is not plainly sound is judged entry by entry, so the results, faults and details
included, are exactly those of the entry-by-entry check for every saga of a tampered journal."""

from __future__ import annotations

import json
from typing import Any

from sagacity_agents.backends import Phase
from sagacity_agents.core.canonical import canonical_bytes, sha256_hex
from sagacity_agents.core.chain import ChainFault, ChainHead
from sagacity_agents.core.evidence import verify_sagas
from sagacity_agents.stores import open_journal

from .tamper import edit_entries, sql


class EntriesOnly:
    """A journal without ``rows_many``: ``verify_sagas`` then reads and checks entries."""

    def __init__(self, journal: Any) -> None:
        self._journal = journal

    def __getattr__(self, name: str) -> Any:
        if name == "rows_many":
            raise AttributeError(name)
        return getattr(self._journal, name)


async def fill(journal: Any, sid: str) -> None:
    """A saga as a run writes it: opened, a run, a call with its outcome, ended, closed."""
    await journal.append(sid, Phase.SAGA_OPENED, write_key="open", payload={"metadata": {}})
    run = await journal.append(sid, Phase.RUN_STARTED, write_key="run", payload={"holder": "h"})
    intent = await journal.append(sid, Phase.INTENT, write_key="in", tool="t", call_id="c",
                                  payload={"args": {"n": 1}}, fence=run.seq)
    await journal.append(sid, Phase.EXECUTED, write_key="out", tool="t", call_id="c",
                         payload={"intent_seq": intent.seq, "result": "ok"}, fence=run.seq)
    await journal.append(sid, Phase.RUN_ENDED, write_key="end", payload={"status": "COMPLETED"},
                         fence=run.seq)
    await journal.append(sid, Phase.SAGA_CLOSED, write_key="close", payload={"status": "COMPLETED"})


def forge_outcome_of_another_call(db: str, sid: str) -> None:
    """Seq 4 (the EXECUTED) re-sealed as the outcome of another tool, and the chain after it
    relinked: the chain verifies, the structure rule (A-03) refuses it."""
    edit_entries(db, sid, lambda o: {**o, "tool": "refund"} if o["seq"] == 4 else None, reseal=True)
    sql(db, "UPDATE sagacity_journal SET tool = 'refund' WHERE saga_id = ? AND seq = 4", (sid,))
    (prev,) = sql(db, "SELECT hash FROM sagacity_journal WHERE saga_id = ? AND seq = 4", (sid,))[0]
    for seq in (5, 6):
        (blob,) = sql(db, "SELECT canonical FROM sagacity_journal WHERE saga_id = ? AND seq = ?", (sid, seq))[0]
        obj = json.loads(bytes(blob))
        obj["prev_hash"] = prev
        data = canonical_bytes(obj)
        sql(db, "UPDATE sagacity_journal SET canonical = ?, hash = ?, prev_hash = ? WHERE saga_id = ? AND seq = ?",
            (data, sha256_hex(data), prev, sid, seq))
        prev = sha256_hex(data)


TAMPERS = {
    "sound": lambda db, sid: None,
    "tool column": lambda db, sid: sql(db, "UPDATE sagacity_journal SET tool = 'x' WHERE saga_id = ? AND seq = 3", (sid,)),
    "hash column": lambda db, sid: sql(db, "UPDATE sagacity_journal SET hash = ? WHERE saga_id = ? AND seq = 2",
                                       ("ab" * 32, sid)),
    "payload edited": lambda db, sid: edit_entries(
        db, sid, lambda o: {**o, "payload": {**o["payload"], "result": "x"}} if o["seq"] == 4 else None),
    "payload edited and resealed": lambda db, sid: edit_entries(
        db, sid, lambda o: {**o, "payload": {**o["payload"], "result": "x"}} if o["seq"] == 4 else None, reseal=True),
    "gap": lambda db, sid: sql(db, "DELETE FROM sagacity_journal WHERE saga_id = ? AND seq = 3", (sid,)),
    "outcome of another call": forge_outcome_of_another_call,
}


async def tampered(db: str) -> list[str]:
    """One saga per :data:`TAMPERS` entry written to ``db``, then each tampered as named; the
    saga ids (the names) in journal order."""
    journal = open_journal(db)
    try:
        for name in TAMPERS:
            await fill(journal, name)
    finally:
        await journal.close()
    for name, tamper in TAMPERS.items():
        tamper(db, name)
    return list(TAMPERS)


async def test_verify_from_rows_names_every_fault_as_the_entry_check_does(journal_db):
    db = journal_db
    await tampered(db)
    journal = open_journal(db)
    try:
        assert hasattr(journal, "rows_many")
        heads = {"sound": ChainHead(6, "f" * 64), "gap": ChainHead(6, "f" * 64)}
        for anchors in ({}, heads):
            fast = await verify_sagas(journal, heads=anchors)
            slow = await verify_sagas(EntriesOnly(journal), heads=anchors)
            assert fast == slow
        by_saga = {r.saga_id: r for r in fast}
        assert by_saga["sound"].fault is ChainFault.HEAD_MISMATCH  # against the made-up anchor
        assert (await verify_sagas(journal, "sound"))[0].ok
        assert (by_saga["tool column"].bad_seq, by_saga["tool column"].fault) == (3, ChainFault.COLUMN_MISMATCH)
        assert (by_saga["hash column"].bad_seq, by_saga["hash column"].fault) == (2, ChainFault.HASH_MISMATCH)
        assert by_saga["payload edited"].fault is ChainFault.HASH_MISMATCH
        assert (by_saga["payload edited and resealed"].bad_seq,
                by_saga["payload edited and resealed"].fault) == (5, ChainFault.BROKEN_LINK)
        assert "also" in by_saga["gap"].detail and by_saga["gap"].fault is ChainFault.GAP
        assert (by_saga["outcome of another call"].bad_seq,
                by_saga["outcome of another call"].fault) == (4, ChainFault.STRUCTURE)
    finally:
        await journal.close()
