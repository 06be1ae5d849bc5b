"""`sagacity saga recover` and `sagacity approvals` through click's runner (in-process)."""

from __future__ import annotations

import asyncio
import shlex

from click.testing import CliRunner

from sagacity_agents.backends import Phase, SqliteJournal
from sagacity_agents.cli import cli
from sagacity_agents.cli.saga import load_app


async def _crash(db: str) -> str:
    journal = SqliteJournal(db)
    sid = "left-behind"
    await journal.append(sid, Phase.SAGA_OPENED, write_key="saga:open", payload={"metadata": {}})
    intent = await journal.append(sid, Phase.INTENT, write_key="n1:intent", tool="note", call_id="n1",
                                  payload={"args": {"text": "a"}, "reversibility": "compensatable"})
    await journal.append(sid, Phase.EXECUTED, write_key="n1:outcome", tool="note", call_id="n1",
                         payload={"intent_seq": intent.seq, "result": "noted"})
    await journal.close()
    return sid


def test_saga_recover_compensates_and_closes(tmp_path):
    db = str(tmp_path / "j.db")
    sid = asyncio.run(_crash(db))
    runner = CliRunner()
    out = runner.invoke(cli, ["saga", "recover", sid, "--app", "tests.sdk.wire_app:resumed_agent", "--db", db])
    assert out.exit_code == 0, out.output
    assert "COMPENSATED" in out.output and "undone: seq 3 note" in out.output
    again = runner.invoke(cli, ["saga", "recover", sid, "--app", "tests.sdk.wire_app:resumed_agent", "--db", db])
    assert again.exit_code == 1 and "closed" in again.output


def test_load_app_rejects_bad_specs():
    import click
    import pytest

    for spec in ("nocolon", "tests.sdk.wire_app:missing", "tests.sdk.wire_app:LEDGER"):
        with pytest.raises(click.UsageError):
            load_app(spec)
    assert load_app("tests.sdk.wire_app:resumed_agent").name == "wire"


def test_approvals_list_on_an_empty_journal(tmp_path):
    db = str(tmp_path / "j.db")
    asyncio.run(_crash(db))
    from sagacity_agents.backends import SqliteApprovalStore

    async def make_store():
        store = SqliteApprovalStore(db)
        await store.close()

    asyncio.run(make_store())
    out = CliRunner().invoke(cli, ["approvals", "list", "--db", db])
    assert out.exit_code == 0 and "no pending approval requests" in out.output


async def _pause(db: str) -> tuple[str, str]:
    from sagacity_agents import Sagacity
    from tests.sdk import wire_app

    sagacity = Sagacity(db)
    try:
        result = await sagacity.run(wire_app.paused_agent(("transfer", '{"amount": 5, "to": "acct-9"}', "w1")), "go")
    finally:
        await sagacity.aclose()
        await sagacity.approvals.close()
    (request,) = result.approvals
    return result.saga_id, request.request_id


def test_approve_prints_the_resume_command_on_one_unbroken_line(tmp_path, monkeypatch):
    from tests.sdk import wire_app

    monkeypatch.setenv("WIRE_LEDGER", str(tmp_path / "ledger.txt"))
    monkeypatch.setattr(wire_app, "LEDGER", tmp_path / "ledger.txt")  # read at import: maybe earlier
    folder = tmp_path / "a rather long directory name so the command is wider than the terminal"
    folder.mkdir()
    db = str(folder / "wire.db")
    saga_id, request_id = asyncio.run(_pause(db))
    # The ids as `approvals list` prints them on a narrow terminal: whole, never cut.
    listed = CliRunner().invoke(cli, ["approvals", "list", "--db", db], env={"COLUMNS": "40"})
    assert listed.exit_code == 0, listed.output
    row = next(line for line in listed.output.splitlines() if request_id[:8] in line)
    printed_request, printed_saga = [cell.strip() for cell in row.strip("│ ").split("│")[:2]]
    assert (printed_request, printed_saga) == (request_id, saga_id)
    sagas = CliRunner().invoke(cli, ["journal", "list", "--db", db], env={"COLUMNS": "40"})
    assert f"│ {saga_id} │" in sagas.output  # whole there too (typed next into saga show)
    out = CliRunner().invoke(cli, ["approvals", "approve", printed_request, "--as", "alice", "--db", db,
                                   "--app", "tests.sdk.wire_app:resumed_agent"], env={"COLUMNS": "60"})
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0].startswith(f"approved {request_id} (transfer, args sha256 ") and lines[0].endswith("as alice")
    command = f"sagacity saga resume {printed_saga} --app tests.sdk.wire_app:resumed_agent --db '{db}'"
    assert command in lines  # a line of its own, not wrapped at 60 columns
    resumed = CliRunner().invoke(cli, shlex.split(command)[1:])  # run as printed
    assert resumed.exit_code == 0, resumed.output
    assert "COMPLETED" in resumed.output
    assert (tmp_path / "ledger.txt").read_text() == "5 USD -> acct-9\n"  # the wire, once


def test_without_app_approve_names_no_command_it_cannot_complete(tmp_path, monkeypatch):
    monkeypatch.setenv("WIRE_LEDGER", str(tmp_path / "ledger.txt"))
    db = str(tmp_path / "wire.db")
    _saga_id, request_id = asyncio.run(_pause(db))
    out = CliRunner().invoke(cli, ["approvals", "approve", request_id, "--as", "alice", "--db", db])
    assert out.exit_code == 0, out.output
    assert not [line for line in out.output.splitlines() if line.startswith("sagacity ")]
    assert "module:attr" not in out.output


