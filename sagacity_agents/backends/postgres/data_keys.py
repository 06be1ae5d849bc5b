"""The PostgreSQL journal's data-key store (``core.data_keys.DataKeyStore``): the sagas' wrapped
data keys in the ``sagacity_data_keys`` table of the journal's schema (migration 0007).

Privileges (docs/postgres.md): the application's role may SELECT and INSERT data keys, never
DELETE or UPDATE them; an erasure (DELETE + tombstone) and a master-key rotation (UPDATE) need
the eraser role (``sagacity db grant --eraser ROLE``, ``sql/eraser_role.sql``). An erasure removes
the row from the table; older row versions stay in the server's WAL, its base backups and, until
VACUUM reuses the space, its data files: the boundary docs/sensitive-data.md states.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...core.data_keys import StoredDataKey
from ...core.journal import utc_stamp
from ...errors import JournalWriteError
from ..data_key_rows import KEY_COLUMNS, check_erasure, check_new_key, key_from_row

__all__ = ["ERASER_GRANT", "PostgresDataKeys"]

ERASER_GRANT = "sagacity db grant --eraser ROLE"
"""The command that gives a role the right to erase data keys."""

_KEY_COLUMNS = ", ".join(KEY_COLUMNS)
_OF_SAGA = f"SELECT {_KEY_COLUMNS} FROM sagacity_data_keys WHERE saga_id = %s ORDER BY generation"
_ONE = f"SELECT {_KEY_COLUMNS} FROM sagacity_data_keys WHERE saga_id = %s AND generation = %s"
_ADD = (f"INSERT INTO sagacity_data_keys ({_KEY_COLUMNS}) VALUES (%s, %s, %s, %s, %s, NULL, NULL, "
        "NULL) ON CONFLICT ON CONSTRAINT sagacity_data_keys_saga_generation DO NOTHING")
_LIVE = (f"SELECT {_KEY_COLUMNS} FROM sagacity_data_keys WHERE saga_id = %s AND wrapped IS NOT NULL "
         "ORDER BY generation FOR UPDATE")
_DELETE = "DELETE FROM sagacity_data_keys WHERE saga_id = %s AND wrapped IS NOT NULL"
_TOMBSTONE = f"INSERT INTO sagacity_data_keys ({_KEY_COLUMNS}) VALUES (%s, %s, %s, NULL, %s, %s, %s, %s)"
_ALL_LIVE = f"SELECT {_KEY_COLUMNS} FROM sagacity_data_keys WHERE wrapped IS NOT NULL FOR UPDATE"
_REWRAP = ("UPDATE sagacity_data_keys SET master_key_id = %s, wrapped = %s "
           "WHERE saga_id = %s AND generation = %s")


class PostgresDataKeys:
    """The data-key methods of ``PostgresJournal`` (a mixin: they use its ``database``)."""

    database: Any

    async def data_keys(self, saga_id: str) -> list[StoredDataKey]:
        """The saga's data keys, every generation (tombstones included), ascending.

        Raises:
            JournalError: the read failed (pool exhausted, timeout, broken connections).
        """

        async def work(conn: Any) -> list[StoredDataKey]:
            cur = await conn.execute(_OF_SAGA, (saga_id,))
            return [key_from_row(r) for r in await cur.fetchall()]

        return await self.database.run(f"read of the data keys of {saga_id!r}", work,  # type: ignore[no-any-return]
                                       retry_broken=True)

    async def add_data_key(self, saga_id: str, generation: int, master_key_id: str,
                           wrapped: bytes) -> StoredDataKey:
        """Store a generation of the saga's wrapped data key unless one is stored (committed,
        and flushed, before returning: ``synchronous_commit`` as the server sets it, ``on`` by
        default), then read the stored row back: ours, a concurrent writer's, or a tombstone.
        Two statements, not one: a statement does not see the row a racer committed while it
        waited for it (the insert does nothing, and its own snapshot predates the row).

        Raises:
            TypeError, ValueError: see ``backends.data_key_rows.check_new_key``.
            JournalWriteError: not stored (pool exhausted, timeout, broken connections, no
                INSERT privilege).
        """
        check_new_key(saga_id, generation, master_key_id, wrapped)
        created = utc_stamp()

        async def work(conn: Any) -> StoredDataKey:
            await conn.execute(_ADD, (saga_id, generation, master_key_id, wrapped, created))
            cur = await conn.execute(_ONE, (saga_id, generation))
            return key_from_row(await cur.fetchone())

        return await self.database.run(f"write of a data key of {saga_id!r}", work,  # type: ignore[no-any-return]
                                       write=True, retry_broken=True)

    async def may_erase_data_keys(self) -> bool:
        """Whether this role may delete data keys (the eraser role, :data:`ERASER_GRANT`; the
        application's role may not): asked before an erasure is written to the access log.

        Raises:
            JournalError: the server could not be asked.
        """
        async def work(conn: Any) -> bool:
            cur = await conn.execute(
                "SELECT has_table_privilege(current_user, 'sagacity_data_keys', 'DELETE')")
            row = await cur.fetchone()
            return bool(row and row[0])

        return await self.database.run("the eraser privilege check", work)  # type: ignore[no-any-return]

    async def erase_data_keys(self, saga_id: str, *, by: str, reason: str) -> int:
        """Delete the wrapped bytes of every generation of the saga and insert one tombstone per
        generation (``wrapped`` NULL; when, who, why), in one transaction. Needs the eraser
        role (module notes); the application's role is refused and nothing changes.

        Returns:
            The generations that held bytes (0: none).

        Raises:
            TypeError, ValueError: see ``backends.data_key_rows.check_erasure``.
            JournalWriteError: the role may not delete data keys (naming :data:`ERASER_GRANT`),
                or the write failed (nothing erased).
        """
        check_erasure(saga_id, by, reason)
        now = utc_stamp()

        async def work(conn: Any) -> int:
            async with conn.transaction():
                cur = await conn.execute(_LIVE, (saga_id,))
                live = [key_from_row(r) for r in await cur.fetchall()]
                await conn.execute(_DELETE, (saga_id,))
                async with conn.cursor() as many:
                    await many.executemany(_TOMBSTONE, [
                        (k.saga_id, k.generation, k.master_key_id, k.created_at, now, by, reason)
                        for k in live])
            return len(live)

        return await self._key_admin(f"erasure of the data keys of {saga_id!r}", work)  # type: ignore[no-any-return]

    async def rewrap_data_keys(self, rewrap: Callable[[StoredDataKey], tuple[str, bytes]]) -> int:
        """Replace every stored wrapped key by ``rewrap(key)`` = ``(master_key_id, wrapped)``
        (master-key rotation) in one transaction: all of them, or none when ``rewrap`` raises.
        Needs UPDATE on the table: the eraser role (module notes).

        Returns:
            The keys rewritten (tombstones are left alone).

        Raises:
            JournalWriteError: the role may not update data keys, or the write failed.
            What ``rewrap`` raises (nothing changed).
        """

        async def work(conn: Any) -> int:
            async with conn.transaction():
                cur = await conn.execute(_ALL_LIVE)
                live = [key_from_row(r) for r in await cur.fetchall()]
                rows = []
                for key in live:
                    master, wrapped = rewrap(key)
                    check_new_key(key.saga_id, key.generation, master, wrapped)
                    rows.append((master, wrapped, key.saga_id, key.generation))
                async with conn.cursor() as many:
                    await many.executemany(_REWRAP, rows)
            return len(rows)

        return await self._key_admin("rotation of the data keys", work)  # type: ignore[no-any-return]

    async def _key_admin(self, what: str, work: Callable[[Any], Any]) -> Any:
        """Run ``work`` as :meth:`PostgresDatabase.run` does (a write), naming the eraser grant
        when the server refuses for want of privilege.

        Raises:
            JournalWriteError: see the callers.
        """
        try:
            return await self.database.run(what, work, write=True)
        except JournalWriteError as exc:
            if isinstance(exc.__cause__, self.database.psycopg.errors.InsufficientPrivilege):
                raise JournalWriteError(
                    f"PostgreSQL {what} refused: this role may not delete or update data keys "
                    f"(the application's role never may); connect as a role given "
                    f"`{ERASER_GRANT}` ({exc.__cause__})") from exc.__cause__
            raise
