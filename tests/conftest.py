"""Shared fixtures: tracing off (no network), journals of every backend."""

from __future__ import annotations

import pytest
from agents import set_tracing_disabled

set_tracing_disabled(True)


@pytest.fixture(params=["memory", "sqlite"])
def any_journal(request, tmp_path):
    """Each embedded backend in turn."""
    from sagacity_agents import InMemoryJournal, SqliteJournal

    if request.param == "memory":
        journal = InMemoryJournal()
    else:
        journal = SqliteJournal(tmp_path / "journal.db")
    yield journal
    import asyncio

    asyncio.run(journal.close()) if request.param == "sqlite" else None


@pytest.fixture(scope="session")
def pg_session_uri():
    """URI of this session's migrated PostgreSQL schema (skipped without a server; failed
    under CI)."""
    from tests.pg import migrated_schema

    yield from migrated_schema()


@pytest.fixture
def pg_uri(pg_session_uri):
    """The session's PostgreSQL schema, emptied for this test."""
    from tests.pg import truncate

    truncate(pg_session_uri)
    return pg_session_uri
