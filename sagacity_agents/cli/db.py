"""``sagacity db migrate|grant``: create or upgrade the PostgreSQL schemas (journal and
checkpoints); print or apply the application role's least-privilege GRANTs."""

from __future__ import annotations

import asyncio

import click

from ..errors import ConfigurationError, JournalError
from ..render import make_console
from ..settings import CHECKPOINTS_ENVVAR
from ..stores import is_postgres_uri
from .base import CONTEXT_SETTINGS, UsageFailure, cli, db_option

__all__ = ["db"]


@cli.group(context_settings=CONTEXT_SETTINGS,
           short_help="Create or upgrade a PostgreSQL schema; grant the application's role.")
def db() -> None:
    """Manage the PostgreSQL schema (SQLite files create their tables when opened)."""


@db.command(short_help="Apply the schema migrations a PostgreSQL database is missing.")
@db_option()
@click.option("--checkpoints", "checkpoints", envvar=CHECKPOINTS_ENVVAR, show_envvar=True,
              metavar="URI", default=None,
              help="Also migrate the signed-checkpoint schema at this postgresql:// URI "
              "(its own schema, default sagacity_checkpoints; a directory needs nothing).")
@click.option("--checkpoints-only", is_flag=True,
              help="Migrate the checkpoint schema only (e.g. as its own owner), not the journal.")
def migrate(db: str, checkpoints: str | None, checkpoints_only: bool) -> None:
    """Apply the versioned schema migrations the PostgreSQL database at --db is missing, and
    those of the signed-checkpoint schema at --checkpoints when it is a postgresql:// URI.

    Idempotent, and safe when several processes run it at once (an advisory lock serializes
    them). Run it with a role that may create tables; the application itself may then run with
    a role that can only SELECT and INSERT journal rows and checkpoints (see docs/postgres.md).
    """
    from ..backends.postgres.checkpoints import PostgresCheckpointStore
    from ..backends.postgres.migrations import migrate as apply_migrations

    pg_checkpoints = checkpoints is not None and is_postgres_uri(checkpoints)
    if checkpoints_only and not pg_checkpoints:
        raise UsageFailure("--checkpoints-only needs --checkpoints postgresql://... (or $SAGACITY_CHECKPOINTS)")
    journal = not checkpoints_only and (is_postgres_uri(db) or not pg_checkpoints)
    if journal and not is_postgres_uri(db):
        raise UsageFailure(
            f"--db {db} is not a postgresql:// URI: SQLite files create their tables when opened"
        )
    console = make_console(highlight=False)
    try:
        if journal:
            applied = asyncio.run(apply_migrations(db))
            console.print(f"applied migration(s) {', '.join(map(str, applied))}: schema is current"
                          if applied else "schema is current: nothing to apply")
        if pg_checkpoints:
            assert checkpoints is not None
            store = PostgresCheckpointStore(checkpoints)
            applied = asyncio.run(apply_migrations(store.database.conninfo, migration_set=store.migration_set))
            done = f"applied migration(s) {', '.join(map(str, applied))}" if applied else "nothing to apply"
            console.print(f"checkpoint schema {store.schema} is current: {done}")
    except (JournalError, ConfigurationError) as exc:
        raise click.ClickException(str(exc)) from exc


@db.command(short_help="Print (or apply) the least-privilege GRANTs for the application's role.")
@click.argument("role")
@db_option()
@click.option("--schema", default=None, metavar="NAME",
              help="The schema holding the tables (default: the search_path of a --db URI, else "
                   "public; with --checkpoints: sagacity_checkpoints).")
@click.option("--checkpoints", "checkpoints", is_flag=True,
              help="The signed-checkpoint schema's GRANTs instead of the journal's.")
@click.option("--eraser", "eraser", is_flag=True,
              help="The eraser role's GRANTs instead of the application's: it may erase the "
                   "sagas' data keys (`sagacity saga erase`) and rewrap them for a master-key "
                   "rotation, which the application's role may not.")
@click.option("--apply", "apply", is_flag=True,
              help="Run them on the --db database (as the owner of the tables) instead of "
                   "printing them.")
def grant(role: str, db: str, schema: str | None, checkpoints: bool, eraser: bool, apply: bool) -> None:
    """Print the GRANTs that let ROLE run the application and nothing more (docs/postgres.md):
    SELECT and INSERT on the journal (no UPDATE, no DELETE: changing evidence then takes another
    role), the approval store's working state, and USAGE on the schema. With --apply, run them in
    one transaction on --db instead (connect as the tables' owner, after `sagacity db migrate`).

    With --eraser, the GRANTs of the role that may erase data keys (DELETE and a tombstone) and
    rewrap them (UPDATE), read the journal and append its access log's DATA_ERASED entry.

    ROLE and the schema are quoted identifiers: give the role's name as stored (lowercase unless
    it was created quoted). The same GRANTs ship as psql scripts:
    psql URI -v app_role=ROLE -v schema=SCHEMA -f sagacity_agents/backends/postgres/sql/app_role.sql
    """
    from ..backends.postgres.checkpoints import DEFAULT_CHECKPOINT_SCHEMA
    from ..backends.postgres.roles import grant_statements, schema_of_uri

    if schema is None:
        uri_schema = schema_of_uri(db) if is_postgres_uri(db) else None
        schema = DEFAULT_CHECKPOINT_SCHEMA if checkpoints else (uri_schema or "public")
    try:
        statements = grant_statements(role, schema, checkpoints=checkpoints, eraser=eraser)
    except ValueError as exc:
        raise UsageFailure(str(exc)) from exc
    if not apply:
        click.echo("\n".join(statements))
        return
    if not is_postgres_uri(db):
        raise UsageFailure(f"--apply needs --db postgresql://... (got {db}): SQLite has no roles")
    try:
        asyncio.run(_apply(db, statements))
    except (JournalError, ConfigurationError) as exc:
        raise click.ClickException(str(exc)) from exc
    access = "checkpoint" if checkpoints else "eraser" if eraser else "journal"
    make_console(highlight=False).print(
        f"granted {access} access on schema {schema} to {role} "
        f"({len(statements)} statements)", markup=False)


async def _apply(uri: str, statements: list[str]) -> None:
    """Run ``statements`` in one transaction on ``uri``.

    Raises:
        ConfigurationError: psycopg is missing or ``uri`` is not a valid URI.
        JournalError: the server refused (e.g. no such role, not the tables' owner): nothing
            was granted.
    """
    from ..backends.postgres.driver import check_conninfo, load_drivers

    psycopg, _ = load_drivers()
    check_conninfo(psycopg, uri)
    try:
        async with await psycopg.AsyncConnection.connect(uri, connect_timeout=10) as conn, \
                conn.transaction():
            for statement in statements:
                await conn.execute(statement)
    except psycopg.Error as exc:
        raise JournalError(f"GRANTs not applied (nothing was granted): {exc}") from exc
