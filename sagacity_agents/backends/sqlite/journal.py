"""The SQLite journal: the embedded default. One file, WAL mode, safe for several processes.

Ordering: every append runs ``BEGIN IMMEDIATE``, which takes SQLite's single write lock for the
whole file before the tail is read, so the read-tail/insert pair is serialized across threads
and processes alike: no gap, no duplicate ``seq``, no retry loop. With ``synchronous=FULL`` (the
default) a commit that must be durable is on disk before ``append`` returns, so an INTENT is on
disk before the tool body starts; a call's outcome, SAGA_OPENED and RUN_STARTED commit without
syncing and the next durable commit covers them (``core.journal.lazy_phases``; opt out with
``durable_outcomes=True``). Batches (``append_many``) are one transaction, one commit.

How: the connection runs ``synchronous=NORMAL``, under which a WAL commit writes its frames
without syncing and every checkpoint syncs (the WAL before it is copied, the database file
after); a durable commit is followed by ``fdatasync`` of the ``-wal`` file, before the append
returns. That is exactly what ``synchronous=FULL`` adds to NORMAL in WAL mode (sqlite.org,
"PRAGMA synchronous": FULL syncs the WAL after each transaction commit), done by us only for the
commits that need it, with no pragma switched per commit. SQLite's automatic checkpoint is off on
this connection (it would run, syncing, inside whichever commit crosses its threshold, the
event loop's lazy ones included): the journal checkpoints after a durable commit, on the thread
that made it, once about as many pages were written as SQLite's default threshold (1,000).

SQLite work runs on one dedicated thread per journal object, which the event loop awaits; a
sync tool's worker thread writes its own appends on the same connection (held under the
connection's lock), and the loop writes a lazy append itself when nobody else is writing
(``writer``: no thread hop for either).
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from typing import Any

from ...errors import JournalWriteError
from ...core.entries import CHAIN_COLUMNS, STORED_COLUMNS, JournalEntry, Phase
from ...core.identity import new_journal_id
from ...core.journal import (
    AppendRequest, Clock, SagaSummary, Tail, append_locked, as_request, as_requests, check_page,
    lazy_phases, utc_now,
)
from .data_keys import SqliteDataKeys
from .setup import SqliteWorker
from .writer import Answer, Busy, GroupWriter, Pending

__all__ = ["SqliteJournal"]


# Errors of one entry's own statement (a value SQLite cannot bind or store: too big for the
# file's length limit, say), which SQLite undoes alone, leaving the transaction open. Disk, lock
# and corruption errors (OperationalError, DatabaseError) are the storage's: a whole group's.
_ENTRY_ERRORS = (sqlite3.DataError, sqlite3.InterfaceError, sqlite3.ProgrammingError,
                 sqlite3.IntegrityError)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    """Whether ``exc`` is SQLITE_BUSY (another connection holds the lock)."""
    return "locked" in str(exc) or "busy" in str(exc)


_COLUMNS = ", ".join(STORED_COLUMNS)
_CHAIN_COLUMNS = ", ".join(CHAIN_COLUMNS)
_ADDED_COLUMNS = (("tag_key", "TEXT"), ("tag", "TEXT"), ("sealed", "BLOB"))
"""Columns later versions added to ``sagacity_journal``: the entry tag's (``core.authenticity``)
and the sealed values' (schema version 3); files of earlier versions get them on open."""


_row_to_entry = JournalEntry.from_row
_saga_of = itemgetter(0)

_CHECKPOINT_EVERY = 250
"""Commits between the journal's own checkpoints (see the module notes): ~1,000 WAL pages."""

_At = tuple[sqlite3.Connection, dict[str, tuple[int, str, int | None]]]
"""A SQLite append's handle: the connection in its transaction, the group's new tails."""

_UNKNOWN = -1
"""In ``SqliteJournal._tails``: the saga's newest RUN_STARTED is not known (read it)."""

