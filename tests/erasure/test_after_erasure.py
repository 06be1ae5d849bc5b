"""After an erasure (``core.erasure.erase``): the saga's sensitive values cannot be recovered,
not even with the master key (``DataErasedError``); the chain, the tags (with a keyring), our
export verifier and the stand-alone verifier of docs/audit-format.md still pass; the wrapped
key's bytes are gone from the SQLite file and its ``-wal``, and from a ``pg_dump`` of the
PostgreSQL schema. On every backend."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import urllib.parse
from pathlib import Path

import pytest
from click.testing import CliRunner

from sagacity_agents.cli import cli
from sagacity_agents.core.audit import verify_export
from sagacity_agents.core.authenticity import signing_view
from sagacity_agents.core.entries import ACCESS_SAGA
from sagacity_agents.core.evidence import Evidence, verify_sagas
from sagacity_agents.core.recovery import Recovery
from sagacity_agents.core.sensitive import masked
from sagacity_agents.core.signing import Keyring, generate_key
from sagacity_agents.backends.memory.approvals import InMemoryApprovalStore
from sagacity_agents.errors import DataErasedError
from tests.evidence.test_audit_export import run_doc_verifier

from .sagas import CARD, FAR, TOKEN, keys, write_saga

pytestmark = pytest.mark.case("X-04")




@pytest.fixture
def keyring(tmp_path):
    generate_key(tmp_path / "keys", "host-1")
    return Keyring.load(tmp_path / "keys")


async def _reveal_all(journal, data_keys, saga_id):
    secrets = await data_keys.for_saga(journal, saga_id, create=False)
    return [secrets.reveal(e.payload, e.sealed, e.write_key) for e in await journal.entries(saga_id)]


async def test_erased_values_stay_unrecoverable_with_the_master_key_and_everything_verifies(
        place, keyring, tmp_path):
    backend, location, journal = place
    data_keys = keys()
    await write_saga(journal, data_keys, "s", "closed", keyring=keyring)
    clear = await _reveal_all(journal, keys(), "s")  # another process with the master key
    assert clear[2]["args"]["card_number"] == CARD and clear[3]["result"]["token"] == TOKEN

    evidence = Evidence(keyring=keyring)
    recovery = Recovery(journal, InMemoryApprovalStore(), evidence=evidence, clock=lambda: FAR,
                        data_keys=data_keys)
    done = await recovery.erase("s", by="dpo", reason="gdpr art. 17")
    assert done.generations == (1,) and done.entry is not None
    assert done.entry.tag_key == "host-1"  # the access log is signed by this host's key

    for fresh in (keys(), data_keys):  # a new process with the master key, and the eraser's own
        with pytest.raises(DataErasedError):
            await _reveal_all(journal, fresh, "s")
    entries = await journal.entries("s")
    assert masked(entries[2].payload, erased=True)["args"]["card_number"] == "[erased]"
    assert all(e.tag_key == "host-1" for e in entries)
    for checked in (await verify_sagas(journal, "s", evidence=evidence),
                    await verify_sagas(journal, ACCESS_SAGA, evidence=evidence)):
        assert all(v.ok for v in checked), checked

    if backend.name == "memory":
        return  # the export reads a stored journal
    out = tmp_path / "audit.jsonl"
    keys_dir = str(tmp_path / "keys")
    result = await asyncio.to_thread(CliRunner().invoke, cli, [
        "audit", "export", "s", "--out", str(out), "--db", location, "--keyring", keys_dir])
    assert result.exit_code == 0, result.output
    assert CARD not in out.read_text() and TOKEN not in out.read_text()
    assert all(v.ok for v in verify_export(out, keyring)), verify_export(out, keyring)
    assert await asyncio.to_thread(run_doc_verifier, out) == (0, {"s": None})
    assert await asyncio.to_thread(run_doc_verifier, out, keys_dir) == (0, {"s": None})


async def _wrapped(journal, saga_id):
    (row,) = await journal.data_keys(saga_id)
    assert row.wrapped is not None
    return row.wrapped


async def test_the_sqlite_file_and_its_wal_no_longer_hold_the_wrapped_key(tmp_path):
    from sagacity_agents.backends.sqlite.journal import SqliteJournal

    path = tmp_path / "j.db"
    journal = SqliteJournal(str(path))
    try:
        await write_saga(journal, keys(), "s", "closed")
        wrapped = await _wrapped(journal, "s")
        stored = path.read_bytes() + Path(f"{path}-wal").read_bytes()
        assert wrapped in stored  # what the erasure must remove is there before it
        await erase_far(journal, "s")
        for name in (path, Path(f"{path}-wal")):
            data = name.read_bytes() if name.exists() else b""
            assert wrapped not in data, name
            assert wrapped[12:28] not in data, name  # not even a piece of the ciphertext
    finally:
        await journal.close()
    for name in (path, Path(f"{path}-wal")):
        assert not name.exists() or wrapped[12:28] not in name.read_bytes()


async def erase_far(journal, saga_id):
    from sagacity_agents.core.erasure import erase

    return await erase(journal, keys(), saga_id, by="dpo", reason="r", now=FAR)


def _schema_of(uri: str) -> str:
    options = urllib.parse.parse_qs(urllib.parse.urlsplit(uri).query).get("options", [""])[0]
    return options.split("search_path=")[1].split(",")[0].strip()


def _pg_dump(uri: str) -> bytes:
    base = urllib.parse.urlsplit(uri)._replace(query="").geturl()
    dump = subprocess.run([shutil.which("pg_dump") or "pg_dump", "--schema", _schema_of(uri),
                           "--data-only", base], capture_output=True, timeout=120, check=True)
    return dump.stdout


@pytest.mark.skipif(shutil.which("pg_dump") is None, reason="pg_dump is not installed")
async def test_a_pg_dump_of_the_schema_no_longer_holds_the_wrapped_key(pg_uri):
    from sagacity_agents.backends.postgres.journal import PostgresJournal

    journal = PostgresJournal(pg_uri)
    try:
        await write_saga(journal, keys(), "s", "closed")
        wrapped = await _wrapped(journal, "s")
        before = _pg_dump(pg_uri)
        assert wrapped.hex().encode() in before  # bytea is dumped in hex
        await erase_far(journal, "s")
        after = _pg_dump(pg_uri)
        assert wrapped.hex().encode() not in after and wrapped[12:28].hex().encode() not in after
        assert b"dpo" in after  # the tombstone says who erased
        assert CARD.encode() not in after and TOKEN.encode() not in after
    finally:
        await journal.close()
