"""The PostgreSQL journal: one database shared by many workers on many hosts (psycopg 3, async).

Ordering (design.md, "PostgreSQL"): every append is one transaction that first takes
``pg_advisory_xact_lock`` on a 64-bit hash of the saga id, then reads the saga's tail and the row
with this write key, then inserts. Appenders to one saga queue on the lock instead of racing and
retrying (the Java original's tail ``SELECT ... FOR UPDATE`` + retry on unique violation loses
appends under contention: 119 of them at 64 workers, measured); appenders to different sagas do
not wait for each other (a hash collision only makes two sagas share a queue). In READ COMMITTED
each statement reads a fresh snapshot, so the tail read, a statement after the lock, sees every
append committed before the lock was granted. UNIQUE (saga_id, seq) and UNIQUE (saga_id,
write_key) back the lock: a writer that bypasses it fails rather than forks the chain.

Round trips: the BEGIN, the lock and the read go in one pipeline flush; the INSERT and the COMMIT
in a second.

Failures: a connection that breaks anywhere in an append (even between INSERT and COMMIT, when
the outcome is unknown) is replaced and the append retried under the same write key: the retry
finds the stored row (returned as is) or stores it now, so the entry is stored exactly once, or
:class:`JournalWriteError` is raised. A pool exhausted for ``pool_timeout`` seconds, a statement
timeout and a schema missing or out of date also raise it; an INTENT that raises means the tool
body does not run.
"""

from __future__ import annotations

from typing import Any

from ..errors import JournalWriteError
from .entries import OUTCOME_PHASES, JournalEntry, Phase
from .journal import AppendRequest, Clock, next_entry, replay_of, stamp_from, utc_now
from .postgres_setup import PostgresDatabase

__all__ = ["PostgresJournal"]

_COLUMNS = "saga_id, seq, phase, tool, call_id, write_key, recorded_at, prev_hash, hash, canonical"
_NAMES = tuple(c.strip() for c in _COLUMNS.split(","))

_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
# The row already holding this write key (kind 0), then the tail (kind 1): one statement.
_KEY_AND_TAIL = (
    f"(SELECT 0, {_COLUMNS} FROM sagacity_journal WHERE saga_id = %(s)s AND write_key = %(k)s) "
    f"UNION ALL (SELECT 1, {_COLUMNS} FROM sagacity_journal WHERE saga_id = %(s)s "
    "ORDER BY seq DESC LIMIT 1)"
)
_INSERT = f"INSERT INTO sagacity_journal ({_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"
_FAST_COMMIT = "SET LOCAL synchronous_commit = off"


def _row_to_entry(row: tuple[Any, ...]) -> JournalEntry:
    return JournalEntry.from_stored(**dict(zip(_NAMES, row, strict=True)))


class PostgresJournal:
    """A :class:`~sagacity_agents.core.journal.Journal` in a PostgreSQL database.

    Args:
        database: a :class:`PostgresDatabase` (shared with a
            :class:`~sagacity_agents.core.postgres_approvals.PostgresApprovalStore`), or a
            ``postgresql://`` URI to open one with ``pool_options``.
        clock: source of ``recorded_at``; defaults to the system UTC time.
        fast_outcomes: commit EXECUTED / REFUSED / FAILED entries with ``synchronous_commit =
            off`` (default ``False``). The commit then returns before its WAL is flushed; the
            next synchronous commit on the server (the next INTENT, at the latest) flushes it. A
            server crash in between can lose the outcome, never an INTENT: the call is then in
            doubt, as if the process had died after the body, and recovery treats it so.
        pool_options: keyword arguments of :class:`PostgresDatabase` (``max_size``,
            ``pool_timeout``, ``statement_timeout``...) when ``database`` is a URI.

    Raises:
        ConfigurationError: the ``postgres`` extra is not installed.
    """

    def __init__(
        self,
        database: PostgresDatabase | str,
        *,
        clock: Clock = utc_now,
        fast_outcomes: bool = False,
        **pool_options: Any,
    ) -> None:
        self.database = (
            database if isinstance(database, PostgresDatabase)
            else PostgresDatabase(database, **pool_options)
        )
        self._clock = clock
        self._fast_outcomes = fast_outcomes

    def __repr__(self) -> str:
        return f"PostgresJournal({self.database!r})"

    async def _append_once(self, conn: Any, request: AppendRequest) -> JournalEntry:
        async with conn.pipeline() as pipeline:
            async with conn.transaction():
                await conn.execute(_LOCK, (request.saga_id,))
                cur = await conn.execute(
                    _KEY_AND_TAIL, {"s": request.saga_id, "k": request.write_key}
                )
                await pipeline.sync()
                rows = await cur.fetchall()
                for row in rows:
                    if row[0] == 0:
                        return replay_of(_row_to_entry(row[1:]), request)
                tail = (rows[0][2], rows[0][9]) if rows else None
                entry = next_entry(request, tail, stamp_from(self._clock))
                if self._fast_outcomes and request.phase in OUTCOME_PHASES:
                    await conn.execute(_FAST_COMMIT)
                await conn.execute(
                    _INSERT,
                    (
                        entry.saga_id, entry.seq, request.phase.value, entry.tool, entry.call_id,
                        entry.write_key, entry.recorded_at, entry.prev_hash, entry.hash,
                        entry.canonical,
                    ),
                )
        return entry

    async def append(
        self,
        saga_id: str,
        phase: Phase,
        *,
        write_key: str,
        tool: str | None = None,
        call_id: str | None = None,
        payload: Any = None,
    ) -> JournalEntry:
        """See :meth:`Journal.append`. Returns after the commit (durable unless
        ``fast_outcomes`` applies to this phase).

        Raises:
            EncodingError: the payload has no canonical encoding (nothing written).
            JournalWriteError: not stored (pool exhausted, statement timeout, connection broken
                three times, schema missing), or the write key names a different entry.
        """
        request = AppendRequest.build(
            saga_id, phase, write_key=write_key, tool=tool, call_id=call_id, payload=payload
        )
        if "\x00" in f"{saga_id}{write_key}{tool or ''}{call_id or ''}":
            # PostgreSQL text cannot hold NUL; the payload can (it is escaped in the bytes).
            raise JournalWriteError("saga id, write key, tool and call id may not contain NUL")

        async def work(conn: Any) -> JournalEntry:
            return await self._append_once(conn, request)

        return await self.database.run(
            f"append to saga {saga_id!r}", work, write=True, retry_broken=True
        )

    async def entries(self, saga_id: str) -> list[JournalEntry]:
        """See :meth:`Journal.entries`."""

        async def work(conn: Any) -> list[JournalEntry]:
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM sagacity_journal WHERE saga_id = %s ORDER BY seq",
                (saga_id,),
            )
            return [_row_to_entry(r) for r in await cur.fetchall()]

        return await self.database.run(f"read of saga {saga_id!r}", work, retry_broken=True)

    async def saga_ids(self) -> list[str]:
        """See :meth:`Journal.saga_ids`. Derived from the entries (no side table an editor could
        prune), in order of each saga's first stored row (the identity column)."""

        async def work(conn: Any) -> list[str]:
            cur = await conn.execute(
                "SELECT saga_id FROM sagacity_journal GROUP BY saga_id ORDER BY min(id)"
            )
            return [r[0] for r in await cur.fetchall()]

        return await self.database.run("list of sagas", work, retry_broken=True)

    async def close(self) -> None:
        """Close this loop's pool and listener (shared with the approval store). Idempotent."""
        await self.database.close()
