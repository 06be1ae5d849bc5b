"""What a journal refuses to open or to run: a schema newer than the code (PostgreSQL's migration
version, a SQLite file's ``PRAGMA user_version``: older code never uses a newer schema), another
application's SQLite database unless told, and saga ids no run may use (empty, ``sagacity.``);
and ``sagacity journal new-id``, which gives a copy its own journal id."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from sagacity_agents import Sagacity
from sagacity_agents.backends.postgres.journal import PostgresJournal
from sagacity_agents.backends.postgres.migrations import migrate, schema_version
from sagacity_agents.backends.sqlite.approvals import SqliteApprovalStore
from sagacity_agents.backends.sqlite.journal import SqliteJournal
from sagacity_agents.backends.sqlite.setup import SCHEMA_VERSION
from sagacity_agents.cli import cli
from sagacity_agents.core.authenticity import ADOPTION_SAGA, adopt_keyring
from sagacity_agents.core.signing import Keyring, generate_key
from sagacity_agents.errors import ConfigurationError, JournalError
from sagacity_agents.stores import open_journal
from tests.evidence.test_journal_identity import Payments, one_order, shop
from tests.pg import SERVER, admin_connect, drop_schema, new_schema, server_or_skip, with_search_path


def test_a_new_sqlite_file_records_its_schema_version_and_a_newer_one_is_refused(tmp_path):
    path = tmp_path / "j.db"

    async def open_close(**options: object) -> None:
        journal = SqliteJournal(path, **options)  # type: ignore[arg-type]
        await journal.close()

    asyncio.run(open_close())
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(JournalError, match=f"schema version {SCHEMA_VERSION + 1}.*Upgrade sagacity-agents"):
        asyncio.run(open_close())
    with pytest.raises(JournalError, match="newer version wrote it"):
        SqliteApprovalStore(path)


def test_a_postgres_schema_one_version_newer_is_refused():
    server_or_skip()
    schema = new_schema("sagacity_newer")
    uri = with_search_path(SERVER, schema)

    async def main() -> None:
        await migrate(uri)
        with admin_connect(uri) as conn:  # as if a newer release had migrated it
            conn.execute("INSERT INTO sagacity_schema_migrations (version, name) VALUES (%s, 'future')",
                         (schema_version() + 1,))
        journal = PostgresJournal(uri)
        try:
            with pytest.raises(JournalError, match=f"version {schema_version() + 1}.*newer.*Upgrade"):
                await journal.entries("s")
        finally:
            await journal.close()

    try:
        asyncio.run(main())
    finally:
        drop_schema(schema)


def test_the_library_refuses_to_create_its_tables_among_another_applications(tmp_path):
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    with pytest.raises(ConfigurationError, match="holds other tables \\(orders\\).*allow_foreign_tables"):
        SqliteJournal(path)
    with pytest.raises(ConfigurationError, match="holds other tables"):
        SqliteApprovalStore(path)
    with sqlite3.connect(path) as conn:  # nothing was created
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["orders"]

    async def shared() -> str:
        journal = SqliteJournal(path, allow_foreign_tables=True)
        try:
            return await journal.journal_id()
        finally:
            await journal.close()

    journal_id = asyncio.run(shared())
    assert asyncio.run(shared()) == journal_id
    journal = open_journal(str(path))  # its tables are there now: opened without the option
    asyncio.run(journal.close())


@pytest.mark.parametrize("saga_id", ["", "sagacity.keyring", "sagacity.anything"])
def test_reserved_and_empty_saga_ids_are_refused_for_runs(tmp_path, saga_id):
    generate_key(tmp_path / "keys", "k1")
    keyring = Keyring.load(tmp_path / "keys", signing_key_id="k1")
    path = str(tmp_path / "j.db")

    async def main() -> None:
        sagacity = Sagacity(path, keyring=keyring)
        try:
            with pytest.raises(ValueError, match="empty|reserved"):
                await sagacity.run(shop(Payments(), "A"), "go", saga_id=saga_id)
        finally:
            await sagacity.aclose()
        journal = open_journal(path)
        try:
            assert await journal.saga_ids() == []  # nothing written
            assert len(await adopt_keyring(journal, keyring)) == 1  # still adoptable
            assert await journal.saga_ids() == [ADOPTION_SAGA]
        finally:
            await journal.close()

    asyncio.run(main())


def test_journal_new_id_needs_yes_and_then_the_copied_sagas_fail_verify_naming_both_ids(tmp_path):
    path = str(tmp_path / "j.db")

    old = asyncio.run(one_order(path))[0]
    runner = CliRunner()
    shown = runner.invoke(cli, ["journal", "show", "order-1", "--db", path])
    assert shown.exit_code == 0 and f"journal {old}" in shown.output
    refused = runner.invoke(cli, ["journal", "new-id", "--db", path])
    assert refused.exit_code == 2 and "pass --yes" in refused.output and "1 saga(s)" in refused.output
    assert runner.invoke(cli, ["journal", "verify", "--db", path]).exit_code == 0
    done = runner.invoke(cli, ["journal", "new-id", "--db", path, "--yes"])
    assert done.exit_code == 0, done.output
    new = done.output.split("-> ")[1].split(":")[0]
    assert new != old and len(new) == 32
    verified = runner.invoke(cli, ["journal", "verify", "--db", path])
    assert verified.exit_code == 1
    assert f"journal {new}" in verified.output and "other journal" in verified.output
    assert old in verified.output.replace("\n", "") and new in verified.output


def test_the_audit_export_names_the_journal_and_its_verification_binds_it(tmp_path: Path):
    from sagacity_agents.core.audit import export_audit, verify_export

    path = str(tmp_path / "j.db")

    async def main() -> str:
        journal_id = (await one_order(path))[0]
        journal = open_journal(path)
        try:
            with open(tmp_path / "audit.jsonl", "w", encoding="utf-8") as out:
                await export_audit(journal, out)
            return journal_id
        finally:
            await journal.close()

    journal_id = asyncio.run(main())
    lines = (tmp_path / "audit.jsonl").read_text().splitlines()
    assert f'"journal_id": "{journal_id}"' in lines[0]
    assert all(r.ok for r in verify_export(tmp_path / "audit.jsonl"))
    (tmp_path / "other.jsonl").write_text("\n".join([lines[0].replace(journal_id, "0" * 32), *lines[1:]]) + "\n")
    (result,) = verify_export(tmp_path / "other.jsonl")
    assert not result.ok and journal_id in result.detail and "0" * 32 in result.detail
