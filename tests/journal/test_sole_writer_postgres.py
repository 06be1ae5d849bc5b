"""The sole writer's append on PostgreSQL (backends/postgres/journal.py, "A sole writer needs no lock"):
a journal that stored a saga's last entry itself, with no other append to it in flight, inserts
the next entry sealed on the tail it remembers, without the function and its lock. What must hold
whatever the other writers do: no fork, no gap, nothing lost, no append failed, the chain verifies.
Which way each entry went is read on the server: the locked function marks its transaction
(``sagacity.inserted``), the plain insert does not."""

from __future__ import annotations

import asyncio

import pytest

from sagacity_agents.core.entries import Phase
from sagacity_agents.backends.postgres import sole_writer
from sagacity_agents.backends.postgres.journal import PostgresJournal
from sagacity_agents.backends.postgres.sole_writer import LOCKED_AFTER_A_LOST_RACE, SoleWriter
from sagacity_agents.errors import JournalClosedError, JournalConflictError
from tests.pg import admin_connect, at_commit_trigger

from .journal_contract import assert_chain, verify_one

# A deferred trigger runs inside COMMIT: it sees the transaction's settings as the commit does.
_WAYS = "CREATE TABLE sagacity_test_ways (write_key text, locked boolean);" + at_commit_trigger(
    "sagacity_test_way", """
    INSERT INTO sagacity_test_ways
        VALUES (NEW.write_key, coalesce(current_setting('sagacity.inserted', true), '') <> '');
    IF NEW.write_key = 'slow' THEN
        PERFORM pg_sleep(0.6);  -- the row is in the index, not yet committed
    END IF;""")


@pytest.fixture
def ways(pg_uri):
    """Record, per stored entry, whether it went the locked way; returns a reader
    ``{write_key: locked}``. An entry written with the key ``slow`` sleeps 0.6 s in its COMMIT."""
    with admin_connect(pg_uri) as conn:
        conn.execute(_WAYS)

    def read() -> dict[str, bool]:
        with admin_connect(pg_uri) as conn:
            return dict(conn.execute("SELECT write_key, locked FROM sagacity_test_ways").fetchall())

    yield read
    with admin_connect(pg_uri) as conn:
        conn.execute("DROP TRIGGER IF EXISTS sagacity_test_way ON sagacity_journal")
        conn.execute("DROP FUNCTION IF EXISTS sagacity_test_way()")
        conn.execute("DROP TABLE IF EXISTS sagacity_test_ways")


async def _in_its_commit(pg_uri: str, slow: asyncio.Task) -> None:
    """Wait until the ``slow`` entry's COMMIT sleeps (its row in the index, not committed), or
    it is done: however long a loaded machine takes to get it there."""
    def sleeping() -> bool:
        with admin_connect(pg_uri) as conn:
            return conn.execute("SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = "
                                "current_database() AND wait_event = 'PgSleep'").fetchone()[0]

    while not slow.done() and not await asyncio.to_thread(sleeping):
        await asyncio.sleep(0.01)


async def _journals(pg_uri: str, n: int) -> list[PostgresJournal]:
    return [PostgresJournal(pg_uri) for _ in range(n)]


async def test_a_sole_writer_takes_the_lock_only_for_a_tail_it_does_not_know(pg_uri, ways):
    """The first append of a saga (tail unknown) is locked; every later one of the same journal,
    lazy or durable, is a plain insert; the entries are those of the locked way (same chain)."""
    journal = PostgresJournal(pg_uri, fast_outcomes=True)
    try:
        await journal.append("s", Phase.SAGA_OPENED, write_key="open", payload={})
        await journal.append("s", Phase.INTENT, write_key="c1:intent", tool="t", call_id="c1")
        await journal.append("s", Phase.EXECUTED, write_key="c1:outcome", tool="t", call_id="c1",
                             payload={"result": "ok"})
        assert ways() == {"open": True, "c1:intent": False, "c1:outcome": False}
        assert_chain(await journal.entries("s"), 3)
        assert (await verify_one(journal, "s")).ok
    finally:
        await journal.close()


