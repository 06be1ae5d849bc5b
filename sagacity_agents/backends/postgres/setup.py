"""One PostgreSQL database shared by the journal and the approval store of a process: connection
pools (one per event loop), schema migrations and the start-up schema check, driver errors turned
into ours, and the one LISTEN connection that wakes every decision waiter.

psycopg 3 and psycopg_pool are the ``postgres`` extra: they are imported when a database is first
used, never when this module is, and a missing install is a :class:`ConfigurationError` naming
``pip install 'sagacity-agents[postgres]'``.

Why a pool per event loop: an asyncio connection belongs to the loop that opened it, and
``Sagacity.run_sync`` (like any ``asyncio.run``) starts a new loop per call. Each loop gets its own
pool, opened on first use; when ``asyncio.run`` shuts its loop down, the pool is closed by an async
generator the loop finalizes (``loop.shutdown_asyncgens``), so no connection outlives its loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any, TypeVar

from ...errors import ConfigurationError, JournalError, JournalWriteError

__all__ = [
    "INSTALL_HINT",
    "JOURNAL_MIGRATIONS",
    "MIGRATE_COMMAND",
    "MigrationSet",
    "PostgresDatabase",
    "is_postgres_uri",
    "migrations",
    "redacted_uri",
    "schema_version",
]

T = TypeVar("T")

INSTALL_HINT = "pip install 'sagacity-agents[postgres]' (from a checkout: pip install '.[postgres]')"
"""The command that installs the PostgreSQL backend's dependencies (psycopg 3, psycopg_pool)."""

MIGRATE_COMMAND = "sagacity db migrate --db URI"
"""The command that creates or upgrades the schema."""

NOTIFY_CHANNEL = "sagacity_decisions"
"""Channel a decision is announced on; the payload is the request id only (a hint: waiters
always re-read the table)."""

LISTENER_NAME = "sagacity-listener"
"""``application_name`` of the LISTEN connection (to tell it apart in ``pg_stat_activity``)."""

_MIGRATION_LOCK = 0x5A6A_C17E_D0DB  # advisory lock key serializing concurrent `db migrate`


def is_postgres_uri(location: object) -> bool:
    """Return whether ``location`` (a journal argument) names a PostgreSQL database:
    a string starting with ``postgresql://`` or ``postgres://``."""
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


def _drivers() -> tuple[Any, Any]:
    """Import psycopg and psycopg_pool.

    Raises:
        ConfigurationError: the ``postgres`` extra is not installed.
    """
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise ConfigurationError(
            f"the PostgreSQL backend requires the 'postgres' extra: {INSTALL_HINT}"
        ) from exc
    return psycopg, psycopg_pool


def _check_conninfo(psycopg: Any, conninfo: str) -> None:
    """Refuse a URI libpq cannot parse, at once (not after a pool's connect timeout).

    Raises:
        ConfigurationError: libpq's own reason (with any password removed), or a port that is
            not a number from 1 to 65535.
    """
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.Error as exc:
        reason = str(exc).strip().replace(conninfo, redacted_uri(conninfo))
        raise ConfigurationError(f"not a valid PostgreSQL URI {redacted_uri(conninfo)!r}: {reason}") from exc
    for port in str(params.get("port") or "").split(","):
        if port and not (port.isdigit() and 1 <= int(port) <= 65535):
            raise ConfigurationError(
                f"not a valid PostgreSQL URI {redacted_uri(conninfo)!r}: invalid port {port!r}"
            )


@dataclass(frozen=True, slots=True)
class Migration:
    """One versioned schema change shipped in ``backends/postgres/sql/journal/NNNN_name.sql``."""

    version: int
    """Its number (the file name's prefix); applied in increasing order."""
    name: str
    """The file name."""
    sql: str
    """The statements."""


