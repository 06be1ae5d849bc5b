"""One PostgreSQL database shared by the journal and the approval store of a process: connection
pools (one per event loop), the start-up schema check, driver errors turned into ours, and the one
LISTEN connection that wakes every decision waiter. The versioned migrations and the schema check
itself are in ``migrations``.

psycopg 3 and psycopg_pool are the ``postgres`` extra: they are imported (by ``driver``, with
the URI helpers :func:`~.driver.is_postgres_uri` and :func:`~.driver.redacted_uri`) when a
database is first used, never when this module is, and a missing install is a :class:`ConfigurationError` naming
``pip install 'sagacity-agents[postgres]'``.

Why a pool per event loop: an asyncio connection belongs to the loop that opened it, and
``Sagacity.run_sync`` (like any ``asyncio.run``) starts a new loop per call. Each loop gets its own
pool, opened on first use; when ``asyncio.run`` shuts its loop down, the pool is closed by an async
generator the loop finalizes (``loop.shutdown_asyncgens``), so no connection outlives its loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from ...errors import ConfigurationError, JournalError, JournalWriteError
from .driver import check_conninfo, load_drivers, redacted_uri
from .migrations import JOURNAL_MIGRATIONS, MigrationSet, require_current_schema

__all__ = ["PostgresDatabase"]

T = TypeVar("T")

NOTIFY_CHANNEL = "sagacity_decisions"
"""Channel a decision is announced on; the payload is the request id only (a hint: waiters
always re-read the table)."""

LISTENER_NAME = "sagacity-listener"
"""``application_name`` of the LISTEN connection (to tell it apart in ``pg_stat_activity``)."""


class PostgresDatabase:
    """Connection pools to one PostgreSQL database, shared by a journal and an approval store.

    Connections are taken for one journal or store operation and given back at once, never held
    across a tool body. One pool per event loop (see the module notes). The schema version is
    checked when a loop's pool opens.

    Args:
        conninfo: a ``postgresql://`` or ``postgres://`` URI (any libpq parameters).
        min_size: connections each pool keeps open (default 1).
        max_size: most connections per pool (default 10).
        pool_timeout: seconds to wait for a free connection before the operation fails
            (default 10.0): an INTENT that cannot get one raises :class:`JournalWriteError` and
            the tool does not run.
        connect_timeout: seconds to wait when opening a connection (default 10.0).
        statement_timeout: seconds any one statement may run, lock waits included (default
            30.0; 0 disables).
        check_schema: refuse to work unless the schema is current (default ``True``).
        migration_set: whose schema version is checked (default: the journal's; the checkpoint
            store passes its own).

    Raises:
        ConfigurationError: the ``postgres`` extra is not installed, ``conninfo`` is not a URI
            libpq accepts (checked at once, without connecting), or a size is invalid.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        pool_timeout: float = 10.0,
        connect_timeout: float = 10.0,
        statement_timeout: float = 30.0,
        check_schema: bool = True,
        migration_set: MigrationSet = JOURNAL_MIGRATIONS,
    ) -> None:
        self.psycopg, self._pool_module = load_drivers()
        check_conninfo(self.psycopg, conninfo)
        if not 0 <= min_size <= max_size or max_size < 1:
            raise ConfigurationError("need 0 <= min_size <= max_size and max_size >= 1")
        self.conninfo = conninfo
        self.min_size, self.max_size = min_size, max_size
        self.pool_timeout = pool_timeout
        self.connect_timeout = connect_timeout
        self.statement_timeout = statement_timeout
        self.check_schema = check_schema
        self.migration_set = migration_set
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary()
        )
        self._opening: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Future[Any]] = (
            weakref.WeakKeyDictionary()
        )
        self._keepers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary()
        )
        self._listeners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Listener] = (
            weakref.WeakKeyDictionary()
        )
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresDatabase({redacted_uri(self.conninfo)!r})"

    # --- pools ------------------------------------------------------------------------------

    async def pool(self) -> Any:
        """The running loop's pool, opened (and the schema checked) on first use.

        Raises:
            JournalError: closed, unreachable, or the schema is missing or old.
        """
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is not None:
            return pool
        if self._closed:
            raise JournalError(f"{self!r} is closed")
        opening = self._opening.get(loop)
        if opening is None:
            opening = self._opening[loop] = loop.create_future()
            try:
                pool = await self._open_pool(loop)
            except BaseException as exc:
                del self._opening[loop]
                opening.set_exception(exc)
                opening.exception()  # retrieved: other waiters re-raise it themselves
                raise
            self._pools[loop] = pool
            opening.set_result(pool)
            return pool
        return await asyncio.shield(opening)

    async def _configure(self, conn: Any) -> None:
        # Per connection, once: a statement may not wait for ever (lock waits included).
        await conn.execute(f"SET statement_timeout = {int(self.statement_timeout * 1000)}")

    async def _open_pool(self, loop: asyncio.AbstractEventLoop) -> Any:
        psycopg = self.psycopg
        pool = self._pool_module.AsyncConnectionPool(
            self.conninfo,
            min_size=self.min_size,
            max_size=self.max_size,
            timeout=self.pool_timeout,
            open=False,
            configure=self._configure,
            kwargs={
                "autocommit": True,
                "application_name": "sagacity",
                "connect_timeout": max(1, round(self.connect_timeout)),
            },
            name="sagacity",
        )
        try:
            await pool.open(wait=self.min_size > 0, timeout=self.connect_timeout)
            if self.check_schema:
                async with pool.connection() as conn:
                    await require_current_schema(conn, psycopg, self.migration_set)
        except BaseException as exc:
            await pool.close()
            if isinstance(exc, self._pool_module.PoolTimeout):
                # The pool only logs why its connections failed: ask libpq once more, briefly.
                raise JournalError(f"cannot open {self!r}: {exc}{await self._why_unreachable()}") from exc
            if isinstance(exc, psycopg.Error):
                raise JournalError(f"cannot open {self!r}: {exc}") from exc
            raise
        keeper = _close_with_loop(pool)
        await keeper.__anext__()  # started in this loop: its shutdown_asyncgens closes the pool
        self._keepers[loop] = keeper
        return pool

    async def _why_unreachable(self) -> str:
        """``"; last error: ..."`` from one direct connection attempt (at most 3 s), or ``""``
        when it connects or gives no reason."""
        try:
            conn = await self.psycopg.AsyncConnection.connect(
                self.conninfo, connect_timeout=max(1, min(3, round(self.connect_timeout))),
            )
        except Exception as exc:  # noqa: BLE001 - any reason is worth showing
            reason = " ".join(str(exc).split()).replace(self.conninfo, redacted_uri(self.conninfo))
            return f"; last error: {reason}" if reason else ""
        await conn.close()
        return ""

    async def run(
        self, what: str, work: Callable[[Any], Awaitable[T]], *, write: bool = False,
        retry_broken: bool = False, attempts: int = 3,
    ) -> T:
        """Run ``work(conn)`` on a pooled connection (autocommit; ``work`` opens a transaction
        with ``conn.transaction()`` where it needs one), and give the connection back.

        With ``retry_broken``, a connection that broke (killed backend, server restart, network)
        is replaced and ``work`` run again, up to ``attempts`` times in all: only for work that is
        safe to repeat whatever the first try did (a journal append under its write key).

        Args:
            what: what the caller does, for messages ("append to saga 'x'").
            work: a coroutine function of the connection.
            write: errors become :class:`JournalWriteError` instead of :class:`JournalError`.
            retry_broken: see above.
            attempts: tries in all when connections keep breaking.

        Raises:
            JournalError / JournalWriteError: no connection within ``pool_timeout`` seconds (pool
                exhausted), the pool closed meanwhile, a statement failed (the psycopg error
                is the ``__cause__``), or the last failure when every attempt broke.
        """
        error = JournalWriteError if write else JournalError
        pool = self._pools.get(asyncio.get_running_loop())
        if pool is None:
            pool = await self.pool()
        # getconn / putconn, not pool.connection(): the two context managers it nests cost more
        # than a journal append's own work on the client (measured: ~25 us of CPU per append).
        # putconn rolls back a connection left in a transaction and discards a broken one.
        for attempt in range(1, attempts + 1):
            try:
                conn = await pool.getconn()
            except self._pool_module.PoolTimeout as exc:
                raise error(
                    f"PostgreSQL {what}: no free connection within {self.pool_timeout} s "
                    f"(pool of {self.max_size} exhausted)"
                ) from exc
            except self.psycopg.Error as exc:  # the pool closed (the database closed meanwhile)
                raise error(f"PostgreSQL {what} failed: {exc}") from exc
            try:
                return await work(conn)
            except (self.psycopg.Error, JournalError) as exc:
                failure = exc
            finally:
                await pool.putconn(conn)
            # Judged after putconn: a connection that broke inside a pipeline may only look
            # broken once the pool has tried to give it back (and closed it).
            if not (retry_broken and (conn.broken or conn.closed) and attempt < attempts):
                if isinstance(failure, JournalError):
                    raise failure
                raise error(f"PostgreSQL {what} failed: {failure}") from failure
            # The pool discards the broken connection. Its idle ones may be dead too (a server
            # restart kills them all): check them before the next attempt.
            with contextlib.suppress(Exception):
                await pool.check()
        raise AssertionError("unreachable")  # pragma: no cover

    # --- notifications ----------------------------------------------------------------------

    def listener(self) -> _Listener:
        """The running loop's LISTEN connection (one per loop, shared by every waiter)."""
        loop = asyncio.get_running_loop()
        listener = self._listeners.get(loop)
        if listener is None:
            listener = self._listeners[loop] = _Listener(self)
        return listener

    # --- closing ----------------------------------------------------------------------------

    async def close(self) -> None:
        """Close the running loop's pool and listener; pools of loops already shut down were
        closed with them. Idempotent; the database cannot be used afterwards."""
        self._closed = True
        loop = asyncio.get_running_loop()
        listener = self._listeners.pop(loop, None)
        if listener is not None:
            await listener.stop()
        keeper = self._keepers.pop(loop, None)
        pool = self._pools.pop(loop, None)
        if keeper is not None:
            await keeper.aclose()
        elif pool is not None:  # pragma: no cover - a pool always has its keeper
            await pool.close()

    async def execute(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        """Run raw SQL in its own transaction (tests and tamper demonstrations; not for apps)."""

        async def work(conn: Any) -> list[tuple[Any, ...]]:
            async with conn.transaction():
                cur = await conn.execute(sql, params)
                return list(await cur.fetchall()) if cur.description else []

        return await self.run("raw SQL", work)


async def _close_with_loop(pool: Any) -> AsyncIterator[None]:
    """Suspended for the pool's life; finalized (pool closed) by ``close()`` or when the loop
    that started it shuts down its async generators."""
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            await pool.close(timeout=1.0)


class _Listener:
    """One LISTEN connection per loop serving every decision waiter of the process.

    Each notification (payload: a request id) wakes the store's in-process notifier for that id.
    When the connection breaks, every waiter is woken (so each re-reads the table) and the
    connection is re-opened with a backoff of 0.1 s doubling to 5 s. Nothing is trusted from a
    notification: it only shortens a wait.
    """

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db
        self._subscribers: list[Callable[[str | None], None]] = []
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Event = asyncio.Event()
        self.backend_pid: int | None = None
        """Server process id of the current LISTEN connection (``None`` while not connected)."""

    async def subscribe(self, wake: Callable[[str | None], None]) -> None:
        """Call ``wake(request_id)`` for each notification (``wake(None)``: maybe missed some,
        re-read everything); returns once LISTEN is active, or at once when it cannot be."""
        self._subscribers.append(wake)
        if self._task is None or self._task.done():
            self._ready.clear()
            self._task = asyncio.get_running_loop().create_task(self._serve())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), self._db.connect_timeout)

    def unsubscribe(self, wake: Callable[[str | None], None]) -> None:
        """Stop calling ``wake``."""
        with contextlib.suppress(ValueError):
            self._subscribers.remove(wake)

    def _wake_all(self, request_id: str | None) -> None:
        for wake in list(self._subscribers):
            wake(request_id)

    async def _serve(self) -> None:
        psycopg = self._db.psycopg
        delay = 0.1
        while self._subscribers:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._db.conninfo, autocommit=True, application_name=LISTENER_NAME,
                    connect_timeout=max(1, round(self._db.connect_timeout)),
                ) as conn:
                    await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    self.backend_pid = conn.info.backend_pid
                    self._ready.set()
                    self._wake_all(None)  # anything decided while we were not listening
                    delay = 0.1
                    async for note in conn.notifies():
                        self._wake_all(note.payload)
            except psycopg.Error:
                self.backend_pid = None
                self._ready.set()  # waiters go on polling meanwhile
                self._wake_all(None)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def stop(self) -> None:
        """Close the LISTEN connection."""
        self._subscribers.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
