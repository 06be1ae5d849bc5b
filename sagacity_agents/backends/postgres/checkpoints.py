"""Signed checkpoints in PostgreSQL: one table many hosts share, in a schema of its own.

A checkpoint is only worth something if the people who can rewrite the journal cannot remove it
(``core/checkpoints.py``). So the table lives in its own schema (default ``sagacity_checkpoints``,
or another database altogether), with its own versioned migrations
(``backends/postgres/sql/checkpoints/``, applied by ``sagacity db migrate --checkpoints URI``) and its
own versions table (``sagacity_checkpoint_migrations``), and the application's role gets SELECT
and INSERT on it only (``backends/postgres/sql/checkpoint_role.sql``): stored checkpoints are never
updated or deleted, by the library or by anyone holding its credentials.

Select it with a ``postgresql://`` URI wherever a checkpoint directory is accepted
(``Sagacity(checkpoints=...)``, ``$SAGACITY_CHECKPOINTS``, the CLI's ``--checkpoints``). The
query parameter ``sagacity_schema=NAME`` names another schema; it is removed before the URI
reaches libpq. Every other libpq parameter applies (a different user, host or database).
"""

from __future__ import annotations

import builtins
import re
import urllib.parse
from typing import Any

from ...errors import ConfigurationError
from ...core.checkpoints import Checkpoint
from .migrations import MigrationSet
from .setup import PostgresDatabase

__all__ = ["DEFAULT_CHECKPOINT_SCHEMA", "SCHEMA_PARAMETER", "PostgresCheckpointStore", "checkpoint_migrations",
           "split_schema"]

DEFAULT_CHECKPOINT_SCHEMA = "sagacity_checkpoints"
"""The schema the checkpoint table lives in unless the URI or the caller names another."""

SCHEMA_PARAMETER = "sagacity_schema"
"""The URI query parameter naming the checkpoint schema (ours: removed before libpq sees it)."""

MIGRATE_CHECKPOINTS_COMMAND = "sagacity db migrate --checkpoints URI"
"""The command that creates or upgrades the checkpoint schema."""

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_COLUMNS = "saga_id, seq, hash, signed_at, key_id, signature"


def checkpoint_migrations(schema: str = DEFAULT_CHECKPOINT_SCHEMA) -> MigrationSet:
    """The checkpoint table's migrations, living in ``schema``.

    Raises:
        ConfigurationError: ``schema`` is not a plain lowercase identifier (``[a-z_][a-z0-9_]*``,
            at most 63 characters: PostgreSQL's limit).
    """
    if not _SCHEMA_NAME.fullmatch(schema):
        raise ConfigurationError(
            f"checkpoint schema {schema!r} must be a lowercase identifier ([a-z_][a-z0-9_]*, "
            "at most 63 characters)"
        )
    return MigrationSet("sql/checkpoints", "sagacity_checkpoint_migrations",
                        "sagacity checkpoint schema", MIGRATE_CHECKPOINTS_COMMAND, schema)


def split_schema(uri: str) -> tuple[str, str | None]:
    """``uri`` without its ``sagacity_schema`` query parameter, and that parameter's value
    (``None`` when absent)."""
    parts = urllib.parse.urlsplit(uri)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    schema = next((v for k, v in query if k == SCHEMA_PARAMETER), None)
    rest = urllib.parse.urlencode([(k, v) for k, v in query if k != SCHEMA_PARAMETER], quote_via=urllib.parse.quote)
    return urllib.parse.urlunsplit(parts._replace(query=rest)), schema


class PostgresCheckpointStore:
    """A :class:`~sagacity_agents.core.checkpoints.CheckpointStore` in a PostgreSQL table,
    append-only: :meth:`put` INSERTs, nothing ever UPDATEs or DELETEs.

    It opens its own connection pools (one per event loop, as the journal's), so it may use
    another role, database or server than the journal; the schema version is checked when a
    loop's pool opens.

    Args:
        uri: a ``postgresql://`` URI; its ``sagacity_schema=NAME`` query parameter names the
            schema (removed before connecting).
        schema: the schema, overriding the URI's (default ``sagacity_checkpoints``).
        pool_options: keyword arguments of :class:`PostgresDatabase` (default ``min_size=0``:
            checkpoints are written at a close or a pause, so no idle connection is kept).

    Raises:
        ConfigurationError: the ``postgres`` extra is not installed, or a bad schema name.
    """

    def __init__(self, uri: str, *, schema: str | None = None, **pool_options: Any) -> None:
        conninfo, named = split_schema(uri)
        self.schema = schema or named or DEFAULT_CHECKPOINT_SCHEMA
        self.migration_set = checkpoint_migrations(self.schema)
        pool_options.setdefault("min_size", 0)
        self.database = PostgresDatabase(conninfo, migration_set=self.migration_set, **pool_options)
        self._table = self.migration_set.qualified("sagacity_checkpoints")

    def __repr__(self) -> str:
        return f"PostgresCheckpointStore({self.database!r}, schema={self.schema!r})"

    async def put(self, checkpoint: Checkpoint) -> None:
        """See :meth:`CheckpointStore.put`. An identical checkpoint already stored (a retry) is
        not stored twice.

        Raises:
            JournalError: not stored: the server cannot be reached or the schema is missing or
                old (:class:`JournalWriteError` once connected: no INSERT right, pool
                exhausted, a statement failed).
        """
        c = checkpoint

        async def work(conn: Any) -> None:
            await conn.execute(
                f"INSERT INTO {self._table} ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s) "
                "ON CONFLICT ON CONSTRAINT sagacity_checkpoints_identical DO NOTHING",
                (c.saga_id, c.seq, c.hash, c.time, c.key_id, c.signature),
            )

        # Safe to repeat whatever a broken first try did: the constraint makes it one row.
        await self.database.run(f"checkpoint of saga {c.saga_id!r}", work, write=True, retry_broken=True)

    async def list(self, saga_id: str) -> builtins.list[Checkpoint]:
        """See :meth:`CheckpointStore.list`.

        Raises:
            ValueError: a stored row is not a checkpoint.
            JournalError: the table could not be read.
        """

        async def work(conn: Any) -> builtins.list[tuple[Any, ...]]:
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM {self._table} WHERE saga_id = %s ORDER BY id", (saga_id,)
            )
            return builtins.list(await cur.fetchall())

        rows = await self.database.run(f"read of the checkpoints of saga {saga_id!r}", work, retry_broken=True)
        return [Checkpoint.from_json({"saga_id": r[0], "seq": r[1], "hash": r[2], "time": r[3],
                                      "key_id": r[4], "signature": r[5]}) for r in rows]

    async def saga_ids(self) -> builtins.list[str]:
        """See :meth:`CheckpointStore.saga_ids`; in order of each saga's first checkpoint."""

        async def work(conn: Any) -> builtins.list[str]:
            cur = await conn.execute(f"SELECT saga_id FROM {self._table} GROUP BY saga_id ORDER BY min(id)")
            return [r[0] for r in await cur.fetchall()]

        return await self.database.run("list of checkpointed sagas", work, retry_broken=True)

    async def close(self) -> None:
        """Close this loop's pool. Idempotent; the store cannot be used afterwards."""
        await self.database.close()
