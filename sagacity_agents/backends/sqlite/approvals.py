"""The SQLite approval store: one file shared by several processes (may be the journal's file)."""

from __future__ import annotations

import builtins
import datetime as dt
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ...errors import ApprovalError
from ...core.approval import (
    ApprovalRequest,
    Decision,
    DecisionNotifier,
    apply_decision,
    check_decision,
    consume_refusal,
    unique_ids,
)
from ..approval_rows import REQUEST_COLUMNS, request_from_row, request_to_row
from ...core.canonical import format_timestamp
from .setup import SqliteWorker

__all__ = ["SqliteApprovalStore"]

T = TypeVar("T")

_SELECT = f"SELECT {', '.join(REQUEST_COLUMNS)} FROM sagacity_approval_requests"

_ADDED_COLUMNS = (("args_version", "INTEGER NOT NULL DEFAULT 1"), ("args_sealed", "TEXT"))
"""Columns added after the first release (``sql/approvals.sql``), with their types."""


class SqliteApprovalStore(SqliteWorker):
    """An :class:`ApprovalStore` in one SQLite file, safe for several processes.

    The file may be the journal's: the tables (``sagacity_approval_requests``,
    ``sagacity_snapshots``) are separate. WAL mode. Every write runs in ``BEGIN IMMEDIATE``, which
    takes SQLite's single write lock for the whole file, so :meth:`decide` and :meth:`consume`
    are serialized across threads and processes; :meth:`consume` additionally updates with
    ``WHERE consumed_at IS NULL`` and rolls back unless every row was updated.

    All SQLite work runs on one dedicated thread per store object; the event loop only awaits it.

    Args:
        path: database file (created if missing, with its tables). ``":memory:"`` works but is
            private to this object.
        busy_timeout: seconds to wait for another process's write lock before failing.
        synchronous: SQLite ``synchronous`` pragma: ``"FULL"`` (default), ``"NORMAL"`` or
            ``"EXTRA"``.
        allow_foreign_tables: create the tables in a file that holds other tables (refused by
            default).

    Raises:
        JournalError: the file cannot be opened or initialised.
        ValueError: an unknown ``synchronous`` value.
    """

    def __init__(
        self, path: str | Path, *, busy_timeout: float = 30.0, synchronous: str = "FULL",
        allow_foreign_tables: bool = False,
    ) -> None:
        self.notifier = DecisionNotifier()
        """Woken by :meth:`decide` in this process; used by :func:`wait_for_decision`."""
        super().__init__(
            path, schema="approvals.sql", what="SQLite approval store",
            busy_timeout=busy_timeout, synchronous=synchronous,
            allow_foreign_tables=allow_foreign_tables,
        )
        self._executor.submit(self._upgrade_sync).result()

    def _upgrade_sync(self) -> None:
        """Add the argument-version columns to a file written by an earlier version (in place,
        once; a concurrent opener that added them first is fine): its requests stay version 1."""
        have = {row[1] for row in self._conn.execute("PRAGMA table_info(sagacity_approval_requests)")}
        for column, kind in _ADDED_COLUMNS:
            if column not in have:
                try:
                    self._conn.execute(f"ALTER TABLE sagacity_approval_requests ADD COLUMN {column} {kind}")
                except sqlite3.OperationalError as exc:
                    if "duplicate column" not in str(exc):
                        raise

    def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` inside ``BEGIN IMMEDIATE``; commit if it returns, roll back if it raises."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return result

    def _create_sync(self, request: ApprovalRequest) -> None:
        cursor = self._conn.execute(
            f"INSERT INTO sagacity_approval_requests ({', '.join(REQUEST_COLUMNS)}) "
            f"VALUES ({', '.join('?' * len(REQUEST_COLUMNS))}) ON CONFLICT (request_id) DO NOTHING",
            request_to_row(request),
        )
        if cursor.rowcount != 1:
            raise ApprovalError(f"approval request {request.request_id!r} already exists")

    def _get_sync(self, request_id: str) -> ApprovalRequest | None:
        row = self._conn.execute(f"{_SELECT} WHERE request_id = ?", (request_id,)).fetchone()
        return None if row is None else request_from_row(row)

    def _list_sync(self, saga_id: str | None, pending_only: bool) -> builtins.list[ApprovalRequest]:
        clauses, params = [], []
        if saga_id is not None:
            clauses.append("saga_id = ?")
            params.append(saga_id)
        if pending_only:
            clauses.append("decision IS NULL AND consumed_at IS NULL")
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._conn.execute(
            f"{_SELECT}{where} ORDER BY created_at, rowid", tuple(params)
        ).fetchall()
        return [request_from_row(r) for r in rows]

    def _decide_sync(
        self,
        request_id: str,
        decision: Decision,
        approver: str | None,
        reason: str | None,
        decided_at: str,
    ) -> ApprovalRequest:
        def run(conn: sqlite3.Connection) -> tuple[ApprovalRequest, bool]:
            row = conn.execute(f"{_SELECT} WHERE request_id = ?", (request_id,)).fetchone()
            current = None if row is None else request_from_row(row)
            updated, changed = apply_decision(
                current, request_id, decision, approver, reason, decided_at
            )
            if changed:
                cursor = conn.execute(
                    "UPDATE sagacity_approval_requests "
                    "SET decision = ?, approver = ?, reason = ?, decided_at = ? "
                    "WHERE request_id = ? AND decision IS NULL AND consumed_at IS NULL",
                    (decision, approver, reason, decided_at, request_id),
                )
                if cursor.rowcount != 1:  # pragma: no cover - excluded by the write lock
                    raise ApprovalError(f"approval request {request_id!r} changed while deciding")
            return updated, changed

        updated, changed = self._write(run)
        if changed:
            self.notifier.notify(request_id)
        return updated

    def _consume_sync(self, ids: builtins.list[str], consumed_at: str) -> None:
        def run(conn: sqlite3.Connection) -> None:
            found: dict[str, str | None] = {}
            for request_id in ids:
                row = conn.execute(
                    "SELECT consumed_at FROM sagacity_approval_requests WHERE request_id = ?",
                    (request_id,),
                ).fetchone()
                if row is not None:
                    found[request_id] = row[0]
            unknown = [i for i in ids if i not in found]
            consumed = [i for i, at in found.items() if at is not None]
            if unknown or consumed:
                raise consume_refusal(unknown, consumed)
            updated = 0
            for request_id in ids:
                updated += conn.execute(
                    "UPDATE sagacity_approval_requests SET consumed_at = ? "
                    "WHERE request_id = ? AND consumed_at IS NULL",
                    (consumed_at, request_id),
                ).rowcount
            if updated != len(ids):  # the rollback in _write undoes the partial update
                raise ApprovalError(
                    f"cannot consume approval requests {ids!r}: {len(ids) - updated} changed "
                    "concurrently; nothing consumed"
                )

        if ids:
            self._write(run)

    def _save_snapshot_sync(self, saga_id: str, snapshot: str) -> None:
        self._conn.execute(
            "INSERT INTO sagacity_snapshots (saga_id, snapshot) VALUES (?, ?) "
            "ON CONFLICT (saga_id) DO UPDATE SET snapshot = excluded.snapshot",
            (saga_id, snapshot),
        )

    def _load_snapshot_sync(self, saga_id: str) -> str | None:
        row = self._conn.execute(
            "SELECT snapshot FROM sagacity_snapshots WHERE saga_id = ?", (saga_id,)
        ).fetchone()
        return None if row is None else str(row[0])

    def _delete_snapshot_sync(self, saga_id: str) -> None:
        self._conn.execute("DELETE FROM sagacity_snapshots WHERE saga_id = ?", (saga_id,))

    async def create(self, request: ApprovalRequest) -> None:
        """See :meth:`ApprovalStore.create`."""
        await self._run(self._create_sync, request)

    async def get(self, request_id: str) -> ApprovalRequest | None:
        """See :meth:`ApprovalStore.get`."""
        return await self._run(self._get_sync, request_id)

    async def list(
        self, saga_id: str | None = None, *, pending_only: bool = False
    ) -> builtins.list[ApprovalRequest]:
        """See :meth:`ApprovalStore.list`."""
        return await self._run(self._list_sync, saga_id, pending_only)

    async def decide(
        self,
        request_id: str,
        decision: Decision,
        approver: str | None,
        reason: str | None,
        at: dt.datetime,
    ) -> ApprovalRequest:
        """See :meth:`ApprovalStore.decide`."""
        check_decision(decision)
        decided_at = format_timestamp(at)
        return await self._run(
            self._decide_sync, request_id, decision, approver, reason, decided_at
        )

    async def consume(self, request_ids: builtins.list[str], at: dt.datetime) -> None:
        """See :meth:`ApprovalStore.consume`."""
        consumed_at = format_timestamp(at)
        await self._run(self._consume_sync, unique_ids(request_ids), consumed_at)

    async def save_snapshot(self, saga_id: str, snapshot: str) -> None:
        """See :meth:`ApprovalStore.save_snapshot`."""
        if not isinstance(snapshot, str):
            raise TypeError("snapshot must be a str")
        await self._run(self._save_snapshot_sync, saga_id, snapshot)

    async def load_snapshot(self, saga_id: str) -> str | None:
        """See :meth:`ApprovalStore.load_snapshot`."""
        return await self._run(self._load_snapshot_sync, saga_id)

    async def delete_snapshot(self, saga_id: str) -> None:
        """See :meth:`ApprovalStore.delete_snapshot`."""
        await self._run(self._delete_snapshot_sync, saga_id)
