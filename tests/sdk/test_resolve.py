"""A human answers an in-doubt call or undo (issue 8 item 2): ``Sagacity.resolve`` and
``sagacity saga resolve`` journal RESOLVED; recovery then undoes what ran, drops what did not,
and the saga closes. An approved call that never ran is named in the report."""

from __future__ import annotations

import pytest
from agents import function_tool
from click.testing import CliRunner

from sagacity_agents import Sagacity, SagaStatus, compensable
from sagacity_agents.backends import InMemoryJournal, Phase, SqliteJournal
from sagacity_agents.errors import EvidenceError, SagaStateError
from sagacity_agents.cli import cli
from sagacity_agents.core.chain import verify_entries

from .helpers import agent, scripted
from .test_recovery import crashed_saga

UNDONE: list[tuple[int, str]] = []


@function_tool
@compensable(undo=lambda ctx: UNDONE.append((ctx.args["n"], ctx.idempotency_key)))
async def step(n: int) -> int:
    """A compensatable step."""
    return n


def step_agent():
    return agent(scripted(), step)


def make(backend: str, tmp_path) -> Sagacity:
    return Sagacity(InMemoryJournal() if backend == "memory" else SqliteJournal(tmp_path / "j.db"))


@pytest.mark.parametrize("ran", [True, False])
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_resolving_an_in_doubt_call_lets_recovery_undo_or_drop_it_and_close(tmp_path, backend, ran):
    UNDONE.clear()
    s = make(backend, tmp_path)
    try:
        sid = await crashed_saga(s.journal)  # c1, c2 executed; c3 (INTENT seq 6) in doubt
        first = await s.recover(sid, step_agent())
        assert first.status is SagaStatus.IN_DOUBT and [i.seq for i in first.report.in_doubt] == [6]
        assert [n for n, _ in UNDONE] == [2, 1]
        resolved = await s.resolve(sid, 6, ran=ran, resolver="ops-alice", reason="checked the ledger",
                                   force=True)
        assert resolved.phase is Phase.RESOLVED
        assert resolved.payload == {"target_seq": 6, "target": "call", "answer": "ran" if ran else "not_run",
                                    "resolver": "ops-alice", "reason": "checked the ledger",
                                    "forced": {"reason": "checked the ledger"}}
        second = await s.recover(sid, step_agent())
        assert second.status is SagaStatus.COMPENSATED
        assert [n for n, _ in UNDONE] == ([2, 1, 3] if ran else [2, 1])  # c3 undone once, if it ran
        assert second.report.in_doubt == ()
        entries = await s.journal.entries(sid)
        assert entries[-1].phase is Phase.SAGA_CLOSED and verify_entries(sid, entries).ok
        with pytest.raises(SagaStateError, match="closed"):
            await s.resolve(sid, 6, ran=True, resolver="bob", reason="again", force=True)
    finally:
        await s.aclose()


async def test_resolving_an_in_doubt_undo():
    """An undo whose COMPENSATING has no outcome: "ran" counts as undone, "not run" retries it
    (same idempotency key) on the next recovery."""
    UNDONE.clear()
    for ran, expected in ((True, [1]), (False, [1, 2])):
        UNDONE.clear()
        s = Sagacity(InMemoryJournal())
        sid = await crashed_saga(s.journal, undo_started=True)  # c2 (EXECUTED seq 5) undo in doubt
        first = await s.recover(sid, step_agent())
        assert {i.seq for i in first.report.in_doubt} == {5, 6}
        await s.resolve(sid, 6, ran=False, resolver="ops", reason="c3 never reached the bank", force=True)
        entry = await s.resolve(sid, 5, ran=ran, resolver="ops", reason="refund seen" if ran else "no refund",
                                force=True)
        assert entry.payload["target"] == "undo" and entry.payload["target_seq"] == 7  # the COMPENSATING
        second = await s.recover(sid, step_agent())
        assert second.status is SagaStatus.COMPENSATED
        assert [n for n, _ in UNDONE] == expected


async def test_resolve_refuses_what_is_not_in_doubt_and_bad_evidence():
    s = Sagacity(InMemoryJournal())
    sid = await crashed_saga(s.journal)
    with pytest.raises(SagaStateError, match="not in doubt"):
        await s.resolve(sid, 3, ran=True, resolver="ops", reason="x", force=True)  # an EXECUTED call
    with pytest.raises(ValueError):
        await s.resolve(sid, 6, ran=True, resolver="", reason="x", force=True)
    with pytest.raises(SagaStateError, match="no saga"):
        await s.resolve("nope", 1, ran=True, resolver="ops", reason="x", force=True)
    await s.resolve(sid, 6, ran=False, resolver="ops", reason="x", force=True)
    with pytest.raises(SagaStateError, match="already answered"):
        await s.resolve(sid, 6, ran=True, resolver="ops", reason="changed my mind", force=True)
    # Verify before acting: an edited entry refuses the answer, naming the first bad seq.
    import dataclasses

    entries = await s.journal.entries(sid)
    s.journal._replace(sid, 2, dataclasses.replace(entries[1], canonical=entries[1].canonical.replace(b'"n":1', b'"n":9')))  # noqa: SLF001
    with pytest.raises(EvidenceError) as caught:
        await s.resolve(sid, 6, ran=True, resolver="ops", reason="x", force=True)
    assert caught.value.bad_seq == 2


def test_cli_saga_resolve_then_recover(tmp_path):
    """``sagacity saga resolve SAGA_ID SEQ --ran --as NAME --reason TEXT``, then recover closes."""
    import asyncio

    UNDONE.clear()
    db = str(tmp_path / "j.db")

    async def setup() -> str:
        journal = SqliteJournal(db)
        try:
            return await crashed_saga(journal)
        finally:
            await journal.close()

    sid = asyncio.run(setup())
    runner = CliRunner()
    first = runner.invoke(cli, ["saga", "recover", sid, "--app", "tests.sdk.test_resolve:step_agent", "--db", db])
    assert first.exit_code == 1 and "in doubt: seq 6" in first.output and "saga resolve" in first.output
    usage = runner.invoke(cli, ["saga", "resolve", sid, "6", "--as", "ops", "--reason", "x", "--db", db])
    assert usage.exit_code == 2 and "--ran or --not-run" in usage.output
    answer = runner.invoke(cli, ["saga", "resolve", sid, "6", "--ran", "--force", "--as", "ops-alice",
                                 "--reason", "seen at the bank", "--db", db])
    assert answer.exit_code == 0, answer.output
    assert "resolved seq 6 (call)" in answer.output and "as ran by ops-alice" in answer.output
    shown = runner.invoke(cli, ["journal", "show", sid, "--db", db], env={"COLUMNS": "200"})
    assert "call at seq 6 ran, says ops-alice: seen at the bank" in shown.output
    again = runner.invoke(cli, ["saga", "resolve", sid, "6", "--not-run", "--force", "--as", "ops", "--reason", "x",
                                "--db", db])
    assert again.exit_code == 1 and "not in doubt" in again.output
    last = runner.invoke(cli, ["saga", "recover", sid, "--app", "tests.sdk.test_resolve:step_agent", "--db", db])
    assert last.exit_code == 0 and "COMPENSATED" in last.output
    assert [n for n, _ in UNDONE] == [2, 1, 3]
