"""Opening an embedded SQLite file the same way for every store that lives in it, and the one
I/O thread each store object runs its SQLite work on."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from ...errors import ConfigurationError, JournalError, JournalWriteError

__all__ = ["SCHEMA_VERSION", "SqliteWorker", "open_sqlite"]

SCHEMA_VERSION = 3
"""The layout of the sagacity tables in a SQLite file, kept in ``PRAGMA user_version``: 2 adds
the journal's id (``sagacity_meta``), 3 the entries' ``sealed`` column (added to an older file by
``ALTER TABLE ... ADD COLUMN`` when the journal opens it) and the ``sagacity_data_keys`` table. A file at 0 holding sagacity tables was written before
versions (version 1) and is upgraded in place; a file with a higher version than this is refused
(docs/postgres.md, "Schema versions": older code never uses a newer schema)."""

T = TypeVar("T")

_FILE_SUFFIXES = ("", "-wal", "-shm")
"""The database file and the two files WAL mode keeps beside it while a connection is open."""


def _file_ids(path: str) -> tuple[tuple[int, int] | None, ...]:
    """(device, inode) of the database file and its ``-wal`` / ``-shm`` files; None if missing."""
    ids: list[tuple[int, int] | None] = []
    for suffix in _FILE_SUFFIXES:
        try:
            st = os.stat(path + suffix)
        except FileNotFoundError:
            ids.append(None)
        else:
            ids.append((st.st_dev, st.st_ino))
    return tuple(ids)


def _check_file_schema(conn: sqlite3.Connection, path: str, allow_foreign_tables: bool) -> None:
    """Refuse a file whose schema version is newer than this code's, or a file holding other
    tables and none of ours unless ``allow_foreign_tables``.

    Raises:
        JournalError: the file's ``user_version`` is above :data:`SCHEMA_VERSION`.
        ConfigurationError: other tables and no sagacity table, not allowed.
    """
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise JournalError(
            f"SQLite file {path!r} has sagacity schema version {version}; this version of "
            f"sagacity-agents knows {SCHEMA_VERSION}: a newer version wrote it, and older code "
            "never uses a newer schema. Upgrade sagacity-agents")
    tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    ours = [t for t in tables if t.startswith("sagacity_")]
    foreign = sorted(t for t in tables if not t.startswith(("sagacity_", "sqlite_")))
    if foreign and not ours and not allow_foreign_tables:
        raise ConfigurationError(
            f"SQLite file {path!r} holds other tables ({', '.join(foreign[:5])}"
            f"{', ...' if len(foreign) > 5 else ''}) and no sagacity table: not creating the "
            "journal's tables in another application's database. Use a file of its own, or "
            "pass allow_foreign_tables=True to share this one")


def _set_version(conn: sqlite3.Connection) -> None:
    """Record :data:`SCHEMA_VERSION` in the file (an older file's tables were just upgraded)."""
    if int(conn.execute("PRAGMA user_version").fetchone()[0]) < SCHEMA_VERSION:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def open_sqlite(path: str, schema: str, *, busy_timeout: float, synchronous: str, what: str,
                shared: bool = False, allow_foreign_tables: bool = False) -> sqlite3.Connection:
    """Open ``path`` in WAL mode with ``synchronous`` and apply the package schema file ``schema``.

    Several processes may open a new file at the same instant; switching it to WAL and creating
    tables then contends for the write lock, and SQLite's busy handler does not cover the journal
    mode change. Setup is therefore retried (backoff 10 ms doubling to 200 ms) until
    ``busy_timeout`` seconds have passed.

    Args:
        path: the database file.
        schema: file name under ``sagacity_agents/backends/sqlite/sql/``.
        busy_timeout: seconds to wait for other writers (also set as SQLite's busy timeout).
        synchronous: the ``synchronous`` pragma value (already validated).
        what: what is being opened, for the error message.
        shared: the connection may be used from other threads than the one opening it (the
            caller serializes every use itself; ``SqliteWorker``'s connection lock).
        allow_foreign_tables: create the tables in a file that holds other tables.

    Raises:
        JournalError: the file cannot be opened or initialised in time, or its schema version
            is newer than this code's (:data:`SCHEMA_VERSION`).
        ConfigurationError: the file holds other tables, not allowed.
    """
    script = resources.files("sagacity_agents.backends.sqlite").joinpath(f"sql/{schema}").read_text("utf-8")
    deadline = time.monotonic() + busy_timeout
    delay = 0.01
    while True:
        conn = None
        try:
            conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None,
                                   check_same_thread=not shared)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={synchronous}")
            conn.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
            _check_file_schema(conn, path, allow_foreign_tables)
            conn.executescript(script)
            _set_version(conn)
            return conn
        except sqlite3.OperationalError as exc:
            if conn is not None:
                conn.close()
            if "locked" in str(exc) and time.monotonic() < deadline:
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
                continue
            raise JournalError(f"cannot open {what} {path!r}: {exc}") from exc
        except sqlite3.Error as exc:
            if conn is not None:
                conn.close()
            raise JournalError(f"cannot open {what} {path!r}: {exc}") from exc
        except (JournalError, ConfigurationError):
            if conn is not None:
                conn.close()
            raise


