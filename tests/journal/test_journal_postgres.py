"""What only a shared server shows of the PostgreSQL journal: bytea storage, session time zones
(C-08), concurrent first appends (C-09), a connection killed mid-append and a pool exhausted
(C-10), canonical JSON (C-11), NUL bytes (C-12), the schema check. The journal contract runs on
PostgreSQL with every other backend in ``tests/test_backend_contracts.py``."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import pytest

from sagacity_agents.core.entries import Phase
from sagacity_agents.backends.postgres.journal import PostgresJournal
from sagacity_agents.errors import JournalWriteError
from sagacity_agents.testing import FrozenClock
from tests.pg import admin_connect, at_commit_trigger

from .journal_contract import SAGA, assert_chain, fill, verify_one


class TestPostgresJournal:
    @pytest.fixture
    async def journal(self, pg_uri):
        journal = PostgresJournal(pg_uri, clock=FrozenClock(tick=0.001))
        yield journal
        await journal.close()

    async def test_stores_exactly_the_hashed_bytes_as_bytea(self, journal, pg_uri):
        written = await fill(journal, 3)
        with admin_connect(pg_uri) as conn:
            rows = conn.execute(
                "SELECT seq, phase, tool, call_id, write_key, recorded_at, prev_hash, hash, "
                "canonical, pg_typeof(canonical)::text FROM sagacity_journal WHERE saga_id = %s "
                "ORDER BY seq",
                (SAGA,),
            ).fetchall()
        for entry, row in zip(written, rows, strict=True):
            assert row == (
                entry.seq, entry.phase.value, entry.tool, entry.call_id, entry.write_key,
                entry.recorded_at, entry.prev_hash, entry.hash, entry.canonical, "bytea",
            )
            assert hashlib.sha256(row[8]).hexdigest() == row[7]


# --- C-09 concurrent first appends ------------------------------------------------------------


@pytest.mark.case("C-09")
@pytest.mark.parametrize("tasks", [10, 64])
async def test_concurrent_first_appends_on_separate_connections(pg_uri, tasks):
    """C-09: an empty journal; N tasks, each on its own connection, append to saga ``r1`` at the
    same instant under READ COMMITTED: seq exactly 1..N, one genesis entry, distinct previous
    hashes, nothing lost or failed, the chain verifies."""
    journal = PostgresJournal(pg_uri, min_size=tasks, max_size=tasks)
    try:
        assert await journal.database.execute("SHOW transaction_isolation") == [("read committed",)]
        go = asyncio.Event()

        async def one(i: int) -> Any:
            await go.wait()
            return await journal.append("r1", Phase.INTENT, write_key=f"w{i}", payload={"i": i})

        runs = [asyncio.create_task(one(i)) for i in range(tasks)]
        await asyncio.sleep(0.05)
        go.set()
        results = await asyncio.gather(*runs, return_exceptions=True)
        assert [r for r in results if isinstance(r, BaseException)] == []
        entries = await journal.entries("r1")
        assert_chain(entries, tasks)
        assert sorted(e.payload["i"] for e in entries) == list(range(tasks))
        assert sum(e.prev_hash == "0" * 64 for e in entries) == 1
        assert len({e.prev_hash for e in entries}) == tasks
        assert (await verify_one(journal, "r1")).ok
    finally:
        await journal.close()


# --- C-10 connection lost, pool exhausted, timeouts --------------------------------------------

_KILL_AT_COMMIT = "CREATE SEQUENCE sagacity_test_kills;" + at_commit_trigger(
    "sagacity_test_kill", """
    IF NEW.phase = 'EXECUTED' AND nextval('sagacity_test_kills') <= %(times)s THEN
        PERFORM pg_terminate_backend(pg_backend_pid());
        PERFORM pg_sleep(5);  -- the termination lands here, inside COMMIT
    END IF;""")


@pytest.fixture
def kill_at_commit(pg_uri):
    """Install a deferred trigger that kills the appending backend inside the COMMIT of the
    first ``times`` EXECUTED inserts (after the INSERT succeeded, before the commit completes)."""

    def install(times: int) -> None:
        with admin_connect(pg_uri) as conn:
            conn.execute(_KILL_AT_COMMIT.replace("%(times)s", str(times)))

    yield install
    with admin_connect(pg_uri) as conn:
        conn.execute("DROP TRIGGER IF EXISTS sagacity_test_kill ON sagacity_journal")
        conn.execute("DROP FUNCTION IF EXISTS sagacity_test_kill()")
        conn.execute("DROP SEQUENCE IF EXISTS sagacity_test_kills")


@pytest.mark.case("C-10a")
async def test_connection_killed_between_insert_and_commit_stores_once(pg_uri, kill_at_commit):
    """C-10 (a): the server connection is killed (pg_terminate_backend) between writing an
    EXECUTED entry and its commit. The append is retried under the same write key on a new
    connection: exactly one EXECUTED row, the outcome kept, the chain intact."""
    journal = PostgresJournal(pg_uri)
    try:
        await journal.append("s", Phase.INTENT, write_key="c1:intent", tool="t", call_id="c1")
        kill_at_commit(1)
        entry = await journal.append(
            "s", Phase.EXECUTED, write_key="c1:outcome", tool="t", call_id="c1",
            payload={"result": "charged"},
        )
        assert entry.seq == 2 and entry.payload == {"result": "charged"}
        again = await journal.append(  # a later retry of the same write: harmless
            "s", Phase.EXECUTED, write_key="c1:outcome", tool="t", call_id="c1",
            payload={"result": "charged"},
        )
        assert again == entry
        entries = await journal.entries("s")
        assert [e.phase for e in entries] == [Phase.INTENT, Phase.EXECUTED]
        assert (await verify_one(journal, "s")).ok
    finally:
        await journal.close()


@pytest.mark.case("C-10a")
async def test_connection_killed_on_every_attempt_raises_and_stores_nothing(
    pg_uri, kill_at_commit
):
    """C-10 (a): when every attempt's commit is killed the append raises JournalWriteError (the
    saga then keeps and flags the outcome) and no row is stored: never a silent loss, never a
    duplicate."""
    journal = PostgresJournal(pg_uri)
    try:
        await journal.append("s", Phase.INTENT, write_key="i", tool="t", call_id="c1")
        kill_at_commit(3)
        with pytest.raises(JournalWriteError, match="append to saga 's'"):
            await journal.append("s", Phase.EXECUTED, write_key="o", tool="t", call_id="c1")
        assert [e.phase for e in await journal.entries("s")] == [Phase.INTENT]
        stored = await journal.append("s", Phase.EXECUTED, write_key="o", tool="t", call_id="c1")
        assert stored.seq == 2
    finally:
        await journal.close()


async def test_idle_connections_killed_as_by_a_server_restart_are_replaced(pg_uri):
    """Every pooled connection dies while idle (what a server restart does to a pool): the next
    append gets a new connection and is stored once."""
    journal = PostgresJournal(pg_uri, min_size=3, max_size=3)
    try:
        await journal.append("s", Phase.INTENT, write_key="a")
        pool = await journal.database.pool()
        held = [await pool.getconn() for _ in range(3)]
        pids = [conn.info.backend_pid for conn in held]
        for conn in held:
            await pool.putconn(conn)
        with admin_connect(pg_uri) as conn:  # only this journal's connections
            killed = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE pid = ANY(%s)", (pids,),
            ).fetchone()
        assert killed == (3,)
        entry = await journal.append("s", Phase.EXECUTED, write_key="b")
        assert entry.seq == 2
        assert_chain(await journal.entries("s"), 2)
    finally:
        await journal.close()


async def test_statement_timeout_on_a_held_saga_lock_raises_and_stores_nothing(pg_uri):
    """A statement timeout (here: the saga's advisory lock held elsewhere for longer) raises
    JournalWriteError and stores nothing; once the lock is free the append works."""
    journal = PostgresJournal(pg_uri, statement_timeout=0.3)
    try:
        with admin_connect(pg_uri) as holder:
            holder.execute("SELECT pg_advisory_lock(hashtextextended('s', 0))")
            with pytest.raises(JournalWriteError, match="statement timeout"):
                await journal.append("s", Phase.INTENT, write_key="a")
        assert await journal.entries("s") == []
        assert (await journal.append("s", Phase.INTENT, write_key="a")).seq == 1
    finally:
        await journal.close()


async def test_pool_exhausted_append_raises_journal_write_error(pg_uri):
    """C-10 (b), the failing half: no free connection within ``pool_timeout`` seconds is a
    JournalWriteError naming the exhausted pool (an INTENT that raises it means the tool does
    not run; see tests/sdk/test_postgres_saga.py)."""
    journal = PostgresJournal(pg_uri, min_size=1, max_size=1, pool_timeout=0.5)
    try:
        pool = await journal.database.pool()
        async with pool.connection():  # the only connection, held elsewhere
            with pytest.raises(JournalWriteError, match="pool of 1 exhausted"):
                await journal.append("s", Phase.INTENT, write_key="a")
        assert await journal.entries("s") == []
    finally:
        await journal.close()


async def test_an_append_waiting_for_a_connection_when_the_database_closes_raises_ours(pg_uri):
    """An append waiting for a connection when its database is closed (``aclose`` while an
    outcome written behind waits): psycopg_pool's PoolClosed becomes JournalWriteError naming the
    append, with PoolClosed as its ``__cause__`` (the saga keeps and flags an outcome it cannot
    write; a raw driver error would escape that handling)."""
    import psycopg

    journal = PostgresJournal(pg_uri, min_size=1, max_size=1, pool_timeout=5)
    pool = await journal.database.pool()
    held = await pool.getconn()  # the only connection, held elsewhere
    waiting = asyncio.create_task(journal.append("s", Phase.INTENT, write_key="a"))
    await asyncio.sleep(0.05)
    await journal.close()
    with pytest.raises(JournalWriteError, match="append to saga 's'") as caught:
        await waiting
    assert isinstance(caught.value.__cause__, psycopg.OperationalError)
    await held.close()


async def test_nul_in_a_text_column_is_refused_clearly(pg_uri):
    """C-12's other half: PostgreSQL text cannot hold NUL; ids with one are refused before any
    write (payloads are fine: escaped in the canonical bytes)."""
    journal = PostgresJournal(pg_uri)
    try:
        with pytest.raises(JournalWriteError, match="NUL"):
            await journal.append("s\x00", Phase.INTENT, write_key="a")
        entry = await journal.append("s", Phase.EXECUTED, write_key="a", payload="PK\x03\x04\x00")
        assert (await journal.entries("s"))[0].payload == "PK\x03\x04\x00" == entry.payload
    finally:
        await journal.close()


async def test_fast_outcomes_commit_outcomes_without_waiting_for_the_flush(pg_uri):
    """``fast_outcomes=True`` turns ``synchronous_commit`` off for outcome entries only; the
    entries and chain are the same."""
    journal = PostgresJournal(pg_uri, fast_outcomes=True)
    try:
        await journal.append("s", Phase.INTENT, write_key="i", tool="t", call_id="c")
        await journal.append("s", Phase.EXECUTED, write_key="o", tool="t", call_id="c")
        assert_chain(await journal.entries("s"), 2)
        assert (await verify_one(journal, "s")).ok
    finally:
        await journal.close()
