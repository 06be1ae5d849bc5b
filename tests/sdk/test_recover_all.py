"""Recovery at scale (issue 8 item 6): ``sagacity saga recover --all`` recovers the sagas whose
run lease expired without RUN_ENDED, never one waiting for approval, idle or running, and exits
non-zero with a report while anything needs a human."""

from __future__ import annotations

import asyncio
from typing import Any

from click.testing import CliRunner

from sagacity_agents.backends import Phase, SqliteJournal
from sagacity_agents.cli import cli
from sagacity_agents.render import saga_status

from .claims_worker import CrashClock, crash_saga, far_side_applied, step_agent

FAR = {"path": ""}


def app() -> Any:
    """``--app tests.sdk.test_recover_all:app``: the steps agent, undoing at the far side."""
    return step_agent(FAR["path"])


async def ended_run(journal: Any, saga_id: str, status: str) -> None:
    """A saga whose last run ended normally with ``status`` (idle OPEN, AWAITING_APPROVAL)."""
    await journal.append(saga_id, Phase.SAGA_OPENED, write_key="saga:open", payload={"metadata": {}})
    await journal.append(saga_id, Phase.RUN_STARTED, write_key="run:a",
                         payload={"agent": "steps", "holder": "h:1:a", "lease_seconds": 5.0, "took_over": None})
    await journal.append(saga_id, Phase.RUN_ENDED, write_key="run-end:a", payload={"holder": "h:1:a", "status": status})


async def build(db: str) -> None:
    clock = CrashClock()
    journal = SqliteJournal(db, clock=clock)
    try:
        await crash_saga(journal, "crashed")
        await crash_saga(journal, "crashed-in-doubt")
        await journal.append("crashed-in-doubt", Phase.INTENT, write_key="c9:intent", tool="step",
                             call_id="c9", payload={"args": {"n": 9}, "reversibility": "compensatable"})
        await crash_saga(journal, "tampered")
        await ended_run(journal, "idle", "OPEN")
        await ended_run(journal, "waiting", "AWAITING_APPROVAL")
        clock.catch_up()
        await crash_saga(journal, "running")  # its lease is fresh: a live run holds it
    finally:
        await journal.close()
    # Someone edits the tampered saga's undo target (E-03 style): it must be refused.
    journal = SqliteJournal(db)
    try:
        entries = await journal.entries("tampered")
        edited = entries[3].canonical.replace(b'"result":1', b'"result":7')
        assert edited != entries[3].canonical
        import sqlite3

        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE sagacity_journal SET canonical = ? WHERE saga_id = 'tampered' AND seq = 4",
                         (edited,))
    finally:
        await journal.close()


def test_recover_all_recovers_crashed_sagas_only_and_reports_what_needs_a_human(tmp_path):
    db = str(tmp_path / "j.db")
    FAR["path"] = str(tmp_path / "far.db")
    asyncio.run(build(db))
    runner = CliRunner()
    out = runner.invoke(cli, ["saga", "recover", "--all", "--app", "tests.sdk.test_recover_all:app", "--db", db])
    assert out.exit_code == 1, out.output
    text = out.output
    assert "saga crashed: run lease of host:1:dead" in text and "without RUN_ENDED" in text
    assert "saga crashed-in-doubt:" in text and "in doubt: seq 9" in text
    assert "saga tampered:" in text and "REFUSED" in text and "EvidenceError" in text
    for untouched in ("idle", "waiting", "running"):
        assert f"saga {untouched}:" not in text
    assert "3 saga(s) recovered, 2 need a human" in " ".join(text.split())

    async def statuses() -> dict[str, str]:
        journal = SqliteJournal(db)
        try:
            return {sid: saga_status(await journal.entries(sid)) for sid in await journal.saga_ids()}
        finally:
            await journal.close()

    after = asyncio.run(statuses())
    assert after["crashed"] == "COMPENSATED"
    assert after["crashed-in-doubt"] == "IN_DOUBT (open: recover it)"
    assert after["idle"] == "OPEN" and after["waiting"] == "AWAITING_APPROVAL (open)"
    assert after["running"].startswith("RUNNING")
    assert after["tampered"].startswith("OPEN")  # nothing written to it
    assert sum(far_side_applied(FAR["path"]).values()) == 6  # crashed + crashed-in-doubt: 3 undos each

    # The human answers; the next --all closes it and re-applies nothing.
    answer = runner.invoke(cli, ["saga", "resolve", "crashed-in-doubt", "9", "--not-run", "--force", "--as", "ops",
                                 "--reason", "no such booking", "--db", db])
    assert answer.exit_code == 0, answer.output
    again = runner.invoke(cli, ["saga", "recover", "--all", "--app", "tests.sdk.test_recover_all:app", "--db", db])
    assert "saga crashed-in-doubt: last run ended IN_DOUBT" in again.output
    assert "saga crashed:" not in again.output  # closed: never again
    assert asyncio.run(statuses())["crashed-in-doubt"] == "COMPENSATED"
    assert set(far_side_applied(FAR["path"]).values()) == {1}
    assert again.exit_code == 1  # the tampered saga still needs a human


def test_recover_needs_a_saga_id_or_all(tmp_path):
    db = str(tmp_path / "j.db")
    asyncio.run(build(db))
    out = CliRunner().invoke(cli, ["saga", "recover", "--app", "tests.sdk.test_recover_all:app", "--db", db])
    assert out.exit_code == 2 and "SAGA_ID or --all" in out.output


