"""What only one embedded backend's journal can show: in memory, a reordered chain; SQLite, the
stored BLOB, SQL edits of it, a reopened file, saga ids read from the entries, close. The journal
contract itself (``journal_contract.py``) runs on every backend in
``tests/test_backend_contracts.py``."""

from __future__ import annotations

import hashlib

import pytest

from sagacity_agents.core.chain import ChainFault, verify_journal
from sagacity_agents.core.entries import Phase
from sagacity_agents.backends.memory.journal import InMemoryJournal
from sagacity_agents.backends.sqlite.journal import SqliteJournal
from sagacity_agents.errors import JournalError
from sagacity_agents.testing import FrozenClock

from .journal_contract import SAGA, assert_chain, fill, verify_one

# --- in memory ------------------------------------------------------------------------------


class TestInMemoryJournal:
    @pytest.fixture
    async def journal(self):
        journal = InMemoryJournal(clock=FrozenClock(tick=0.001))
        yield journal
        await journal.close()

    async def test_tamper_entries_swapped_in_storage_order_is_reordered(self, journal):
        await fill(journal, 5)
        chain = journal._chains[SAGA]
        chain[1], chain[2] = chain[2], chain[1]  # storage order 1, 3, 2, 4, 5
        result = await verify_one(journal)
        assert (result.ok, result.bad_seq, result.fault) == (False, 2, ChainFault.REORDERED)


# --- SQLite ---------------------------------------------------------------------------------


class TestSqliteJournal:
    @pytest.fixture
    async def journal(self, tmp_path):
        journal = SqliteJournal(tmp_path / "journal.db", clock=FrozenClock(tick=0.001))
        yield journal
        await journal.close()

    async def test_stores_exactly_the_hashed_bytes_as_blob(self, journal):
        written = await fill(journal, 3)
        rows = journal.execute_sql(
            "SELECT seq, phase, tool, call_id, write_key, recorded_at, prev_hash, hash, canonical, "
            "typeof(canonical) FROM sagacity_journal WHERE saga_id = ? ORDER BY seq",
            (SAGA,),
        )
        for entry, row in zip(written, rows, strict=True):
            assert row == (
                entry.seq, entry.phase.value, entry.tool, entry.call_id, entry.write_key,
                entry.recorded_at, entry.prev_hash, entry.hash, entry.canonical, "blob",
            )
            assert hashlib.sha256(row[8]).hexdigest() == row[7]

    async def test_tamper_sql_text_replace_on_the_bytes_is_hash_mismatch(self, journal):
        """SQL ``replace()`` on the BLOB returns TEXT: reading must still work and verification
        must name the edited entry."""
        await fill(journal, 5)
        journal.execute_sql(
            "UPDATE sagacity_journal SET canonical = replace(canonical, '\"amount\":103', "
            "'\"amount\":999') WHERE saga_id = ?",
            (SAGA,),
        )
        # Every row now holds TEXT; the untouched ones still carry the right UTF-8 bytes.
        assert journal.execute_sql("SELECT DISTINCT typeof(canonical) FROM sagacity_journal") == [
            ("text",)
        ]
        entries = await journal.entries(SAGA)
        assert entries[2].payload == {"i": 3, "amount": 999}
        result = await verify_one(journal)
        assert (result.ok, result.bad_seq, result.fault) == (False, 3, ChainFault.HASH_MISMATCH)

    async def test_reopened_file_keeps_the_chain_and_continues_it(self, journal, tmp_path):
        written = await fill(journal, 4)
        await journal.append("other", Phase.SAGA_OPENED, write_key="open")
        await journal.close()
        reopened = SqliteJournal(tmp_path / "journal.db", clock=FrozenClock())
        try:
            assert await reopened.entries(SAGA) == written
            assert await reopened.saga_ids() == [SAGA, "other"]
            fifth = await reopened.append(SAGA, Phase.EXECUTED, write_key="w5", payload=5)
            assert fifth.seq == 5 and fifth.prev_hash == written[-1].hash
            # A retry after a restart is still recognised by its write key.
            assert await reopened.append(
                SAGA, Phase.INTENT, write_key="w1", tool="charge", call_id="call_1",
                payload={"i": 1, "amount": 101},
            ) == written[0]
            assert_chain(await reopened.entries(SAGA), 5)
            assert (await verify_one(reopened)).ok
        finally:
            await reopened.close()

    async def test_saga_ids_come_from_the_entries_not_a_side_table(self, journal, tmp_path):
        """Pruning a side table must not hide a saga from `list` / `verify`: there is none, and
        an old file's leftover ``sagacity_sagas`` table is not read."""
        await fill(journal, 2, saga_id="s-old")
        await fill(journal, 2, saga_id="s-new")
        tables = {r[0] for r in journal.execute_sql("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "sagacity_sagas" not in tables
        # A file written by an earlier version, its side table edited to forget "s-new".
        journal.execute_sql("CREATE TABLE sagacity_sagas (saga_id TEXT PRIMARY KEY, ordinal INTEGER NOT NULL)")
        journal.execute_sql("INSERT INTO sagacity_sagas VALUES ('s-old', 1)")
        await journal.close()
        reopened = SqliteJournal(tmp_path / "journal.db")
        try:
            assert await reopened.saga_ids() == ["s-old", "s-new"]
            assert [r.saga_id for r in await verify_journal(reopened) if r.ok] == ["s-old", "s-new"]
        finally:
            await reopened.close()

    async def test_saga_ids_in_order_of_first_stored_entry(self, journal):
        for i in range(3):
            for sid in ("c", "a", "b"):
                await journal.append(sid, Phase.INTENT, write_key=f"k{i}", payload=i)
        await journal.append("z", Phase.INTENT, write_key="k", payload=0)
        assert await journal.saga_ids() == ["c", "a", "b", "z"]

    async def test_close_is_idempotent_and_refuses_later_use(self, journal):
        await journal.close()
        await journal.close()
        with pytest.raises(JournalError):
            await journal.append(SAGA, Phase.INTENT, write_key="k")
        with pytest.raises(JournalError):
            await journal.entries(SAGA)
