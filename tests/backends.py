"""The storage backends the tests run on: one list, :data:`BACKENDS`, one entry per backend.

Each entry says where a test's data lives (its *location*, in the form ``sagacity_agents.stores``
maps to a backend: ``":memory:"``, a SQLite file, a ``postgresql://`` URI) and how to open, at
that location, a journal, an approval store and a :class:`Tamper` (the backend's storage edited
behind the journal's back, as an attacker with storage access would). The journal contract and
the approval-store conformance suite run on every entry (``tests/test_backend_contracts.py``), and
so do the fixtures that want "each backend" (``any_journal``, the C-07..C-12 cases): adding a
backend is one more entry here.

A backend that needs a server gets its location from a fixture that skips the test when the
server cannot be reached and fails it under CI (``$CI`` set): PostgreSQL uses ``pg_uri``
(``tests/pg.py``), this test's own emptied schema on the session's migrated one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from sagacity_agents.backends.memory.approvals import InMemoryApprovalStore
from sagacity_agents.backends.memory.journal import InMemoryJournal
from sagacity_agents.backends.sqlite.approvals import SqliteApprovalStore
from sagacity_agents.backends.sqlite.journal import SqliteJournal
from sagacity_agents.core.approval import ApprovalStore
from sagacity_agents.core.entries import JournalEntry, Phase
from sagacity_agents.core.journal import Journal
from tests.journal.journal_contract import Tamper, replace_entry
from tests.pg import admin_connect


@dataclasses.dataclass(frozen=True)
class Backend:
    """How the tests reach one storage backend."""

    name: str
    location: Callable[[pytest.FixtureRequest], str]
    """Where this test's data lives: a fresh, empty place for every test (may skip or fail the
    test when it needs a server, see the module notes)."""
    journal: Callable[..., Journal]
    """``journal(location, **options)``: the journal there (``clock=`` and the like passed on)."""
    approvals: Callable[[str], ApprovalStore]
    """``approvals(location)``: the approval store there."""
    tamper: Callable[[str, Journal], Tamper]
    """``tamper(location, journal)``: edits that journal's storage directly."""
    server: bool = False
    """True when the backend needs a server (False: embedded, always available)."""

    def __str__(self) -> str:
        return self.name


# --- in memory ------------------------------------------------------------------------------


class MemoryTamper(Tamper):
    def __init__(self, journal: InMemoryJournal) -> None:
        self.journal = journal

    def _get(self, saga_id: str, seq: int) -> JournalEntry:
        return next(e for e in self.journal._chains[saga_id] if e.seq == seq)

    def set_canonical(self, saga_id: str, seq: int, data: bytes) -> None:
        self.journal._replace(saga_id, seq, replace_entry(self._get(saga_id, seq), canonical=data))

    def set_column(self, saga_id: str, seq: int, column: str, value: Any) -> None:
        if column == "phase":
            value = Phase(value)
        self.journal._replace(saga_id, seq, replace_entry(self._get(saga_id, seq), **{column: value}))

    def delete(self, saga_id: str, seq: int) -> None:
        self.journal._delete(saga_id, seq)

    def swap(self, saga_id: str, a: int, b: int) -> None:
        ea, eb = self._get(saga_id, a), self._get(saga_id, b)
        self.journal._replace(saga_id, a, replace_entry(eb, seq=a))
        self.journal._replace(saga_id, b, replace_entry(ea, seq=b))


# --- SQL (SQLite and PostgreSQL) ------------------------------------------------------------

_COLUMNS = ("saga_id", "seq", "phase", "tool", "call_id", "write_key", "recorded_at", "prev_hash",
            "hash", "canonical")
_EDITABLE = set(_COLUMNS) - {"saga_id", "seq"}


