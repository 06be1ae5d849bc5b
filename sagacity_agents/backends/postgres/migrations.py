"""Versioned schema migrations of the PostgreSQL backend, and the schema check a pool runs.

A :class:`MigrationSet` per schema: the journal's (:data:`JOURNAL_MIGRATIONS`, the files in
``sql/journal/``) and the signed checkpoints' (``checkpoints.checkpoint_migrations``, in
``sql/checkpoints/``). :func:`migrate` applies what a database is missing (``sagacity db
migrate``); :func:`require_current_schema` is how ``setup.PostgresDatabase`` refuses a schema that
is missing or older than this code's when a loop's pool opens.

A shipped migration never changes, not even a comment (``tests/test_postgres_schema.py`` pins
each file's SHA-256): the comments of 0001 and 0002 of the journal and 0001 of the checkpoints
name the modules as they were then (``core/postgres_journal.py`` is now
``backends/postgres/journal.py``, ``core/postgres_checkpoints.py`` ``backends/postgres/
checkpoints.py``, ``core/sql/postgres_checkpoint_role.sql`` ``sql/checkpoint_role.sql``).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

from ...errors import JournalError
from .driver import check_conninfo, load_drivers
from .roles import quote_identifier

__all__ = [
    "JOURNAL_MIGRATIONS",
    "MIGRATE_COMMAND",
    "Migration",
    "MigrationSet",
    "full_schema_sql",
    "migrate",
    "migrations",
    "require_current_schema",
    "schema_version",
]

MIGRATE_COMMAND = "sagacity db migrate --db URI"
"""The command that creates or upgrades the schema."""

_MIGRATION_LOCK = 0x5A6A_C17E_D0DB  # advisory lock key serializing concurrent `db migrate`


@dataclass(frozen=True, slots=True)
class Migration:
    """One versioned schema change shipped as ``NNNN_name.sql`` in its set's folder
    (``backends/postgres/sql/journal/`` or ``sql/checkpoints/``)."""

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
    psycopg, _ = load_drivers()
    check_conninfo(psycopg, conninfo)
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

    PostgreSQL also skips, without a word, a schema the role may not use (no USAGE privilege):
    then the error names the schema and the missing grant instead.

    Raises:
        JournalError: no schema of the search path exists, or the role lacks USAGE on it.
    """
    cur = await conn.execute("SELECT current_schema(), current_setting('search_path'), current_user")
    current, path, user = await cur.fetchone()
    if current is None:
        named = [user if n == "$user" else n for n in (p.strip().strip('"') for p in path.split(","))]
        cur = await conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname = ANY(%s) "
            "AND NOT has_schema_privilege(oid, 'USAGE')", (named,))
        denied = {row[0] for row in await cur.fetchall()}
        schema = next((n for n in named if n in denied), None)
        if schema is not None:
            raise JournalError(
                f"cannot {doing} the sagacity tables: schema {schema} exists, but role {user} has "
                "no USAGE privilege on it (PostgreSQL then acts as if it did not exist). As the "
                f"schema's owner: GRANT USAGE ON SCHEMA {quote_identifier(schema)} TO "
                f"{quote_identifier(user)}; the table grants with it: `sagacity db grant {user} "
                f"--schema {schema}` (docs/postgres.md)"
            )
        raise JournalError(
            f"cannot {doing} the sagacity tables: no schema of the connection's search_path "
            f"({path}) exists; create it first (CREATE SCHEMA ..., as a role that may), or "
            "drop the search_path option from the URI to use the default schema"
        )


async def require_current_schema(
    conn: Any, psycopg: Any, ms: MigrationSet = JOURNAL_MIGRATIONS
) -> None:
    """Refuse to work on a database whose schema is missing, older than this code's, or newer
    (the rule of docs/postgres.md, "Schema versions": older code never uses a newer schema; it
    may not know what a newer migration promised its readers and writers).

    Raises:
        JournalError: the schema is missing, older (naming ``sagacity db migrate``) or newer
            (naming the upgrade of the library).
    """
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
    if found > ms.version():
        where = f' in schema "{ms.schema}"' if ms.schema else ""
        raise JournalError(
            f"the PostgreSQL database has {ms.label} version {found}{where}, newer than this "
            f"version of sagacity-agents knows ({ms.version()}): a newer release migrated it, "
            "and older code never uses a newer schema. Upgrade sagacity-agents on this host")
