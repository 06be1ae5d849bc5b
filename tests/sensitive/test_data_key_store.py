"""The data-key store on every backend (``core.data_keys.DataKeyStore``): a saga's wrapped key
per generation, added once (two writers racing get the same stored row), erased for good (a
tombstone says who, when and why; on SQLite the wrapped bytes leave the file and its ``-wal``),
rewrapped all at once for a master-key rotation."""

from __future__ import annotations

import asyncio
import os
import sqlite3

import pytest

from sagacity_agents.backends import SqliteApprovalStore, SqliteJournal
from sagacity_agents.core.data_keys import DataKeyStore, StoredDataKey
from sagacity_agents.core.journal import capabilities_of
from tests.test_backend_contracts import backend, location  # noqa: F401 - the fixtures: each backend

MASTER = "0123456789abcdef"


@pytest.fixture
async def journal(backend, location):
    journal = backend.journal(location)
    yield journal
    await journal.close()


def wrapped(tag: str) -> bytes:
    """Wrapped-key-like bytes, unique enough to be grepped for in a file."""
    return os.urandom(12) + f"WRAPPED-{tag}-".encode() + os.urandom(32)


@pytest.mark.case("X-02")
async def test_a_key_is_added_once_and_read_back(journal):
    assert capabilities_of(journal).data_keys and isinstance(journal, DataKeyStore)
    assert await journal.data_keys("s") == []
    first = wrapped("one")
    stored = await journal.add_data_key("s", 1, MASTER, first)
    assert (stored.saga_id, stored.generation, stored.master_key_id, stored.wrapped) == ("s", 1, MASTER, first)
    assert (stored.erased_at, stored.erased_by, stored.reason) == (None, None, None)
    assert len(stored.created_at) == 27 and stored.created_at.endswith("Z")
    assert await journal.add_data_key("s", 1, "fedcba9876543210", wrapped("other")) == stored
    second = await journal.add_data_key("s", 2, MASTER, wrapped("two"))
    assert await journal.data_keys("s") == [stored, second]
    assert await journal.data_keys("t") == []


@pytest.mark.case("X-02")
async def test_two_writers_adding_the_same_generation_both_get_the_stored_row(backend, location, journal):
    """Two concurrent ``add_data_key`` for one saga and generation, with different keys: both get
    the one stored row (on SQLite and PostgreSQL from two journal objects: two connections)."""
    other = backend.journal(location) if backend.name != "memory" else journal
    try:
        for generation in range(1, 6):
            a, b = await asyncio.gather(
                journal.add_data_key("race", generation, MASTER, wrapped(f"a{generation}")),
                other.add_data_key("race", generation, MASTER, wrapped(f"b{generation}")))
            assert a == b and a.wrapped is not None
        assert [k.generation for k in await other.data_keys("race")] == [1, 2, 3, 4, 5]
    finally:
        if other is not journal:
            await other.close()


@pytest.mark.case("X-04")
async def test_an_erasure_leaves_a_tombstone_and_no_generation_comes_back(journal):
    await journal.add_data_key("s", 1, MASTER, wrapped("one"))
    await journal.add_data_key("s", 2, MASTER, wrapped("two"))
    kept = await journal.add_data_key("other", 1, MASTER, wrapped("kept"))
    assert await journal.erase_data_keys("s", by="dpo@example.com", reason="GDPR art. 17") == 2
    keys = await journal.data_keys("s")
    assert [(k.generation, k.wrapped, k.erased_by, k.reason) for k in keys] == [
        (1, None, "dpo@example.com", "GDPR art. 17"), (2, None, "dpo@example.com", "GDPR art. 17")]
    assert all(k.erased_at is not None and k.erased_at >= k.created_at for k in keys)
    # The tombstone holds the generation: adding it again gives the tombstone, never a new key.
    assert await journal.add_data_key("s", 1, MASTER, wrapped("again")) == keys[0]
    assert await journal.erase_data_keys("s", by="dpo@example.com", reason="again") == 0
    assert await journal.data_keys("s") == keys  # the first erasure's record stands
    assert await journal.data_keys("other") == [kept]
    # A later generation (a late outcome after the erasure) is a fresh key.
    fresh = await journal.add_data_key("s", 3, MASTER, wrapped("three"))
    assert fresh.wrapped is not None and (await journal.data_keys("s"))[-1] == fresh


@pytest.mark.case("X-04")
@pytest.mark.parametrize("args", [
    ("s", "", "why"), ("s", "who", " "), ("", "who", "why"), ("s", None, "why"), ("s", "who", "a\x00b"),
])
async def test_an_erasure_names_the_saga_who_and_why(journal, args):
    saga_id, by, reason = args
    await journal.add_data_key("s", 1, MASTER, wrapped("one"))
    with pytest.raises((TypeError, ValueError)):
        await journal.erase_data_keys(saga_id, by=by, reason=reason)
    assert (await journal.data_keys("s"))[0].wrapped is not None


