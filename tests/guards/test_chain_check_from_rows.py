"""T-02, the read-speed chain check from stored rows (``core.chain.verify_rows``, issue 22).

``verify_rows`` answers only for a saga whose every row is plainly sound; for any other it
returns ``None`` and ``verify`` judges the entries built from the rows (``verify_entries``),
which names the fault as it always has. Each test pins one direction: a sound chain is accepted
with the result ``verify_entries`` gives, and every tampered row, whatever column or byte was
changed, sends the saga to the entry-by-entry check.
"""

from __future__ import annotations

import json

import pytest

from sagacity_agents.backends import JournalEntry, Phase
from sagacity_agents.core.canonical import canonical_bytes, sha256_hex
from sagacity_agents.core.chain import VerifyResult, verify_entries, verify_rows
from sagacity_agents.core.entries import CHAIN_COLUMNS

from .support import SAGA, journal_of

pytestmark = pytest.mark.case("T-02")


async def saga() -> list[JournalEntry]:
    """A closed saga of six entries, as a run writes them (a fence, an INTENT, its outcome)."""
    _, entries = await journal_of(
        (Phase.SAGA_OPENED, {"payload": {"metadata": {}}}),
        (Phase.RUN_STARTED, {"payload": {"holder": "h"}}),
        (Phase.INTENT, {"tool": "t", "call_id": "c", "payload": {"args": {"n": 1}, "fence": 2}}),
        (Phase.EXECUTED, {"tool": "t", "call_id": "c", "payload": {"intent_seq": 3, "fence": 2}}),
        (Phase.RUN_ENDED, {"payload": {"status": "COMPLETED"}}),
        (Phase.SAGA_CLOSED, {"payload": {"status": "COMPLETED"}}),
    )
    return entries


def row(entry: JournalEntry) -> tuple:
    """``entry`` as an SQL backend reads it for verify (``CHAIN_COLUMNS``, the phase by name)."""
    return tuple(entry.phase.value if c == "phase" else getattr(entry, c) for c in CHAIN_COLUMNS)


def entry(row: tuple) -> JournalEntry:
    """The entry ``verify`` builds from a row it judges entry by entry (no tags: no keyring)."""
    return JournalEntry.from_row((*row, None, None))


def rows_of(entries: list[JournalEntry]) -> list[tuple]:
    return [row(e) for e in entries]


def with_column(rows: list[tuple], seq: int, column: str, value) -> list[tuple]:
    """``rows`` with one column of the row at ``seq`` changed."""
    i = CHAIN_COLUMNS.index(column)
    return [r[:i] + (value,) + r[i + 1:] if r[1] == seq else r for r in rows]


def resealed_row(rows: list[tuple], seq: int, canonical: bytes) -> list[tuple]:
    """``rows`` with the bytes of ``seq`` replaced and given their true hash."""
    return with_column(with_column(rows, seq, "canonical", canonical), seq, "hash", sha256_hex(canonical))


async def test_rows_a_sound_chain_is_accepted_with_the_entries_result():
    entries = await saga()
    verified = verify_rows(SAGA, rows_of(entries))
    assert verified is not None
    result, fields = verified
    assert result == verify_entries(SAGA, entries)
    assert result.ok and result.head == entries[-1].hash and result.entries == 6
    assert [(f.seq, f.phase, f.tool, f.call_id, f.write_key, f.payload, f.hash) for f in fields] == \
        [(e.seq, e.phase, e.tool, e.call_id, e.write_key, e.payload, e.hash) for e in entries]
    assert fields[2].phase is Phase.INTENT  # the enum, as the structure rule compares it


async def test_rows_an_empty_saga_is_sound_without_a_head():
    assert verify_rows(SAGA, []) == (VerifyResult(SAGA, True, 0, None), [])


def _edited_bytes(entry: JournalEntry, **fields) -> bytes:
    obj = json.loads(entry.canonical)
    obj.update(fields)
    return canonical_bytes(obj)


