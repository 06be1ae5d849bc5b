"""A journal the previous release wrote (``tests/fixtures/previous_release.db``, two open sagas,
every entry tagged) after the upgrade: its sagas keep derivation 1 for every entry, call and
undo, so they are resumed, recovered and verified as before (keys equal to the old rule's), on
SQLite (the file itself, upgraded in place) and PostgreSQL (its rows, byte for byte)."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from pathlib import Path

import pytest

from sagacity_agents import Sagacity, SagaStatus
from sagacity_agents.core.evidence import Evidence, verify_sagas
from sagacity_agents.core.identity import Derivation, derivation_of
from sagacity_agents.core.signing import Keyring
from sagacity_agents.core.undo import call_idempotency_key, idempotency_key
from sagacity_agents.stores import open_journal
from tests.evidence.test_journal_identity import ROWS, copy_rows
from tests.fixtures import previous_release_app as app

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(params=["sqlite", "postgres"])
def previous_journal(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the previous release's journal is now: a copy of its file, or its rows in a
    PostgreSQL schema of this release."""
    if request.param == "sqlite":
        path = tmp_path / "previous.db"
        shutil.copy(FIXTURES / "previous_release.db", path)
        return str(path)
    uri = str(request.getfixturevalue("pg_uri"))
    with sqlite3.connect(FIXTURES / "previous_release.db") as conn:
        rows = conn.execute(f"SELECT {ROWS} FROM sagacity_journal ORDER BY rowid").fetchall()
    copy_rows(rows, uri)
    return uri


@pytest.fixture
def keyring(tmp_path: Path) -> Keyring:
    keys = tmp_path / "keys"
    shutil.copytree(FIXTURES / "previous_release_keys", keys)
    return Keyring.load(keys, signing_key_id="writer-1")


def test_a_saga_of_the_previous_release_is_resumed_recovered_and_verified(previous_journal, keyring):
    app.CALL_KEYS.clear()
    app.UNDO_KEYS.clear()

    async def main() -> None:
        evidence = Evidence(keyring=keyring)
        journal = open_journal(previous_journal)
        try:
            assert all(v.ok for v in await verify_sagas(journal, evidence=evidence))
            before = {sid: await journal.entries(sid) for sid in app.SAGAS}
            assert derivation_of(before["prev-resume"], await journal.journal_id()) == Derivation()
        finally:
            await journal.close()
        sagacity = Sagacity(previous_journal, keyring=keyring)
        try:
            resumed = await sagacity.run(app.agent((3,)), "go on", saga_id="prev-resume")
            assert resumed.status is SagaStatus.COMPLETED
            recovered = await sagacity.recover("prev-recover", app.agent())
            assert recovered.status is SagaStatus.COMPENSATED
        finally:
            await sagacity.aclose()
        journal = open_journal(previous_journal)
        try:
            verdicts = await verify_sagas(journal, evidence=evidence)
            resume_entries = await journal.entries("prev-resume")
        finally:
            await journal.close()
        assert [v.ok for v in verdicts] == [True, True], verdicts
        intent = next(e for e in resume_entries if e.seq > 7 and e.tool == "step")
        assert app.CALL_KEYS == [call_idempotency_key("prev-resume", intent.seq)]  # the old rule
        executed = [e.seq for e in before["prev-recover"] if e.phase.value == "EXECUTED"]
        assert app.UNDO_KEYS == [idempotency_key("prev-recover", seq) for seq in reversed(executed)]

    asyncio.run(main())


def test_the_previous_release_file_is_upgraded_in_place_to_this_schema_version(tmp_path):
    from sagacity_agents.backends.sqlite.setup import SCHEMA_VERSION

    path = tmp_path / "previous.db"
    shutil.copy(FIXTURES / "previous_release.db", path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (0,)  # before versions: 1

    async def main() -> str:
        journal = open_journal(str(path))
        try:
            return await journal.journal_id()  # type: ignore[attr-defined,no-any-return]
        finally:
            await journal.close()

    journal_id = asyncio.run(main())
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert conn.execute("SELECT value FROM sagacity_meta WHERE key = 'journal_id'").fetchone() == (journal_id,)
    assert asyncio.run(main()) == journal_id
