"""Tampering with a SQLite journal file directly, as someone with write access to it would."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from sagacity_agents.core.canonical import canonical_bytes, parse_json


def edit_entries(path: str, saga_id: str, edit: Callable[[dict[str, Any]], dict[str, Any] | None],
                 *, reseal: bool = False) -> list[int]:
    """Rewrite the hashed bytes of the saga's entries through ``edit(entry_object)`` (return the
    new object, or None to leave the entry). Without ``reseal`` the stored hashes stay as they
    were; with it the edited entry gets its recomputed hash (and nothing else changes).

    Returns:
        The seqs edited.
    """
    from sagacity_agents.core.canonical import sha256_hex

    conn = sqlite3.connect(path)
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
    conn = sqlite3.connect(path)
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

    conn = sqlite3.connect(path)
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
