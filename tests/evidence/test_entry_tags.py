"""Issue 19, the tag itself: what it covers is the same on every backend and append path (the
PostgreSQL pieces, the sealed bytes, the stand-alone verifier's reading), an earlier SQLite file
is upgraded in place, and an export carries the tags the auditor checks."""

from __future__ import annotations

import asyncio
import base64
import json
import sqlite3

import pytest

from sagacity_agents.backends.postgres.journal import PostgresJournal, byte_pieces
from sagacity_agents.backends.sqlite.journal import SqliteJournal
from sagacity_agents.core.authenticity import (
    ENTRY_STATEMENT, TagCache, signing_view, tag_statement, unlinked_bytes,
    unlinked_from_pieces,
)
from sagacity_agents.core.chain import verify_entries
from sagacity_agents.core.entries import Phase, entry_bytes
from sagacity_agents.core.evidence import Evidence
from sagacity_agents.core.journal import AppendRequest
from sagacity_agents.core.signing import Keyring, generate_key, statement_bytes

from .test_audit_export import doc_blocks, export, populated  # noqa: F401 - the fixture

NASTY = {"seq": 7, "tool": "x", "prev_hash": "0" * 64, "recorded_at": "r", "nested": {"seq": 1, "tool": None},
         "text": '","seq":3,"tool":"', "emoji": "\U0001f600"}


@pytest.fixture
def keyring(tmp_path):
    generate_key(tmp_path / "keys", "writer-1")
    return Keyring.load(tmp_path / "keys")


@pytest.mark.parametrize("payload", [None, {"a": 1}, NASTY])
def test_the_tag_covers_the_same_bytes_from_the_pieces_and_from_the_sealed_entry(payload):
    """PostgreSQL's locked append tags the pieces it sends; the other paths tag the sealed
    bytes; a verifier unlinks the stored bytes: all three are the entry at seq 0 after genesis,
    even when the payload holds the members the unlinking looks for."""
    request = AppendRequest.build("s", Phase.INTENT, write_key="k", tool="t", call_id="c", payload=payload)
    now = "2026-01-01T00:00:00.000000Z"
    head, middle, tail = byte_pieces(request, now)
    fields = dict(saga_id="s", phase=Phase.INTENT, tool="t", call_id="c", write_key="k",
                  payload=request.payload, recorded_at=now)
    expected = entry_bytes(seq=0, prev_hash="0" * 64, **fields)
    assert unlinked_from_pieces(head, middle, tail) == expected
    sealed = entry_bytes(seq=41, prev_hash="ab" * 32, **fields)
    assert unlinked_bytes(sealed, 41, "ab" * 32) == expected


def test_the_statement_is_rfc_8785_and_json_dumps_rebuilds_it():
    digest_of = unlinked_bytes(entry_bytes(saga_id="s", seq=1, phase=Phase.INTENT, tool=None, call_id=None,
                                           write_key="k", payload=None, recorded_at="r", prev_hash="0" * 64),
                               1, "0" * 64)
    statement = tag_statement(digest_of, "writer-1")
    fields = json.loads(statement)
    assert statement == statement_bytes(ENTRY_STATEMENT, {"content": fields["content"], "key_id": "writer-1"})
    assert statement == json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()


def test_a_tag_does_not_verify_on_other_content_or_under_another_key_id(keyring, tmp_path):
    from sagacity_agents.backends.memory.journal import InMemoryJournal

    async def go():
        journal = signing_view(InMemoryJournal(), keyring)
        entry = await journal.append("s", Phase.SAGA_OPENED, write_key="k", payload={"metadata": {}})
        assert entry.tag_key == "writer-1" and TagCache().check(entry, keyring) is None
        other = await journal.append("t", Phase.SAGA_OPENED, write_key="k", payload={"metadata": {}})
        moved = type(entry)(**{**{f: getattr(other, f) for f in other.__dataclass_fields__},
                               "tag": entry.tag})  # a valid tag of another entry
        assert "does not verify" in TagCache().check(moved, keyring)
        generate_key(tmp_path / "other", "writer-2")
        assert "unknown key" in TagCache().check(
            type(entry)(**{**{f: getattr(entry, f) for f in entry.__dataclass_fields__}, "tag_key": "writer-2"}),
            keyring)

    asyncio.run(go())