async def test_a_stale_tail_loses_to_the_seq_and_the_append_takes_the_lock(pg_uri, ways):
    """Another writer (another process: another journal) appended since: the sole writer's
    insert finds its seq taken, stores nothing, and the append goes the locked way on the real
    tail; the saga's next appends stay locked for a while."""
    a, b = await _journals(pg_uri, 2)
    try:
        await a.append("s", Phase.INTENT, write_key="a1")
        await a.append("s", Phase.EXECUTED, write_key="a2")
        await b.append("s", Phase.INTENT, write_key="b1")  # a's remembered tail is now stale
        entry = await a.append("s", Phase.EXECUTED, write_key="a3")
        assert entry.seq == 4
        await a.append("s", Phase.INTENT, write_key="a4")
        assert ways() == {"a1": True, "a2": False, "b1": True, "a3": True, "a4": True}
        entries = await a.entries("s")
        assert_chain(entries, 5)
        assert [e.write_key for e in entries] == ["a1", "a2", "b1", "a3", "a4"]
        assert (await verify_one(a, "s")).ok
    finally:
        await a.close()
        await b.close()


def _insert_without_the_lock(pg_uri: str, tail, key: str) -> None:  # type: ignore[no-untyped-def]
    """A writer that takes no lock (an INSERT written by hand): the entry sealed on ``tail``, a
    plain INSERT that neither tries the saga's lock nor checks the tail."""
    from sagacity_agents.core.journal import AppendRequest, next_entry, utc_stamp

    e = next_entry(AppendRequest.build("s", Phase.EXECUTED, write_key=key), tail, utc_stamp())
    with admin_connect(pg_uri) as conn:
        conn.execute(
            "INSERT INTO sagacity_journal (saga_id, seq, phase, tool, call_id, write_key, "
            "recorded_at, prev_hash, hash, canonical) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (e.saga_id, e.seq, "EXECUTED", None, None, key, e.recorded_at, e.prev_hash, e.hash,
             e.canonical),
        )


@pytest.mark.parametrize("writer", ["sole writer", "no lock"])
async def test_a_locked_append_and_an_insert_in_flight_both_get_stored(pg_uri, ways, writer):
    """A sole writer's insert is in the index but not committed (its COMMIT sleeps) when a
    locked append starts. It holds the saga's lock (taken without waiting), so the locked append
    queues and reads its row. An insert that took no lock (an INSERT written by hand) is what UNIQUE (saga_id, seq) settles: the locked insert waits for it, is refused
    on the seq, nothing of it is stored, and it is sent again. Either way both are stored, in one
    chain, and nothing failed."""
    a, b = await _journals(pg_uri, 2)
    try:
        first = await a.append("s", Phase.INTENT, write_key="a1")
        if writer == "sole writer":
            slow = asyncio.create_task(a.append("s", Phase.EXECUTED, write_key="slow"))
        else:
            slow = asyncio.create_task(asyncio.to_thread(
                _insert_without_the_lock, pg_uri, (1, first.hash, "INTENT"), "slow"))
        await _in_its_commit(pg_uri, slow)
        locked = await b.append("s", Phase.INTENT, write_key="b1")
        await slow
        assert locked.seq == 3
        assert ways() == {"a1": True, "slow": False, "b1": True}
        assert_chain(await b.entries("s"), 3)
        assert (await verify_one(b, "s")).ok
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize("writers", [2, 4])
async def test_writers_that_each_think_they_are_alone_lose_nothing(pg_uri, writers):
    """Several journals (as several processes would), each warmed up on the saga so that each
    believes it is the sole writer, append to it at once, 40 appends each: seq exactly 1..N, no
    append failed, every write key stored once, the chain verifies."""
    journals = await _journals(pg_uri, writers)
    try:
        for i, journal in enumerate(journals):
            await journal.append("s", Phase.INTENT, write_key=f"w{i}-warm")
        go = asyncio.Event()

        async def write(i: int, journal: PostgresJournal) -> None:
            await go.wait()
            for k in range(40):
                await journal.append("s", Phase.EXECUTED if k % 2 else Phase.INTENT,
                                     write_key=f"w{i}-{k}", payload={"k": k})

        runs = [asyncio.create_task(write(i, j)) for i, j in enumerate(journals)]
        go.set()
        await asyncio.gather(*runs)
        entries = await journals[0].entries("s")
        assert_chain(entries, writers * 41)
        assert len({e.write_key for e in entries}) == writers * 41
        assert (await verify_one(journals[0], "s")).ok
    finally:
        for journal in journals:
            await journal.close()


