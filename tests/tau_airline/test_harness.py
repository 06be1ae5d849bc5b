"""The τ-bench airline replay harness on a handful of conversations, in every mode.

The subset covers all 14 tools, reused call ids, an appended final message, a booking paid
with a certificate, an approved cancellation after a flight update of the same reservation, and
conversations with one and with two irreversible calls (so the second actor both approves and
rejects). The full run over the 150 conversations is
``python -m examples.tau_airline.harness --mode all`` (docs/tau-airline.md).
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from examples.tau_airline.agent_tools import make_tools, plain_tools
from examples.tau_airline.harness import Summary, main, replay_saga, run_harness
from examples.tau_airline.replay import execute_calls
from examples.tau_airline.script import APPENDED_FINAL, Script, load_scripts
from examples.tau_airline.store import AirlineStore
from examples.tau_airline.tools import IRREVERSIBLE, MUTATING, TOOLS
from sagacity_agents import Sagacity, SagaStatus
from sagacity_agents.backends import InMemoryJournal
from sagacity_agents.saga import Reversibility
from sagacity_agents.sdk.tools import declaration_of

#: TASK.TRIAL: why the conversation is in the subset.
SUBSET = {
    "5.1": "bag, flight and passenger updates",
    "10.0": "booking, list_all_airports",
    "11.1": "booking that uses up a 500 certificate for part of the price",
    "15.0": "refused flight update of GV1N64, then GV1N64 cancelled",
    "34.0": "flight update of XEHM4B, then XEHM4B and 59XX6W cancelled",
    "37.0": "send_certificate, transfer; reused id; ends on a tool output",
    "8.1": "booking, cancellation, one-stop search; reused ids; ends on a tool output",
}


@pytest.fixture(scope="module")
def scripts(data_dir: Path) -> dict[str, Script]:
    return {script.key: script for script in load_scripts(data_dir)}


@pytest.fixture(scope="module")
def summary(data_dir: Path) -> Summary:
    """One harness run over the subset, every mode; inject and approvals on SQLite."""
    return asyncio.run(run_harness(data_dir, keys=list(SUBSET), journal="sqlite"))


def test_subset_covers_every_tool(scripts: dict[str, Script]) -> None:
    used = {call.name for key in SUBSET for call in scripts[key].calls}
    assert used == set(TOOLS)
    assert any(scripts[key].rewritten_ids for key in SUBSET)
    assert any(scripts[key].appended_final for key in SUBSET)


def test_every_mode_ran_and_every_check_holds(summary: Summary) -> None:
    assert [(m.name, m.journal) for m in summary.modes] == [
        ("clean", "memory"), ("clean", "sqlite"), ("inject", "sqlite"), ("approvals", "sqlite")]
    for mode in summary.modes:
        assert mode.invariant_violations == [], mode.name
        assert mode.problems == [], mode.name
        assert mode.double_executions == 0, mode.name
        assert mode.chains_verified == mode.sagas > 0, mode.name
    assert summary.ok


def test_clean_mode(summary: Summary) -> None:
    n = len(SUBSET)
    for journal in ("memory", "sqlite"):
        clean = summary.mode("clean", journal)
        assert clean.sagas_completed == clean.sagas == n
        assert clean.databases_equal == clean.databases_compared == n  # = the unwrapped replay
        assert clean.calls == summary.calls  # every recorded call journaled once
        assert clean.approvals_asked == clean.approvals_granted == clean.approvals_executed > 0
        assert clean.refused_database_changing_calls > 0
    timing = summary.timing()
    assert timing is not None and timing["unwrapped_s"] > 0
    assert timing["ratio_memory"] > 0 and timing["ratio_sqlite"] > 0


def test_inject_mode(summary: Summary, scripts: dict[str, Script]) -> None:
    inject = summary.mode("inject")
    targets = sum(call.name in MUTATING for key in SUBSET for call in scripts[key].calls)
    assert inject.injected_failures == inject.sagas == inject.sagas_compensated == targets
    assert inject.sagas_completed == 0
    assert inject.undos_run > 0
    assert inject.irreversible_kept == sum(len(e["kept"]) for e in inject.exclusions) > 0
    # task 34 trial 0, failing at its last call: the approved cancellation of XEHM4B is kept and
    # its reservation and user are excluded; the undo of its earlier flight update paid nothing.
    case = next(e for e in inject.exclusions
                if e["case"].startswith("inject task 34 trial 0 call 11"))
    assert case["reservations"] == ["XEHM4B"] and case["users"] == ["daiki_muller_1116"]


def test_approvals_mode(summary: Summary, scripts: dict[str, Script]) -> None:
    approvals = summary.mode("approvals")
    irreversible = sum(call.name in IRREVERSIBLE for key in SUBSET for call in scripts[key].calls)
    assert approvals.approvals_asked == approvals.runs_paused == irreversible
    assert approvals.approvals_granted + approvals.approvals_rejected == irreversible
    assert approvals.approvals_granted > 0 and approvals.approvals_rejected > 0
    assert approvals.approvals_executed == approvals.approvals_granted  # each ran exactly once
    assert approvals.sagas_completed == len(SUBSET)
    # rejected calls never ran; the database equals a direct replay without them
    assert approvals.databases_equal == approvals.databases_compared == len(SUBSET)
    assert approvals.calls == summary.calls - approvals.approvals_rejected


def test_a_broken_undo_is_caught(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The oracle has teeth: an undo of a booking that deletes the reservation but forgets the
    user's list and the gift card is reported (task 4 trial 2 books, then updates the bags)."""
    import examples.tau_airline.agent_tools as agent_tools

    def forgetful_undo(store, args, result, undo_data):  # deletes the booking, credits nothing
        store.delete_reservation(undo_data["reservation_id"])
        return "removed"

    monkeypatch.setitem(agent_tools.COMPENSATIONS, "book_reservation", forgetful_undo)
    broken = asyncio.run(run_harness(data_dir, ["inject"], keys=["4.2"]))
    violations = broken.mode("inject").invariant_violations
    assert not broken.ok
    gift_card = "[1] user omar_rossi_1241: payment method gift_card_8190333"
    assert any(gift_card in v for v in violations)
    assert any("[3] user omar_rossi_1241 lists reservation HATHAT" in v for v in violations)