@pytest.mark.case("X-02")
@pytest.mark.parametrize("args", [
    ("s", 0, MASTER, b"w"), ("s", 1, MASTER, b""), ("s", 1, "", b"w"), ("", 1, MASTER, b"w"),
    ("s", True, MASTER, b"w"), ("s", 1, MASTER, "w"), ("s", 1.0, MASTER, b"w"), (1, 1, MASTER, b"w"),
])
async def test_a_key_that_cannot_be_stored_is_refused(journal, args):
    with pytest.raises((TypeError, ValueError)):
        await journal.add_data_key(*args)
    assert await journal.data_keys("s") == []


@pytest.mark.case("X-02")
async def test_rewrap_replaces_every_live_key_or_none(journal):
    await journal.add_data_key("a", 1, MASTER, wrapped("a1"))
    await journal.add_data_key("b", 1, MASTER, wrapped("b1"))
    await journal.add_data_key("b", 2, MASTER, wrapped("b2"))
    await journal.erase_data_keys("a", by="ops", reason="closed")
    before = {sid: await journal.data_keys(sid) for sid in ("a", "b")}

    def failing(key: StoredDataKey) -> tuple[str, bytes]:
        if key.generation == 2:
            raise RuntimeError("cannot unwrap")
        return "new-master-0001", b"rewrapped"

    with pytest.raises(RuntimeError, match="cannot unwrap"):
        await journal.rewrap_data_keys(failing)
    assert {sid: await journal.data_keys(sid) for sid in ("a", "b")} == before

    seen: list[StoredDataKey] = []

    def rewrap(key: StoredDataKey) -> tuple[str, bytes]:
        seen.append(key)
        return "new-master-0001", b"re:" + key.wrapped

    assert await journal.rewrap_data_keys(rewrap) == 2
    assert sorted((k.saga_id, k.generation) for k in seen) == [("b", 1), ("b", 2)]
    after = await journal.data_keys("b")
    assert [(k.master_key_id, k.wrapped) for k in after] == [
        ("new-master-0001", b"re:" + k.wrapped) for k in before["b"]]
    assert [k.created_at for k in after] == [k.created_at for k in before["b"]]
    assert await journal.data_keys("a") == before["a"]  # a tombstone is left alone


def _file_bytes(path: str) -> bytes:
    found = b""
    for suffix in ("", "-wal"):
        if os.path.exists(path + suffix):
            with open(path + suffix, "rb") as f:
                found += f.read()
    return found


@pytest.mark.case("X-04")
async def test_after_an_erasure_the_wrapped_bytes_are_nowhere_in_the_sqlite_file_or_its_wal(tmp_path):
    """The bytes are in the file (or its -wal) before; after ``erase_data_keys`` (secure_delete,
    synced commit, truncating checkpoint) neither holds them, with the approval store's
    connection open on the same file and other sagas' keys and entries written around them."""
    path = str(tmp_path / "sagacity.db")
    journal, approvals = SqliteJournal(path), SqliteApprovalStore(path)
    try:
        await approvals.save_snapshot("other", "{}")
        keys = [wrapped(f"erase{g}") for g in (1, 2)]
        kept = wrapped("kept")
        await journal.add_data_key("erase", 1, MASTER, keys[0])
        await journal.append("other", "SAGA_OPENED", write_key="o", payload={"n": 1})
        await journal.add_data_key("kept", 1, MASTER, kept)
        await journal.add_data_key("erase", 2, MASTER, keys[1])
        on_disk = _file_bytes(path)
        assert all(on_disk.count(k) >= 1 for k in keys) and kept in on_disk
        assert await journal.erase_data_keys("erase", by="ops", reason="request 42") == 2
        on_disk = _file_bytes(path)
        assert [on_disk.count(k) for k in keys] == [0, 0]
        assert all(on_disk.count(k[12:]) == 0 for k in keys)  # not even the ciphertext alone
        assert kept in on_disk
        assert os.path.getsize(path + "-wal") == 0
        (tomb1, tomb2) = await journal.data_keys("erase")
        assert tomb1.wrapped is None and tomb2.reason == "request 42"
        await journal.append("other", "LEASE_RENEWED", write_key="r", payload={"holder": "h"})
    finally:
        await journal.close()
        await approvals.close()
    assert all(_file_bytes(path).count(k) == 0 for k in keys)
    with sqlite3.connect(path) as conn:  # the file is whole, the tombstones readable by anyone
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("SELECT generation, wrapped IS NULL, erased_by FROM sagacity_data_keys "
                            "WHERE saga_id = 'erase' ORDER BY generation").fetchall() == [(1, 1, "ops"), (2, 1, "ops")]


@pytest.mark.case("X-04")
async def test_a_rotation_leaves_no_old_wrapped_bytes_in_the_sqlite_file(tmp_path):
    path = str(tmp_path / "sagacity.db")
    journal = SqliteJournal(path)
    try:
        old = wrapped("old")
        await journal.add_data_key("s", 1, MASTER, old)
        assert old in _file_bytes(path)
        assert await journal.rewrap_data_keys(lambda key: ("new-master-0001", wrapped("new"))) == 1
        assert old not in _file_bytes(path)
    finally:
        await journal.close()
