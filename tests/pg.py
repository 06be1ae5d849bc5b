"""The PostgreSQL server the tests use, and each test run's own schema on it.

The server is ``$SAGACITY_TEST_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``, as in
CI). Every test process works in a database of its own on it (:data:`SERVER`); every test session
creates its own schema (``sagacity_test_<pid>_<random>``), migrates it
with ``sagacity db migrate``'s code and drops it at the end; every test starts from empty tables.
When the server cannot be reached the PostgreSQL tests are skipped, except under CI (``$CI`` set),
where they fail: a CI run must never pass without them.
"""

from __future__ import annotations

import os
import secrets
import urllib.parse
from collections.abc import Iterator

import pytest

BASE = os.environ.get("SAGACITY_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
"""The server and database named by the environment (or CI's default)."""

_DATABASE_VARIABLE = "SAGACITY_TEST_PG_DATABASE"


def admin_connect(uri: str | None = None):  # type: ignore[no-untyped-def]
    """A plain (sync, autocommit) psycopg connection for fixtures (default: :data:`SERVER`)."""
    import psycopg

    return psycopg.connect(SERVER if uri is None else uri, autocommit=True, connect_timeout=3)


def _own_database(base: str) -> str:
    """``base`` pointed at a database of this test process's own, created on first import and
    dropped at its exit; ``base`` itself when the server cannot be reached (the tests then skip,
    or fail under CI, in :func:`server_or_skip`).

    Schemas alone do not isolate parallel workers: a saga's lock is an advisory lock, and those
    are per database, so two workers' tests on saga "s" (each in its own schema) met on one lock
    and took the contended path (issue 22). Child processes started by a test inherit the name
    through the environment and use the same database."""
    name = os.environ.get(_DATABASE_VARIABLE)
    if name is None:
        name = f"sagacity_test_{os.getpid()}_{secrets.token_hex(4)}"
        try:
            with admin_connect(base) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
        except Exception:  # noqa: BLE001 - no server or no psycopg: server_or_skip reports it
            return base
        os.environ[_DATABASE_VARIABLE] = name
        import atexit

        atexit.register(_drop_database, base, name)
    return urllib.parse.urlsplit(base)._replace(path=f"/{name}").geturl()


def _drop_database(base: str, name: str) -> None:
    with admin_connect(base) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


SERVER = _own_database(BASE)
"""The database the tests use: this test process's own on :data:`BASE`'s server."""
TABLES = "sagacity_journal, sagacity_approval_requests, sagacity_snapshots, sagacity_data_keys"


def with_search_path(uri: str, schema: str) -> str:
    """``uri`` whose connections use ``schema`` (libpq ``options=-csearch_path=...``)."""
    sep = "&" if "?" in uri else "?"
    return f"{uri}{sep}options={urllib.parse.quote(f'-csearch_path={schema}')}"


def with_options(uri: str, option: str) -> str:
    """``uri`` (made by :func:`with_search_path`) with one more libpq ``options`` switch."""
    head, sep, tail = uri.partition("options=")
    assert sep, uri
    return f"{head}options={urllib.parse.quote(option + ' ')}{tail}"


def at_commit_trigger(name: str, body: str) -> str:
    """SQL creating a PL/pgSQL function ``name`` that runs ``body`` for every row inserted into
    ``sagacity_journal``, fired from a deferred constraint trigger: inside the COMMIT, after the
    INSERT succeeded, seeing the settings the commit itself runs with (``synchronous_commit``,
    ``set_config(..., true)``). ``body`` sees ``NEW``; the function returns NULL after it."""
    return f"""
CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
{body}
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER {name} AFTER INSERT ON sagacity_journal
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {name}();
"""




def server_or_skip() -> None:
    """Skip (fail under CI) when the server cannot be reached or psycopg is missing."""
    try:
        with admin_connect() as conn:
            conn.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any reason means "no server"
        message = f"PostgreSQL server {SERVER} unreachable: {exc}"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (CI is set: the PostgreSQL tests must run)", pytrace=False)
        pytest.skip(message)


def new_schema(prefix: str = "sagacity_test") -> str:
    """Create an empty schema with a unique name and return the name."""
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    with admin_connect() as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    return name


def drop_schema(name: str) -> None:
    with admin_connect() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def migrated_schema() -> Iterator[str]:
    """A migrated schema for the whole session; yields the URI using it."""
    from sagacity_agents.backends.postgres.migrations import migrate

    server_or_skip()
    schema = new_schema()
    uri = with_search_path(SERVER, schema)
    try:
        run_in_thread(migrate(uri))
        yield uri
    finally:
        drop_schema(schema)


def run_in_thread(coro):  # type: ignore[no-untyped-def]
    """Run ``coro`` to completion on a new loop in a new thread (usable under a running loop)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def truncate(uri: str) -> None:
    """Empty every table of the schema ``uri`` uses."""
    with admin_connect(uri) as conn:
        for table in TABLES.split(", "):  # DELETE: much faster than TRUNCATE on tiny tables
            conn.execute(f"DELETE FROM {table}")


def checkpoint_uri(schema: str) -> str:
    """The server's URI naming ``schema`` as the signed-checkpoint schema."""
    sep = "&" if "?" in SERVER else "?"
    return f"{SERVER}{sep}sagacity_schema={schema}"


def migrated_checkpoint_schema() -> Iterator[str]:
    """A checkpoint schema of its own, migrated for the whole session (as `sagacity db migrate
    --checkpoints` does); yields the checkpoint URI naming it."""
    from sagacity_agents.backends.postgres.checkpoints import checkpoint_migrations
    from sagacity_agents.backends.postgres.migrations import migrate

    server_or_skip()
    schema = f"sagacity_cp_{os.getpid()}_{secrets.token_hex(4)}"
    try:
        run_in_thread(migrate(SERVER, migration_set=checkpoint_migrations(schema)))
        yield checkpoint_uri(schema)
    finally:
        drop_schema(schema)


def truncate_checkpoints(uri: str) -> None:
    """Empty the checkpoint table of the schema ``uri`` names."""
    from sagacity_agents.backends.postgres.checkpoints import split_schema

    conninfo, schema = split_schema(uri)
    with admin_connect(conninfo) as conn:
        conn.execute(f'DELETE FROM "{schema}".sagacity_checkpoints')
