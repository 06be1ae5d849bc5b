"""Checkpoint stores: the contract every store passes (a directory, a PostgreSQL table), and what
only the PostgreSQL store adds: its own schema and migrations, the URI forms, and an application
role that may append checkpoints but never rewrite or remove them."""

from __future__ import annotations

import asyncio
import re
import secrets

import psycopg
import pytest
from click.testing import CliRunner

from sagacity_agents import Sagacity
from sagacity_agents.backends import PostgresCheckpointStore
from sagacity_agents.errors import ConfigurationError, JournalError
from sagacity_agents.evidence import Keyring
from sagacity_agents.backends.postgres.roles import grant_statements
from sagacity_agents.cli import cli
from sagacity_agents.core.checkpoints import sign_checkpoint
from sagacity_agents.backends.postgres.checkpoints import checkpoint_migrations, split_schema
from sagacity_agents.backends.postgres.migrations import migrate
from sagacity_agents.core.signing import generate_key
from sagacity_agents.settings import checkpoint_store_at, evidence_from
from tests.pg import SERVER, admin_connect, checkpoint_uri, drop_schema, server_or_skip, with_search_path

from .test_keys_and_checkpoints import closed
from .tamper import sql

T = "2026-01-01T00:00:00.000000Z"


@pytest.fixture
def keyring(tmp_path):
    generate_key(tmp_path / "keys", "k1")
    return Keyring.load(tmp_path / "keys")


async def test_store_contract_order_sagas_and_an_identical_put_again(checkpoints_at, keyring):
    """Every store: checkpoints come back as stored, per saga, only that saga's; storing an
    identical checkpoint again (a retried put) changes nothing that verification sees;
    `saga_ids` lists each checkpointed saga once, oldest first; a saga without checkpoints
    has none."""
    store = checkpoint_store_at(checkpoints_at)
    try:
        a1 = sign_checkpoint(keyring, "saga-a", 3, "aa" * 32, T)
        b1 = sign_checkpoint(keyring, "saga-b", 1, "bb" * 32, T)
        a2 = sign_checkpoint(keyring, "saga-a", 7, "cc" * 32, T)
        for checkpoint in (a1, b1, a2, a1):
            await store.put(checkpoint)
        assert list(dict.fromkeys(await store.list("saga-a"))) == [a1, a2]
        assert await store.list("saga-b") == [b1]
        assert await store.list("saga-c") == []
        assert await store.saga_ids() == ["saga-a", "saga-b"]
        for checkpoint in await store.list("saga-a"):
            checkpoint.verify(keyring)
    finally:
        if isinstance(store, PostgresCheckpointStore):
            await store.close()