@dataclass(frozen=True, slots=True)
class MigrationSet:
    """One set of versioned migrations: the journal's, or the signed checkpoints' (which live in
    a schema of their own, ``backends/postgres/checkpoints.py``)."""

    folder: str
    """Where its ``NNNN_name.sql`` files are, relative to ``sagacity_agents/backends/postgres``."""
    table: str
    """The table recording which versions are applied."""
    label: str
    """What it is, for messages ("sagacity tables")."""
    command: str
    """The command that applies it, for messages."""
    schema: str | None = None
    """The PostgreSQL schema it lives in, created if missing and put first on ``search_path``
    while migrating; ``None``: the connection's own ``search_path``. A plain lowercase
    identifier (checked by whoever builds the set)."""

    def migrations(self) -> list[Migration]:
        """Every shipped migration of the set, oldest first."""
        folder = resources.files("sagacity_agents.backends.postgres").joinpath(self.folder)
        found = []
        for item in folder.iterdir():
            if item.name.endswith(".sql") and item.name[:4].isdigit():
                found.append(Migration(int(item.name[:4]), item.name, item.read_text("utf-8")))
        return sorted(found, key=lambda m: m.version)

    def version(self) -> int:
        """The version this code needs: the highest shipped migration."""
        return self.migrations()[-1].version

    def qualified(self, name: str) -> str:
        """``name`` qualified with the set's schema (unqualified without one)."""
        return f'"{self.schema}".{name}' if self.schema else name


JOURNAL_MIGRATIONS = MigrationSet("sql/journal", "sagacity_schema_migrations", "sagacity tables",
                                  MIGRATE_COMMAND)
"""The journal's, the approval requests' and the snapshots' migrations."""


def migrations() -> list[Migration]:
    """Every shipped migration of the journal's schema, oldest first."""
    return JOURNAL_MIGRATIONS.migrations()


def schema_version() -> int:
    """The journal schema version this code needs: the highest shipped migration."""
    return JOURNAL_MIGRATIONS.version()


def full_schema_sql() -> str:
    """The whole current schema in one file (``backends/postgres/sql/schema.sql``); a test checks
    that applying every migration gives exactly this."""
    return (
        resources.files("sagacity_agents.backends.postgres").joinpath("sql/schema.sql").read_text("utf-8")
    )


async def migrate(conninfo: str, *, connect_timeout: float = 10.0,
                  migration_set: MigrationSet = JOURNAL_MIGRATIONS) -> list[int]:
    """Create or upgrade the schema at ``conninfo`` to the set's version (default: the
    journal's, :func:`schema_version`).

    Idempotent; safe when several processes run it at once: the whole upgrade is one transaction
    holding a transaction-scoped advisory lock, so a second process waits, then finds nothing left
    to apply. Run it with a role that may create tables (not the application's role); on a
    schema that is already current it only reads, so a deploy step that runs it as the
    application's role (SELECT on the versions table) succeeds and applies nothing.

    Args:
        conninfo: ``postgresql://`` URI (libpq parameters such as ``options=-csearch_path=...``
            apply).
        connect_timeout: seconds to wait for the connection.
        migration_set: which migrations (the checkpoint store passes its own).

    Returns:
        The versions applied by this call (empty when the schema was current).

    Raises:
        ConfigurationError: psycopg is not installed, or ``conninfo`` is not a valid URI.
        JournalError: the database cannot be reached or a migration fails (nothing applied).
    """
    psycopg, _ = _drivers()
    _check_conninfo(psycopg, conninfo)
    ms = migration_set
    try:
        async with await psycopg.AsyncConnection.connect(
            conninfo, connect_timeout=max(1, round(connect_timeout))
        ) as conn:
            if {m.version for m in ms.migrations()} <= await _applied_versions(conn, psycopg, ms):
                return []  # current: nothing to lock or create (the application's role may not)
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                if ms.schema is not None:
                    # Created only when missing: CREATE SCHEMA IF NOT EXISTS needs CREATE on the
                    # database even when the schema exists, which its owner may not hold.
                    cur = await conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (ms.schema,))
                    if await cur.fetchone() is None:
                        await conn.execute(f'CREATE SCHEMA "{ms.schema}"')
                    await conn.execute(f'SET LOCAL search_path TO "{ms.schema}"')
                else:
                    await _require_search_path_schema(conn, "migrate")
                await conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {ms.table} ("
                    " version integer PRIMARY KEY, name text NOT NULL,"
                    " applied_at timestamptz NOT NULL DEFAULT now())"
                )
                cur = await conn.execute(f"SELECT version FROM {ms.table}")
                done = {row[0] for row in await cur.fetchall()}
                applied = []
                for migration in ms.migrations():
                    if migration.version in done:
                        continue
                    await conn.execute(migration.sql)
                    await conn.execute(
                        f"INSERT INTO {ms.table} (version, name) VALUES (%s, %s)",
                        (migration.version, migration.name),
                    )
                    applied.append(migration.version)
            return applied
    except psycopg.Error as exc:
        raise JournalError(f"PostgreSQL migration failed: {exc}") from exc


