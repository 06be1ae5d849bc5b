"""How a PostgreSQL URI is taken (issue 9, point 1): both schemes wherever a journal path is
accepted, a malformed URI refused at once with libpq's reason, an unreachable server reported
with its reason, and no password ever printed."""

from __future__ import annotations

import asyncio
import time

import pytest
from agents import function_tool
from click.testing import CliRunner

from sagacity_agents import Sagacity, SagaStatus, compensable
from sagacity_agents.backends import PostgresDatabase, PostgresJournal
from sagacity_agents.errors import ConfigurationError, JournalError
from sagacity_agents.cli import cli
from sagacity_agents.backends.postgres.migrations import migrate
from sagacity_agents.backends.postgres.driver import redacted_uri
from tests.sdk.helpers import agent, scripted

pytest.importorskip("psycopg")

MALFORMED = [
    ("postgresql://u:s3cret@127.0.0.1:5432/test?options=-c search_path=x", "extra key/value separator"),
    ("postgresql://u:s3cret@[::1/test", 'matching "]"'),
    ("postgresql://u:s3cret@127.0.0.1:5432/test?bogus=1", 'invalid URI query parameter: "bogus"'),
    ("postgresql://u:s3cret@127.0.0.1:99999/test", "invalid port '99999'"),
    ("postgres://u:s3cret@127.0.0.1:http/test", "invalid port 'http'"),
]


@pytest.mark.parametrize(("uri", "reason"), MALFORMED)
def test_malformed_uri_is_refused_at_once_with_libpqs_reason_and_no_password(uri, reason):
    """Before: every one waited for the pool's 10 s connect timeout, then said only "pool
    initialization incomplete" (libpq's reason went to the log)."""
    started = time.monotonic()
    for make in (PostgresDatabase, PostgresJournal, Sagacity):
        with pytest.raises(ConfigurationError, match="not a valid PostgreSQL URI") as caught:
            make(uri)
        assert reason in str(caught.value) and "s3cret" not in str(caught.value)
    with pytest.raises(ConfigurationError, match="not a valid PostgreSQL URI"):
        asyncio.run(migrate(uri))
    result = CliRunner().invoke(cli, ["db", "migrate", "--db", uri])
    assert result.exit_code == 1 and reason in result.output and "s3cret" not in result.output
    assert time.monotonic() - started < 10  # not one wait for the pool's 10 s connect timeout


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        ("postgresql://app:s3cret@db:5432/agents", "postgresql://app@db:5432/agents"),
        ("postgres://app:p@ss:w@db/agents?sslmode=require", "postgres://app@db/agents?sslmode=require"),
        ("postgresql://app@db/agents?password=s3cret&sslmode=require",
         "postgresql://app@db/agents?password=***&sslmode=require"),
        ("postgresql://db/agents?options=-c%20x%3Da@b", "postgresql://db/agents?options=-c%20x%3Da@b"),
        ("journal.db", "journal.db"),
    ],
)
def test_redacted_uri_drops_the_password(uri, shown):
    assert redacted_uri(uri) == shown


def test_unreachable_server_error_names_the_reason():
    """Before: "pool initialization incomplete after N sec" only; now libpq's reason too."""
    journal = PostgresJournal("postgresql://nobody:s3cret@127.0.0.1:1/none", connect_timeout=1)

    async def read() -> None:
        try:
            await journal.entries("s")
        finally:
            await journal.close()

    with pytest.raises(JournalError, match="last error: .*127.0.0.1.*port 1") as caught:
        asyncio.run(read())
    assert "s3cret" not in str(caught.value)


def test_postgres_scheme_works_as_an_argument_in_sagacity_db_and_for_the_cli(pg_uri, monkeypatch):
    """``postgres://`` is accepted like ``postgresql://``: ``Sagacity(uri)``, ``Sagacity()`` with
    ``$SAGACITY_DB``, and a CLI ``--db`` (the saga runs; both are listed)."""
    short = "postgres://" + pg_uri.removeprefix("postgresql://")

    @function_tool
    @compensable(undo=lambda ctx: None)
    def step(n: int) -> int:
        """A step."""
        return n

    def run(s: Sagacity) -> SagaStatus:
        assert isinstance(s.journal, PostgresJournal)
        try:
            return s.run_sync(agent(scripted([("step", '{"n": 1}', "c1")], "ok"), step), "go").status
        finally:
            asyncio.run(s.aclose())

    assert run(Sagacity(short)) == SagaStatus.COMPLETED
    monkeypatch.setenv("SAGACITY_DB", short)
    assert run(Sagacity()) == SagaStatus.COMPLETED
    listed = CliRunner().invoke(cli, ["journal", "list", "--db", short])
    assert listed.exit_code == 0, listed.output
    assert "2 saga(s)" in listed.output and "COMPLETED" in listed.output
    from_env = CliRunner().invoke(cli, ["approvals", "list"], env={"SAGACITY_DB": short})
    assert from_env.exit_code == 0, from_env.output
    assert "no pending" in from_env.output or "0 approval" in from_env.output, from_env.output


def test_cli_never_prints_the_password_of_a_uri(pg_uri):
    """The server trusts the test role, so any password works: the listing's title shows the
    URI without it."""
    with_password = pg_uri.replace("://postgres@", "://postgres:s3cret@", 1)
    assert with_password != pg_uri
    for args in (["journal", "list"], ["journal", "verify"]):
        result = CliRunner().invoke(cli, [*args, "--db", with_password])
        assert result.exit_code == 0, result.output
        assert "s3cret" not in result.output and "postgres@" in result.output
