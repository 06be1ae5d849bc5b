"""The PostgreSQL schema: versioned migrations applied by `sagacity db migrate`, equal to the
documented full schema, safe when run twice at once, checked at start-up; the missing extra."""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys

import pytest
from click.testing import CliRunner

from sagacity_agents.cli import cli
from sagacity_agents.core.entries import Phase
from sagacity_agents.backends.postgres.journal import PostgresJournal
from sagacity_agents.backends.postgres.migrations import full_schema_sql, migrate, migrations, schema_version
from sagacity_agents.errors import JournalError
from tests.pg import SERVER, admin_connect, drop_schema, new_schema, server_or_skip, with_search_path


SHIPPED_VERSIONS = [m.version for m in migrations()]
"""Every shipped journal migration's number, in order (numbers are not always contiguous while
branches that each add one are merged)."""


@pytest.fixture
def fresh_schema():
    """An empty schema of its own; yields (name, uri)."""
    server_or_skip()
    name = new_schema("sagacity_fresh")
    try:
        yield name, with_search_path(SERVER, name)
    finally:
        drop_schema(name)


def catalog(schema: str) -> dict[str, list[tuple[object, ...]]]:
    """Tables, columns, constraints and indexes of ``schema``, names relative to it."""
    with admin_connect() as conn:
        columns = conn.execute(
            "SELECT table_name, column_name, ordinal_position, data_type, is_nullable, "
            "column_default, is_identity, identity_generation FROM information_schema.columns "
            "WHERE table_schema = %s ORDER BY 1, 3",
            (schema,),
        ).fetchall()
        constraints = conn.execute(
            "SELECT rel.relname, con.conname, con.contype, pg_get_constraintdef(con.oid) "
            "FROM pg_constraint con JOIN pg_class rel ON rel.oid = con.conrelid "
            "JOIN pg_namespace ns ON ns.oid = rel.relnamespace WHERE ns.nspname = %s "
            "ORDER BY 1, 2",
            (schema,),
        ).fetchall()
        indexes = conn.execute(
            "SELECT tablename, indexname, replace(indexdef, %s, '') FROM pg_indexes "
            "WHERE schemaname = %s ORDER BY 1, 2",
            (f"{schema}.", schema),
        ).fetchall()
        routines = conn.execute(
            "SELECT p.proname, p.prokind, pg_get_function_identity_arguments(p.oid), p.prosrc "
            "FROM pg_proc p JOIN pg_namespace ns ON ns.oid = p.pronamespace "
            "WHERE ns.nspname = %s ORDER BY 1, 3",
            (schema,),
        ).fetchall()
    return {"columns": columns, "constraints": constraints, "indexes": indexes,
            "routines": routines}


async def test_all_migrations_give_exactly_the_full_schema(fresh_schema):
    migrated_name, migrated_uri = fresh_schema
    assert await migrate(migrated_uri) == SHIPPED_VERSIONS
    reference = new_schema("sagacity_reference")
    try:
        with admin_connect(with_search_path(SERVER, reference)) as conn:
            conn.execute(full_schema_sql())
        assert catalog(migrated_name) == catalog(reference)
        assert catalog(reference)["columns"]  # not two empty schemas
    finally:
        drop_schema(reference)


async def test_migrate_is_idempotent_and_safe_when_run_twice_at_once(fresh_schema):
    _, uri = fresh_schema
    first, second = await asyncio.gather(migrate(uri), migrate(uri))
    assert sorted([first, second]) == [[], SHIPPED_VERSIONS]
    assert await migrate(uri) == []
    with admin_connect(uri) as conn:
        assert conn.execute("SELECT count(*) FROM sagacity_schema_migrations").fetchone() == (
            len(SHIPPED_VERSIONS),
        )


async def test_missing_schema_is_a_clear_error_naming_the_command(fresh_schema):
    _, uri = fresh_schema
    journal = PostgresJournal(uri)
    try:
        with pytest.raises(JournalError, match="no sagacity tables.*sagacity db migrate --db URI"):
            await journal.append("s", Phase.INTENT, write_key="a")
    finally:
        await journal.close()


async def test_older_schema_is_a_clear_error_naming_the_command(fresh_schema):
    _, uri = fresh_schema
    await migrate(uri)
    with admin_connect(uri) as conn:  # as if the database were one release behind
        conn.execute("DELETE FROM sagacity_schema_migrations WHERE version = %s", (schema_version(),))
    journal = PostgresJournal(uri)
    try:
        with pytest.raises(JournalError, match=f"sagacity tables version {SHIPPED_VERSIONS[-2]}.*sagacity db migrate"):
            await journal.entries("s")
    finally:
        await journal.close()


