"""The PostgreSQL approval store: requests and snapshots shared by workers on many hosts.

It lives in the journal's database and shares its pools (:class:`PostgresDatabase`). A decision
is announced with ``pg_notify`` in the deciding transaction (delivered at commit; payload = the
request id only); waiters in every process hear it through one LISTEN connection per process and
always re-read the table (``wait_for_decision``).

``consume`` is atomic across hosts: one transaction locks the requests' rows (``FOR UPDATE``, in
request-id order so two consumers of overlapping sets cannot deadlock), checks that none is
consumed, and updates them all; a second consumer waits for the first's commit, then finds them
consumed and is refused. Two resumes of one saga therefore execute the tool at most once.
"""

from __future__ import annotations

import asyncio
import builtins
import datetime as dt
import weakref
from typing import Any

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
from .setup import NOTIFY_CHANNEL, PostgresDatabase

__all__ = ["PostgresApprovalStore"]

_SELECT = f"SELECT {', '.join(REQUEST_COLUMNS)} FROM sagacity_approval_requests"


class _PostgresNotifier(DecisionNotifier):
    """Wakes this process's waiters on a decision made anywhere (LISTEN, via the database's one
    listener per loop)."""

    def __init__(self, database: PostgresDatabase) -> None:
        super().__init__()
        self._database = database
        self._loops: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()

    async def listen(self) -> None:
        """Subscribe this notifier to the loop's LISTEN connection (once per loop)."""
        loop = asyncio.get_running_loop()
        if loop not in self._loops:
            self._loops.add(loop)
            await self._database.listener().subscribe(self._hint)

    def _hint(self, request_id: str | None) -> None:
        if request_id is None:
            self.notify_all()
        else:
            self.notify(request_id)