class SqliteWorker:
    """One SQLite connection on one dedicated thread; the event loop only awaits it. Base of the
    SQLite journal and approval store.

    With ``shared``, other threads may use the connection too (the journal's direct writes from
    a sync tool's worker thread, ``backends.sqlite.writer``), one at a time: every use holds
    :attr:`_conn_lock`, so a read never runs inside another thread's open write transaction.

    Args:
        path: database file (created if missing, with the schema). ``":memory:"`` is private to
            this object.
        schema: the package schema file to apply (``backends/sqlite/sql/NAME``).
        what: what this store is, for messages ("SQLite journal").
        busy_timeout: seconds to wait for another process's write lock before failing.
        synchronous: SQLite ``synchronous`` pragma: ``"FULL"``, ``"NORMAL"`` or ``"EXTRA"``.
        shared: open the connection for use from other threads as well (see above).
        allow_foreign_tables: create the tables in a file that holds other tables (refused by
            default: ``open_sqlite``).

    Raises:
        JournalError: the file cannot be opened or initialised.
        ValueError: an unknown ``synchronous`` value.
    """

    def __init__(
        self, path: str | Path, *, schema: str, what: str, busy_timeout: float, synchronous: str,
        shared: bool = False, allow_foreign_tables: bool = False,
    ) -> None:
        if synchronous.upper() not in {"FULL", "NORMAL", "EXTRA"}:
            raise ValueError("synchronous must be FULL, NORMAL or EXTRA")
        self.path = str(path)
        self._what = what
        self._closed = False
        self._connection: sqlite3.Connection | None = None
        self._conn_lock = threading.RLock()
        """Held by every use of the connection (one thread at a time; see the class notes)."""
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sagacity-sqlite")
        mode = synchronous.upper()
        self._synchronous = mode
        self._busy_seconds = busy_timeout

        self._file_ids: tuple[tuple[int, int] | None, ...] | None = None
        self._file_path = self.path
        """The database file as SQLite opened it (absolute, symlinks resolved): what
        ``_check_file`` watches, whatever the process's working directory is later."""
        self._lost: str | None = None

        def connect() -> None:
            self._connection = open_sqlite(
                self.path, schema, busy_timeout=busy_timeout, synchronous=mode, what=what,
                shared=shared, allow_foreign_tables=allow_foreign_tables,
            )
            if self.path != ":memory:" and not self.path.startswith("file:"):
                # Applying the schema ran a write transaction: the -wal and -shm files exist now,
                # and stay while this connection is open (SQLite removes them only when the last
                # connection closes, and this one is open). Watched by the path SQLite reports,
                # not ``self.path``: a relative path would name another file after a chdir.
                self._file_path = next(row[2] for row in self._conn.execute("PRAGMA database_list")
                                       if row[1] == "main")
                self._file_ids = _file_ids(self._file_path)

        try:
            self._executor.submit(connect).result()
        except BaseException:
            self._executor.shutdown(wait=False)
            raise

    @property
    def _conn(self) -> sqlite3.Connection:
        """The connection (on the worker thread; on others only when ``shared``, holding
        :attr:`_conn_lock`)."""
        return self._connection  # type: ignore[return-value]

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the worker thread; driver errors become :class:`JournalError`."""
        self._refuse_closed()
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, self._on_same_file, fn, args)
        except sqlite3.Error as exc:
            raise JournalError(f"{self._what} {self.path!r}: {exc}") from exc

    def _refuse_closed(self) -> None:
        """Raises:
            JournalError: this store is closed."""
        if self._closed:
            raise JournalError(f"{self._what} {self.path!r} is closed")

    def _check_file(self) -> None:
        """Refuse to write when the database file, or its ``-wal`` / ``-shm`` file, was deleted
        or replaced since this object opened it (called on the worker thread after every
        operation: three ``os.stat`` calls, a few microseconds; see bench/overhead.py).

        An open connection keeps writing into a deleted file without error, and a WAL file
        deleted under it takes every later commit with it: the writes would "succeed" into
        nothing. Once noticed, the store stays refused (nothing it writes can be trusted to land).

        Raises:
            JournalWriteError: the file is gone or is another file now.
        """
        if self._file_ids is None:
            return
        if self._lost is None:
            now = _file_ids(self._file_path)
            if now != self._file_ids:
                changed = [
                    f"{os.path.basename(self.path) + suffix} "
                    + ("deleted" if new is None else "replaced")
                    for suffix, old, new in zip(_FILE_SUFFIXES, self._file_ids, now, strict=True)
                    if old != new
                ]
                self._lost = ", ".join(changed)
        if self._lost is not None:
            raise JournalWriteError(
                f"{self._what} {self.path!r}: the file was changed under this process "
                f"({self._lost}); writes since then may be lost, nothing more is written here. "
                "Restore the file from a backup or investigate before going on."
            )

    def _on_same_file(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        # Checked after the operation: a file deleted or replaced before or during it means the
        # write went nowhere, so the caller must not count on it (an INTENT: the body does not
        # run). Once noticed, every later operation is refused before it starts.
        with self._conn_lock:
            return self._locked_on_same_file(fn, args)

    def _locked_on_same_file(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        if self._lost is not None:
            self._check_file()
        deadline = None
        while True:
            try:
                result = fn(*args)
                break
            except sqlite3.OperationalError as exc:
                # A read that met a lock (rare in WAL mode; the journal's connection leaves lock
                # waits to its own code): tried again in short steps up to the busy timeout.
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                deadline = deadline or time.monotonic() + self._busy_seconds
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.001)
        self._check_file()
        return result

    def _close_sync(self) -> None:
        with self._conn_lock:
            conn, self._connection = self._connection, None
            if conn is not None:
                conn.close()

    async def close(self) -> None:
        """Close the connection and stop the worker thread. Idempotent.

        Awaited, not blocked on: closing the connection may checkpoint the WAL (milliseconds to
        seconds for a large one), and the event loop's other tasks keep running meanwhile. The
        worker thread runs its queued work first (one thread, in order), so when this returns
        every append handed to it before ``close`` has finished.
        """
        if self._closed:
            return
        self._closed = True
        await asyncio.wrap_future(self._executor.submit(self._close_sync))
        self._executor.shutdown(wait=True)  # its last task is done: this only joins the thread

    def execute_sql(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run raw SQL on the worker thread (tests and tamper demonstrations; not for apps)."""
        def run() -> list[tuple[Any, ...]]:
            with self._conn_lock:
                return self._conn.execute(sql, params).fetchall()

        return self._executor.submit(run).result()
