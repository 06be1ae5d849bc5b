"""The journal contract on PostgreSQL, and what only a shared server shows: bytea storage,
session time zones (C-08), concurrent first appends (C-09), a connection killed mid-append and a
pool exhausted (C-10), canonical JSON (C-11), NUL bytes (C-12), the schema check."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import pytest
from journal_contract import SAGA, JournalContract, Tamper, assert_chain, fill, verify_one

from sagacity_agents.core.postgres_journal import PostgresJournal
from tests.pg import admin_connect

_COLUMNS = ("saga_id", "seq", "phase", "tool", "call_id", "write_key", "recorded_at", "prev_hash",
            "hash", "canonical")
_EDITABLE = set(_COLUMNS) - {"saga_id", "seq"}


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


class TestPostgresJournal(JournalContract):
    @pytest.fixture
    async def journal(self, clock, pg_uri):
        journal = PostgresJournal(pg_uri, clock=clock)
        yield journal
        await journal.close()

    @pytest.fixture
    def tamper(self, pg_uri):
        return PostgresTamper(pg_uri)

    async def test_stores_exactly_the_hashed_bytes_as_bytea(self, journal, pg_uri):
        written = await fill(journal, 3)
        with admin_connect(pg_uri) as conn:
            rows = conn.execute(
                "SELECT seq, phase, tool, call_id, write_key, recorded_at, prev_hash, hash, "
                "canonical, pg_typeof(canonical)::text FROM sagacity_journal WHERE saga_id = %s "
                "ORDER BY seq",
                (SAGA,),
            ).fetchall()
        for entry, row in zip(written, rows, strict=True):
            assert row == (
                entry.seq, entry.phase.value, entry.tool, entry.call_id, entry.write_key,
                entry.recorded_at, entry.prev_hash, entry.hash, entry.canonical, "bytea",
            )
            assert hashlib.sha256(row[8]).hexdigest() == row[7]