async def test_the_rules_on_a_remembered_tail_are_decided_by_the_server(pg_uri):
    """The shared rule refuses on the remembered tail only through the locked way, which reads
    the real tail: a conditional append whose ``expected_seq`` is not the remembered seq, and any
    append after SAGA_CLOSED, raise the rule's own errors; nothing is written."""
    a, b = await _journals(pg_uri, 2)
    try:
        await a.append("s", Phase.INTENT, write_key="a1")
        await b.append("s", Phase.EXECUTED, write_key="b1")
        # a remembers seq 1; the real tail is 2: expecting 2 is right, and is stored.
        assert (await a.append("s", Phase.INTENT, write_key="a2", expected_seq=2)).seq == 3
        with pytest.raises(JournalConflictError):
            await a.append("s", Phase.INTENT, write_key="a3", expected_seq=2)
        await a.append("s", Phase.SAGA_CLOSED, write_key="close")
        with pytest.raises(JournalClosedError):
            await a.append("s", Phase.INTENT, write_key="a4")
        assert [e.write_key for e in await a.entries("s")] == ["a1", "b1", "a2", "close"]
    finally:
        await a.close()
        await b.close()


def test_sole_writer_bookkeeping():
    """Unit: the tail is offered only to an append that is alone; a later seq wins over an
    earlier one ending late; a lost race locks the saga for a number of appends."""
    sole = SoleWriter()
    assert sole.begin("s") is None  # tail unknown
    sole.end("s", _entry(1))
    assert sole.begin("s") == (1, "h1", "INTENT")
    assert sole.begin("s") is None  # another append in flight
    sole.end("s", _entry(3))
    sole.end("s", _entry(2))  # ended late: the remembered tail stays seq 3
    assert sole.begin("s", alone=False) is None
    sole.end("s", None)
    assert sole.begin("s") == (3, "h3", "INTENT")
    sole.end("s", None)
    sole.lost_race("s")
    for _ in range(LOCKED_AFTER_A_LOST_RACE):
        assert sole.begin("s") is None
        sole.end("s", _entry(4))
    assert sole.begin("s") == (4, "h4", "INTENT")



def test_sole_writer_bookkeeping_stays_bounded(monkeypatch):
    """A long-lived worker touches many sagas: the remembered tails and the sagas kept on the
    locked way after a lost race are both bounded (past the bound they are forgotten, which only
    costs a locked append)."""

    monkeypatch.setattr(sole_writer, "TAILS_KEPT", 8)
    sole = SoleWriter()
    for i in range(50):
        sole.begin(f"s{i}")
        sole.end(f"s{i}", _entry(1))
        sole.lost_race(f"t{i}")
    assert len(sole._tails) <= 8 and len(sole._locked_for) <= 8
    assert sole.begin("s49") == (1, "h1", "INTENT")


def _entry(seq: int):  # type: ignore[no-untyped-def]
    from types import SimpleNamespace

    return SimpleNamespace(seq=seq, hash=f"h{seq}", phase=Phase.INTENT)