TAMPERS = {
    # a column that disagrees with the hashed bytes
    "saga_id column": lambda e, r: with_column(r, 3, "saga_id", "other"),
    "seq column": lambda e, r: with_column(r, 3, "seq", 9),
    "phase column": lambda e, r: with_column(r, 4, "phase", "FAILED"),
    "tool column": lambda e, r: with_column(r, 3, "tool", "refund"),
    "call_id column": lambda e, r: with_column(r, 3, "call_id", "c9"),
    "write_key column": lambda e, r: with_column(r, 3, "write_key", "k9"),
    "recorded_at column": lambda e, r: with_column(r, 3, "recorded_at", "2020-01-01T00:00:00.000000Z"),
    "prev_hash column": lambda e, r: with_column(r, 3, "prev_hash", "ab" * 32),
    "hash column": lambda e, r: with_column(r, 3, "hash", "ab" * 32),
    # the bytes
    "bytes edited, hash kept": lambda e, r: with_column(r, 4, "canonical", e[3].canonical.replace(b'"c"', b'"d"')),
    "payload rewritten and resealed": lambda e, r: resealed_row(r, 4, _edited_bytes(e[3], payload={"x": 1})),
    "bytes that are not JSON": lambda e, r: resealed_row(r, 4, b"not json"),
    "bytes that are a JSON list": lambda e, r: resealed_row(r, 4, b"[1, 2]"),
    "bytes without a payload": lambda e, r: resealed_row(
        r, 4, canonical_bytes({k: v for k, v in json.loads(e[3].canonical).items() if k != "payload"})),
    "a duplicated key": lambda e, r: resealed_row(r, 4, e[3].canonical[:-1] + b',"tool":"t"}'),
    # the order
    "a row removed": lambda e, r: r[:2] + r[3:],
    "a row twice": lambda e, r: r[:3] + r[2:],
    "two rows swapped": lambda e, r: r[:2] + [r[3], r[2]] + r[4:],
}


@pytest.mark.parametrize("tamper", TAMPERS, ids=str)
async def test_rows_a_tampered_row_goes_to_the_entry_check_which_names_it(tamper):
    entries = await saga()
    rows = TAMPERS[tamper](entries, rows_of(entries))
    assert verify_rows(SAGA, rows) is None
    assert not verify_entries(SAGA, [entry(r) for r in rows]).ok


async def test_rows_an_entry_after_the_close_goes_to_the_entry_check():
    entries = await saga()
    rows = rows_of(entries)
    extra = _edited_bytes(entries[-1], seq=7, prev_hash=entries[-1].hash, write_key="k7")
    last = entries[-1]
    rows.append((SAGA, 7, "SAGA_CLOSED", None, None, "k7", last.recorded_at, last.hash, sha256_hex(extra),
                 extra))
    assert verify_rows(SAGA, rows) is None
    assert verify_entries(SAGA, [entry(r) for r in rows]).bad_seq == 7


async def test_rows_of_another_saga_go_to_the_entry_check():
    entries = await saga()
    assert verify_rows("other", rows_of(entries)) is None


async def test_rows_bytes_only_the_strict_reader_accepts_go_to_it():
    """Bytes that hash right and say what the columns say, but not in orjson's encoding
    (spaces): not plainly sound, so the entry check decides (and accepts, as it always has)."""
    entries = await saga()
    spaced = json.dumps(json.loads(entries[3].canonical), sort_keys=True).encode()
    rows = rows_of(entries)
    rows = _relink(resealed_row(rows, 4, spaced))
    assert verify_rows(SAGA, rows) is None
    assert verify_entries(SAGA, [entry(r) for r in rows]).ok


async def test_rows_bytes_stored_as_text_go_to_the_entry_check():
    """Storage may hand back text for the bytes (an SQL ``replace()`` on the BLOB): the entry
    built from the row keeps it as UTF-8 and judges it."""
    entries = await saga()
    rows = with_column(rows_of(entries), 4, "canonical", entries[3].canonical.decode())
    assert verify_rows(SAGA, rows) is None
    assert verify_entries(SAGA, [entry(r) for r in rows]).ok


def _relink(rows: list[tuple]) -> list[tuple]:
    """Re-seal every row after the first whose link no longer matches, so only the bytes differ."""
    out, prev = [], "0" * 64
    for r in rows:
        if r[7] != prev:
            obj = json.loads(r[9])
            obj["prev_hash"] = prev
            data = canonical_bytes(obj)
            r = r[:7] + (prev, sha256_hex(data), data) + r[10:]
        out.append(r)
        prev = r[8]
    return out