class SqliteJournal(SqliteDataKeys, SqliteWorker):
    """A :class:`~sagacity_agents.core.journal.Journal` in one SQLite file.

    Args:
        path: database file (created if missing, with its tables). ``":memory:"`` works but is
            private to this object.
        clock: source of ``recorded_at``; defaults to the system UTC time.
        busy_timeout: seconds to wait for another process's write lock before failing: the
            bound of any append's wait (waited in steps of at most 1 ms, see ``_begin_write``).
        synchronous: SQLite ``synchronous`` pragma: ``"FULL"`` (default, an INTENT survives power
            loss) or ``"NORMAL"`` (survives a process crash; ~6x faster commits, see design.md).
        durable_outcomes: with ``synchronous`` FULL or EXTRA, also wait for the disk on each
            call's outcome (EXECUTED, REFUSED, FAILED). Default ``False``: one durable commit
            per call, the INTENT's; the outcome's commit does not sync, and the next durable
            commit (the next INTENT, an approval pause, a compensation decision, the end of the
            run) makes it durable: a power loss can turn the last call's outcome into "in
            doubt", a process crash loses nothing (docs/architecture.md, "One durable commit
            per call"). SAGA_OPENED and RUN_STARTED never wait.
        allow_foreign_tables: create the journal's tables in a file that holds other tables
            (another application's database); refused by default.

    It keeps the sagas' wrapped data keys too, in the same file (``core.data_keys.DataKeyStore``,
    ``backends.sqlite.data_keys``).

    Raises:
        JournalError: the file cannot be opened or initialised, or a newer version of the
            library wrote it (its ``PRAGMA user_version``, ``backends.sqlite.setup``).
        ConfigurationError: the file holds other tables and no sagacity table, and
            ``allow_foreign_tables`` is false.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Clock = utc_now,
        busy_timeout: float = 30.0,
        synchronous: str = "FULL",
        durable_outcomes: bool = False,
        allow_foreign_tables: bool = False,
    ) -> None:
        self._clock = clock
        self._journal_id = ""
        self.durable_outcomes = durable_outcomes
        """Every outcome waits for the disk (``False``: the next durable commit covers it; see
        ``core.journal.lazy_phases``). Journaled in each run's RUN_STARTED."""
        self._lazy_phases = lazy_phases(durable_outcomes=durable_outcomes)
        self._durable_now = True
        """The last commit was synced (or needed no sync): nothing of this connection's is
        waiting for the next durable commit."""
        self._wal_fd: int | None = None
        self._sync_failed: str | None = None
        """Why a sync of the ``-wal`` failed: every later write is refused (``_sync_wal``)."""
        self._commits_since_checkpoint = 0
        self._wal_restarts = False
        """The journal's last checkpoint copied the whole WAL: the next commit restarts it and
        syncs its header (SQLite does, under NORMAL too), so the loop does not write it."""
        super().__init__(
            path, schema="journal.sql", what="SQLite journal",
            busy_timeout=busy_timeout, synchronous=synchronous, shared=True,
            allow_foreign_tables=allow_foreign_tables,
        )
        self._tails: dict[str, tuple[int, str, int | None]] = {}
        """Per saga, as of this connection's last commit to it: (tail seq, tail hash, seq of the
        newest RUN_STARTED). While the stored tail is still that one, nobody else appended, so
        the lease needs no range read (``_lease_of``). Used under the connection's lock."""
        self._executor.submit(self._upgrade_sync).result()
        self._lazy_possible = self._synchronous in ("FULL", "EXTRA")
        self._busy_timeout = busy_timeout
        self._writer = GroupWriter(self._executor, self._write_group, self._inline_ok)
        # Lock waits are ours (_begin_write: bounded, fine-grained), not SQLite's busy handler.
        self._executor.submit(lambda: self._conn.execute("PRAGMA busy_timeout=0")).result()
        if self._lazy_possible and self.path != ":memory:" and not self.path.startswith("file:"):
            # The schema was applied in a write transaction: the -wal file exists, and stays (same
            # inode: `_check_file` refuses writes if it is ever replaced) while we are connected.
            self._executor.submit(self._sync_by_hand).result()
        else:
            self._lazy_possible = False

    def _upgrade_sync(self) -> None:
        """Add the tag and sealed columns to a file written by an earlier version (in place,
        once; a concurrent opener that added them first is fine; old rows stay untagged and
        unsealed), and give the file its journal id if it has none yet (``core.identity``)."""
        conn: sqlite3.Connection = self._conn
        read = "SELECT value FROM sagacity_meta WHERE key = 'journal_id'"
        found = conn.execute(read).fetchone()
        if found is None:  # a new file, or one from before journal ids: made once, here
            conn.execute("INSERT OR IGNORE INTO sagacity_meta (key, value) VALUES ('journal_id', ?)",
                         (new_journal_id(),))
            found = conn.execute(read).fetchone()
        self._journal_id = str(found[0])
        have = {row[1] for row in conn.execute("PRAGMA table_info(sagacity_journal)")}
        for column, kind in _ADDED_COLUMNS:
            if column not in have:
                try:
                    conn.execute(f"ALTER TABLE sagacity_journal ADD COLUMN {column} {kind}")
                except sqlite3.OperationalError as exc:
                    if "duplicate column" not in str(exc):
                        raise

    def _sync_by_hand(self) -> None:
        """Switch the connection to ``synchronous=NORMAL`` and open the ``-wal`` file to sync it
        after each durable commit (see the module notes)."""
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA wal_autocheckpoint=0")
        # The file SQLite writes: its own full path of the database (a symlinked path resolved),
        # not ``self.path``, whose "-wal" may not exist or be another (stale) file.
        main = next(row[2] for row in self._conn.execute("PRAGMA database_list") if row[1] == "main")
        self._wal_fd = os.open(main + "-wal", os.O_RDONLY)

    def _checkpoint(self) -> None:
        """After a durable commit, once ``_CHECKPOINT_EVERY`` commits were made since the last
        one (each writes about four pages: the row and its two index entries): a passive
        checkpoint, so the WAL stays as short as SQLite's own threshold would keep it. Passive:
        it never waits for readers or writers; what it cannot copy now, a later one does. A
        failure is not the append's (it is committed and synced): the next one tries again. When it
        copied the whole WAL, the next commit restarts the WAL and syncs its header: not the
        loop's (``_wal_restarts``)."""
        self._commits_since_checkpoint = 0
        try:
            busy, log, copied = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error:
            return
        self._wal_restarts = not busy and log == copied

    def _checkpoint_after(self, wait: bool) -> None:
        """The checkpoint a durable commit made due: here on the journal's or a worker's thread
        (``wait``), on the journal's thread when the event loop made the commit itself."""
        if wait:
            self._checkpoint()
        else:
            self._commits_since_checkpoint = 0
            self._executor.submit(self._checkpoint_later)

    def _checkpoint_later(self) -> None:
        """:meth:`_checkpoint` on the journal's thread, for a durable commit the event loop made
        itself (a checkpoint syncs the database file: never on the loop)."""
        with self._conn_lock:
            if self._connection is not None and self._wal_fd is not None:
                self._checkpoint()

    def _sync_wal(self) -> None:
        """Make every commit so far durable: ``fdatasync`` of the ``-wal`` file (``fsync`` for
        ``synchronous=EXTRA``), what SQLite does after a commit under ``synchronous=FULL``. WAL
        frames reach the file in commit order and a frame lost in a power cut invalidates every
        frame after it (WAL checksums are cumulative): no later entry survives an earlier lost
        one.

        Raises:
            OSError: the sync failed (the caller reports the commit's durability unknown, and
                refuses every later write: ``_sync_failed``).
        """
        if self._wal_fd is not None:
            # fsync where there is no fdatasync (macOS; SQLite's own FULL commit calls fsync
            # there too, unless PRAGMA fullfsync is set). Looked up per call, not at import.
            sync = os.fsync if self._synchronous == "EXTRA" else getattr(os, "fdatasync", os.fsync)
            sync(self._wal_fd)
        self._durable_now = True

    def _begin_write(self, conn: sqlite3.Connection, saga_id: str) -> None:
        """``BEGIN IMMEDIATE``, waiting for another process's write lock ourselves: short
        steps (50 us doubling to 1 ms, jittered) until ``busy_timeout`` seconds have passed.

        SQLite's own busy handler (the connection's busy timeout, which the journal's connection
        sets to 0) sleeps in growing steps up to 100 ms, so a writer that just missed the lock
        waits far longer than the lock is held (one commit): the p99 append latency of several
        processes on one file (bench/sqlite_processes.py).

        Raises:
            JournalWriteError: the lock was not free within ``busy_timeout`` seconds.
        """
        deadline, delay = None, 50e-6
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise
                now = time.monotonic()
                deadline = deadline or now + self._busy_timeout
                if now >= deadline:
                    raise JournalWriteError(
                        f"SQLite append to saga {saga_id!r}: the file's write lock was held by "
                        f"another writer for more than busy_timeout={self._busy_timeout} s"
                    ) from exc
            time.sleep(delay * (0.5 + random.random()))  # jitter, not a secret
            delay = min(delay * 2, 1e-3)

    def _waits(self, request: AppendRequest) -> bool:
        return request.late or request.phase not in self._lazy_phases

    def _inline_ok(self, requests: list[AppendRequest], idle: Callable[[], bool]) -> bool:
        """Whether the event loop may write ``requests`` itself: none of them waits for the
        disk, or the loop has no other work waiting (``idle()``, ``writer.loop_idle``): the
        loop waits for an fsync only when that delays nobody else."""
        if not self._lazy_possible:
            return False
        if not self._wal_restarts and not any(self._waits(r) for r in requests):
            return True
        return idle()

    def _remembered_newest(self, saga_id: str, tail: Tail | None,
                           new_tails: dict[str, tuple[int, str, int | None]]) -> int | None:
        """The seq of the saga's newest RUN_STARTED as this connection remembers it (this group's
        own appends first, then its last commit), valid only while the stored ``tail`` is the
        one it wrote; :data:`_UNKNOWN` otherwise (read it)."""
        known = new_tails.get(saga_id) or self._tails.get(saga_id)
        if known is None or tail is None or known[:2] != tail[:2]:
            return _UNKNOWN
        return known[2]

    # The append rule's dialect pieces (core.journal.append_locked), inside the caller's
    # BEGIN IMMEDIATE transaction: ``at`` is (the connection, the group's new tails: see _tails).

    def _stored_entry(self, at: _At, request: AppendRequest) -> JournalEntry | None:
        row = at[0].execute(
            f"SELECT {_COLUMNS} FROM sagacity_journal WHERE saga_id = ? AND write_key = ?",
            (request.saga_id, request.write_key),
        ).fetchone()
        return None if row is None else _row_to_entry(row)

    def _tail_of(self, at: _At, request: AppendRequest) -> Tail | None:
        return at[0].execute(  # type: ignore[no-any-return]
            "SELECT seq, hash, phase FROM sagacity_journal WHERE saga_id = ? "
            "ORDER BY seq DESC LIMIT 1",
            (request.saga_id,),
        ).fetchone()

    def _lease_of(self, at: _At, request: AppendRequest, tail: Tail | None) -> int | None:
        """The seq of the saga's newest RUN_STARTED at or after ``request.fence`` (the fence
        itself while its run holds the lease): from what this connection knows when the stored
        tail is the one it wrote last (this group's own appends first, then its last commit),
        else read: a range of the primary key, this run's entries only. Reading it every time
        cost one row per entry of the run (~0.2 us each), on every append."""
        newest = self._remembered_newest(request.saga_id, tail, at[1])
        if newest != _UNKNOWN:
            return newest if newest is not None and newest >= request.fence else None  # type: ignore[operator]
        return at[0].execute(  # type: ignore[no-any-return]
            "SELECT max(seq) FROM sagacity_journal WHERE saga_id = ? AND seq >= ? "
            "AND phase = 'RUN_STARTED'",
            (request.saga_id, request.fence),
        ).fetchone()[0]

    def _entry_at(self, at: _At, request: AppendRequest, seq: int) -> JournalEntry | None:
        row = at[0].execute(
            f"SELECT {_COLUMNS} FROM sagacity_journal WHERE saga_id = ? AND seq = ?",
            (request.saga_id, seq),
        ).fetchone()
        return None if row is None else _row_to_entry(row)

    def _insert_entry(self, at: _At, request: AppendRequest, entry: JournalEntry, tail: Tail | None,
                lease: int | None) -> None:
        """Insert ``entry``; the group's new tails get the saga's (see ``_tails``)."""
        conn, new_tails = at
        conn.execute(
            f"INSERT INTO sagacity_journal ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (entry.saga_id, entry.seq, request.phase.value, entry.tool, entry.call_id,
             entry.write_key, entry.recorded_at, entry.prev_hash, entry.hash, entry.canonical,
             entry.tag_key, entry.tag, entry.sealed),
        )
        newest: int | None
        if request.phase is Phase.RUN_STARTED:
            newest = entry.seq
        elif lease is not None:
            newest = lease  # the newest at or after the fence is the newest of all
        else:
            newest = self._remembered_newest(request.saga_id, tail, new_tails)
        new_tails[request.saga_id] = (entry.seq, entry.hash, newest)

    def _write_group(self, group: Sequence[Pending], wait: bool = True) -> list[Answer]:
        """Every queued caller's appends in one ``BEGIN IMMEDIATE`` transaction, one commit
        (waiting for the disk when one of them must, see ``core.journal.lazy_phases``), one
        answer per caller (``writer``), on the calling thread under the connection's lock. An
        append the rule refuses inserts nothing and ends its caller's appends only: the ones
        before it stay.

        Args:
            wait: ``False`` (the event loop writing itself): raise :class:`Busy` at once, with
                nothing written, when the connection or the file's write lock is taken.

        Raises:
            Busy: see ``wait``.
            JournalWriteError: storage failed (nothing of the group is committed, or the file
                was replaced under it); every caller gets it.
        """
        if not self._conn_lock.acquire(blocking=wait):
            raise Busy()  # a read of the journal's thread: the loop does not wait for it
        try:
            return self._write_group_locked(group, wait)
        finally:
            self._conn_lock.release()

    def _write_group_locked(self, group: Sequence[Pending], wait: bool) -> list[Answer]:
        self._refuse_closed()
        conn: sqlite3.Connection = self._conn
        saga_id = group[0].requests[0].saga_id
        if self._sync_failed is not None:
            raise JournalWriteError(
                f"SQLite append to saga {saga_id!r} refused: an earlier sync to disk failed "
                f"({self._sync_failed}); what it covered may never reach the disk, and a later "
                "sync would not say so. Reopen the journal after checking the storage.")
        answers: list[Answer] = []
        new_tails: dict[str, tuple[int, str, int | None]] = {}
        try:
            if self._lost is not None:
                self._check_file()
            durable = not self._lazy_possible or any(self._waits(r) for p in group for r in p.requests)
            if wait:
                self._begin_write(conn, saga_id)
            else:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                except sqlite3.OperationalError as exc:
                    if _is_busy(exc):
                        raise Busy() from exc
                    raise
            inserted = False
            for pending in group:
                entries: list[JournalEntry] = []
                error: Exception | None = None
                for request in pending.requests:
                    try:
                        entry, fresh = append_locked(self, (conn, new_tails), request)
                    except _ENTRY_ERRORS as exc:
                        if not conn.in_transaction:
                            raise  # it ended the transaction: the whole group fails
                        # This entry's own statement failed (too big for the file, say) and
                        # SQLite undid that statement only: its caller's error, not the others'.
                        error = JournalWriteError(
                            f"SQLite append to saga {request.saga_id!r} failed, nothing stored: {exc}")
                        break
                    except sqlite3.Error:
                        raise  # storage, not the rule: the whole group fails
                    except Exception as exc:  # noqa: BLE001 - the rule refused it: this caller's error
                        error = exc
                        break
                    inserted = inserted or fresh
                    entries.append(entry)
                answers.append((entries, error))
            conn.execute("COMMIT" if inserted else "ROLLBACK")
        except sqlite3.Error as exc:
            self._tails.clear()  # the commit's fate may be unknown: read the leases again
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise JournalWriteError(f"SQLite append to saga {saga_id!r} failed: {exc}") from exc
        except Busy:
            raise  # nothing begun
        except BaseException:
            self._tails.clear()
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if inserted:
            self._wal_restarts = False
            self._tails.update(new_tails)
            self._durable_now = False
            self._commits_since_checkpoint += 1
        if durable:
            # Also when nothing was inserted: a retried write finds its entry stored by a commit
            # whose sync may have failed.
            try:
                self._sync_wal()
            except OSError as exc:
                # Linux reports a failed writeback once and may drop the pages: the next sync
                # would succeed with the commit still not on disk (PostgreSQL's "fsyncgate").
                self._sync_failed = str(exc)
                raise JournalWriteError(
                    f"SQLite append to saga {saga_id!r}: committed, but the sync to disk failed "
                    f"({exc}): its durability is unknown") from exc
            if self._commits_since_checkpoint >= _CHECKPOINT_EVERY and self._wal_fd is not None:
                self._checkpoint_after(wait)
        self._check_file()  # a file replaced under the commit: the writes went nowhere
        return answers

    def _entries_sync(self, saga_id: str) -> list[JournalEntry]:
        rows = self._conn.execute(
            f"SELECT {_COLUMNS} FROM sagacity_journal WHERE saga_id = ? ORDER BY seq", (saga_id,)
        ).fetchall()
        return [_row_to_entry(r) for r in rows]

    def _tail_sync(self, saga_id: str) -> JournalEntry | None:
        row = self._conn.execute(
            f"SELECT {_COLUMNS} FROM sagacity_journal WHERE saga_id = ? ORDER BY seq DESC LIMIT 1",
            (saga_id,),
        ).fetchone()
        return None if row is None else _row_to_entry(row)

    def _close_sync(self) -> None:
        # The lazy commits since the last durable one are synced now, whether or not closing
        # runs a checkpoint (it does not while another connection is open; when it does,
        # synchronous=NORMAL syncs the WAL and the database file around it).
        with self._conn_lock:
            if self._connection is not None and not self._durable_now:
                self._sync_wal()  # the lazy commits since the last durable one
            super()._close_sync()
            if self._wal_fd is not None:
                os.close(self._wal_fd)
                self._wal_fd = None

    def _rows_many_sync(self, saga_ids: list[str], columns: str = _CHAIN_COLUMNS) -> dict[str, list[tuple[Any, ...]]]:
        # One statement for the batch, read along the (saga_id, seq) primary key.
        rows = self._conn.execute(
            f"SELECT {columns} FROM sagacity_journal WHERE saga_id IN "
            f"({', '.join('?' * len(saga_ids))}) ORDER BY saga_id, seq", saga_ids,
        ).fetchall()
        return {sid: list(chain) for sid, chain in groupby(rows, _saga_of)}

    def _entries_many_sync(self, saga_ids: list[str]) -> dict[str, list[JournalEntry]]:
        return {sid: [_row_to_entry(r) for r in rows]
                for sid, rows in self._rows_many_sync(saga_ids, _COLUMNS).items()}

    def _saga_ids_sync(self) -> list[str]:
        # Derived from the entries themselves, never from a side table an editor could prune
        # to hide a saga from `verify`. Order of first appearance: the first stored row of each
        # saga (rowids grow with every insert).
        rows = self._conn.execute(
            "SELECT saga_id FROM sagacity_journal GROUP BY saga_id ORDER BY MIN(rowid)"
        ).fetchall()
        return [r[0] for r in rows]

    def _summaries_sync(self, offset: int, limit: int | None) -> list[SagaSummary]:
        # One pass over the (saga_id, seq) primary-key index (count, bounds, first rowid: no
        # payload read), then two primary-key lookups per saga of the page.
        page = self._conn.execute(
            "SELECT saga_id, count(*), min(seq), max(seq) FROM sagacity_journal "
            "GROUP BY saga_id ORDER BY MIN(rowid) LIMIT ? OFFSET ?",
            (-1 if limit is None else limit, offset),
        ).fetchall()
        summaries = []
        for saga_id, count, low, high in page:
            rows = {r[1]: _row_to_entry(r) for r in self._conn.execute(
                f"SELECT {_COLUMNS} FROM sagacity_journal WHERE saga_id = ? AND seq IN (?, ?)",
                (saga_id, low, high),
            )}
            summaries.append(SagaSummary(saga_id, count, rows[low], rows[high]))
        return summaries

    async def append(self, saga_id: AppendRequest | str, phase: Phase | None = None,
                     **fields: Any) -> JournalEntry:
        """See :meth:`Journal.append`. Returns after the commit (``synchronous`` decides how
        durable that is); a fenced append reads the saga's lease inside the same
        ``BEGIN IMMEDIATE`` transaction as its insert."""
        request = as_request(saga_id, phase, fields)
        self._refuse_closed()
        return (await self._writer.submit([request]))[0]

    def append_sync(self, saga_id: AppendRequest | str, phase: Phase | None = None,
                    **fields: Any) -> JournalEntry:
        """:meth:`append`, blocking, from a thread that is not the event loop's (a sync tool's
        worker thread, ``core.saga.calls``): one hop to the journal's thread and back, none
        through the event loop. Same ordering, same rules, same errors.

        Raises:
            The errors of :meth:`Journal.append`.
        """
        request = as_request(saga_id, phase, fields)
        self._refuse_closed()
        return self._writer.submit_blocking([request])[0]

    async def append_many(
        self, requests: Sequence[AppendRequest] | str, appends: Sequence[Mapping[str, Any]] = (), /,
    ) -> list[JournalEntry]:
        """Several appends to one saga in one transaction and one commit, in order (see
        ``core.journal.append_requests``): RUN_ENDED + SAGA_CLOSED, SAGA_OPENED + RUN_STARTED.
        The commit waits for the disk when one of them must. The loose form takes the saga id
        and one keyword mapping per append.

        Raises:
            The errors of :meth:`append`, for the first append that fails (the ones before it
            are written, the ones after it are not).
        """
        batch = as_requests(requests, appends)
        if not batch:
            return []
        self._refuse_closed()
        return await self._writer.submit(batch)

    async def journal_id(self) -> str:
        """The file's journal id, read when it was opened (``core.journal.Identified``)."""
        return self._journal_id

    async def assign_journal_id(self, journal_id: str | None = None) -> str:
        """Give the file a new journal id (``sagacity journal new-id``, for a copy meant to
        become another journal): its sagas of derivation 2 fail verification from then on
        (they name the id they were opened under). Other open handles keep the old id until
        reopened.

        Returns:
            The new id.

        Raises:
            JournalError: the file could not be written.
        """
        new = journal_id or new_journal_id()

        def write() -> None:
            self._conn.execute("UPDATE sagacity_meta SET value = ? WHERE key = 'journal_id'", (new,))

        await self._run(write)
        self._journal_id = new
        return new

    async def entries(self, saga_id: str) -> list[JournalEntry]:
        """See :meth:`Journal.entries`."""
        return await self._run(self._entries_sync, saga_id)

    async def tail(self, saga_id: str) -> JournalEntry | None:
        """The saga's newest entry (``core.journal.TailRead``): one probe of the primary key
        ``(saga_id, seq)``, whatever the saga's length. ``None``: no entry.

        Raises:
            JournalError: storage could not be read.
        """
        return await self._run(self._tail_sync, saga_id)

    async def entries_many(self, saga_ids: list[str]) -> dict[str, list[JournalEntry]]:
        """The entries of each of ``saga_ids`` in one read (``core.journal.read_sagas``):
        ``{saga_id: entries}`` in ``seq`` order, sagas without entries left out.

        Raises:
            JournalError: storage could not be read.
        """
        if not saga_ids:
            return {}
        return await self._run(self._entries_many_sync, list(saga_ids))

    async def rows_many(self, saga_ids: list[str]) -> dict[str, list[tuple[Any, ...]]]:
        """The stored rows of each of ``saga_ids`` in one read (``core.journal.read_saga_rows``):
        ``{saga_id: rows}``, each row a tuple of ``entries.CHAIN_COLUMNS`` (no tags), in ``seq``
        order, sagas without entries left out; no entry built (``verify`` checks the rows).

        Raises:
            JournalError: storage could not be read.
        """
        if not saga_ids:
            return {}
        return await self._run(self._rows_many_sync, list(saga_ids))

    async def saga_ids(self) -> list[str]:
        """See :meth:`Journal.saga_ids`. Read from the journal's entries: a saga is listed while
        any of its entries is stored, in order of its first stored entry."""
        return await self._run(self._saga_ids_sync)

    async def saga_summaries(self, *, offset: int = 0, limit: int | None = None) -> list[SagaSummary]:
        """See :meth:`Journal.saga_summaries`: one query over the primary-key index, then two
        primary-key lookups per saga of the page, in one read on the journal's thread."""
        check_page(offset, limit)
        return await self._run(self._summaries_sync, offset, limit)