def test_json_output(summary: Summary) -> None:
    data = json.loads(json.dumps(summary.to_dict()))
    assert data["ok"] is True
    assert set(data["timing"]) == {"unwrapped_s", "saga_memory_s", "ratio_memory",
                                   "saga_sqlite_s", "ratio_sqlite"}
    assert {m["name"] for m in data["modes"]} == {"clean", "inject", "approvals"}


async def test_tool_outputs_are_the_domain_outputs(
    data_dir: Path, scripts: dict[str, Script]
) -> None:
    """Through the SDK and the saga layer, every tool returns exactly what the domain returns
    when the recorded calls are replayed directly (the cross-check's replay)."""
    script = scripts["8.1"]
    sagacity = Sagacity(InMemoryJournal())
    with AirlineStore(data_dir) as store:
        replay = await replay_saga(script, store, sagacity, "outputs", "")
    assert replay.status is SagaStatus.COMPLETED
    with AirlineStore(data_dir) as store:
        direct = execute_calls(store, script.conversation.calls)
    journaled = [replay.facts.outcomes[c.call_id][0].payload["result"] for c in script.calls]
    assert journaled == [item.output for item in direct]


def test_tool_declarations(data_dir: Path) -> None:
    with AirlineStore(data_dir) as store:
        tools = make_tools(store)
        plain = plain_tools(tools)
    kinds = {tool.name: declaration_of(tool).reversibility for tool in tools}
    assert {n for n, k in kinds.items() if k is Reversibility.IRREVERSIBLE} == IRREVERSIBLE
    compensatable = {n for n, k in kinds.items() if k is Reversibility.COMPENSATABLE}
    assert compensatable == MUTATING - IRREVERSIBLE
    assert {n for n, k in kinds.items() if k is Reversibility.READ_ONLY} == set(TOOLS) - MUTATING
    assert {tool.name for tool in tools if tool.needs_approval} == IRREVERSIBLE
    recorded = json.loads((data_dir / "tools.json").read_text(encoding="utf-8"))
    schemas = {item["function"]["name"]: item["function"]["parameters"] for item in recorded}
    assert {tool.name: tool.params_json_schema for tool in tools} == schemas
    assert [t.name for t in plain] == [t.name for t in tools]
    assert all(declaration_of(t) is None and not t.needs_approval for t in plain)


def test_script_treatments(scripts: dict[str, Script]) -> None:
    every = list(scripts.values())
    assert len(every) == 150 and sum(len(s.calls) for s in every) == 862
    assert sum(s.rewritten_ids for s in every) == 56
    assert sum(bool(s.rewritten_ids) for s in every) == 37
    assert sum(s.appended_final for s in every) == 38
    for script in every:
        ids = [call.call_id for call in script.calls]
        assert len(set(ids)) == len(ids)
        for call in script.calls:
            assert re.fullmatch(re.escape(call.recorded_id) + r"(-r[2-9][0-9]*)?", call.call_id)
        last = script.turns[-1].steps[-1]
        assert not last.calls and (last.text == APPENDED_FINAL) == script.appended_final


def test_command_line(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "summary.json"
    code = main(["--data", str(data_dir), "--mode", "clean", "--conversations", "23.0",
                 "--json", str(out)])
    assert code == 0
    assert json.loads(out.read_text())["conversations"] == 1
    assert "all checks hold" in capsys.readouterr().out
