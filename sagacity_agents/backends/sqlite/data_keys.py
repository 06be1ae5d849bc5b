"""The SQLite journal's data-key store (``core.data_keys.DataKeyStore``): the sagas' wrapped data
keys in the ``sagacity_data_keys`` table of the journal's file, written on the journal's own
connection and thread.

An erasure must take the key's bytes out of the file and its ``-wal`` (crypto-shredding): the
DELETE runs under ``PRAGMA secure_delete=ON`` (SQLite overwrites the deleted content and freed
pages with zeros instead of leaving them in free space), the commit is synced, and
``PRAGMA wal_checkpoint(TRUNCATE)`` then copies the zeroed pages into the database file and
truncates the ``-wal`` to zero bytes (the WAL's older frames held the page with the key). The
checkpoint needs no reader to be in the middle of a read of an older snapshot; it is tried again
in short steps up to the journal's busy timeout. What the filesystem, the disk or a backup kept
of earlier writes is outside this (docs/sensitive-data.md).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import Any

from ...core.data_keys import StoredDataKey
from ...core.journal import utc_stamp
from ...errors import JournalError, JournalWriteError
from ..data_key_rows import KEY_COLUMNS, check_erasure, check_new_key, key_from_row

__all__ = ["SqliteDataKeys"]

_KEY_COLUMNS = ", ".join(KEY_COLUMNS)
_INSERT = f"INSERT INTO sagacity_data_keys ({_KEY_COLUMNS}) VALUES (?,?,?,?,?,?,?,?)"
_OF_SAGA = f"SELECT {_KEY_COLUMNS} FROM sagacity_data_keys WHERE saga_id = ? ORDER BY generation"
_ONE = f"SELECT {_KEY_COLUMNS} FROM sagacity_data_keys WHERE saga_id = ? AND generation = ?"
_LIVE = (f"SELECT {_KEY_COLUMNS} FROM sagacity_data_keys WHERE saga_id = ? AND wrapped IS NOT NULL "
         "ORDER BY generation")


class SqliteDataKeys:
    """The data-key methods of ``SqliteJournal`` (a mixin: they use its connection, its lock
    wait, its WAL sync and its worker thread)."""

    _conn: sqlite3.Connection
    _busy_timeout: float
    _sync_failed: str | None
    _wal_restarts: bool
    _run: Callable[..., Any]
    _begin_write: Callable[[sqlite3.Connection, str], None]
    _sync_wal: Callable[[], None]

    async def data_keys(self, saga_id: str) -> list[StoredDataKey]:
        """The saga's data keys, every generation (tombstones included), ascending.

        Raises:
            JournalError: the file could not be read.
        """

        def read() -> list[StoredDataKey]:
            return [key_from_row(r) for r in self._conn.execute(_OF_SAGA, (saga_id,)).fetchall()]

        return await self._run(read)  # type: ignore[no-any-return]

    async def add_data_key(self, saga_id: str, generation: int, master_key_id: str,
                           wrapped: bytes) -> StoredDataKey:
        """Store a generation of the saga's wrapped data key unless one is stored, in one
        ``BEGIN IMMEDIATE`` transaction, synced to disk before returning; return the stored row
        (ours, a concurrent writer's, or a tombstone).

        Raises:
            TypeError, ValueError: see ``backends.data_key_rows.check_new_key``.
            JournalError: the file could not be written or synced.
        """
        check_new_key(saga_id, generation, master_key_id, wrapped)
        row = (saga_id, generation, master_key_id, wrapped, utc_stamp(), None, None, None)

        def write(conn: sqlite3.Connection) -> StoredDataKey:
            conn.execute(_INSERT.replace("INSERT", "INSERT OR IGNORE", 1), row)
            return key_from_row(conn.execute(_ONE, (saga_id, generation)).fetchone())

        return await self._run(self._key_write, saga_id, write, False)  # type: ignore[no-any-return]

    async def may_erase_data_keys(self) -> bool:
        """On SQLite whoever can write the file may erase (docs/sensitive-data.md); a read-only
        file is refused when the erasure's access-log entry is written, before anything is
        erased (``core.data_keys.DataKeyStore``)."""
        return True

    async def erase_data_keys(self, saga_id: str, *, by: str, reason: str) -> int:
        """Delete the wrapped bytes of every generation of the saga for good (module notes:
        ``secure_delete``, a synced commit, ``wal_checkpoint(TRUNCATE)``), leaving one tombstone
        per generation (``wrapped`` NULL; when, who, why). Whoever can write the file can erase.

        Returns:
            The generations that held bytes (0: none; the checkpoint runs anyway, so a retry
            after a checkpoint that could not finish finishes it).

        Raises:
            TypeError, ValueError: see ``backends.data_key_rows.check_erasure``.
            JournalError: the file could not be written, or the ``-wal`` could not be truncated
                within the busy timeout (the erasure is committed; the WAL may still hold the
                bytes until a checkpoint: erase again).
        """
        check_erasure(saga_id, by, reason)
        now = utc_stamp()

        def write(conn: sqlite3.Connection) -> int:
            live = [key_from_row(r) for r in conn.execute(_LIVE, (saga_id,))]
            conn.execute("DELETE FROM sagacity_data_keys WHERE saga_id = ? AND wrapped IS NOT NULL",
                         (saga_id,))
            conn.executemany(_INSERT, [(k.saga_id, k.generation, k.master_key_id, None,
                                        k.created_at, now, by, reason) for k in live])
            return len(live)

        return await self._run(self._key_write, saga_id, write, True)  # type: ignore[no-any-return]

    async def rewrap_data_keys(self, rewrap: Callable[[StoredDataKey], tuple[str, bytes]]) -> int:
        """Replace every stored wrapped key by ``rewrap(key)`` = ``(master_key_id, wrapped)``
        (master-key rotation) in one transaction: all of them, or none when ``rewrap`` raises.
        The old wrapped bytes are overwritten as an erasure's are (``secure_delete``, the WAL
        truncated): a retired master key then opens nothing left in the file.

        Returns:
            The keys rewritten (tombstones are left alone).

        Raises:
            JournalError: the file could not be written. What ``rewrap`` raises (nothing changed).
        """

        def write(conn: sqlite3.Connection) -> int:
            live = [key_from_row(r) for r in conn.execute(
                f"SELECT {_KEY_COLUMNS} FROM sagacity_data_keys WHERE wrapped IS NOT NULL")]
            for key in live:
                master, wrapped = rewrap(key)
                check_new_key(key.saga_id, key.generation, master, wrapped)
                conn.execute("UPDATE sagacity_data_keys SET master_key_id = ?, wrapped = ? "
                             "WHERE saga_id = ? AND generation = ?",
                             (master, wrapped, key.saga_id, key.generation))
            return len(live)

        return await self._run(self._key_write, "(every saga)", write, True)  # type: ignore[no-any-return]

    def _key_write(self, saga_id: str, write: Callable[[sqlite3.Connection], Any], shred: bool) -> Any:
        """Run ``write`` in a ``BEGIN IMMEDIATE`` transaction on the journal's connection (under
        its lock, on its thread), commit, sync the ``-wal``; with ``shred``, under
        ``secure_delete`` and followed by the truncating checkpoint (module notes).

        Raises:
            JournalWriteError: an earlier sync failed, the lock was not free in time, the sync
                or the checkpoint failed. What ``write`` raises (rolled back).
        """
        if self._sync_failed is not None:
            raise JournalWriteError(f"data key write refused: an earlier sync to disk failed "
                                    f"({self._sync_failed}); reopen the journal after checking the storage")
        conn = self._conn
        before = conn.execute("PRAGMA secure_delete").fetchone()[0]
        if shred:
            conn.execute("PRAGMA secure_delete = ON")
        try:
            self._begin_write(conn, saga_id)
            try:
                result = write(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        finally:
            if shred:
                conn.execute(f"PRAGMA secure_delete = {int(before)}")
        try:
            self._sync_wal()
        except OSError as exc:
            self._sync_failed = str(exc)
            raise JournalWriteError(f"data key of saga {saga_id!r}: committed, but the sync to "
                                    f"disk failed ({exc}): its durability is unknown") from exc
        if shred:
            self._truncate_wal(saga_id)
        return result

    def _truncate_wal(self, saga_id: str) -> None:
        """``PRAGMA wal_checkpoint(TRUNCATE)``, tried again in short steps while another
        connection's read or write keeps it from finishing, up to the busy timeout.

        Raises:
            JournalError: it did not finish in time.
        """
        deadline = time.monotonic() + self._busy_timeout
        while True:
            try:
                busy = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                busy = 1
            if not busy:
                self._wal_restarts = True  # the next commit starts the WAL again (journal notes)
                return
            if time.monotonic() >= deadline:
                raise JournalError(
                    f"erasure of saga {saga_id!r} is committed, but the -wal file could not be "
                    f"truncated within {self._busy_timeout} s (another connection kept reading "
                    "an older snapshot): it may still hold the erased bytes; erase again")
            time.sleep(0.005)
