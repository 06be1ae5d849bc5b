"""R-04 d and e (issue 18), on a real PostgreSQL with real roles made by each test.

d: a role without USAGE on the schema is told which grant it lacks (PostgreSQL itself acts as if
   the schema did not exist).
e: the GRANT scripts name the role and schema by psql variables (the former placeholder
   ``sagacity_app`` was a prefix of ``sagacity_approval_requests``: a ``sed`` broke the table's
   GRANT, and every pause then compensated instead of waiting); ``sagacity db grant ROLE`` prints
   them filled in, or applies them; the printed GRANTs give exactly docs/postgres.md's least
   privilege."""

from __future__ import annotations

import asyncio
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from importlib import resources

import psycopg
import pytest
from click.testing import CliRunner

from sagacity_agents import Sagacity, SagaStatus
from sagacity_agents.errors import JournalError
from sagacity_agents.backends.postgres.journal import PostgresJournal
from sagacity_agents.backends.postgres.roles import grant_statements
from sagacity_agents.cli import cli
from tests.pg import SERVER, admin_connect, with_search_path

from .sdk import wire_app

SQL = resources.files("sagacity_agents.backends.postgres").joinpath("sql")
WIRE = ("transfer", '{"amount": 5, "to": "acct-9"}', "w1")
LEAST_PRIVILEGE = {
    ("sagacity_schema_migrations", "SELECT"),
    ("sagacity_journal", "SELECT"), ("sagacity_journal", "INSERT"),
    ("sagacity_journal_meta", "SELECT"),
    ("sagacity_approval_requests", "SELECT"), ("sagacity_approval_requests", "INSERT"),
    ("sagacity_approval_requests", "UPDATE"),
    ("sagacity_snapshots", "SELECT"), ("sagacity_snapshots", "INSERT"),
    ("sagacity_snapshots", "UPDATE"), ("sagacity_snapshots", "DELETE"),
    ("sagacity_data_keys", "SELECT"), ("sagacity_data_keys", "INSERT"),
}
"""docs/postgres.md's promise: (table, privilege) the application's role holds, nothing more."""


@pytest.fixture(autouse=True)
def ledger(tmp_path, monkeypatch):
    monkeypatch.setattr(wire_app, "LEDGER", tmp_path / "ledger.txt")


def schema_of(uri: str) -> str:
    return re.search(r"search_path%3D(\w+)", uri).group(1)


@pytest.fixture
def new_role(pg_uri) -> Iterator:
    """Makes login roles with no privileges (named with the placeholder that used to collide,
    ``sagacity_app`` + a suffix); drops them and what was granted to them at the end."""
    made: list[str] = []

    def make() -> str:
        role = f"sagacity_app_{secrets.token_hex(4)}"
        with admin_connect(pg_uri) as conn:
            conn.execute(f'CREATE ROLE "{role}" LOGIN')
        made.append(role)
        return role

    yield make
    with admin_connect(pg_uri) as conn:
        for role in made:
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


def as_role(role: str, schema: str) -> str:
    return with_search_path(SERVER.replace("//postgres@", f"//{role}@"), schema)


def table_grants(pg_uri: str, role: str) -> set[tuple[str, str]]:
    with admin_connect(pg_uri) as conn:
        rows = conn.execute(
            "SELECT table_name, privilege_type FROM information_schema.role_table_grants "
            "WHERE grantee = %s AND table_schema = %s", (role, schema_of(pg_uri))).fetchall()
    return {(table, privilege) for table, privilege in rows}


# --- d --------------------------------------------------------------------------------------


@pytest.mark.case("R-04d")
async def test_a_role_without_usage_on_the_schema_is_told_the_missing_grant(pg_uri, new_role):
    """The role holds every table grant but not USAGE on the schema: the error names the schema,
    says it exists, and gives the GRANT to run (not "no schema ... exists; create it")."""
    role, schema = new_role(), schema_of(pg_uri)
    with admin_connect(pg_uri) as conn:
        for statement in grant_statements(role, schema)[1:]:  # all but GRANT USAGE
            conn.execute(statement)
    journal = PostgresJournal(as_role(role, schema))
    try:
        with pytest.raises(JournalError) as refused:
            await journal.entries("any")
    finally:
        await journal.close()
    message = str(refused.value)
    assert f"schema {schema} exists, but role {role} has no USAGE privilege on it" in message
    assert f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"' in message
    assert "create it first" not in message

    with admin_connect(pg_uri) as conn:  # the grant the message names is the one missing
        conn.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
    journal = PostgresJournal(as_role(role, schema))
    try:
        assert await journal.entries("any") == []
    finally:
        await journal.close()


