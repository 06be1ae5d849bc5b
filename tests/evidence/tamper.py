"""Tampering with a journal directly, as someone with write access to it would: a SQLite file, or
a PostgreSQL database given by its ``postgresql://`` URI (statements written with ``?``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from sagacity_agents.core.canonical import canonical_bytes, parse_json


class _Postgres:
    """The few sqlite3 connection methods used here, on a psycopg connection."""

    def __init__(self, uri: str) -> None:
        import psycopg

        self.conn = psycopg.connect(uri)

    def execute(self, statement: str, params: tuple[Any, ...] = ()) -> Any:
        cur = self.conn.execute(statement.replace("?", "%s"), params)
        return _Rows(cur.fetchall() if cur.description else [])

    def commit(self) -> None:
        self.conn.commit()

    def close(self) -> None:
        self.conn.close()


class _Rows(list):  # type: ignore[type-arg]
    def fetchall(self) -> list[Any]:
        return list(self)


def _connect(path: str) -> Any:
    return _Postgres(path) if path.startswith("postgresql://") else sqlite3.connect(path)


def edit_entries(path: str, saga_id: str, edit: Callable[[dict[str, Any]], dict[str, Any] | None],
                 *, reseal: bool = False) -> list[int]:
    """Rewrite the hashed bytes of the saga's entries through ``edit(entry_object)`` (return the
    new object, or None to leave the entry). Without ``reseal`` the stored hashes stay as they
    were; with it the edited entry gets its recomputed hash (and nothing else changes).

    Returns:
        The seqs edited.
    """
    from sagacity_agents.core.canonical import sha256_hex

    conn = _connect(path)
    edited = []
    try:
        rows = conn.execute(
            "SELECT seq, canonical FROM sagacity_journal WHERE saga_id = ? ORDER BY seq", (saga_id,)
        ).fetchall()
        for seq, blob in rows:
            obj = parse_json(bytes(blob))
            new = edit(obj)
            if new is None:
                continue
            data = canonical_bytes(new)
            if reseal:
                conn.execute("UPDATE sagacity_journal SET canonical = ?, hash = ?, phase = ? WHERE saga_id = ? AND seq = ?",
                             (data, sha256_hex(data), new["phase"], saga_id, seq))
            else:
                conn.execute("UPDATE sagacity_journal SET canonical = ?, phase = ? WHERE saga_id = ? AND seq = ?",
                             (data, new["phase"], saga_id, seq))
            edited.append(seq)
        conn.commit()
    finally:
        conn.close()
    return edited


def sql(path: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    conn = _connect(path)
    try:
        rows = conn.execute(statement, params).fetchall()
        conn.commit()
        return rows
    finally:
        conn.close()


def reseal_from(path: str, saga_id: str, start: int, edit: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Rewrite entry ``start`` through ``edit`` and re-seal it and every later entry with
    correct hashes and links: a consistent rewrite the chain alone cannot see."""
    from sagacity_agents.core.canonical import sha256_hex

    conn = _connect(path)
    try:
        rows = conn.execute(
            "SELECT seq, canonical, prev_hash FROM sagacity_journal WHERE saga_id = ? ORDER BY seq", (saga_id,)
        ).fetchall()
        prev = None
        for seq, blob, stored_prev in rows:
            if seq < start:
                continue
            obj = parse_json(bytes(blob))
            if seq == start:
                obj = edit(obj)
                prev = stored_prev
            obj["prev_hash"] = prev
            data = canonical_bytes(obj)
            prev = sha256_hex(data)
            conn.execute("UPDATE sagacity_journal SET canonical = ?, hash = ?, prev_hash = ?, phase = ? "
                         "WHERE saga_id = ? AND seq = ?", (data, prev, obj["prev_hash"], obj["phase"], saga_id, seq))
        conn.commit()
    finally:
        conn.close()