def test_an_earlier_sqlite_file_is_upgraded_in_place(tmp_path, keyring):
    """A file written before tags existed gets the two columns when opened; its rows stay
    untagged (and verify as a chain), new rows are tagged."""
    path = tmp_path / "old.db"

    async def write_old():
        journal = SqliteJournal(path)
        await journal.append("s", Phase.SAGA_OPENED, write_key="open", payload={"metadata": {}})
        await journal.close()

    asyncio.run(write_old())
    conn = sqlite3.connect(path)  # what an earlier version's file looks like: no tag columns
    conn.execute("ALTER TABLE sagacity_journal DROP COLUMN tag")
    conn.execute("ALTER TABLE sagacity_journal DROP COLUMN tag_key")
    conn.commit()
    conn.close()

    async def reopen():
        journal = signing_view(SqliteJournal(path), keyring)
        await journal.append("s", Phase.INTENT, write_key="i", tool="t", call_id="c", payload={"args": {}})
        entries = await journal.entries("s")
        await journal.close()
        return entries

    old, new = asyncio.run(reopen())
    assert (old.tag, new.tag_key) == (None, "writer-1") and verify_entries("s", [old, new]).ok
    columns = [row[1] for row in sqlite3.connect(path).execute("PRAGMA table_info(sagacity_journal)")]
    assert columns[-2:] == ["tag_key", "tag"]


async def test_postgres_tags_on_the_sole_writers_insert_and_on_the_locked_append(pg_uri, keyring):
    """Both PostgreSQL append paths store the tag the client made (the locked one before the
    server joined seq and prev_hash in), and both verify under the keyring."""
    journal = signing_view(PostgresJournal(pg_uri), keyring)
    other = signing_view(PostgresJournal(pg_uri), keyring)
    try:
        await journal.append("s", Phase.SAGA_OPENED, write_key="a", payload={"metadata": {}})  # locked (unknown tail)
        await journal.append("s", Phase.INTENT, write_key="b", tool="t", call_id="c", payload=NASTY)  # alone
        await other.append("s", Phase.INTENT, write_key="c", tool="t", call_id="d", payload={})  # locked
        await journal.append_many("s", [{"phase": Phase.INTENT, "write_key": "d", "tool": "t", "call_id": "e"}])
        entries = await journal.entries("s")
    finally:
        await journal.close()
        await other.close()
    assert [e.tag_key for e in entries] == ["writer-1"] * 4
    result = Evidence(keyring=keyring).check("s", entries, None)
    assert result.ok, result


def test_the_stand_alone_tag_check_of_audit_format(populated, tmp_path):  # noqa: F811
    """docs/audit-format.md's optional tag check accepts every tagged entry of a real export
    and refuses a tag moved to another entry."""
    db, cps, keys, _ = populated
    out = tmp_path / "audit.jsonl"
    export(db, cps, out)
    namespace: dict = {}
    exec(doc_blocks()[2], namespace)  # noqa: S102 - the documented code, run as printed
    lines = out.read_text().splitlines()
    header, records = json.loads(lines[0]), [json.loads(line) for line in lines[1:]]
    tagged = [r for r in records if r["type"] == "entry"]
    assert tagged and all("tag" in r for r in tagged)
    first = {r["saga_id"]: r for r in tagged if r["seq"] == 1}
    for record in tagged:
        namespace["check_tag"](record, keys, header, first[record["saga_id"]])
    forged = {**tagged[1], "tag": tagged[0]["tag"]}
    from cryptography.exceptions import InvalidSignature

    with pytest.raises(InvalidSignature):
        namespace["check_tag"](forged, keys, header, first[forged["saga_id"]])
    with pytest.raises(InvalidSignature):  # the same export claimed for another journal
        namespace["check_tag"](tagged[1], keys, {**header, "journal_id": "0" * 32}, first[tagged[1]["saga_id"]])
    assert base64.b64decode(tagged[0]["tag"])


@pytest.mark.case("A-05")
@pytest.mark.parametrize("key_id", ["../../etc/passwd", "/abs/key", "a/b", "", "k\x00"])
def test_the_documented_checks_refuse_a_key_id_that_is_a_path(tmp_path, key_id):
    """docs/audit-format.md's check_tag and check_checkpoint take the key id from the export,
    which its writer chose: one that is not a key id (the Keyring's pattern) is refused before
    any file is opened."""
    namespace: dict = {}
    exec(doc_blocks()[1] + "\n" + doc_blocks()[2], namespace)  # noqa: S102 - the documented code
    opened: list = []
    namespace["open"] = lambda *a, **k: opened.append(a) or (_ for _ in ()).throw(AssertionError("opened"))
    with pytest.raises(KeyError, match="not a key id"):
        namespace["check_tag"]({"tag_key": key_id, "canonical": "", "tag": ""}, str(tmp_path), {}, {})
    with pytest.raises(KeyError, match="not a key id"):
        namespace["check_checkpoint"]({"key_id": key_id, "saga_id": "s", "seq": 1, "hash": "h",
                                       "time": "t", "signature": ""}, str(tmp_path))
    assert opened == []