def test_cli_db_migrate(fresh_schema):
    _, uri = fresh_schema
    runner = CliRunner()
    first = runner.invoke(cli, ["db", "migrate", "--db", uri])
    assert first.exit_code == 0, first.output
    assert "applied migration(s) 1, 2" in first.output
    again = runner.invoke(cli, ["db", "migrate"], env={"SAGACITY_DB": uri})
    assert again.exit_code == 0 and "nothing to apply" in again.output
    listed = runner.invoke(cli, ["journal", "list", "--db", uri])
    assert listed.exit_code == 0, listed.output
    refused = runner.invoke(cli, ["db", "migrate", "--db", "some.db"])
    assert refused.exit_code == 2 and "not a postgresql:// URI" in refused.output


def test_without_the_extra_a_postgres_uri_names_the_install_command():
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "import sagacity_agents\n"
        "from sagacity_agents.stores import open_journal\n"
        "from sagacity_agents.errors import ConfigurationError\n"
        "try:\n"
        "    open_journal('postgresql://nobody@127.0.0.1:1/none')\n"
        "except ConfigurationError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert "pip install 'sagacity-agents[postgres]'" in out.stdout
    assert "from a checkout: pip install '.[postgres]'" in out.stdout


def test_a_search_path_schema_that_does_not_exist_is_named_with_what_to_do():
    """From a fresh user's run of the README: `db migrate` with `options=-csearch_path%3Dname`
    before `CREATE SCHEMA name` failed with PostgreSQL's "no schema has been selected to create
    in", and the application's error sent them back to that same migrate. Both now say the
    schema must be created first; nothing is created anywhere else."""
    server_or_skip()
    name = f"sagacity_absent_{secrets.token_hex(6)}"  # never created
    uri = with_search_path(SERVER, name)
    result = CliRunner().invoke(cli, ["db", "migrate", "--db", uri])
    assert result.exit_code == 1
    assert "no schema of the connection's search_path" in result.output
    assert "create it first (CREATE SCHEMA" in result.output

    async def use() -> None:
        journal = PostgresJournal(uri)
        try:
            await journal.append("s", Phase.INTENT, write_key="a")
        finally:
            await journal.close()

    with pytest.raises(JournalError, match=r"no schema of the connection's search_path .*CREATE SCHEMA"):
        asyncio.run(use())
    with admin_connect() as conn:
        assert conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (name,)).fetchone() is None


# A migration, once shipped, is what databases in the field have applied: it never changes, not
# even a comment (a path in one was nearly rewritten by a layout move). A new change is a new file.
SHIPPED_MIGRATIONS = {
    "journal/0001_journal_and_approvals.sql": "c32749ab50e81b1db6a38eabdb9d8a2423fbc720fad8d8447097fdc2d275d85b",
    "journal/0002_append_in_one_statement.sql": "595f29f159c5458560397051980a82eef765aca8c55245b3428b619de19f716c",
    "journal/0003_fencing_tokens.sql": "f4982f235869a6b232dc49e38292b90a837ba855bf510cae640be9fe4e24a3ea",
    "journal/0004_entry_tags.sql": "a6b5af19f14c9d26225a790d3648104642af8330c61c7d0ccf5003d759a5be07",
    "journal/0005_late_outcome_after_close.sql": "a429fe2161c87ef18d186935dd304b0e9d8e5a51c0e5fa4debd6674811ba96b2",
    "journal/0006_journal_identity.sql": "c7adde04ad4337e35cdaf4a31c9bc80482335c4333da060392e7f5d2fabd84c1",
    "journal/0007_sensitive_values.sql": "277fbfb4d9a6ac90a03b996173f617113f87b62cead887cff2b5f6dd4e1379ce",
    "journal/0008_approval_args_version.sql": "9e22d70341c739a53944246a3c1867d2af415fca0ffcc25c3d26ebfb9f548109",
    "checkpoints/0001_checkpoints.sql": "573929619c4b234bd1a34a3310894e82b8a94d495bce476d7c36579df26c5c6b",
}


def test_shipped_migrations_are_never_edited():
    import hashlib
    from importlib import resources

    sql = resources.files("sagacity_agents.backends.postgres").joinpath("sql")
    for name, digest in SHIPPED_MIGRATIONS.items():
        assert hashlib.sha256(sql.joinpath(name).read_bytes()).hexdigest() == digest, name