class SqliteTamper(Tamper):
    def __init__(self, journal: SqliteJournal) -> None:
        self.journal = journal

    def set_canonical(self, saga_id: str, seq: int, data: bytes) -> None:
        self.set_column(saga_id, seq, "canonical", data)

    def set_column(self, saga_id: str, seq: int, column: str, value: Any) -> None:
        assert column in _EDITABLE, column
        self.journal.execute_sql(
            f"UPDATE sagacity_journal SET {column} = ? WHERE saga_id = ? AND seq = ?",
            (value, saga_id, seq),
        )
        assert self.journal.execute_sql("SELECT changes()") == [(1,)]

    def delete(self, saga_id: str, seq: int) -> None:
        self.journal.execute_sql(
            "DELETE FROM sagacity_journal WHERE saga_id = ? AND seq = ?", (saga_id, seq)
        )
        assert self.journal.execute_sql("SELECT changes()") == [(1,)]

    def swap(self, saga_id: str, a: int, b: int) -> None:
        rows = {
            row[1]: row
            for row in self.journal.execute_sql(
                f"SELECT {', '.join(_COLUMNS)} FROM sagacity_journal "
                "WHERE saga_id = ? AND seq IN (?, ?)",
                (saga_id, a, b),
            )
        }
        self.journal.execute_sql(
            "DELETE FROM sagacity_journal WHERE saga_id = ? AND seq IN (?, ?)", (saga_id, a, b)
        )
        for seq, source in ((a, rows[b]), (b, rows[a])):
            self.journal.execute_sql(
                f"INSERT INTO sagacity_journal ({', '.join(_COLUMNS)}) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (source[0], seq, *source[2:]),
            )


class PostgresTamper(Tamper):
    """Edits rows with a separate (superuser) connection, as an attacker with DB access would."""

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def _exec(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        with admin_connect(self.uri) as conn:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else cur.rowcount

    def set_canonical(self, saga_id: str, seq: int, data: bytes) -> None:
        self.set_column(saga_id, seq, "canonical", data)

    def set_column(self, saga_id: str, seq: int, column: str, value: Any) -> None:
        assert column in _EDITABLE, column
        changed = self._exec(
            f"UPDATE sagacity_journal SET {column} = %s WHERE saga_id = %s AND seq = %s",
            (value, saga_id, seq),
        )
        assert changed == 1

    def delete(self, saga_id: str, seq: int) -> None:
        assert self._exec(
            "DELETE FROM sagacity_journal WHERE saga_id = %s AND seq = %s", (saga_id, seq)
        ) == 1

    def swap(self, saga_id: str, a: int, b: int) -> None:
        rows = {
            row[1]: row
            for row in self._exec(
                f"SELECT {', '.join(_COLUMNS)} FROM sagacity_journal "
                "WHERE saga_id = %s AND seq IN (%s, %s)",
                (saga_id, a, b),
            )
        }
        self._exec("DELETE FROM sagacity_journal WHERE saga_id = %s AND seq IN (%s, %s)",
                   (saga_id, a, b))
        for seq, source in ((a, rows[b]), (b, rows[a])):
            self._exec(
                f"INSERT INTO sagacity_journal ({', '.join(_COLUMNS)}) "
                "VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                (source[0], seq, *source[2:]),
            )


# --- locations and openers ------------------------------------------------------------------


def sqlite_file(request: pytest.FixtureRequest) -> str:
    """A SQLite file in the test's own directory (journal and approval store share it)."""
    return str(request.getfixturevalue("tmp_path") / "sagacity.db")


def postgres_schema(request: pytest.FixtureRequest) -> str:
    """The session's migrated PostgreSQL schema, emptied for this test (``pg_uri``: skipped
    without a server, failed under CI)."""
    return str(request.getfixturevalue("pg_uri"))


def postgres_journal(location: str, **options: Any) -> Journal:
    from sagacity_agents.backends.postgres.journal import PostgresJournal

    return PostgresJournal(location, **options)


def postgres_approvals(location: str) -> ApprovalStore:
    from sagacity_agents.backends.postgres.approvals import PostgresApprovalStore

    return PostgresApprovalStore(location)


BACKENDS: list[Backend] = [
    Backend("memory", lambda request: ":memory:", lambda location, **options: InMemoryJournal(**options),
            lambda location: InMemoryApprovalStore(), lambda location, journal: MemoryTamper(journal)),
    Backend("sqlite", sqlite_file, SqliteJournal, SqliteApprovalStore,
            lambda location, journal: SqliteTamper(journal)),
    Backend("postgres", postgres_schema, postgres_journal, postgres_approvals,
            lambda location, journal: PostgresTamper(location), server=True),
]
"""Every backend, in the order the tests run them. Adding a backend: one more entry."""

EMBEDDED = [backend for backend in BACKENDS if not backend.server]
"""The backends that need no server (those a fixture may use without ever skipping)."""
