"""Cases C-07, C-08, C-11 and C-12 (shared/cases/cases-1.md) on every backend.

Each case appends the same writes (same saga id, write keys and frozen time) to a journal of
every backend of ``tests/backends.py`` (in-memory, SQLite, PostgreSQL with its sessions in
``TimeZone = 'Europe/Berlin'``) and checks the right value on each, that the chains verify, and
that the stored bytes and hashes are identical across backends. Without a PostgreSQL server (and
``$CI`` unset) the cases run on the two embedded backends only.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import re
import time
import unicodedata
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import rfc8785

from sagacity_agents.core.canonical import (
    canonical_bytes,
    parse_json,
    to_canonical_value,
)
from sagacity_agents.core.chain import verify_journal
from sagacity_agents.core.entries import JournalEntry, Phase
from sagacity_agents.core.saga.payloads import ENCODING_ERROR_KEY, encode_or_marker as _encode_or_marker
from sagacity_agents.errors import EncodingError
from sagacity_agents.testing import FrozenClock
from tests.backends import BACKENDS
from tests.pg import with_options

UTC = dt.UTC
BERLIN = ZoneInfo("Europe/Berlin")
FIXED_WIDTH = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
ZEROS = "0" * 64


@dataclasses.dataclass
class Backends:
    """The same writes on every backend, checked for identical bytes and hashes."""

    clock: FrozenClock
    journals: dict[str, Any]

    async def append(self, saga_id: str, phase: Phase, **kwargs: Any) -> JournalEntry:
        entries = {
            name: await journal.append(saga_id, phase, **kwargs)
            for name, journal in self.journals.items()
        }
        first = next(iter(entries.values()))
        for name, entry in entries.items():
            assert entry.canonical == first.canonical, name
            assert entry.hash == first.hash, name
        return first

    async def read(self, saga_id: str) -> list[JournalEntry]:
        """Entries read back from every backend (asserted equal); the in-memory ones returned."""
        reads = {name: await j.entries(saga_id) for name, j in self.journals.items()}
        first = next(iter(reads.values()))
        for name, entries in reads.items():
            assert [(e.canonical, e.hash, e.payload) for e in entries] == [
                (e.canonical, e.hash, e.payload) for e in first
            ], name
        return first

    async def verify(self, saga_id: str) -> None:
        heads = set()
        for name, journal in self.journals.items():
            (result,) = await verify_journal(journal, saga_id)
            assert result.ok, f"{name}: {result}"
            heads.add(result.head)
        assert len(heads) == 1


SERVER_BACKENDS = [b.name for b in BACKENDS if b.server]


@pytest.fixture(params=["embedded", *SERVER_BACKENDS])
async def backends(request):
    """A journal of every embedded backend of ``tests/backends.py`` (``[embedded]``), or of every
    embedded one and one that needs a server (``[postgres]``), all on one frozen clock.

    T-03: a server that cannot be reached skips that backend's variant of the test, named in
    the report (under CI it fails), and the embedded variant still runs: a case "on every
    backend" never passes silently on fewer."""
    clock = FrozenClock(dt.datetime(2026, 1, 1, tzinfo=UTC))
    journals = {}
    for backend in BACKENDS:
        if backend.server and backend.name != request.param:
            continue
        location = backend.location(request)  # skips (or fails under CI) without its server
        if backend.name == "postgres":  # its sessions in another time zone (C-08)
            location = with_options(location, "-cTimeZone=Europe/Berlin")
        journals[backend.name] = backend.journal(location, clock=clock)
    assert {"memory", "sqlite"} <= journals.keys()  # stored_bytes reads the SQLite file
    if "postgres" in journals:
        assert await journals["postgres"].database.execute("SHOW TimeZone") == [("Europe/Berlin",)]
    yield Backends(clock, journals)
    for journal in journals.values():
        await journal.close()


async def stored_bytes(backends: Backends, saga_id: str) -> list[bytes]:
    """The canonical column exactly as SQLite holds it (and PostgreSQL, asserted the same)."""
    rows = backends.journals["sqlite"].execute_sql(
        "SELECT canonical, typeof(canonical) FROM sagacity_journal WHERE saga_id = ? ORDER BY seq",
        (saga_id,),
    )
    assert {kind for _, kind in rows} == {"blob"}
    data = [data for data, _ in rows]
    if "postgres" in backends.journals:
        pg_rows = await backends.journals["postgres"].database.execute(
            "SELECT canonical, pg_typeof(canonical)::text, position('\\x00'::bytea in canonical) "
            "FROM sagacity_journal WHERE saga_id = %s ORDER BY seq",
            (saga_id,),
        )
        assert [(bytes(r[0]), r[1], r[2]) for r in pg_rows] == [(d, "bytea", 0) for d in data]
    return data


