"""Issue 19, the hostile review of ``recover --all`` and of closes (A3, A4): sagas are selected
from verified entries only, a row an attacker writes never stops the command, and no run closes a
saga with a call in doubt, so a forged SAGA_CLOSED that does is STRUCTURE. On SQLite and on
PostgreSQL under the least-privilege role (the ``db`` fixture)."""

from __future__ import annotations

import asyncio
import math
import sys
import types

import pytest
from click.testing import CliRunner

from sagacity_agents import SagaStatus
from sagacity_agents.backends import Phase
from sagacity_agents.errors import EvidenceError
from sagacity_agents.evidence import ChainFault
from sagacity_agents.cli import cli
from sagacity_agents.core import lease

from ..sdk.helpers import agent, scripted
from .test_entry_authenticity import (  # noqa: F401 - fixtures: db, keys, far_side, app_role_uri
    CANCELLED, app_role_uri, book_hotel, db, entries, far_side, forge, host, in_doubt_saga, keys,
)


async def forged_close_and_open_end(db: str, keys) -> dict[str, int]:
    """Two crashed sagas, a call in doubt in each; the forger closes the first and ends the
    second's run "OPEN" (idle), untagged: what makes an unverified selection skip them."""
    first = await in_doubt_saga(db, keys, "crashed-1")
    second = await in_doubt_saga(db, keys, "crashed-2")
    closed = await forge(db, "crashed-1", Phase.SAGA_CLOSED, "saga:closed", payload={"status": "COMPLETED"})
    ended = await forge(db, "crashed-2", Phase.RUN_ENDED, "run:1:end", fence=second["run"],
                        payload={"holder": "h:1:dead", "status": "OPEN"})
    assert first["intent"] == 3
    return {"crashed-1": closed, "crashed-2": ended}


@pytest.mark.case("A-03")
async def test_recover_all_reports_sagas_a_forged_close_or_end_would_hide(db, keys):
    """Under a keyring, recover --all names both sagas with their first bad seq (the forged,
    untagged entry) for a human; nothing is undone or closed on them."""
    forged = await forged_close_and_open_end(db, keys)
    s = host(db, keys)
    try:
        done = {sid: outcome for sid, _, outcome in await s.recover_all(agent(scripted(), book_hotel))}
    finally:
        await s.aclose()
    assert set(done) == {"crashed-1", "crashed-2"}
    for sid, seq in forged.items():
        assert isinstance(done[sid], EvidenceError) and done[sid].bad_seq == seq
        assert f"first bad seq {seq}" in str(done[sid])
    assert CANCELLED == []


@pytest.mark.case("A-03")
def test_the_cli_exits_non_zero_and_names_the_saga(tmp_path, keys, monkeypatch):
    """``saga recover --all`` under a keyring: "no saga needs recovery" is not printed, both
    sagas are named with their first bad seq, exit 1."""
    db = str(tmp_path / "r.db")
    forged = asyncio.run(forged_close_and_open_end(db, keys))
    module = types.ModuleType("a03_app")
    module.app = agent(scripted(), book_hotel)
    monkeypatch.setitem(sys.modules, "a03_app", module)
    for name, value in (("SAGACITY_KEYRING", str(keys)), ("SAGACITY_SIGNING_KEY_ID", "writer-1"),
                        ("SAGACITY_DECISION_KEYS", "alice-1")):
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(cli, ["saga", "recover", "--all", "--app", "a03_app:app", "--db", db])
    assert result.exit_code == 1, result.output
    assert "no saga needs recovery" not in result.output
    for sid, seq in forged.items():
        assert f"saga {sid}" in result.output and f"first bad seq {seq}" in result.output
    assert CANCELLED == []


@pytest.mark.case("A-03")
@pytest.mark.parametrize("with_keyring", [False, True])
async def test_a_garbage_lease_does_not_stop_the_other_sagas(db, keys, with_keyring):
    """A forged RUN_STARTED with ``lease_seconds: "abc"`` (then one of 1e308, past the calendar)
    before a genuine crashed saga: recover --all does not crash, the crashed saga after them is
    recovered (its call reported in doubt); with a keyring the forged sagas are reported."""
    ring = keys if with_keyring else None
    for sid, seconds in (("zz-poison", "abc"), ("zz-huge", 1e308)):
        await forge(db, sid, Phase.RUN_STARTED, "run:x",
                    payload={"agent": "a", "holder": "h:poison", "lease_seconds": seconds, "took_over": None})
    await in_doubt_saga(db, ring, "victim-after")
    s = host(db, ring)
    try:
        done = {sid: outcome for sid, _, outcome in await s.recover_all(agent(scripted(), book_hotel))}
    finally:
        await s.aclose()
    assert done["victim-after"].status is SagaStatus.IN_DOUBT
    if with_keyring:
        assert all(isinstance(done[sid], EvidenceError) and done[sid].bad_seq == 1 for sid in ("zz-poison", "zz-huge"))
    assert CANCELLED == []