def test_a_postgresql_uri_selects_the_table_everywhere_a_directory_is_accepted(
        tmp_path, monkeypatch, pg_checkpoints_uri):
    """Sagacity(checkpoints=URI), $SAGACITY_CHECKPOINTS=URI and the CLI's --checkpoints URI all
    use the PostgreSQL table: a saga closed by the library is found by `journal verify`, a
    checkpoint signed by `audit checkpoint` lands in the table, and a tail cut from the journal
    is reported truncated at the checkpointed seq."""
    uri, keys, db = pg_checkpoints_uri, tmp_path / "keys", str(tmp_path / "j.db")
    generate_key(keys, "k1")
    assert isinstance(evidence_from(uri, keys).checkpoints, PostgresCheckpointStore)  # Sagacity(checkpoints=uri)
    monkeypatch.setenv("SAGACITY_CHECKPOINTS", uri)

    async def run() -> str:
        s = Sagacity(db, keyring=keys)  # from the environment
        assert isinstance(s.evidence.checkpoints, PostgresCheckpointStore)
        try:
            return await closed(s)
        finally:
            await s.aclose()

    sid = asyncio.run(run())
    monkeypatch.delenv("SAGACITY_CHECKPOINTS")
    runner = CliRunner()
    signed = runner.invoke(cli, ["audit", "checkpoint", sid, "--db", db, "--checkpoints", uri, "--keyring", str(keys)])
    assert signed.exit_code == 0 and "signed seq" in signed.output, signed.output
    conninfo, schema = split_schema(uri)
    with admin_connect(conninfo) as conn:
        (count,) = conn.execute(f'SELECT count(*) FROM "{schema}".sagacity_checkpoints WHERE saga_id = %s',
                                (sid,)).fetchone()
    assert count == 2  # at the close, and on demand (a new time: a new statement)
    ok = runner.invoke(cli, ["journal", "verify", "--db", db, "--checkpoints", uri, "--keyring", str(keys)])
    assert ok.exit_code == 0, ok.output
    (n,) = sql(db, "SELECT max(seq) FROM sagacity_journal WHERE saga_id = ?", (sid,))[0]
    sql(db, "DELETE FROM sagacity_journal WHERE saga_id = ? AND seq >= ?", (sid, n - 1))
    cut = runner.invoke(cli, ["journal", "verify", "--db", db, "--checkpoints", uri, "--keyring", str(keys)])
    assert cut.exit_code == 1 and f"at seq {n - 1}: truncated" in cut.output, cut.output


def test_checkpoint_uri_schema_parameter_and_bad_names():
    """`sagacity_schema=NAME` names the schema and never reaches libpq (other parameters stay);
    a name that is not a plain lowercase identifier is refused before anything connects."""
    base = with_search_path("postgresql://app@db/agents", "journal")
    assert split_schema(f"{base}&sagacity_schema=audit_cp") == (base, "audit_cp")
    assert split_schema("postgresql://app@db/agents") == ("postgresql://app@db/agents", None)
    store = PostgresCheckpointStore("postgresql://app@db/agents")
    assert store.schema == "sagacity_checkpoints" and "sagacity_schema" not in store.database.conninfo
    assert PostgresCheckpointStore(checkpoint_uri("x"), schema="y").schema == "y"
    for bad in ("Audit", "a-b", 'x"; DROP TABLE t; --', "", "a" * 64):
        with pytest.raises(ConfigurationError, match="lowercase identifier"):
            checkpoint_migrations(bad)
    with pytest.raises(ConfigurationError, match="lowercase identifier"):
        PostgresCheckpointStore("postgresql://h/d?sagacity_schema=Audit")


@pytest.fixture
def fresh_checkpoint_schema():
    """A checkpoint schema name nobody has created; dropped afterwards."""
    server_or_skip()
    name = f"sagacity_cpfresh_{secrets.token_hex(4)}"
    try:
        yield name
    finally:
        drop_schema(name)


async def test_missing_checkpoint_schema_is_a_clear_error_naming_the_command(fresh_checkpoint_schema, keyring):
    store = PostgresCheckpointStore(checkpoint_uri(fresh_checkpoint_schema))
    try:
        with pytest.raises(JournalError, match=f'no sagacity checkpoint schema in schema "{fresh_checkpoint_schema}"'
                                                   r".*sagacity db migrate --checkpoints URI"):
            await store.put(sign_checkpoint(keyring, "s", 1, "aa" * 32, T))
        with pytest.raises(JournalError, match="sagacity db migrate --checkpoints URI"):
            await store.list("s")
    finally:
        await store.close()


async def test_checkpoint_migrations_are_their_own_and_safe_when_run_twice_at_once(fresh_checkpoint_schema):
    """The checkpoint schema is created by its own migrations, recorded in its own versions
    table (so it may share a schema or database with the journal's without their versions
    mixing), idempotently, and two runs at once apply it once."""
    ms = checkpoint_migrations(fresh_checkpoint_schema)
    first, second = await asyncio.gather(migrate(SERVER, migration_set=ms), migrate(SERVER, migration_set=ms))
    assert sorted([first, second]) == [[], list(range(1, ms.version() + 1))]
    assert await migrate(SERVER, migration_set=ms) == []
    with admin_connect() as conn:
        tables = {r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (fresh_checkpoint_schema,))}
    assert tables == {"sagacity_checkpoints", "sagacity_checkpoint_migrations"}


