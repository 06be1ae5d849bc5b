"""A REOPENED saga (a late outcome after its SAGA_CLOSED) is named wherever sagas are listed:
``sagacity saga show``, the inbox's saga list, the gauges, ``recover --all``'s selection; and it
takes no run but a recovery."""

from __future__ import annotations

import asyncio

import pytest
from click.testing import CliRunner

from sagacity_agents import Sagacity
from sagacity_agents.backends.sqlite.journal import SqliteJournal
from sagacity_agents.cli import cli
from sagacity_agents.core.entries import Phase
from sagacity_agents.core.health import saga_health
from sagacity_agents.core.recovery import Recovery, recovery_reason
from sagacity_agents.errors import SagaStateError
from sagacity_agents.web.views import saga_views

from .test_late_outcome_after_close import SAGA, _closed_with_a_call_in_flight, _outcome


async def _reopened(db: str) -> SqliteJournal:
    journal = SqliteJournal(db)
    seqs = await _closed_with_a_call_in_flight(journal)
    await journal.append(SAGA, Phase.EXECUTED, **_outcome(seqs, fence=seqs["r1"], late=True))
    await journal.append("other", Phase.SAGA_OPENED, write_key="open", payload={"metadata": {}})
    return journal


def test_saga_show_names_a_reopened_saga(tmp_path, monkeypatch):
    db = str(tmp_path / "j.db")
    asyncio.run(asyncio.run(_reopened(db)).close())
    monkeypatch.setenv("COLUMNS", "200")
    out = CliRunner().invoke(cli, ["saga", "show", SAGA, "--db", db])
    assert out.exit_code == 0, out.output
    assert "REOPENED (late outcome seq 7 after SAGA_CLOSED seq 6: recover it)" in out.output


async def test_lists_gauges_and_selection_name_it_and_only_a_recovery_takes_it(tmp_path):
    journal = await _reopened(str(tmp_path / "j.db"))
    try:
        views = {v["saga_id"]: v["status"] for v in await saga_views(journal, await journal.saga_summaries())}
        assert views[SAGA].startswith("REOPENED") and not views["other"].startswith("REOPENED")
        health = await saga_health(journal)
        assert (health.reopened, health.still_dirty) == (1, 1)
        entries = await journal.entries(SAGA)
        assert recovery_reason(entries).startswith("REOPENED: a late outcome (seq 7)")
        selected = [sid async for sid, _why, _found in Recovery(journal, Sagacity(journal).approvals)
                    .needing_recovery()]
        assert selected == [SAGA]
        with pytest.raises(SagaStateError, match="reopened"):
            await Sagacity(journal).close_saga(SAGA)
    finally:
        await journal.close()