@pytest.mark.case("A-03")
@pytest.mark.parametrize("value", ["abc", -1, 0, math.nan, math.inf, -math.inf, True, None, [30], {"s": 1}])
def test_a_lease_duration_the_library_never_writes_reads_as_the_default(value):
    """``lease_seconds`` of an attacker's row: anything not a finite number > 0 is the default."""
    assert lease.lease_seconds(value) == lease.DEFAULT_LEASE_SECONDS
    assert lease.lease_seconds(12.5) == 12.5


@pytest.mark.case("A-03")
async def test_an_unreadable_recorded_at_renews_nothing(db):
    """A lease read from rows with a non-time ``recorded_at`` (a raw row) does not raise."""
    saga = await in_doubt_saga(db, None, "s-1")
    rows = await entries(db, "s-1")
    from dataclasses import replace  # noqa: PLC0415

    rows[saga["run"] - 1] = replace(rows[saga["run"] - 1], recorded_at="not a time")
    rows[-1] = replace(rows[-1], recorded_at="not a time")
    found = lease.lease_of(rows)
    assert found is not None and not found.held()


@pytest.mark.case("A-04")
async def test_without_a_keyring_a_forged_close_over_a_call_in_doubt_is_refused(db):
    """N7: without a keyring, a forged SAGA_CLOSED on a saga whose INTENT has no outcome is a
    shape no run writes: verify says STRUCTURE at its seq, recover refuses, recover --all
    reports it."""
    await in_doubt_saga(db, None, "crashed-1")
    seq = await forge(db, "crashed-1", Phase.SAGA_CLOSED, "saga:closed", payload={"status": "COMPLETED"})
    s = host(db, None)
    try:
        (verdict,) = await s.verify("crashed-1")
        assert (verdict.ok, verdict.bad_seq, verdict.fault) == (False, seq, ChainFault.STRUCTURE)
        assert "in doubt" in verdict.detail
        with pytest.raises(EvidenceError, match=f"first bad seq {seq}"):
            await s.recover("crashed-1", agent(scripted(), book_hotel))
        ((sid, _, outcome),) = await s.recover_all(agent(scripted(), book_hotel))
        assert sid == "crashed-1" and isinstance(outcome, EvidenceError) and outcome.bad_seq == seq
    finally:
        await s.aclose()


@pytest.mark.case("A-04")
async def test_a_close_after_a_humans_answer_verifies(db):
    """The legitimate path: recovery reports the call in doubt, a human answers "not run"
    (RESOLVED counts as its outcome), recovery closes the saga; verify is ok."""
    saga = await in_doubt_saga(db, None, "s-1")
    s = host(db, None)
    try:
        assert (await s.recover("s-1", agent(scripted(), book_hotel))).status is SagaStatus.IN_DOUBT
        await s.resolve("s-1", saga["intent"], ran=False, resolver="ops", reason="checked", force=True)
        assert (await s.recover("s-1", agent(scripted(), book_hotel))).status is SagaStatus.COMPENSATED
        (verdict,) = await s.verify("s-1")
        assert verdict.ok, verdict
    finally:
        await s.aclose()
    assert (await entries(db, "s-1"))[-1].phase is Phase.SAGA_CLOSED


@pytest.mark.case("A-06")
async def test_pause_does_not_reuse_a_forged_decision_under_a_keyring(db, keys, tmp_path, monkeypatch):
    """C-05's reuse path reads decisions through the evidence check: an untagged APPROVED +
    CONSUMED forged for the pending transfer is refused (its seq named) when the SDK interrupts
    the call again, not reused as an approval; nothing is wired."""
    from agents import RunState  # noqa: PLC0415

    from sagacity_agents.saga import Saga  # noqa: PLC0415

    from ..sdk import wire_app  # noqa: PLC0415

    monkeypatch.setattr(wire_app, "LEDGER", tmp_path / "ledger.txt")
    wire = ("transfer", '{"amount": 5, "to": "acct-9"}', "w1")
    s = host(db, keys)
    try:
        result = await s.run(wire_app.paused_agent(wire), "go")
        (request,) = result.approvals
        fields = {"request_id": request.request_id, "args_hash": request.args_hash}
        approved = await forge(db, result.saga_id, Phase.APPROVED, "forged:approved", tool="transfer",
                               call_id="w1", payload={**fields, "approver": "mallory"})
        await forge(db, result.saga_id, Phase.CONSUMED, "forged:consumed", tool="transfer", call_id="w1",
                    payload={**fields, "decision": "approved", "claimant": "x"})
        state = await RunState.from_string(wire_app.resumed_agent(), await s.approvals.load_snapshot(result.saga_id))
        with pytest.raises(EvidenceError, match=f"first bad seq {approved}"):
            await s.desk.pause(Saga(s.journal, result.saga_id, evidence=s.evidence), wire_app.resumed_agent(), state)
        assert [i.tool_name for i in state.get_interruptions()] == ["transfer"]
    finally:
        await s.aclose()
    assert wire_app.executions() == []