async def test_a_remembered_tail_the_server_no_longer_has_is_not_chained_onto(pg_uri, ways):
    """The remembered tail can be gone: a lazy commit (SAGA_OPENED, RUN_STARTED, an outcome with
    fast_outcomes) lost in a server crash, a failover to a replica that lagged, a restore; here
    the row is deleted, which is what the server looks like afterwards. Chaining onto it would
    store seq 4 after seq 2 (a gap: the saga then fails verification as if tampered with); the
    locked way chains onto the real tail. Likewise when another writer has since stored another
    entry at the lost seq (same seq, other hash)."""
    a, b = await _journals(pg_uri, 2)
    try:
        await a.append("s", Phase.SAGA_OPENED, write_key="open", payload={})
        await a.append("s", Phase.INTENT, write_key="i1", tool="t", call_id="c1")
        await a.append("s", Phase.EXECUTED, write_key="o1", tool="t", call_id="c1")
        with admin_connect(pg_uri) as conn:
            conn.execute("DELETE FROM sagacity_journal WHERE seq = 3")
        assert (await a.append("s", Phase.INTENT, write_key="i2", tool="t", call_id="c2")).seq == 3
        assert ways()["i2"] is True
        await a.append("s", Phase.EXECUTED, write_key="o2", tool="t", call_id="c2")  # a knows seq 4
        with admin_connect(pg_uri) as conn:
            conn.execute("DELETE FROM sagacity_journal WHERE seq = 4")
        await b.append("s", Phase.EXECUTED, write_key="o2-other", tool="t", call_id="c2")  # seq 4
        await a.append("s", Phase.INTENT, write_key="i3", tool="t", call_id="c3")
        entries = await a.entries("s")
        assert [e.write_key for e in entries] == ["open", "i1", "i2", "o2-other", "i3"]
        assert_chain(entries, 5)
        assert (await verify_one(a, "s")).ok
    finally:
        await a.close()
        await b.close()


async def test_a_batch_queues_behind_a_sole_writers_insert_in_flight(pg_uri, ways):
    """append_many always takes the lock; a sole writer's insert (its COMMIT held open) holds
    it: the batch waits, then reads the sole writer's row; both appends stored after it, one
    chain."""
    a, b = await _journals(pg_uri, 2)
    try:
        await a.append("s", Phase.INTENT, write_key="a1")
        slow = asyncio.create_task(a.append("s", Phase.EXECUTED, write_key="slow"))
        await _in_its_commit(pg_uri, slow)
        batch = await b.append_many("s", [{"phase": Phase.INTENT, "write_key": "b1"},
                                          {"phase": Phase.EXECUTED, "write_key": "b2"}])
        assert (await slow).seq == 2 and [e.seq for e in batch] == [3, 4]
        assert ways() == {"a1": True, "slow": False, "b1": True, "b2": True}
        assert_chain(await b.entries("s"), 4)
    finally:
        await a.close()
        await b.close()


async def test_claims_and_retries_on_the_sole_path_follow_the_shared_rule(pg_uri):
    """A write key already stored (at an earlier seq, so the sole writer's seq is free) makes the
    plain insert fail on the key: the locked way applies replay_of. Another claimant's
    COMPENSATING is ClaimTakenError, the same claimant's retry gets its entry back, a key reused
    for another entry is JournalWriteError; nothing is written by any of them."""
    from sagacity_agents.errors import ClaimTakenError, JournalWriteError

    a, b = await _journals(pg_uri, 2)
    try:
        claim = await a.append("s", Phase.COMPENSATING, write_key="undo:c1", call_id="c1",
                               payload={"claimant": "a"})
        await b.append("s", Phase.INTENT, write_key="b1")  # b remembers the real tail: seq 2
        with pytest.raises(ClaimTakenError):
            await b.append("s", Phase.COMPENSATING, write_key="undo:c1", call_id="c1",
                           payload={"claimant": "b"})
        with pytest.raises(JournalWriteError, match="already used"):
            await b.append("s", Phase.INTENT, write_key="undo:c1")
        await b.append("s", Phase.EXECUTED, write_key="b2")
        again = await b.append("s", Phase.COMPENSATING, write_key="undo:c1", call_id="c1",
                               payload={"claimant": "a"})
        assert again == claim
        assert [e.write_key for e in await a.entries("s")] == ["undo:c1", "b1", "b2"]
    finally:
        await a.close()
        await b.close()