# --- C-07 -----------------------------------------------------------------------------------

C07_RESULT = {
    "due": dt.datetime(2026, 1, 1, tzinfo=UTC),
    "total": Decimal("10.10"),
    "tags": {"b", "a"},
}
C07_BYTES = (
    b'{"call_id":"call_1","payload":{"due":"2026-01-01T00:00:00.000000Z","tags":["a","b"],'
    b'"total":"10.10"},"phase":"EXECUTED","prev_hash":"' + ZEROS.encode() + b'",'
    b'"recorded_at":"2026-01-01T00:00:00.000000Z","saga_id":"c07","seq":1,"tool":"get_invoice",'
    b'"write_key":"c07:outcome"}'
)
C07_GOLDEN_HASH = "9da128c1ebe32e63eeb308c0e98eb9bcf6bce2c4cddd0c5e25f444c8fe6b9272"
"""SHA-256 of C07_BYTES: a third party re-verifies it with nothing but SHA-256."""


@pytest.mark.case("C-07")
async def test_values_that_are_not_plain_json(backends):
    """C-07: Decimal -> "10.10" (never 10.1), datetime -> fixed-width UTC, set -> sorted list;
    identical bytes and hash on every backend."""
    entry = await backends.append(
        "c07", Phase.EXECUTED, write_key="c07:outcome", tool="get_invoice", call_id="call_1",
        payload=C07_RESULT,
    )
    assert entry.payload == {
        "due": "2026-01-01T00:00:00.000000Z",
        "tags": ["a", "b"],
        "total": "10.10",
    }
    assert isinstance(entry.payload["total"], str)
    assert entry.canonical == C07_BYTES
    assert entry.hash == hashlib.sha256(C07_BYTES).hexdigest() == C07_GOLDEN_HASH
    assert await stored_bytes(backends, "c07") == [C07_BYTES]
    (read,) = await backends.read("c07")
    assert read.payload["total"] == "10.10" and read.payload["tags"] == ["a", "b"]
    await backends.verify("c07")


class Opaque:
    """A value with no defined canonical encoding."""


@pytest.mark.case("C-07")
async def test_object_without_encoding_is_refused_by_the_rules():
    """C-07: an object with no defined encoding raises EncodingError naming its path and type."""
    with pytest.raises(EncodingError, match=r"\$\.result\.handle.*Opaque"):
        to_canonical_value({"result": {"handle": Opaque()}})


@pytest.mark.case("C-07")
async def test_journal_refuses_object_without_encoding(backends):
    """C-07: the journal itself never stores a repr: append raises and writes nothing."""
    for journal in backends.journals.values():
        with pytest.raises(EncodingError):
            await journal.append("c07", Phase.EXECUTED, write_key="k", payload={"x": Opaque()})
        assert await journal.entries("c07") == []


@pytest.mark.case("C-07")
@pytest.mark.parametrize(
    "value",
    [Opaque(), {"ok": 1, "bad": Opaque()}, [1, Opaque()], {"n": float("nan")}],
    ids=["object", "nested-in-dict", "nested-in-list", "nan"],
)
async def test_result_without_encoding_is_journaled_as_explicit_marker(backends, value):
    """C-07: the saga layer journals an explicit encoding-error marker, never a repr with a
    memory address; the marker is itself canonical and hashes the same on every backend."""
    marker = _encode_or_marker(value)
    assert ENCODING_ERROR_KEY == "$encoding_error"
    assert isinstance(marker, dict) and ENCODING_ERROR_KEY in marker
    assert marker["type"] == type(value).__qualname__
    text = json.dumps(marker)
    assert "0x" not in text and " at " not in text and "object" not in text
    assert repr(value) not in text
    entry = await backends.append(
        "c07m", Phase.EXECUTED, write_key="out", tool="t", call_id="c", payload={"result": marker}
    )
    assert entry.payload == {"result": marker}
    await backends.verify("c07m")


@pytest.mark.case("C-07")
async def test_encodable_value_passes_through_marker_helper():
    assert _encode_or_marker(C07_RESULT) == {
        "due": "2026-01-01T00:00:00.000000Z",
        "tags": ["a", "b"],
        "total": "10.10",
    }


# --- C-08 -----------------------------------------------------------------------------------


