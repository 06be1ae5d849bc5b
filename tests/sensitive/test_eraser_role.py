"""On PostgreSQL, erasing a saga's data key takes a role of its own, on a real server with real
roles: the application's role (``sagacity db grant ROLE``) adds and reads data keys but cannot
delete or update them (``erase_data_keys`` is refused naming ``sagacity db grant --eraser``);
the eraser role (``sagacity db grant --eraser ROLE``) erases, leaves the tombstone and writes the
access log, and cannot change a journal row."""

from __future__ import annotations

import asyncio
import dataclasses

import psycopg
import pytest
from click.testing import CliRunner

from sagacity_agents.backends.postgres.journal import PostgresJournal
from sagacity_agents.backends.postgres.roles import grant_statements
from sagacity_agents.cli import cli
from sagacity_agents.core.access_log import erasures, record_access
from sagacity_agents.core.entries import Phase
from sagacity_agents.core.erasure import erase
from sagacity_agents.core.journal import AppendRequest
from sagacity_agents.errors import JournalWriteError
from tests.pg import admin_connect
from tests.test_postgres_roles import as_role, new_role, schema_of, table_grants  # noqa: F401 - the fixture

pytestmark = pytest.mark.case("X-04")

MASTER = "0123456789abcdef"
ERASER_PRIVILEGES = {
    ("sagacity_schema_migrations", "SELECT"), ("sagacity_journal", "SELECT"),
    ("sagacity_journal", "INSERT"), ("sagacity_journal_meta", "SELECT"),
    ("sagacity_data_keys", "SELECT"), ("sagacity_data_keys", "INSERT"),
    ("sagacity_data_keys", "UPDATE"), ("sagacity_data_keys", "DELETE"),
}


def grant(pg_uri: str, role: str, *flags: str) -> None:
    out = CliRunner().invoke(cli, ["db", "grant", role, *flags, "--apply", "--db", pg_uri])
    assert out.exit_code == 0, out.output


async def erase_as(app_uri: str, eraser_uri: str) -> None:
    """The application adds a key; it cannot erase it; the eraser role can (and logs it)."""
    as_app, as_eraser = PostgresJournal(app_uri), PostgresJournal(eraser_uri)
    try:
        opened = AppendRequest.build("s", Phase.SAGA_OPENED, write_key="o", payload={})
        await as_app.append(dataclasses.replace(opened, sealed=b"sealed"))
        stored = await as_app.add_data_key("s", 1, MASTER, b"wrapped-key-bytes")
        assert await as_app.add_data_key("s", 1, MASTER, b"other") == stored  # insert-if-absent, no UPDATE
        with pytest.raises(JournalWriteError, match=r"may not delete or update data keys.*sagacity db grant --eraser"):
            await as_app.erase_data_keys("s", by="app", reason="try")
        with pytest.raises(JournalWriteError, match="sagacity db grant --eraser"):
            await as_app.rewrap_data_keys(lambda key: ("m", b"x"))
        assert await as_app.data_keys("s") == [stored]  # nothing changed
        assert not await as_app.may_erase_data_keys() and await as_eraser.may_erase_data_keys()
        with pytest.raises(JournalWriteError, match="nothing was logged or erased"):
            await erase(as_app, None, "s", by="app", reason="try", force=True)
        assert await erasures(as_app) == {}  # the access log names no erasure that did not happen

        assert await as_eraser.erase_data_keys("s", by="dpo", reason="request 7") == 1
        (tomb,) = await as_app.data_keys("s")
        assert (tomb.wrapped, tomb.erased_by, tomb.reason) == (None, "dpo", "request 7")
        entry = await record_access(as_eraser, Phase.DATA_ERASED, {
            "saga_id": "s", "by": "dpo", "reason": "request 7", "forced": False, "generations": [1]})
        assert (await erasures(as_app))["s"] == entry
        assert (await as_app.entries("s"))[0].sealed == b"sealed"
    finally:
        await as_app.close()
        await as_eraser.close()


def test_the_application_role_adds_keys_but_only_the_eraser_role_erases(pg_uri, new_role):
    schema = schema_of(pg_uri)
    app, eraser = new_role(), new_role()
    grant(pg_uri, app)
    printed = CliRunner().invoke(cli, ["db", "grant", eraser, "--eraser", "--db", pg_uri])
    assert printed.exit_code == 0 and printed.output.splitlines() == grant_statements(eraser, schema, eraser=True)
    grant(pg_uri, eraser, "--eraser")
    assert table_grants(pg_uri, eraser) == ERASER_PRIVILEGES
    assert {("sagacity_data_keys", "SELECT"), ("sagacity_data_keys", "INSERT")} <= table_grants(pg_uri, app)
    assert not {("sagacity_data_keys", "DELETE"), ("sagacity_data_keys", "UPDATE")} & table_grants(pg_uri, app)

    asyncio.run(erase_as(as_role(app, schema), as_role(eraser, schema)))

    with psycopg.connect(as_role(app, schema), autocommit=True) as conn:
        for statement in ("DELETE FROM sagacity_data_keys", "UPDATE sagacity_data_keys SET reason = 'x'"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    with psycopg.connect(as_role(eraser, schema), autocommit=True) as conn:
        for statement in ("UPDATE sagacity_journal SET tool = 'x'", "DELETE FROM sagacity_journal",
                          "DELETE FROM sagacity_approval_requests"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    with admin_connect(pg_uri) as conn:
        assert conn.execute("SELECT count(*) FROM sagacity_data_keys WHERE wrapped IS NOT NULL").fetchone() == (0,)


def test_eraser_and_checkpoint_grants_are_one_or_the_other():
    out = CliRunner().invoke(cli, ["db", "grant", "someone", "--eraser", "--checkpoints"])
    assert out.exit_code == 2 and "choose one" in out.output