class PostgresApprovalStore:
    """An :class:`~sagacity_agents.core.approval.ApprovalStore` in a PostgreSQL database.

    Args:
        database: the journal's :class:`PostgresDatabase` (pools shared), or a
            ``postgresql://`` URI to open one with ``pool_options``.
        pool_options: keyword arguments of :class:`PostgresDatabase` when ``database`` is a URI.

    Raises:
        ConfigurationError: the ``postgres`` extra is not installed.
    """

    def __init__(self, database: PostgresDatabase | str, **pool_options: Any) -> None:
        self.database = (
            database if isinstance(database, PostgresDatabase)
            else PostgresDatabase(database, **pool_options)
        )
        self.notifier: DecisionNotifier = _PostgresNotifier(self.database)
        """Woken by :meth:`decide` in this process and by NOTIFY from every other one."""

    def __repr__(self) -> str:
        return f"PostgresApprovalStore({self.database!r})"

    async def create(self, request: ApprovalRequest) -> None:
        """See :meth:`ApprovalStore.create`."""

        async def work(conn: Any) -> int:
            cur = await conn.execute(
                f"INSERT INTO sagacity_approval_requests ({', '.join(REQUEST_COLUMNS)}) "
                f"VALUES ({', '.join(['%s'] * len(REQUEST_COLUMNS))}) "
                "ON CONFLICT (request_id) DO NOTHING",
                request_to_row(request),
            )
            return int(cur.rowcount)

        if await self.database.run(f"approval request {request.request_id!r}", work) != 1:
            raise ApprovalError(f"approval request {request.request_id!r} already exists")

    async def get(self, request_id: str) -> ApprovalRequest | None:
        """See :meth:`ApprovalStore.get`."""

        async def work(conn: Any) -> ApprovalRequest | None:
            cur = await conn.execute(f"{_SELECT} WHERE request_id = %s", (request_id,))
            row = await cur.fetchone()
            return None if row is None else request_from_row(row)

        return await self.database.run(
            f"read of approval request {request_id!r}", work, retry_broken=True
        )

    async def list(
        self, saga_id: str | None = None, *, pending_only: bool = False
    ) -> builtins.list[ApprovalRequest]:
        """See :meth:`ApprovalStore.list`."""
        clauses, params = [], []
        if saga_id is not None:
            clauses.append("saga_id = %s")
            params.append(saga_id)
        if pending_only:
            clauses.append("decision IS NULL AND consumed_at IS NULL")
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""

        async def work(conn: Any) -> builtins.list[ApprovalRequest]:
            cur = await conn.execute(f"{_SELECT}{where} ORDER BY created_at, id", params)
            return [request_from_row(r) for r in await cur.fetchall()]

        return await self.database.run("list of approval requests", work, retry_broken=True)

    async def decide(
        self,
        request_id: str,
        decision: Decision,
        approver: str | None,
        reason: str | None,
        at: dt.datetime,
    ) -> ApprovalRequest:
        """See :meth:`ApprovalStore.decide`. Safe to repeat, so a broken connection is retried."""
        check_decision(decision)
        decided_at = format_timestamp(at)

        async def work(conn: Any) -> tuple[ApprovalRequest, bool]:
            async with conn.transaction():
                cur = await conn.execute(
                    f"{_SELECT} WHERE request_id = %s FOR UPDATE", (request_id,)
                )
                row = await cur.fetchone()
                updated, changed = apply_decision(
                    None if row is None else request_from_row(row),
                    request_id, decision, approver, reason, decided_at,
                )
                if changed:
                    await conn.execute(
                        "UPDATE sagacity_approval_requests "
                        "SET decision = %s, approver = %s, reason = %s, decided_at = %s "
                        "WHERE request_id = %s",
                        (decision, approver, reason, decided_at, request_id),
                    )
                    await conn.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, request_id))
                return updated, changed

        updated, changed = await self.database.run(
            f"decision on approval request {request_id!r}", work, retry_broken=True
        )
        if changed:
            self.notifier.notify(request_id)
        return updated

    async def consume(self, request_ids: builtins.list[str], at: dt.datetime) -> None:
        """See :meth:`ApprovalStore.consume`. Never retried on a broken connection: when the
        commit's fate is unknown the caller gets :class:`JournalError` and nothing runs."""
        consumed_at = format_timestamp(at)
        ids = sorted(unique_ids(request_ids))
        if not ids:
            return

        async def work(conn: Any) -> None:
            async with conn.transaction():
                cur = await conn.execute(
                    "SELECT request_id, consumed_at FROM sagacity_approval_requests "
                    "WHERE request_id = ANY(%s) ORDER BY request_id FOR UPDATE",
                    (ids,),
                )
                found = {r[0]: r[1] for r in await cur.fetchall()}
                unknown = [i for i in ids if i not in found]
                consumed = [i for i, when in found.items() if when is not None]
                if unknown or consumed:
                    raise consume_refusal(unknown, consumed)
                await conn.execute(
                    "UPDATE sagacity_approval_requests SET consumed_at = %s "
                    "WHERE request_id = ANY(%s)",
                    (consumed_at, ids),
                )

        await self.database.run(f"consume of approval requests {ids!r}", work)

    async def save_snapshot(self, saga_id: str, snapshot: str) -> None:
        """See :meth:`ApprovalStore.save_snapshot`."""
        if not isinstance(snapshot, str):
            raise TypeError("snapshot must be a str")

        async def work(conn: Any) -> None:
            await conn.execute(
                "INSERT INTO sagacity_snapshots (saga_id, snapshot) VALUES (%s, %s) "
                "ON CONFLICT (saga_id) DO UPDATE SET snapshot = excluded.snapshot",
                (saga_id, snapshot),
            )

        await self.database.run(f"snapshot of saga {saga_id!r}", work, retry_broken=True)

    async def load_snapshot(self, saga_id: str) -> str | None:
        """See :meth:`ApprovalStore.load_snapshot`."""

        async def work(conn: Any) -> str | None:
            cur = await conn.execute(
                "SELECT snapshot FROM sagacity_snapshots WHERE saga_id = %s", (saga_id,)
            )
            row = await cur.fetchone()
            return None if row is None else str(row[0])

        return await self.database.run(f"snapshot of saga {saga_id!r}", work, retry_broken=True)

    async def delete_snapshot(self, saga_id: str) -> None:
        """See :meth:`ApprovalStore.delete_snapshot`."""

        async def work(conn: Any) -> None:
            await conn.execute("DELETE FROM sagacity_snapshots WHERE saga_id = %s", (saga_id,))

        await self.database.run(f"snapshot of saga {saga_id!r}", work, retry_broken=True)

    async def close(self) -> None:
        """Close this loop's pool and listener (shared with the journal). Idempotent."""
        await self.database.close()