def _expected_from_ns(ns: int) -> str:
    seconds, rest = divmod(ns, 10**9)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{rest // 1000:06d}Z"


@pytest.mark.case("C-08")
async def test_timestamps_truncated_utc_fixed_width(backends):
    """C-08: microsecond 0, nanosecond precision (truncated, not rounded) and non-UTC zones all
    become one fixed-width UTC form before hashing; same bytes and verification everywhere."""
    cases = [
        (dt.datetime(2026, 1, 1, tzinfo=UTC), "2026-01-01T00:00:00.000000Z"),
        (dt.datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=UTC), "2026-01-01T00:00:00.123456Z"),
        (dt.datetime(2026, 7, 1, 14, 30, 0, 500, tzinfo=BERLIN), "2026-07-01T12:30:00.000500Z"),
        (dt.datetime(2026, 1, 1, 1, 0, tzinfo=BERLIN), "2026-01-01T00:00:00.000000Z"),
        # The DST fold: the same wall time twice, two instants.
        (dt.datetime(2026, 10, 25, 2, 30, fold=0, tzinfo=BERLIN), "2026-10-25T00:30:00.000000Z"),
        (dt.datetime(2026, 10, 25, 2, 30, fold=1, tzinfo=BERLIN), "2026-10-25T01:30:00.000000Z"),
        (dt.datetime(2026, 3, 1, 9, 0, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
         "2026-03-01T14:00:00.000000Z"),
    ]
    for i, (moment, expected) in enumerate(cases):
        backends.clock.set(moment)
        entry = await backends.append("c08", Phase.INTENT, write_key=f"k{i}", payload={"i": i})
        assert entry.recorded_at == expected
        assert FIXED_WIDTH.match(entry.recorded_at) and len(entry.recorded_at) == 27
        assert f'"recorded_at":"{expected}"'.encode() in entry.canonical
    entries = await backends.read("c08")
    assert [e.recorded_at for e in entries] == [expected for _, expected in cases]
    sql_columns = backends.journals["sqlite"].execute_sql(
        "SELECT recorded_at FROM sagacity_journal WHERE saga_id = 'c08' ORDER BY seq"
    )
    assert [r[0] for r in sql_columns] == [expected for _, expected in cases]
    if "postgres" in backends.journals:  # read back in a Europe/Berlin session: still UTC text
        pg_columns = await backends.journals["postgres"].database.execute(
            "SELECT recorded_at FROM sagacity_journal WHERE saga_id = 'c08' ORDER BY seq"
        )
        assert [r[0] for r in pg_columns] == [expected for _, expected in cases]
    await backends.verify("c08")


@pytest.mark.case("C-08")
@pytest.mark.parametrize("ns", [
    1767225600_123456_999,  # .999 ns past a microsecond: truncated, not rounded up
    1767225600_999999_999,  # the last nanosecond of a second: not carried into the next one
    1767225600_000000_000,
])
async def test_nanoseconds_truncated_by_the_journals_own_clock(backends, monkeypatch, ns):
    """C-08 through the product's conversion: each backend on its default clock, which reads
    ``time.time_ns()`` (``core.journal.utc_stamp``); the expected text is built independently
    (``time.gmtime``)."""
    import types

    from sagacity_agents.core import append_rule as journal_module  # where the clock lives

    monkeypatch.setattr(journal_module, "time", types.SimpleNamespace(time_ns=lambda: ns))
    monkeypatch.setattr(journal_module, "_stamp_cache", (-1, ""))
    for journal in backends.journals.values():
        monkeypatch.setattr(journal, "_clock", journal_module.utc_now)
    entry = await backends.append("c08ns", Phase.INTENT, write_key="k", payload=None)
    assert entry.recorded_at == _expected_from_ns(ns)
    assert [e.recorded_at for e in await backends.read("c08ns")] == [_expected_from_ns(ns)]
    await backends.verify("c08ns")


@pytest.mark.case("C-08")
async def test_order_is_by_seq_never_by_time(backends):
    """C-08: a clock that goes backwards still yields seq order, and the chain verifies."""
    backends.clock.set(dt.datetime(2026, 6, 1, 12, 0, tzinfo=UTC))
    await backends.append("c08b", Phase.INTENT, write_key="a", payload="first")
    backends.clock.advance(-3600 * 24)
    await backends.append("c08b", Phase.EXECUTED, write_key="b", payload="second")
    backends.clock.set(dt.datetime(2020, 1, 1, tzinfo=UTC))
    await backends.append("c08b", Phase.INTENT, write_key="c", payload="third")
    entries = await backends.read("c08b")
    assert [e.seq for e in entries] == [1, 2, 3]
    assert [e.payload for e in entries] == ["first", "second", "third"]
    assert entries[0].recorded_at > entries[1].recorded_at > entries[2].recorded_at
    await backends.verify("c08b")


# --- C-11 -----------------------------------------------------------------------------------

C11_VALUE = {"b": 1, "a": {"y": 2, "x": 1e-7}}
C11_BYTES = b'{"a":{"x":1e-7,"y":2},"b":1}'


@pytest.mark.case("C-11")
def test_one_canonical_form_keys_sorted_numbers_as_ecmascript():
    """C-11: one RFC 8785 form: keys sorted, 1e-7 written as ECMAScript does."""
    assert canonical_bytes(C11_VALUE) == C11_BYTES
    assert canonical_bytes({"a": {"x": 1e-7, "y": 2}, "b": 1}) == C11_BYTES
    assert canonical_bytes(json.loads('{"b":1,"a":{"y":2.0,"x":0.0000001}}')) == C11_BYTES


@pytest.mark.case("C-11")
async def test_exactly_the_canonical_bytes_are_stored_and_hashed(backends):
    """C-11: computed once; the stored bytes are those bytes and the hash is their SHA-256."""
    entry = await backends.append("c11", Phase.EXECUTED, write_key="k", tool="t", call_id="c",
                                  payload=C11_VALUE)
    assert b'"payload":' + C11_BYTES + b"," in entry.canonical
    assert entry.canonical == rfc8785.dumps(entry.hashed_object())
    (stored,) = await stored_bytes(backends, "c11")
    assert stored == entry.canonical
    assert entry.hash == hashlib.sha256(stored).hexdigest()
    (read,) = await backends.read("c11")
    assert read.canonical == stored and read.payload == C11_VALUE
    await backends.verify("c11")


@pytest.mark.case("C-11")
@pytest.mark.parametrize(
    "text", ['{"a":1,"a":2}', '{"x":{"a":1,"a":2}}', '[{"k":0,"k":0}]'], ids=["top", "nested", "in-list"]
)
def test_duplicate_keys_refused(text):
    """C-11: duplicate keys are refused with a clear error (readers would disagree)."""
    with pytest.raises(EncodingError, match="duplicate key"):
        parse_json(text)


@pytest.mark.case("C-11")
async def test_unicode_never_normalized(backends):
    """C-11: precomposed "é" and "e" + combining accent are different bytes and hashes."""
    composed, decomposed = "\u00e9", "e\u0301"
    assert unicodedata.normalize("NFC", decomposed) == composed  # the same text to a human
    one = await backends.append("c11u", Phase.EXECUTED, write_key="nfc", payload={"name": composed})
    two = await backends.append("c11u", Phase.EXECUTED, write_key="nfd", payload={"name": decomposed})
    assert canonical_bytes(composed) == b'"\xc3\xa9"'
    assert canonical_bytes(decomposed) == b'"e\xcc\x81"'
    assert b'"name":"\xc3\xa9"' in one.canonical and b'"name":"e\xcc\x81"' in two.canonical
    a = await backends.append("c11v", Phase.EXECUTED, write_key="k", payload={"name": composed})
    b = await backends.append("c11w", Phase.EXECUTED, write_key="k", payload={"name": decomposed})
    assert a.canonical.replace(b"c11v", b"c11w") != b.canonical
    assert a.hash != b.hash
    first, second = await backends.read("c11u")
    assert first.payload["name"] == composed and len(first.payload["name"]) == 1
    assert second.payload["name"] == decomposed and len(second.payload["name"]) == 2
    await backends.verify("c11u")


# --- C-12 -----------------------------------------------------------------------------------

C12_VALUE = "PK\x03\x04\x00"


@pytest.mark.case("C-12")
@pytest.mark.parametrize("wrap", [False, True], ids=["bare", "in-dict"])
async def test_nul_bytes_round_trip(backends, wrap):
    """C-12: a string with NUL is stored as escaped canonical JSON (no raw NUL byte), verifies,
    and reads back equal to the original on every backend."""
    payload = {"result": C12_VALUE} if wrap else C12_VALUE
    entry = await backends.append("c12", Phase.EXECUTED, write_key="out", tool="unzip",
                                  call_id="c", payload=payload)
    assert b'"PK\\u0003\\u0004\\u0000"' in entry.canonical
    assert b"\x00" not in entry.canonical
    (stored,) = await stored_bytes(backends, "c12")
    assert stored == entry.canonical
    assert backends.journals["sqlite"].execute_sql(
        "SELECT instr(canonical, X'00') FROM sagacity_journal WHERE saga_id = 'c12'"
    ) == [(0,)]
    (read,) = await backends.read("c12")
    assert read.payload == payload
    assert (read.payload["result"] if wrap else read.payload) == C12_VALUE
    await backends.verify("c12")