# Between a locked append's tail read and its insert (a BEFORE INSERT trigger: the row's seq is
# read, its index entry not yet made): 0.1 s, as a statement stalled on I/O or CPU would be.
_SLOW_READER = """
CREATE FUNCTION sagacity_test_slow_reader() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.write_key LIKE 'slow-%' THEN
        PERFORM pg_sleep(0.1);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER sagacity_test_slow_reader BEFORE INSERT ON sagacity_journal
    FOR EACH ROW EXECUTE FUNCTION sagacity_test_slow_reader();
"""


@pytest.fixture
def slow_reader(pg_uri):
    """Entries written with a key ``slow-...`` take 0.1 s between the tail read and the insert."""
    with admin_connect(pg_uri) as conn:
        conn.execute(_SLOW_READER)
    yield
    with admin_connect(pg_uri) as conn:
        conn.execute("DROP TRIGGER IF EXISTS sagacity_test_slow_reader ON sagacity_journal")
        conn.execute("DROP FUNCTION IF EXISTS sagacity_test_slow_reader()")


def _old_worker_append(pg_uri: str, key: str) -> str:
    """An append of the previous release: 0001's procedure (under the lock, no retry)."""
    import psycopg

    from sagacity_agents.core.journal import AppendRequest, utc_stamp
    from sagacity_agents.backends.postgres.journal import byte_pieces

    request = AppendRequest.build("s", Phase.INTENT, write_key=key)
    now = utc_stamp()
    head, middle, tail = byte_pieces(request, now)
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        return conn.execute(
            "CALL sagacity_append(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            ("s", "INTENT", None, None, key, now, "0" * 64, head, middle, tail, True, None,
             ["SAGA_CLOSED"]),
        ).fetchone()[0]


@pytest.mark.parametrize("writer", ["batch", "previous release"])
async def test_a_locked_append_is_not_starved_by_a_steady_sole_writer(pg_uri, slow_reader, writer):
    """A sole writer appends every 20 ms (a run with quick tools) while a locked append (a batch;
    a worker of the previous release through 0001's procedure) takes 0.1 s from its tail read to
    its insert. The sole writer must not take the seq the locked one read, again and again, until
    it gives up: both writers' appends are stored, nothing fails, one chain."""
    a = PostgresJournal(pg_uri)
    b = PostgresJournal(pg_uri)
    try:
        await a.append("s", Phase.INTENT, write_key="a0")
        stop = asyncio.Event()

        async def steady() -> int:
            k = 0
            while not stop.is_set():
                k += 1
                await a.append("s", Phase.INTENT, write_key=f"a{k}")
                await asyncio.sleep(0.02)
            return k

        task = asyncio.create_task(steady())
        try:
            if writer == "batch":
                await b.append_many("s", [{"phase": Phase.INTENT, "write_key": "slow-b"}])
            else:
                assert await asyncio.to_thread(_old_worker_append, pg_uri, "slow-old") == "inserted"
        finally:
            stop.set()
            steady_appends = await task
        entries = await a.entries("s")
        assert_chain(entries, steady_appends + 2)
    finally:
        await a.close()
        await b.close()


def test_one_journal_appending_from_threads_with_their_own_event_loops(pg_uri):
    """Sync tools append from worker threads, run_sync from new event loops: one journal, one
    sole-writer bookkeeping, a pool per loop. Three threads, each with its own loop, append to
    one saga at once: seq 1..N, nothing failed, every key once."""
    import threading

    journal = PostgresJournal(pg_uri)
    asyncio.run(journal.append("s", Phase.INTENT, write_key="warm"))
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        async def go() -> None:
            for k in range(15):
                await journal.append("s", Phase.INTENT, write_key=f"t{i}-{k}")

        try:
            asyncio.run(go())
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []

    async def check() -> None:
        entries = await journal.entries("s")
        assert_chain(entries, 46)
        assert len({e.write_key for e in entries}) == 46
        await journal.close()

    asyncio.run(check())


