"""``sagacity saga erase`` (one saga; ``--older-than`` retention with ``--dry-run``) and
``sagacity journal rewrap-keys`` (master-key rotation), on a SQLite file."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt

import click
import pytest
from click.testing import CliRunner

from sagacity_agents.backends.sqlite.journal import SqliteJournal
from sagacity_agents.cli import cli
from sagacity_agents.cli.erase import older_than_seconds
from sagacity_agents.core.data_keys import DataKeys, MasterKey
from sagacity_agents.core.entries import ACCESS_SAGA
from sagacity_agents.errors import DataKeyError

from .sagas import CARD, MASTER, NEW_MASTER, keys, write_saga

pytestmark = pytest.mark.case("X-04")

OLD = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=40)


def _write(db: str, shapes: dict[str, str], when: dt.datetime | None = None) -> None:
    async def go() -> None:
        journal = SqliteJournal(db, **({"clock": lambda: when} if when else {}))
        try:
            for saga_id, shape in shapes.items():
                await write_saga(journal, keys(), saga_id, shape)
        finally:
            await journal.close()

    asyncio.run(go())


def _live(db: str) -> dict[str, list[int]]:
    async def go() -> dict[str, list[int]]:
        journal = SqliteJournal(db)
        try:
            return {sid: [r.generation for r in await journal.data_keys(sid) if r.wrapped]
                    for sid in await journal.saga_ids() if not sid.startswith("sagacity.")}
        finally:
            await journal.close()

    return asyncio.run(go())


def _erase(*args: str):
    return CliRunner().invoke(cli, ["saga", "erase", *args])


def test_one_saga_is_erased_and_a_refusal_says_why_with_exit_1(tmp_path):
    db = str(tmp_path / "j.db")
    _write(db, {"fresh": "closed", "open-one": "open"})
    refused = _erase("fresh", "--as", "dpo", "--reason", "r", "--db", db)
    assert refused.exit_code == 1 and "[BEFORE_DEADLINE]" in refused.output
    refused = _erase("open-one", "--as", "dpo", "--reason", "r", "--db", db)
    assert refused.exit_code == 1 and "[OPEN]" in refused.output
    forced = _erase("open-one", "--as", "dpo", "--reason", "customer asked", "--force", "--db", db)
    assert forced.exit_code == 0, forced.output
    assert "erased saga open-one: data key generation 1 destroyed, forced" in forced.output
    again = _erase("open-one", "--as", "dpo", "--reason", "r", "--force", "--db", db)
    assert again.exit_code == 0 and "already erased" in again.output
    assert _live(db) == {"fresh": [1], "open-one": []}
    assert _erase("--as", "dpo", "--reason", "r", "--db", db).exit_code == 2  # neither


def test_retention_erases_old_closed_sagas_skips_refused_ones_and_exits_1(tmp_path):
    db = str(tmp_path / "j.db")
    _write(db, {"old": "closed", "old-dirty": "dirty", "old-open": "open"}, OLD)
    _write(db, {"recent": "closed"})
    dry = _erase("--older-than", "30d", "--as", "dpo", "--reason", "retention", "--dry-run", "--db", db)
    assert dry.exit_code == 1, dry.output
    assert "old  would erase" in dry.output and "old-dirty  would refuse [DIRTY]" in dry.output
    assert "recent" not in dry.output and "old-open" not in dry.output  # not closed / not old
    assert _live(db)["old"] == [1]  # a dry run erases nothing

    run = _erase("--older-than", "30d", "--as", "dpo", "--reason", "retention", "--db", db)
    assert run.exit_code == 1
    assert "erased saga old: data key generation 1 destroyed" in run.output
    assert "skipped old-dirty: refused [DIRTY]" in run.output
    assert _live(db) == {"old": [], "old-dirty": [1], "old-open": [1], "recent": [1]}
    clean = _erase("--older-than", "12h", "--as", "dpo", "--reason", "retention", "--db", db)
    assert "skipped old-dirty" in clean.output and "erased saga old" not in clean.output


@pytest.mark.parametrize("text, seconds", [("30d", 30 * 86400), ("12h", 43200), ("90m", 5400),
                                           ("1.5d", 129600)])
def test_retention_periods(text, seconds):
    assert older_than_seconds(text) == seconds


@pytest.mark.parametrize("text", ["30", "0d", "d", "30 days", "-1d", ""])
def test_bad_retention_periods(text):
    with pytest.raises(click.BadParameter):
        older_than_seconds(text)


def _env(master: MasterKey | None, secret: bytes, previous: bytes | None = None) -> dict[str, str]:
    env = {"SAGACITY_DATA_KEY": base64.b64encode(secret).decode()}
    if previous is not None:
        env["SAGACITY_DATA_KEY_PREVIOUS"] = base64.b64encode(previous).decode()
    return env


def test_rewrap_keys_rotates_the_master_key_and_leaves_erased_keys_erased(tmp_path):
    db = str(tmp_path / "j.db")
    _write(db, {"kept": "closed", "gone": "open"})
    assert _erase("gone", "--as", "dpo", "--reason", "r", "--force", "--db", db).exit_code == 0
    old, new = bytes(range(32)), bytes(range(32, 64))
    assert MasterKey(old).key_id == MASTER.key_id and MasterKey(new).key_id == NEW_MASTER.key_id
    runner = CliRunner()
    missing = runner.invoke(cli, ["journal", "rewrap-keys", "--db", db], env={"SAGACITY_DATA_KEY": ""})
    assert missing.exit_code == 2 and "SAGACITY_DATA_KEY" in missing.output
    wrong = runner.invoke(cli, ["journal", "rewrap-keys", "--db", db], env=_env(None, new))
    assert wrong.exit_code == 1 and "nothing rewrapped" in wrong.output
    done = runner.invoke(cli, ["journal", "rewrap-keys", "--db", db], env=_env(None, new, old))
    assert done.exit_code == 0, done.output
    assert f"1 data key(s) rewrapped under master key {NEW_MASTER.key_id}" in done.output

    async def read() -> None:
        journal = SqliteJournal(db)
        try:
            (row,) = await journal.data_keys("kept")
            assert row.master_key_id == NEW_MASTER.key_id
            intent = (await journal.entries("kept"))[2]
            secrets = await DataKeys(NEW_MASTER).for_saga(journal, "kept", create=False)
            assert secrets.reveal(intent.payload, intent.sealed, intent.write_key)["args"]["card_number"] == CARD
            with pytest.raises(DataKeyError):
                await DataKeys(MASTER).for_saga(journal, "kept", create=False)  # the old key: nothing
            (gone,) = await journal.data_keys("gone")
            assert gone.wrapped is None
            assert len(await journal.entries(ACCESS_SAGA)) == 1
        finally:
            await journal.close()

    asyncio.run(read())
