"""``sagacity db migrate``: create or upgrade the PostgreSQL schemas (journal and checkpoints)."""

from __future__ import annotations

import asyncio

import click

from ..errors import ConfigurationError, JournalError
from ..render import make_console
from ..settings import CHECKPOINTS_ENVVAR
from ..stores import is_postgres_uri
from .base import CONTEXT_SETTINGS, UsageFailure, cli, db_option

__all__ = ["db"]


@cli.group(context_settings=CONTEXT_SETTINGS, short_help="Create or upgrade a PostgreSQL schema.")
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
