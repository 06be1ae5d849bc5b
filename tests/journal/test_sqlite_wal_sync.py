"""The SQLite journal's own sync of the ``-wal`` file (``backends/sqlite/journal.py``, module
notes): it must sync the file SQLite writes, and a failed sync must never be followed by an
answer that says "durable"."""

from __future__ import annotations

import os


from sagacity_agents import Phase, SqliteJournal


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