# --- the fence (issue 18, R-01): the sole writer's plain INSERT is fenced too -----------------
# Decision: UNIQUE (saga_id, seq) with the takeover's conditional RUN_STARTED fences the plain
# INSERT across journals (it lands only on the tail its journal stored last, so a RUN_STARTED
# after that tail refuses it; one before it makes the takeover re-read). Within one journal
# object the remembered tail may be the taker's own RUN_STARTED: the INSERT then goes alone only
# when the tail shows the fence's own lease (sole_writer.SoleWriter.begin).

async def _start(journal: PostgresJournal, holder: str, saga: str = "f") -> int:
    entries = await journal.entries(saga)
    entry = await journal.append(saga, Phase.RUN_STARTED, write_key=f"run:{holder}",
                                 payload={"holder": holder},
                                 expected_seq=entries[-1].seq if entries else 0)
    return entry.seq


@pytest.mark.case("R-01")
async def test_takeover_before_the_sole_writers_insert_refuses_it(pg_uri, ways):
    from sagacity_agents.errors import LeaseLostError

    old, taker = await _journals(pg_uri, 2)
    try:
        fence = await _start(old, "a")
        await old.append("f", Phase.INTENT, write_key="i1", payload={}, fence=fence)
        await old.append("f", Phase.INTENT, write_key="i2", payload={}, fence=fence)
        assert ways()["i2"] is False  # the old holder is a sole writer
        await _start(taker, "b")
        with pytest.raises(LeaseLostError):
            await old.append("f", Phase.EXECUTED, write_key="o2", payload={}, fence=fence)
        entries = await old.entries("f")
        assert [e.write_key for e in entries] == ["run:a", "i1", "i2", "run:b"]
        verify_one(entries)
    finally:
        for journal in (old, taker):
            await journal.close()


@pytest.mark.case("R-01")
async def test_sole_writers_insert_before_the_takeover_makes_it_read_again(pg_uri, ways):
    old, taker = await _journals(pg_uri, 2)
    try:
        fence = await _start(old, "a")
        await old.append("f", Phase.INTENT, write_key="i1", payload={}, fence=fence)
        seen = await taker.entries("f")  # the taker decides on this tail...
        await old.append("f", Phase.EXECUTED, write_key="o1", payload={}, fence=fence)  # ...stale now
        assert ways()["o1"] is False
        with pytest.raises(JournalConflictError):
            await taker.append("f", Phase.RUN_STARTED, write_key="run:b", payload={"holder": "b"},
                               expected_seq=seen[-1].seq)
        assert [e.write_key for e in await old.entries("f")] == ["run:a", "i1", "o1"]
    finally:
        for journal in (old, taker):
            await journal.close()


@pytest.mark.case("R-01")
async def test_one_journal_object_shared_by_the_stale_and_the_new_holder(pg_uri, ways):
    """Both holders in one process on one journal: its remembered tail is the new holder's
    RUN_STARTED, so the stale holder's append must not go alone on it."""
    from sagacity_agents.errors import LeaseLostError

    (journal,) = await _journals(pg_uri, 1)
    try:
        fence = await _start(journal, "a")
        await journal.append("f", Phase.INTENT, write_key="i1", payload={}, fence=fence)
        second = await _start(journal, "b")
        with pytest.raises(LeaseLostError):
            await journal.append("f", Phase.EXECUTED, write_key="o1", payload={}, fence=fence)
        await journal.append("f", Phase.INTENT, write_key="i2", payload={}, fence=second)
        await journal.append("f", Phase.INTENT, write_key="i3", payload={}, fence=second)
        assert ways()["i3"] is False  # the new holder is the sole writer now
        await journal.append("f", Phase.RESOLVED, write_key="human", payload={})  # unfenced tail
        with pytest.raises(LeaseLostError):
            await journal.append("f", Phase.EXECUTED, write_key="o1", payload={}, fence=fence)
        assert ways()["human"] is False
        assert [e.write_key for e in await journal.entries("f")] == [
            "run:a", "i1", "run:b", "i2", "i3", "human"]
    finally:
        await journal.close()
