"""The SQLite journal: the embedded default. One file, WAL mode, safe for several processes.

Ordering: every append runs ``BEGIN IMMEDIATE``, which takes SQLite's single write lock for the
whole file before the tail is read, so the read-tail/insert pair is serialized across threads
and processes alike: no gap, no duplicate ``seq``, no retry loop. ``synchronous=FULL`` makes the
commit durable before ``append`` returns, so an INTENT is on disk before the tool body starts.

All SQLite work runs on one dedicated thread per journal object (sqlite3 connections are not to
be shared across threads); the event loop only awaits it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from ...errors import JournalWriteError
from ...core.entries import STORED_COLUMNS, JournalEntry, Phase
from ...core.journal import (
    AppendRequest, Clock, SagaSummary, check_page, next_entry, replay_of, stamp_from, utc_now,
)
from .setup import SqliteWorker

__all__ = ["SqliteJournal"]


_COLUMNS = ", ".join(STORED_COLUMNS)
_TAG_COLUMNS = ("tag_key", "tag")
"""Added by issue 19 (``core.authenticity``): files of earlier versions get them on open."""


_row_to_entry = JournalEntry.from_row

class SqliteJournal(SqliteWorker):
    """A :class:`~sagacity_agents.core.journal.Journal` in one SQLite file.

    Args:
        path: database file (created if missing, with its tables). ``":memory:"`` works but is
            private to this object.
        clock: source of ``recorded_at``; defaults to the system UTC time.
        busy_timeout: seconds to wait for another process's write lock before failing.
        synchronous: SQLite ``synchronous`` pragma: ``"FULL"`` (default, an INTENT survives power
            loss) or ``"NORMAL"`` (survives a process crash; ~6x faster commits, see design.md).

    Raises:
        JournalError: the file cannot be opened or initialised.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Clock = utc_now,
        busy_timeout: float = 30.0,
        synchronous: str = "FULL",
    ) -> None:
        self._clock = clock
        self.tagger: Any = None
        """An ``core.authenticity.EntryTagger``: every entry is tagged before it is inserted
        (``None``: untagged; set by ``attach_tagger``)."""
        super().__init__(
            path, schema="journal.sql", what="SQLite journal",
            busy_timeout=busy_timeout, synchronous=synchronous,
        )
        self._executor.submit(self._upgrade_sync).result()

    def _upgrade_sync(self) -> None:
        """Add the tag columns to a file written by an earlier version (in place, once; a
        concurrent opener that added them first is fine). Old rows stay untagged."""
        conn: sqlite3.Connection = self._conn
        have = {row[1] for row in conn.execute("PRAGMA table_info(sagacity_journal)")}
        for column in _TAG_COLUMNS:
            if column not in have:
                try:
                    conn.execute(f"ALTER TABLE sagacity_journal ADD COLUMN {column} TEXT")
                except sqlite3.OperationalError as exc:
                    if "duplicate column" not in str(exc):
                        raise

    def _append_sync(self, request: AppendRequest) -> JournalEntry:
        conn: sqlite3.Connection = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute(
                    f"SELECT {_COLUMNS} FROM sagacity_journal WHERE saga_id = ? AND write_key = ?",
                    (request.saga_id, request.write_key),
                ).fetchone()
                if row is not None:
                    conn.execute("ROLLBACK")
                    return replay_of(_row_to_entry(row), request)
                tail = conn.execute(
                    "SELECT seq, hash, phase FROM sagacity_journal WHERE saga_id = ? "
                    "ORDER BY seq DESC LIMIT 1",
                    (request.saga_id,),
                ).fetchone()
                lease = None
                if request.checks_fence:
                    # The newest RUN_STARTED at or after the fence: the fence itself while its
                    # run holds the lease (a range of the primary key: this run's entries only).
                    lease = conn.execute(
                        "SELECT max(seq) FROM sagacity_journal WHERE saga_id = ? AND seq >= ? "
                        "AND phase = 'RUN_STARTED'",
                        (request.saga_id, request.fence),
                    ).fetchone()[0]
                entry = next_entry(request, tail, stamp_from(self._clock), lease=lease)
                if self.tagger is not None:
                    entry = self.tagger.tag_entry(entry)
                conn.execute(
                    f"INSERT INTO sagacity_journal ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        entry.saga_id,
                        entry.seq,
                        request.phase.value,
                        entry.tool,
                        entry.call_id,
                        entry.write_key,
                        entry.recorded_at,
                        entry.prev_hash,
                        entry.hash,
                        entry.canonical,
                        entry.tag_key,
                        entry.tag,
                    ),
                )
                conn.execute("COMMIT")
                return entry
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise JournalWriteError(f"SQLite append to saga {request.saga_id!r} failed: {exc}") from exc

    def _entries_sync(self, saga_id: str) -> list[JournalEntry]:
        rows = self._conn.execute(
            f"SELECT {_COLUMNS} FROM sagacity_journal WHERE saga_id = ? ORDER BY seq", (saga_id,)
        ).fetchall()
        return [_row_to_entry(r) for r in rows]

    def _entries_many_sync(self, saga_ids: list[str]) -> dict[str, list[JournalEntry]]:
        # One statement for the batch, read along the (saga_id, seq) primary key.
        found: dict[str, list[JournalEntry]] = {}
        rows = self._conn.execute(
            f"SELECT {_COLUMNS} FROM sagacity_journal WHERE saga_id IN "
            f"({', '.join('?' * len(saga_ids))}) ORDER BY saga_id, seq", saga_ids,
        ).fetchall()
        for row in rows:
            entry = _row_to_entry(row)
            chain = found.get(entry.saga_id)
            if chain is None:
                found[entry.saga_id] = chain = []
            chain.append(entry)
        return found

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

    async def append(
        self,
        saga_id: str,
        phase: Phase,
        *,
        write_key: str,
        tool: str | None = None,
        call_id: str | None = None,
        payload: Any = None,
        expected_seq: int | None = None,
        fence: int | None = None,
        late: bool = False,
    ) -> JournalEntry:
        """See :meth:`Journal.append`. Returns after the commit (``synchronous`` decides how
        durable that is); a fenced append reads the saga's lease inside the same
        ``BEGIN IMMEDIATE`` transaction as its insert."""
        request = AppendRequest.build(
            saga_id, phase, write_key=write_key, tool=tool, call_id=call_id, payload=payload,
            expected_seq=expected_seq, fence=fence, late=late,
        )
        return await self._run(self._append_sync, request)

    async def entries(self, saga_id: str) -> list[JournalEntry]:
        """See :meth:`Journal.entries`."""
        return await self._run(self._entries_sync, saga_id)

    async def entries_many(self, saga_ids: list[str]) -> dict[str, list[JournalEntry]]:
        """The entries of each of ``saga_ids`` in one read (``core.journal.read_sagas``):
        ``{saga_id: entries}`` in ``seq`` order, sagas without entries left out.

        Raises:
            JournalError: storage could not be read.
        """
        if not saga_ids:
            return {}
        return await self._run(self._entries_many_sync, list(saga_ids))

    async def saga_ids(self) -> list[str]:
        """See :meth:`Journal.saga_ids`. Read from the journal's entries: a saga is listed while
        any of its entries is stored, in order of its first stored entry."""
        return await self._run(self._saga_ids_sync)

    async def saga_summaries(self, *, offset: int = 0, limit: int | None = None) -> list[SagaSummary]:
        """See :meth:`Journal.saga_summaries`: one query over the primary-key index, then two
        primary-key lookups per saga of the page, in one read on the journal's thread."""
        check_page(offset, limit)
        return await self._run(self._summaries_sync, offset, limit)
