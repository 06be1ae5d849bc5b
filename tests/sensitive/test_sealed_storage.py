"""Sealed values are stored with their entry, outside its hashed bytes, on every backend: every
insert path (memory; SQLite's group commit, blocking append and batch; PostgreSQL's sole writer,
locked function and batch) stores ``AppendRequest.sealed`` in the entry's ``sealed`` column, every
read that builds entries gives it back, a retry of the write returns the stored bytes, and the
hashed bytes are the same as without them, byte for byte, on each backend. An older SQLite file
(schema version 2) gets the column when opened and still verifies."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3

import pytest

from sagacity_agents.backends import InMemoryJournal, SqliteJournal
from sagacity_agents.backends.sqlite.setup import SCHEMA_VERSION
from sagacity_agents.core.entries import CHAIN_COLUMNS, Phase
from sagacity_agents.core.evidence import Evidence, verify_sagas
from sagacity_agents.core.journal import AppendRequest, capabilities_of
from sagacity_agents.core.reads import read_saga_rows
from sagacity_agents.testing import FrozenClock
from tests.test_backend_contracts import backend, location  # noqa: F401 - the fixtures: each backend

pytestmark = pytest.mark.case("X-02")

SEALED = {"open": b'{"v":1,"key":1,"values":{}}', "intent": b"\x00sealed\xffintent", "exec": b"exec"}


def request_of(phase: Phase, key: str, sealed: bytes | None, **fields) -> AppendRequest:
    """The request of an append whose values were sealed into ``sealed`` (what
    ``AppendRequest.build(..., protect=...)`` makes; any bytes will do for the storage)."""
    return dataclasses.replace(AppendRequest.build("s", phase, write_key=key, payload={"k": key}, **fields),
                               sealed=sealed)


async def write_every_way(journal) -> None:
    """The saga written through each insert path the backend has: a single append (PostgreSQL:
    the locked function, no tail known yet), the next one (PostgreSQL: the sole writer's plain
    INSERT), a batch, and a blocking append where there is one; sealed and unsealed entries."""
    await journal.append(request_of(Phase.SAGA_OPENED, "open", SEALED["open"]))
    await journal.append(request_of(Phase.INTENT, "intent", SEALED["intent"], tool="t", call_id="c"))
    batch = [request_of(Phase.EXECUTED, "exec", SEALED["exec"], tool="t", call_id="c"),
             request_of(Phase.LEASE_RENEWED, "plain", None)]
    if capabilities_of(journal).batch_append:
        await journal.append_many(batch)
    else:
        for request in batch:
            await journal.append(request)
    last = request_of(Phase.RUN_ENDED, "sync", b"sync")
    if capabilities_of(journal).sync_append:
        await asyncio.to_thread(journal.append_sync, last)
    else:
        await journal.append(last)


EXPECTED = {"open": SEALED["open"], "intent": SEALED["intent"], "exec": SEALED["exec"], "plain": None,
            "sync": b"sync"}


async def test_every_insert_path_stores_the_sealed_bytes_and_every_read_gives_them_back(backend, location):
    journal = backend.journal(location, clock=FrozenClock(tick=0.001))
    try:
        await write_every_way(journal)
        entries = await journal.entries("s")
        assert {e.write_key: e.sealed for e in entries} == EXPECTED
        assert all(type(e.sealed) is bytes for e in entries if e.sealed is not None)
        assert (await journal.tail("s")).sealed == b"sync"
        if capabilities_of(journal).entries_many:
            assert {e.write_key: e.sealed for e in (await journal.entries_many(["s"]))["s"]} == EXPECTED
        (summary,) = await journal.saga_summaries()
        assert (summary.first.sealed, summary.last.sealed) == (SEALED["open"], b"sync")
    finally:
        await journal.close()
    reopened = backend.journal(location)
    try:
        assert {e.write_key: e.sealed for e in await reopened.entries("s")} == EXPECTED \
            or backend.name == "memory"
    finally:
        await reopened.close()


async def test_the_hashed_bytes_are_the_same_with_or_without_sealed_values_on_every_backend(backend, location):
    """Sealed values are outside the hash: the same appends with the same clock give the same
    canonical bytes and hashes as an in-memory journal given no sealed values at all."""
    reference = InMemoryJournal(clock=FrozenClock(tick=0.001))
    for phase, key in ((Phase.SAGA_OPENED, "open"), (Phase.INTENT, "intent")):
        await reference.append(AppendRequest.build("s", phase, write_key=key, payload={"k": key},
                                                   **({"tool": "t", "call_id": "c"} if key == "intent" else {})))
    journal = backend.journal(location, clock=FrozenClock(tick=0.001))
    try:
        await journal.append(request_of(Phase.SAGA_OPENED, "open", SEALED["open"]))
        await journal.append(request_of(Phase.INTENT, "intent", SEALED["intent"], tool="t", call_id="c"))
        stored = await journal.entries("s")
        assert [(e.canonical, e.hash) for e in stored] == \
            [(e.canonical, e.hash) for e in await reference.entries("s")]
        assert b"sealed" not in b"".join(e.canonical for e in stored)
        (result,) = await verify_sagas(journal, evidence=Evidence())
        assert result.ok and result.entries == 2
    finally:
        await journal.close()


async def test_verify_reads_rows_without_the_sealed_column(backend, location):
    """``verify``'s read-speed path reads the chain's columns only (no sealed bytes fetched)."""
    journal = backend.journal(location)
    try:
        await write_every_way(journal)
        if capabilities_of(journal).rows_read:
            async for _, rows in read_saga_rows(journal, ["s"]):
                assert {len(row) for row in rows} == {len(CHAIN_COLUMNS)}
        results = await verify_sagas(journal, evidence=Evidence())
        assert [(r.saga_id, r.ok, r.entries) for r in results] == [("s", True, 5)]
    finally:
        await journal.close()


async def test_a_retry_returns_the_stored_entry_with_its_sealed_bytes(backend, location):
    """A retry under the same write key (its values sealed again, under fresh nonces: other
    bytes) gets the stored entry and the stored sealed bytes; from another journal object too
    (PostgreSQL: the locked function's "exists" answer; SQLite: another connection)."""
    journal = backend.journal(location)
    try:
        first = await journal.append(request_of(Phase.SAGA_OPENED, "open", b"first"))
        again = await journal.append(request_of(Phase.SAGA_OPENED, "open", b"second"))
        assert again == first and again.sealed == b"first"
        none = await journal.append(request_of(Phase.INTENT, "intent", None, tool="t", call_id="c"))
        assert (await journal.append(request_of(Phase.INTENT, "intent", b"late", tool="t", call_id="c"))).sealed is None
        assert none.sealed is None
        if backend.name != "memory":
            other = backend.journal(location)
            try:
                replay = await other.append(request_of(Phase.SAGA_OPENED, "open", b"third"))
                assert replay.sealed == b"first" and replay.hash == first.hash
                if capabilities_of(other).batch_append:
                    (batched,) = await other.append_many([request_of(Phase.SAGA_OPENED, "open", b"4th")])
                    assert batched.sealed == b"first"
            finally:
                await other.close()
    finally:
        await journal.close()


def _downgrade_to_version_2(path) -> None:
    """The file as the previous release (schema version 2) left it: no sealed column, no
    data-key table."""
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE sagacity_journal DROP COLUMN sealed")
        conn.execute("DROP TABLE sagacity_data_keys")
        conn.execute("PRAGMA user_version = 2")


async def test_a_version_2_sqlite_file_gets_the_column_on_open_and_resumes(tmp_path):
    path = tmp_path / "v2.db"
    journal = SqliteJournal(path)
    await journal.append(request_of(Phase.SAGA_OPENED, "open", None))
    await journal.close()
    _downgrade_to_version_2(path)
    with sqlite3.connect(path) as conn:
        assert "sealed" not in {row[1] for row in conn.execute("PRAGMA table_info(sagacity_journal)")}

    journal = SqliteJournal(path)
    try:
        (old,) = await journal.entries("s")
        assert old.sealed is None
        new = await journal.append(request_of(Phase.INTENT, "intent", b"sealed", tool="t", call_id="c"))
        assert new.sealed == b"sealed" and new.prev_hash == old.hash
        assert await journal.add_data_key("s", 1, "k" * 16, b"wrapped") is not None
        (result,) = await verify_sagas(journal, evidence=Evidence())
        assert result.ok and result.entries == 2
    finally:
        await journal.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,) == (3,)
        assert conn.execute("SELECT sealed FROM sagacity_journal ORDER BY seq").fetchall() == [(None,), (b"sealed",)]
