"""The SQLite journal's own sync of the ``-wal`` file (``backends/sqlite/journal.py``, module
notes): it must sync the file SQLite writes, and a failed sync must never be followed by an
answer that says "durable"."""

from __future__ import annotations

import errno
import os

import pytest

from sagacity_agents.backends import Phase, SqliteJournal
from sagacity_agents.errors import JournalWriteError


async def test_a_journal_opened_through_a_symlink_syncs_the_wal_sqlite_writes(tmp_path):
    """SQLite resolves a symlinked database path and keeps its ``-wal`` beside the real file:
    the journal must open (and sync) that one, not ``<link>-wal``, which does not exist (or is a
    stale file that would be synced in its place)."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").mkdir()
    os.symlink(tmp_path / "real" / "j.db", tmp_path / "link" / "j.db")
    journal = SqliteJournal(tmp_path / "link" / "j.db")
    try:
        await journal.append("s", Phase.INTENT, write_key="i", tool="t", call_id="c", payload={})
        wal = os.fstat(journal._wal_fd)
        real = os.stat(tmp_path / "real" / "j.db-wal")
        assert (wal.st_dev, wal.st_ino) == (real.st_dev, real.st_ino)
        assert not (tmp_path / "link" / "j.db-wal").exists()
    finally:
        await journal.close()


async def test_after_a_failed_sync_no_append_is_answered_as_durable(tmp_path, monkeypatch):
    """Linux reports a failed writeback once (to the next fsync of the file) and may drop the
    unwritten pages: a later ``fdatasync`` succeeds though the commit never reached the disk.
    A retry of the INTENT (``core.saga.calls`` retries once, same write key) finds it stored and
    syncs again: it must not be answered "durable" (the body would run), nor may any later
    append, whose WAL frames follow the lost ones (a power cut loses them all)."""
    journal = SqliteJournal(tmp_path / "j.db")
    real_sync = os.fdatasync
    failures = [OSError(errno.EIO, "Input/output error")]

    def failing_once(fd: int) -> None:
        if fd == journal._wal_fd and failures:
            raise failures.pop()
        real_sync(fd)

    try:
        await journal.append("s", Phase.INTENT, write_key="i0", tool="t", call_id="c0", payload={})
        monkeypatch.setattr(os, "fdatasync", failing_once)
        intent = dict(write_key="i1", tool="t", call_id="c1", payload={})
        with pytest.raises(JournalWriteError, match="sync"):
            await journal.append("s", Phase.INTENT, **intent)
        assert not failures  # the injected failure was met
        with pytest.raises(JournalWriteError):
            await journal.append("s", Phase.INTENT, **intent)  # the saga's retry
        with pytest.raises(JournalWriteError):
            await journal.append("s", Phase.INTENT, write_key="i2", tool="t", call_id="c2",
                                 payload={})
        with pytest.raises(JournalWriteError):
            await journal.append("s", Phase.EXECUTED, write_key="o0", tool="t", call_id="c0",
                                 payload={"intent_seq": 1})  # lazy, from the loop
    finally:
        await journal.close()


async def test_without_fdatasync_the_wal_is_fsynced(tmp_path, monkeypatch):
    """macOS has no ``os.fdatasync``: a durable commit must still sync the ``-wal`` (with
    ``fsync``, as SQLite's own FULL commit does there), not fail every INTENT with an
    ``AttributeError``."""
    journal = SqliteJournal(tmp_path / "j.db")
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    try:
        monkeypatch.delattr(os, "fdatasync")
        monkeypatch.setattr(os, "fsync", fsync)
        await journal.append("s", Phase.INTENT, write_key="i", tool="t", call_id="c", payload={})
        assert journal._wal_fd in synced
    finally:
        await journal.close()


async def test_a_relative_path_is_watched_after_a_chdir(tmp_path, monkeypatch):
    """A journal opened by a relative path keeps checking the file it opened (``_check_file``)
    after the process changes directory: it must neither refuse sound writes (the relative
    name now points nowhere) nor miss the real file being deleted."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    journal = SqliteJournal("j.db")
    try:
        monkeypatch.chdir(tmp_path / "b")
        await journal.append("s", Phase.INTENT, write_key="i0", tool="t", call_id="c", payload={})
        os.remove(tmp_path / "a" / "j.db-wal")
        with pytest.raises(JournalWriteError, match="changed under this process"):
            await journal.append("s", Phase.INTENT, write_key="i1", tool="t", call_id="c1",
                                 payload={})
    finally:
        await journal.close()