# --- e --------------------------------------------------------------------------------------


@pytest.mark.case("R-04e")
def test_the_scripts_name_role_and_schema_by_psql_variables_only():
    """No placeholder that a table name contains: the role and the schema appear only as the
    psql variables :"app_role" and :"schema"; filling them with a role named like a table's
    prefix leaves every table name whole."""
    for name in ("app_role.sql", "checkpoint_role.sql"):
        script = SQL.joinpath(name).read_text("utf-8")
        grants = [line for line in script.splitlines() if line.startswith("GRANT")]
        assert grants and all(line.endswith(' TO :"app_role";') for line in grants), name
        assert "sagacity_app" not in script.replace("sagacity_approval", "")
    filled = "\n".join(grant_statements("sagacity_app", "sagacity_app"))
    assert '"sagacity_app".sagacity_approval_requests TO "sagacity_app";' in filled


@pytest.mark.case("R-04e")
def test_printed_grants_give_exactly_the_documented_least_privilege(pg_uri, new_role):
    """``sagacity db grant ROLE --db URI`` prints the GRANTs for the URI's schema; applied to a
    fresh role they give exactly the privileges docs/postgres.md promises: a paused saga waits
    (its approval request is stored), is approved and resumed (the wire runs once); the role
    cannot UPDATE or DELETE a journal row, nor DELETE an approval request."""
    role, schema = new_role(), schema_of(pg_uri)
    printed = CliRunner().invoke(cli, ["db", "grant", role, "--db", pg_uri])
    assert printed.exit_code == 0, printed.output
    assert printed.output.splitlines() == grant_statements(role, schema)
    with admin_connect(pg_uri) as conn:
        conn.execute(printed.output)
    assert table_grants(pg_uri, role) == LEAST_PRIVILEGE

    async def saga() -> None:
        s = Sagacity(as_role(role, schema))
        try:
            paused = await s.run(wire_app.paused_agent(WIRE), "go")
            assert paused.status is SagaStatus.AWAITING_APPROVAL, paused.exception
            (request,) = paused.approvals
            await s.approve(request.request_id, approver="alice", reason="ok")
            done = await s.resume(paused.saga_id, wire_app.resumed_agent())
            assert done.status is SagaStatus.COMPLETED, done.exception
        finally:
            await s.aclose()

    asyncio.run(saga())
    assert wire_app.executions() == ["5 USD -> acct-9"]
    with psycopg.connect(as_role(role, schema), autocommit=True) as conn:
        for statement in ("UPDATE sagacity_journal SET tool = 'x'", "DELETE FROM sagacity_journal",
                          "DELETE FROM sagacity_approval_requests",
                          "INSERT INTO sagacity_schema_migrations (version, name) VALUES (99, 'x')"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)


@pytest.mark.case("R-04e")
def test_grant_apply_and_the_psql_script_grant_the_same(pg_uri, new_role):
    """``--apply`` runs the GRANTs itself; ``psql -v app_role=... -v schema=... -f app_role.sql``
    (the file as shipped) grants the same, and so does the checkpoint script for its schema."""
    schema = schema_of(pg_uri)
    applied, by_psql = new_role(), new_role()
    out = CliRunner().invoke(cli, ["db", "grant", applied, "--apply", "--schema", schema, "--db", pg_uri])
    assert out.exit_code == 0, out.output
    assert f"granted journal access on schema {schema} to {applied}" in out.output
    assert table_grants(pg_uri, applied) == LEAST_PRIVILEGE
    psql = shutil.which("psql")
    if psql is None:
        pytest.skip("psql is not installed")
    with resources.as_file(SQL.joinpath("app_role.sql")) as script:
        proc = subprocess.run([psql, SERVER, "-v", "ON_ERROR_STOP=1", "-v", f"app_role={by_psql}",
                               "-v", f"schema={schema}", "-f", str(script)],
                              capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert table_grants(pg_uri, by_psql) == LEAST_PRIVILEGE


@pytest.mark.case("R-04e")
def test_grant_apply_refusals(pg_uri):
    """``--apply`` on a SQLite file is a usage error; a role that does not exist: nothing is
    granted and the server's reason is shown."""
    sqlite = CliRunner().invoke(cli, ["db", "grant", "someone", "--apply", "--db", "x.db"])
    assert sqlite.exit_code == 2 and "SQLite has no roles" in sqlite.output
    missing = CliRunner().invoke(cli, ["db", "grant", "no_such_role_r04e", "--apply", "--db", pg_uri])
    assert missing.exit_code == 1
    assert "GRANTs not applied (nothing was granted)" in missing.output
    assert 'role "no_such_role_r04e" does not exist' in missing.output
