"""E-06: a SQLite journal (or approval store) whose file, ``-wal`` or ``-shm`` is deleted or
replaced while it is open refuses to go on with :class:`JournalWriteError`, instead of writing
into a file nobody will ever read again.

SQLite only, nothing to port: the case is a file deleted or replaced under an open connection,
and a PostgreSQL client holds no file. Its counterpart there, rows deleted with SQL, is the tamper
matrix's truncate and delete-saga cases, run on both backends and caught through signed
checkpoints (test_tamper_matrix.py)."""

from __future__ import annotations

import os
import shutil
import sqlite3

import pytest
from agents import function_tool

from sagacity_agents import Sagacity, compensable
from sagacity_agents.backends import Phase, SqliteApprovalStore, SqliteJournal
from sagacity_agents.errors import JournalWriteError

from ..sdk.helpers import agent, scripted

pytestmark = pytest.mark.case("E-06")

SUFFIXES = ("", "-wal", "-shm")


def delete(path: str, which: tuple[str, ...]) -> None:
    for suffix in which:
        os.remove(path + suffix)


@pytest.mark.parametrize("which", [SUFFIXES, ("",), ("-wal",), ("-shm",)], ids=["all", "db", "wal", "shm"])
async def test_deleted_files_refuse_the_next_append(tmp_path, which):
    path = str(tmp_path / "j.db")
    journal = SqliteJournal(path)
    try:
        await journal.append("s", Phase.SAGA_OPENED, write_key="saga:open", payload={})
        delete(path, which)
        with pytest.raises(JournalWriteError, match="deleted"):
            await journal.append("s", Phase.RUN_STARTED, write_key="run", payload={})
        with pytest.raises(JournalWriteError):  # stays refused
            await journal.append("s", Phase.RUN_STARTED, write_key="run2", payload={})
    finally:
        await journal.close()


async def test_replaced_file_refuses_the_next_append(tmp_path):
    path = str(tmp_path / "j.db")
    journal = SqliteJournal(path)
    try:
        await journal.append("s", Phase.SAGA_OPENED, write_key="saga:open", payload={})
        other = str(tmp_path / "other.db")
        sqlite3.connect(other).close()
        shutil.copy(other, path + ".new")
        os.replace(path + ".new", path)
        with pytest.raises(JournalWriteError, match="replaced"):
            await journal.entries("s")
    finally:
        await journal.close()


async def test_approval_store_notices_a_deleted_file_too(tmp_path):
    path = str(tmp_path / "a.db")
    store = SqliteApprovalStore(path)
    try:
        await store.save_snapshot("s", "{}")
        delete(path, SUFFIXES)
        with pytest.raises(JournalWriteError, match="SQLite approval store"):
            await store.save_snapshot("s", "{}")
    finally:
        await store.close()


async def test_journal_deleted_mid_run_is_not_a_clean_compensation(tmp_path):
    """E-06: db, -wal and -shm deleted by a tool body mid-run: the next INTENT fails (the next
    tool does not run) and the run raises JournalWriteError naming the deleted files (today:
    COMPENSATED with no error, the journal gone). The hotel is not undone: an undo runs only
    after its COMPENSATING entry is journaled, and there is no journal left to write it to."""
    path = str(tmp_path / "j.db")
    world: list[str] = []

    @function_tool
    @compensable(undo=lambda ctx: world.remove(ctx.args["city"]))
    async def book_hotel(city: str) -> str:
        world.append(city)
        delete(path, SUFFIXES)
        return "booked"

    @function_tool
    @compensable(undo=lambda ctx: None)
    async def charge(amount: int) -> str:
        world.append("charged")
        return "ok"

    model = scripted([("book_hotel", {"city": "Porto"}, "1")], [("charge", {"amount": 80}, "2")], "done")
    journal = SqliteJournal(path)
    try:
        with pytest.raises(JournalWriteError, match=r"j\.db deleted, j\.db-wal deleted, j\.db-shm deleted"):
            await Sagacity(journal).run(agent(model, book_hotel, charge), "go")
    finally:
        await journal.close()
    assert world == ["Porto"]