def test_still_dirty_items_print_as_the_readme_shows_them():
    from sagacity_agents.saga import CompensationItem, CompensationReport

    report = CompensationReport(no_undo=(CompensationItem(5, "send_email", "e1", "no undo declared"),),
                                in_doubt=(CompensationItem(3, "book_car", "c1", "INTENT without outcome"),))
    assert str(report.still_dirty) == ("in doubt: book_car (call c1): INTENT without outcome\n"
                                       "not undone: send_email (call e1): no undo declared")
    assert report.still_dirty == (report.in_doubt[0], report.no_undo[0])  # still a tuple of items


def test_a_request_edited_in_the_approval_store_is_never_shown_nor_decided(tmp_path, monkeypatch):
    """Someone with write access to the approval store (working state) makes a paused 5 look
    like 1 to the human, keeping the hash (`approvals show` refuses: the shown arguments do not
    hash to it), then also rewrites the hash (approve refuses: the journaled pause says another
    hash). Nothing is decided or paid; the untouched request is decided as usual."""
    import json
    import sqlite3

    from sagacity_agents.core.approval import args_hash
    from tests.sdk import wire_app

    monkeypatch.setattr(wire_app, "LEDGER", tmp_path / "ledger.txt")
    db = str(tmp_path / "wire.db")
    saga_id, request_id = asyncio.run(_pause(db))
    edited = {"amount": 1, "currency": "USD", "to": "acct-9"}

    def store(sql: str, *params: object) -> None:
        with sqlite3.connect(db) as conn:
            conn.execute(sql, params)

    store("UPDATE sagacity_approval_requests SET args = ? WHERE request_id = ?", json.dumps(edited), request_id)
    runner = CliRunner()
    shown = runner.invoke(cli, ["approvals", "show", request_id, "--db", db])
    assert shown.exit_code == 1 and "the store was changed" in shown.output and '"amount": 1' not in shown.output
    refused = runner.invoke(cli, ["approvals", "approve", request_id, "--as", "alice", "--db", db])
    assert refused.exit_code == 1 and "not the one journaled" in refused.output, refused.output
    store("UPDATE sagacity_approval_requests SET args_hash = ? WHERE request_id = ?", args_hash(edited), request_id)
    assert runner.invoke(cli, ["approvals", "show", request_id, "--db", db]).exit_code == 0
    refused = runner.invoke(cli, ["approvals", "approve", request_id, "--as", "alice", "--db", db])
    assert refused.exit_code == 1 and "not the one journaled" in refused.output, refused.output
    journal = SqliteJournal(db)
    phases = [e.phase for e in asyncio.run(journal.entries(saga_id))]
    asyncio.run(journal.close())
    assert Phase.APPROVED not in phases and wire_app.executions() == []
    second_saga, second = asyncio.run(_pause(db))
    assert runner.invoke(cli, ["approvals", "approve", second, "--as", "alice", "--db", db]).exit_code == 0


def test_a_resume_whose_run_raises_prints_a_clear_error_and_leaves_the_saga_recoverable(tmp_path, monkeypatch):
    """Issue 8 item 6: the resumed SDK run raises ModelBehaviorError: a clear one-line error and
    exit 1, no traceback; the saga is compensated (the approved transfer, irreversible, is kept
    and reported) and closed, not stuck."""
    from tests.sdk import wire_app

    monkeypatch.setenv("WIRE_LEDGER", str(tmp_path / "ledger.txt"))
    monkeypatch.setattr(wire_app, "LEDGER", tmp_path / "ledger.txt")  # read at import time
    db = str(tmp_path / "wire.db")
    saga_id, request_id = asyncio.run(_pause(db))
    runner = CliRunner()
    assert runner.invoke(cli, ["approvals", "approve", request_id, "--as", "alice", "--db", db]).exit_code == 0
    out = runner.invoke(cli, ["saga", "resume", saga_id, "--app", "tests.sdk.wire_app:misbehaving_agent",
                              "--db", db])
    assert out.exit_code == 1
    assert "Traceback" not in out.output and out.exception is None or isinstance(out.exception, SystemExit)
    assert "ModelBehaviorError: the model called a tool that does not exist" in out.output
    assert "COMPENSATED" in out.output


def test_an_sdk_error_outside_the_run_is_one_clear_line(tmp_path, monkeypatch):
    """An Agents SDK exception that escapes before the saga's run (e.g. while restoring) is
    printed as one line naming the error and what to do, exit 1, no traceback."""
    from agents.exceptions import ModelBehaviorError

    from sagacity_agents import Sagacity

    monkeypatch.setenv("WIRE_LEDGER", str(tmp_path / "ledger.txt"))
    db = str(tmp_path / "wire.db")
    saga_id, _ = asyncio.run(_pause(db))

    async def raising(self, *args, **kwargs):
        raise ModelBehaviorError("bad snapshot item")

    monkeypatch.setattr(Sagacity, "resume", raising)
    out = CliRunner().invoke(cli, ["saga", "resume", saga_id, "--app", "tests.sdk.wire_app:resumed_agent",
                                   "--db", db])
    assert out.exit_code == 1 and isinstance(out.exception, SystemExit)
    assert "the Agents SDK raised ModelBehaviorError: bad snapshot item" in out.output
    assert "sagacity saga recover" in out.output