def test_cli_db_migrate_checkpoints(fresh_checkpoint_schema, pg_uri, monkeypatch):
    """`sagacity db migrate --checkpoints URI` migrates the checkpoint schema too (or alone with
    --checkpoints-only, or when --db is not PostgreSQL); a checkpoint directory needs nothing."""
    uri = checkpoint_uri(fresh_checkpoint_schema)
    runner = CliRunner()
    both = runner.invoke(cli, ["db", "migrate", "--db", pg_uri, "--checkpoints", uri])
    assert both.exit_code == 0, both.output
    assert "schema is current: nothing to apply" in both.output
    assert f"checkpoint schema {fresh_checkpoint_schema} is current: applied migration(s) 1" in both.output
    monkeypatch.setenv("SAGACITY_CHECKPOINTS", uri)
    alone = runner.invoke(cli, ["db", "migrate", "--checkpoints-only"])
    assert alone.exit_code == 0 and alone.output.strip() == (
        f"checkpoint schema {fresh_checkpoint_schema} is current: nothing to apply"), alone.output
    monkeypatch.setenv("SAGACITY_CHECKPOINTS", "some/dir")
    refused = runner.invoke(cli, ["db", "migrate", "--checkpoints-only"])
    assert refused.exit_code == 2 and "--checkpoints-only needs" in refused.output


@pytest.fixture
def app_role(pg_uri, pg_checkpoints_uri):
    """A login role holding only the GRANTs docs/postgres.md shows, for the journal's schema
    and the checkpoint schema; yields (journal URI, checkpoint URI) as that role."""
    role = f"sagacity_app_{secrets.token_hex(4)}"
    journal_schema = re.search(r"search_path%3D(\w+)", pg_uri).group(1)
    _, cp_schema = split_schema(pg_checkpoints_uri)
    grants = (grant_statements(role, journal_schema)
              + grant_statements(role, cp_schema, checkpoints=True))  # the shipped scripts' GRANTs
    with admin_connect(pg_uri) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        for statement in grants:
            conn.execute(statement)
    as_role = SERVER.replace("//postgres@", f"//{role}@")
    try:
        yield with_search_path(as_role, journal_schema), checkpoint_uri(cp_schema).replace(SERVER, as_role)
    finally:
        with admin_connect(pg_uri) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


async def test_the_application_role_appends_checkpoints_but_cannot_rewrite_or_remove_them(app_role, tmp_path):
    """Journal and checkpoints on PostgreSQL, the application under the documented least-privilege
    role: sagas close with signed checkpoints and verify. The same role cannot UPDATE, DELETE or
    TRUNCATE a checkpoint, nor touch the checkpoint schema's versions: so whoever holds the
    application's credentials can cut a journal's tail only where no checkpoint reveals it."""
    journal_uri, cp_uri = app_role
    generate_key(tmp_path / "keys", "k1")
    s = Sagacity(journal_uri, checkpoints=cp_uri, keyring=tmp_path / "keys")
    try:
        sid = await closed(s)
        assert len(await s.evidence.checkpoints.list(sid)) == 1
        assert all(r.ok for r in await s.verify())
    finally:
        await s.aclose()
    conninfo, schema = split_schema(cp_uri)
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        for statement in (f'UPDATE "{schema}".sagacity_checkpoints SET seq = 1',
                          f'DELETE FROM "{schema}".sagacity_checkpoints',
                          f'TRUNCATE "{schema}".sagacity_checkpoints',
                          f'DELETE FROM "{schema}".sagacity_checkpoint_migrations'):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                await conn.execute(statement)
