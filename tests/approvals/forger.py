"""A writer with database access and no key: rewrites a saga's rows in SQLite or PostgreSQL and
re-seals its whole chain with the library's own sealing function (``core.entries.seal_entry``,
the hash rule of docs/audit-format.md), as someone who read that page would."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sagacity_agents.core.canonical import parse_json
from sagacity_agents.core.entries import GENESIS_HASH, Phase, seal_entry

from ..evidence.tamper import _connect

Rows = list[dict[str, Any]]
"""A saga's entries as plain dicts (the hashed fields), in ``seq`` order."""


def read(db: str, saga_id: str) -> Rows:
    """The saga's entries as the forger sees them."""
    conn = _connect(db)
    try:
        rows = conn.execute(
            "SELECT phase, tool, call_id, write_key, recorded_at, canonical FROM sagacity_journal "
            "WHERE saga_id = ? ORDER BY seq", (saga_id,)).fetchall()
    finally:
        conn.close()
    return [{"phase": p, "tool": t, "call_id": c, "write_key": w, "recorded_at": r,
             "payload": parse_json(bytes(blob))["payload"]} for p, t, c, w, r, blob in rows]


def forge(db: str, saga_id: str, edit: Callable[[Rows], Rows]) -> Rows:
    """Rewrite the saga: ``edit`` gets its entries and returns the new list (entries edited,
    added or removed); every entry is renumbered, re-linked and re-sealed, the rows updated
    in place and the extra ones inserted (tags cleared: the forger has no key).

    Returns:
        The forged entries, ``seq`` set (1-based).
    """
    old = read(db, saga_id)
    new = edit([dict(e, payload=dict(e["payload"])) for e in old])
    conn = _connect(db)
    prev = GENESIS_HASH
    try:
        for seq, e in enumerate(new, start=1):
            sealed = seal_entry(saga_id=saga_id, seq=seq, phase=Phase(e["phase"]), tool=e["tool"],
                                call_id=e["call_id"], write_key=e["write_key"], payload=e["payload"],
                                recorded_at=e["recorded_at"], prev_hash=prev)
            e["seq"] = seq
            values = (sealed.phase.value, sealed.tool, sealed.call_id, sealed.write_key,
                      sealed.recorded_at, sealed.prev_hash, sealed.hash, sealed.canonical)
            if seq <= len(old):
                conn.execute("UPDATE sagacity_journal SET phase = ?, tool = ?, call_id = ?, "
                             "write_key = ?, recorded_at = ?, prev_hash = ?, hash = ?, canonical = ?, "
                             "tag_key = NULL, tag = NULL WHERE saga_id = ? AND seq = ?",
                             (*values, saga_id, seq))
            else:
                conn.execute("INSERT INTO sagacity_journal (phase, tool, call_id, write_key, "
                             "recorded_at, prev_hash, hash, canonical, saga_id, seq) "
                             "VALUES (?,?,?,?,?,?,?,?,?,?)", (*values, saga_id, seq))
            prev = sealed.hash
        if len(new) < len(old):
            conn.execute("DELETE FROM sagacity_journal WHERE saga_id = ? AND seq > ?", (saga_id, len(new)))
        conn.commit()
    finally:
        conn.close()
    return new


def index(rows: Rows, phase: str, tool: str | None = None) -> int:
    """Position in ``rows`` of the first entry of ``phase`` (and ``tool``)."""
    return next(i for i, e in enumerate(rows) if e["phase"] == phase and (tool is None or e["tool"] == tool))