async def _applied_versions(conn: Any, psycopg: Any, ms: MigrationSet) -> set[int]:
    """The set's versions recorded as applied, read without a lock or any DDL; empty when its
    table (or schema) is missing or unreadable (:func:`migrate` then takes the locked way, which
    decides, and reports what is wrong)."""
    try:
        async with conn.transaction():
            cur = await conn.execute(f"SELECT version FROM {ms.qualified(ms.table)}")
            return {row[0] for row in await cur.fetchall()}
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName,
            psycopg.errors.InsufficientPrivilege):
        return set()


async def _require_search_path_schema(conn: Any, doing: str) -> None:
    """Raise a clear error when the connection's ``search_path`` names no schema that exists
    (a URI's ``options=-csearch_path%3Dname`` before ``CREATE SCHEMA name``): PostgreSQL's own
    message, "no schema has been selected to create in", does not say what to do.

    Raises:
        JournalError: no schema of the search path exists.
    """
    cur = await conn.execute("SELECT current_schema(), current_setting('search_path')")
    current, path = await cur.fetchone()
    if current is None:
        raise JournalError(
            f"cannot {doing} the sagacity tables: no schema of the connection's search_path "
            f"({path}) exists; create it first (CREATE SCHEMA ..., as a role that may), or "
            "drop the search_path option from the URI to use the default schema"
        )


async def _check_schema(conn: Any, psycopg: Any, ms: MigrationSet = JOURNAL_MIGRATIONS) -> None:
    """Refuse to work on a database whose schema is missing or older than this code's."""
    found: int | None
    try:
        cur = await conn.execute(f"SELECT max(version) FROM {ms.qualified(ms.table)}")
        row = await cur.fetchone()
        found = None if row is None or row[0] is None else int(row[0])
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
        found = None
    if found is None and ms.schema is None:
        await _require_search_path_schema(conn, "use")
    if found is None or found < ms.version():
        where = f' in schema "{ms.schema}"' if ms.schema else ""
        state = f"has no {ms.label}{where}" if found is None else f"has {ms.label} version {found}{where}"
        raise JournalError(
            f"the PostgreSQL database {state}; this version needs {ms.version()}: run "
            f"`{ms.command}` (with a role that may create tables)"
        )


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
        self.psycopg, self._pool_module = _drivers()
        _check_conninfo(self.psycopg, conninfo)
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
                    await _check_schema(conn, psycopg, self.migration_set)
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


def redacted_uri(location: str) -> str:
    """``location`` as it may be shown or logged: a PostgreSQL URI without its password (in the
    user info or a ``password=`` query parameter); anything else unchanged."""
    if not is_postgres_uri(location):
        return location
    scheme, _, rest = location.partition("://")
    end = len(rest)
    for stop in "/?#":  # the authority ends at the first of these
        if stop in rest:
            end = min(end, rest.index(stop))
    authority, tail = rest[:end], rest[end:]
    userinfo, at, hosts = authority.rpartition("@")
    if at:
        authority = f"{userinfo.split(':', 1)[0]}@{hosts}"
    tail = re.sub(r"([?&])password=[^&#]*", r"\1password=***", tail)
    return f"{scheme}://{authority}{tail}"


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
