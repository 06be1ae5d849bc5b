"""The ``sagacity`` command line: demo, journal list / show / verify, tamper detection."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3

import pytest
from click.testing import CliRunner

from sagacity_agents.backends import Phase, SqliteJournal
from sagacity_agents.cli import cli, main
from sagacity_agents.demo import run_trip


@pytest.fixture
def runner(monkeypatch):
    monkeypatch.delenv("SAGACITY_DB", raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    return CliRunner()


@pytest.fixture
def demo_db(tmp_path):
    """A journal holding one demo saga; returns (path, saga id)."""
    path = tmp_path / "journal.db"
    outcome = asyncio.run(run_trip(path))
    return str(path), outcome.result.saga_id


def _append(path, saga_id, *phases):
    async def go():
        journal = SqliteJournal(path)
        try:
            for n, phase in enumerate(phases):
                await journal.append(saga_id, phase, write_key=f"k{n}", payload={})
        finally:
            await journal.close()

    asyncio.run(go())


def _tamper(path, sql, params=()):
    with sqlite3.connect(path) as db:
        db.execute(sql, params)
    db.close()


# --- help -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], ["demo", "journal", "SAGACITY_DB", "sagacity approvals list",
              "sagacity saga resume SAGA_ID --app MODULE:ATTR",
              "sagacity saga recover SAGA_ID --app MODULE:ATTR", "sagacity journal heads"]),
        (["journal"], ["list", "show", "verify", "heads"]),
        (["journal", "list"], ["--db", "SAGACITY_DB", "status"]),
        (["journal", "show"], ["SAGA_ID", "--full", "prefix"]),
        (["journal", "verify"], ["status 1", "SAGA_ID", "--heads FILE", "truncated"]),
        (["journal", "heads"], ["--out FILE", '{"SAGA_ID": {"seq": N, "hash": H}', "verify --heads"]),
        (["demo"], ["--real-model", "sagacity-demo.db", "OPENAI_API_KEY"]),
    ],
)
def test_help(runner, args, expected):
    result = runner.invoke(cli, [*args, "--help"])
    assert result.exit_code == 0, result.output
    for word in expected:
        assert word in result.output


def test_version_through_main_entry_point(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert "sagacity" in capsys.readouterr().out


# --- demo -------------------------------------------------------------------------------------
def test_demo_command(runner, tmp_path):
    db = tmp_path / "d.db"
    result = runner.invoke(cli, ["demo", "--db", str(db)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "Your trip is booked!" in out
    assert "COMPENSATED" in out
    assert out.index("1. book_hotel") < out.index("2. book_flight")
    assert "nothing booked, nothing charged" in out
    assert "verify: ok" in out
    assert f"sagacity journal verify --db {db}" in out
    assert db.exists() and (tmp_path / "d.db.booking.db").exists()

    listed = runner.invoke(cli, ["journal", "list", "--db", str(db)])
    assert listed.exit_code == 0 and "COMPENSATED" in listed.output


def test_demo_default_db_is_in_the_current_directory(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(cli, ["demo"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "sagacity-demo.db").exists()
    assert "--db sagacity-demo.db" in result.output


def test_demo_real_model_without_key_is_a_usage_error(runner, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = runner.invoke(cli, ["demo", "--db", str(tmp_path / "d.db"), "--real-model"])
    assert result.exit_code == 2
    assert "OPENAI_API_KEY" in result.output


# --- missing or wrong journal files -----------------------------------------------------------
@pytest.mark.parametrize("args", [["list"], ["show", "abc"], ["verify"]])
def test_missing_journal_is_reported_not_created(runner, tmp_path, args):
    db = tmp_path / "nope.db"
    result = runner.invoke(cli, ["journal", *args, "--db", str(db)])
    assert result.exit_code == 2
    assert "no journal at" in result.output and "does not exist" in result.output
    assert not db.exists()


def test_default_db_is_sagacity_db_in_the_current_directory(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(cli, ["journal", "list"])
    assert result.exit_code == 2
    assert "sagacity.db" in result.output
    assert not (tmp_path / "sagacity.db").exists()


def test_db_from_environment(runner, demo_db):
    path, saga_id = demo_db
    result = runner.invoke(cli, ["journal", "list"], env={"SAGACITY_DB": path})
    assert result.exit_code == 0, result.output
    assert saga_id in result.output


def test_not_a_journal(runner, tmp_path):
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x)")
    db.close()
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not sqlite at all, not even close" * 10)
    result = runner.invoke(cli, ["journal", "list", "--db", str(other)])
    assert result.exit_code == 2 and "not a sagacity journal" in result.output
    result = runner.invoke(cli, ["journal", "verify", "--db", str(garbage)])
    assert result.exit_code == 2 and "not a SQLite database" in result.output
    result = runner.invoke(cli, ["journal", "list", "--db", str(tmp_path)])
    assert result.exit_code == 2 and "directory" in result.output


# --- list / show ------------------------------------------------------------------------------
def test_list(runner, demo_db, tmp_path):
    path, saga_id = demo_db
    _append(path, "open-saga", Phase.SAGA_OPENED, Phase.RUN_STARTED)
    result = runner.invoke(cli, ["journal", "list", "--db", path])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    demo_line = next(line for line in lines if saga_id in line)
    assert "15" in demo_line and "COMPENSATED" in demo_line
    open_line = next(line for line in lines if "open-saga" in line)
    assert "OPEN (last RUN_STARTED)" in open_line
    assert result.output.index(saga_id) < result.output.index("open-saga")


def test_list_empty_journal(runner, tmp_path):
    path = tmp_path / "empty.db"
    asyncio.run(SqliteJournal(path).close())
    result = runner.invoke(cli, ["journal", "list", "--db", str(path)])
    assert result.exit_code == 0
    assert "no sagas" in result.output


def test_show(runner, demo_db):
    path, saga_id = demo_db
    result = runner.invoke(cli, ["journal", "show", saga_id, "--db", path])
    assert result.exit_code == 0, result.output
    out = result.output
    assert saga_id in out and "COMPENSATED" in out and "(15 entries)" in out
    for text in ("INTENT", "EXECUTED", "FAILED", "COMPENSATING", "SAGA_CLOSED", "call_charge",
                 "CardDeclined", "book_hotel", "destination=Lisbon"):
        assert text in out
    # rows in seq order, hashes shortened
    assert out.index("SAGA_OPENED") < out.index("SAGA_FAILED") < out.index("SAGA_CLOSED")


def test_show_accepts_a_unique_prefix_and_full(runner, demo_db):
    path, saga_id = demo_db
    entries = asyncio.run(_entries(path, saga_id))
    result = runner.invoke(cli, ["journal", "show", saga_id[:6], "--db", path, "--full"])
    assert result.exit_code == 0, result.output
    assert entries[-1].hash in result.output  # whole hashes with --full
    assert '"idempotency_key"' in result.output


async def _entries(path, saga_id):
    journal = SqliteJournal(path)
    try:
        return await journal.entries(saga_id)
    finally:
        await journal.close()


def test_show_unknown_or_ambiguous_saga(runner, tmp_path):
    path = str(tmp_path / "j.db")
    _append(path, "abc-1", Phase.SAGA_OPENED)
    _append(path, "abc-2", Phase.SAGA_OPENED)
    result = runner.invoke(cli, ["journal", "show", "zzz", "--db", path])
    assert result.exit_code == 2 and "no saga 'zzz'" in result.output
    result = runner.invoke(cli, ["journal", "show", "abc", "--db", path])
    assert result.exit_code == 2 and "ambiguous" in result.output
    result = runner.invoke(cli, ["journal", "show", "abc-2", "--db", path])
    assert result.exit_code == 0 and "abc-2" in result.output


def test_show_narrow_terminal_uses_the_compact_layout(runner, demo_db):
    path, saga_id = demo_db
    result = runner.invoke(cli, ["journal", "show", saga_id, "--db", path], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80
    assert "COMPENSATED  book_hotel  call_hotel" in result.output


# --- verify -----------------------------------------------------------------------------------
def test_verify_ok(runner, demo_db):
    path, saga_id = demo_db
    _append(path, "second", Phase.SAGA_OPENED)
    result = runner.invoke(cli, ["journal", "verify", "--db", path])
    assert result.exit_code == 0, result.output
    ok_lines = [line for line in result.output.splitlines() if line.startswith("verify: ok")]
    assert len(ok_lines) == 2
    assert saga_id in ok_lines[0] and "15 entries" in ok_lines[0]

    one = runner.invoke(cli, ["journal", "verify", saga_id[:8], "--db", path])
    assert one.exit_code == 0
    assert one.output.count("verify: ok") == 1 and saga_id in one.output


def test_verify_empty_journal(runner, tmp_path):
    path = tmp_path / "empty.db"
    asyncio.run(SqliteJournal(path).close())
    result = runner.invoke(cli, ["journal", "verify", "--db", str(path)])
    assert result.exit_code == 0 and "no sagas" in result.output


@pytest.mark.parametrize(
    ("sql", "bad_seq", "fault"),
    [
        # an edited indexed column no longer matches the hashed bytes
        ("UPDATE sagacity_journal SET tool = 'book_spa' WHERE seq = 4", 4, "column mismatch"),
        # an edited payload: the stored hash no longer matches the bytes
        (
            "UPDATE sagacity_journal SET canonical = CAST(REPLACE(CAST(canonical AS TEXT), "
            "'FL-0001', 'FL-0666') AS BLOB) WHERE seq = 4",
            4,
            "hash mismatch",
        ),
        # a removed entry leaves a gap
        ("DELETE FROM sagacity_journal WHERE seq = 7", 7, "gap"),
        # a FAILED call relabelled as EXECUTED
        (
            "UPDATE sagacity_journal SET phase = 'EXECUTED' WHERE seq = 8",
            8,
            "column mismatch",
        ),
    ],
)
def test_verify_detects_tampering(runner, demo_db, sql, bad_seq, fault):
    path, saga_id = demo_db
    _append(path, "untouched", Phase.SAGA_OPENED)
    _tamper(path, sql + " AND saga_id = ?", (saga_id,))
    result = runner.invoke(cli, ["journal", "verify", "--db", path])
    assert result.exit_code == 1, result.output
    broken = [line for line in result.output.splitlines() if "BROKEN" in line and saga_id in line]
    assert len(broken) == 1
    assert f"at seq {bad_seq}: {fault}" in broken[0]
    assert any(line.startswith("verify: ok") and "untouched" in line for line in result.output.splitlines())
    assert "1 of 2 saga chain(s) BROKEN" in result.output

    one = runner.invoke(cli, ["journal", "verify", saga_id, "--db", path])
    assert one.exit_code == 1 and f"at seq {bad_seq}" in one.output


def test_verify_detects_a_consistently_rehashed_entry_by_its_broken_link(runner, demo_db):
    """Rewriting an entry *and* its hash still breaks the next entry's prev_hash link."""
    import hashlib

    path, saga_id = demo_db
    with sqlite3.connect(path) as db:
        (canonical,) = db.execute(
            "SELECT canonical FROM sagacity_journal WHERE saga_id = ? AND seq = 6", (saga_id,)
        ).fetchone()
        forged = bytes(canonical).replace(b"HT-0001", b"HT-0999")
        db.execute(
            "UPDATE sagacity_journal SET canonical = ?, hash = ? WHERE saga_id = ? AND seq = 6",
            (forged, hashlib.sha256(forged).hexdigest(), saga_id),
        )
    db.close()
    result = runner.invoke(cli, ["journal", "verify", "--db", path])
    assert result.exit_code == 1
    assert "at seq 7: broken link" in result.output


def test_demo_into_a_missing_directory_fails_cleanly(runner, tmp_path):
    result = runner.invoke(cli, ["demo", "--db", str(tmp_path / "no" / "such" / "dir.db")])
    assert result.exit_code == 1
    assert "demo failed" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_python_dash_m_runs_the_cli(demo_db):
    """End to end through a real process: ``python -m sagacity_agents journal verify``."""
    import subprocess
    import sys

    path, saga_id = demo_db
    proc = subprocess.run(
        [sys.executable, "-m", "sagacity_agents", "journal", "verify", "--db", path],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("verify: ok") and saga_id in proc.stdout


# --- anchors: journal heads / verify --heads ----------------------------------------------------
def _heads(runner, path, *args):
    result = runner.invoke(cli, ["journal", "heads", *args, "--db", path])
    assert result.exit_code == 0, result.output
    return result


def _reseal(path, saga_id, seq, old, new):
    with sqlite3.connect(path) as db:
        (canonical,) = db.execute(
            "SELECT canonical FROM sagacity_journal WHERE saga_id = ? AND seq = ?", (saga_id, seq)
        ).fetchone()
        forged = bytes(canonical).replace(old, new)
        assert forged != bytes(canonical)
        db.execute(
            "UPDATE sagacity_journal SET canonical = ?, hash = ? WHERE saga_id = ? AND seq = ?",
            (forged, hashlib.sha256(forged).hexdigest(), saga_id, seq),
        )
    db.close()


def test_heads_to_stdout_is_the_head_of_each_chain(runner, demo_db):
    path, saga_id = demo_db
    _append(path, "second", Phase.SAGA_OPENED, Phase.RUN_STARTED)
    heads = json.loads(_heads(runner, path).output)
    entries = asyncio.run(_entries(path, saga_id))
    second = asyncio.run(_entries(path, "second"))
    assert heads == {
        saga_id: {"seq": 15, "hash": entries[-1].hash},
        "second": {"seq": 2, "hash": second[-1].hash},
    }
    assert list(heads) == [saga_id, "second"]
    one = json.loads(_heads(runner, path, "second").output)
    assert one == {"second": heads["second"]}


def test_heads_of_an_empty_journal_is_an_empty_object(runner, tmp_path):
    path = tmp_path / "empty.db"
    asyncio.run(SqliteJournal(path).close())
    assert json.loads(_heads(runner, str(path)).output) == {}


def test_verify_against_heads_ok_even_after_later_appends(runner, demo_db, tmp_path):
    path, saga_id = demo_db
    anchors = tmp_path / "heads.json"
    out = _heads(runner, path, "--out", str(anchors))
    assert f"wrote the heads of 1 saga(s) to {anchors}" in out.output
    _append(path, "newer", Phase.SAGA_OPENED)  # not in the heads file: verified unanchored
    result = runner.invoke(cli, ["journal", "verify", "--db", path, "--heads", str(anchors)])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if saga_id in line)
    assert line.startswith("verify: ok") and "anchored seq 15 matches" in line
    newer = next(line for line in result.output.splitlines() if "newer" in line)
    assert newer.startswith("verify: ok") and "anchored" not in newer
    assert f"checked 1 saga(s) against the heads in {anchors}" in result.output
    one = runner.invoke(cli, ["journal", "verify", saga_id[:8], "--db", path, "--heads", str(anchors)])
    assert one.exit_code == 0 and "anchored seq 15 matches" in one.output


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("DELETE FROM sagacity_journal WHERE seq >= 14", "at seq 14: truncated: chain ends at seq 13"),
        ("DELETE FROM sagacity_journal WHERE seq = 15", "at seq 15: truncated: chain ends at seq 14"),
        ("DELETE FROM sagacity_journal WHERE 1", "at seq 1: missing saga: no entries left"),
    ],
)
def test_verify_against_heads_detects_truncation(runner, demo_db, tmp_path, sql, message):
    path, saga_id = demo_db
    _append(path, "untouched", Phase.SAGA_OPENED)
    anchors = tmp_path / "heads.json"
    _heads(runner, path, "--out", str(anchors))
    head = json.loads(anchors.read_text())[saga_id]
    _tamper(path, sql + " AND saga_id = ?", (saga_id,))

    plain = runner.invoke(cli, ["journal", "verify", "--db", path])
    assert plain.exit_code == 0, plain.output  # the chain alone cannot tell

    result = runner.invoke(cli, ["journal", "verify", "--db", path, "--heads", str(anchors)])
    assert result.exit_code == 1, result.output
    (broken,) = [line for line in result.output.splitlines() if "BROKEN" in line and saga_id in line]
    assert message in broken
    assert f"anchored head is seq {head['seq']} hash {head['hash']}" in broken
    assert any(line.startswith("verify: ok") and "untouched" in line for line in result.output.splitlines())
    assert "1 of 2 saga chain(s) BROKEN" in result.output

    one = runner.invoke(cli, ["journal", "verify", saga_id, "--db", path, "--heads", str(anchors)])
    assert one.exit_code == 1 and message in one.output


def test_verify_against_heads_detects_a_rewritten_tail(runner, demo_db, tmp_path):
    path, saga_id = demo_db
    anchors = tmp_path / "heads.json"
    _heads(runner, path, "--out", str(anchors))
    _reseal(path, saga_id, 15, b'"COMPENSATED"', b'"COMPLETED"')  # the last entry, resealed
    assert runner.invoke(cli, ["journal", "verify", "--db", path]).exit_code == 0
    result = runner.invoke(cli, ["journal", "verify", "--db", path, "--heads", str(anchors)])
    assert result.exit_code == 1
    assert f"saga {saga_id}  at seq 15: head mismatch" in result.output


def test_heads_refuses_to_anchor_a_broken_chain(runner, demo_db, tmp_path):
    path, saga_id = demo_db
    _tamper(path, "UPDATE sagacity_journal SET tool = 'x' WHERE seq = 4 AND saga_id = ?", (saga_id,))
    anchors = tmp_path / "heads.json"
    result = runner.invoke(cli, ["journal", "heads", "--db", path, "--out", str(anchors)])
    assert result.exit_code == 1
    assert "at seq 4: column mismatch" in result.output and "no heads exported" in result.output
    assert not anchors.exists()


@pytest.mark.parametrize(
    "content",
    ["not json", "[]", '{"s": {"seq": 0, "hash": "00"}}', '{"s": {"seq": 1}}'],
)
def test_verify_with_a_malformed_heads_file_is_a_usage_error(runner, demo_db, tmp_path, content):
    path, _ = demo_db
    anchors = tmp_path / "heads.json"
    anchors.write_text(content)
    result = runner.invoke(cli, ["journal", "verify", "--db", path, "--heads", str(anchors)])
    assert result.exit_code == 2
    assert "not a heads file" in result.output


def test_verify_one_saga_not_listed_in_the_heads_file_is_a_usage_error(runner, demo_db, tmp_path):
    path, saga_id = demo_db
    anchors = tmp_path / "heads.json"
    anchors.write_text("{}")
    result = runner.invoke(cli, ["journal", "verify", saga_id, "--db", path, "--heads", str(anchors)])
    assert result.exit_code == 2 and "lists no head for saga" in result.output
    missing = runner.invoke(cli, ["journal", "verify", "--db", path, "--heads", str(tmp_path / "nope.json")])
    assert missing.exit_code == 2


def test_a_pruned_saga_side_table_hides_nothing(runner, demo_db):
    """Files of earlier versions listed sagas from a side table; deleting a saga's row there
    made `list` and `verify` say "no sagas". Saga ids now come from the entries."""
    path, saga_id = demo_db
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE IF NOT EXISTS sagacity_sagas (saga_id TEXT PRIMARY KEY, ordinal INTEGER)")
        db.execute("DELETE FROM sagacity_sagas")
    db.close()
    listed = runner.invoke(cli, ["journal", "list", "--db", path])
    assert listed.exit_code == 0 and saga_id in listed.output and "no sagas" not in listed.output
    verified = runner.invoke(cli, ["journal", "verify", "--db", path])
    assert verified.exit_code == 0 and "verify: ok" in verified.output and saga_id in verified.output


# --- untrusted data on the terminal -------------------------------------------------------------
async def _hostile(path):
    journal = SqliteJournal(path)
    try:
        await journal.append("evil\x1b]0;owned\x07", Phase.SAGA_OPENED, write_key="open",
                             payload={"metadata": {"note": "\x1b[2J\x9b31m"}})
        await journal.append("evil\x1b]0;owned\x07", Phase.INTENT, write_key="i", tool="pay\x1b[31m[/]",
                             call_id="[bold]c\x7f\u0085", payload={"args": {"to": "x\x1b[8m"}})
        await journal.append("evil\x1b]0;owned\x07", Phase.FAILED, write_key="f", tool="pay\x1b[31m[/]",
                             call_id="[bold]c\x7f\u0085", payload={"error": "boom\x1b[1A\nline\rover"})
    finally:
        await journal.close()


@pytest.mark.parametrize(
    "args", [[], ["--full"], ["--columns"], ["--columns", "--full"]], ids=["wide", "full", "narrow", "narrow-full"]
)
def test_show_escapes_control_characters_and_markup_from_the_journal(runner, tmp_path, args):
    path = str(tmp_path / "j.db")
    asyncio.run(_hostile(path))
    env = {"COLUMNS": "80"} if "--columns" in args else {}
    args = [a for a in args if a != "--columns"]
    result = runner.invoke(cli, ["journal", "show", "evil", "--db", path, *args], env=env)
    assert result.exit_code == 0, result.output
    out = result.output
    for raw in ("\x1b", "\x07", "\x9b", "\x7f", "\x85", "\r"):
        assert raw not in out, repr(raw)
    assert "\\u001b]0;owned\\u0007" in out  # the saga id in the title
    assert "\\u001b[31m[/]" in out  # the tool: escaped, and `[/]` is not read as markup
    assert "[bold]c\\u007f\\u0085" in out  # the call id
    assert "boom\\u001b[1A\\nline\\rover" in out  # the payload stays on one line


def test_list_and_verify_escape_control_characters(runner, tmp_path):
    path = str(tmp_path / "j.db")
    asyncio.run(_hostile(path))
    for command in (["list"], ["verify"], ["heads"]):
        result = runner.invoke(cli, ["journal", *command, "--db", path])
        assert result.exit_code == 0, result.output
        assert "\x1b" not in result.output and "\x07" not in result.output
        assert "\\u001b" in result.output


@pytest.mark.parametrize("columns", ["200", "80"])
def test_show_prints_approval_hashes_whole(runner, tmp_path, monkeypatch, columns):
    """Issue 7 item 8: an approval entry's argument hash is printed whole (a human compares it
    with the request), in the wide and the compact layout, without --full."""
    from sagacity_agents.backends import Phase

    monkeypatch.setenv("COLUMNS", columns)
    path = tmp_path / "journal.db"
    digest = "ab" * 32

    async def go():
        journal = SqliteJournal(path)
        try:
            await journal.append("s-appr", Phase.AWAITING_APPROVAL, write_key="a", tool="wire",
                                 call_id="w1", payload={"request_id": "apr-1", "args": {"n": 5},
                                                        "args_hash": digest})
            await journal.append("s-appr", Phase.APPROVED, write_key="b", tool="wire", call_id="w1",
                                 payload={"request_id": "apr-1", "args_hash": digest,
                                          "approver": "alice", "reason": None})
        finally:
            await journal.close()

    asyncio.run(go())
    result = runner.invoke(cli, ["journal", "show", "s-appr", "--db", str(path)])
    assert result.exit_code == 0, result.output
    # A narrow table folds a long cell over lines: join the payload column's pieces.
    cells = [line.split("│") for line in result.output.splitlines() if "│" in line]
    column = next(i for row in cells for i, cell in enumerate(row) if "args_hash" in cell)
    flat = "".join("".join(row[column].split()) for row in cells if len(row) > column)
    assert flat.count(digest) == 2


def test_print_lines_writes_what_rich_would_print():
    """``render.print_lines`` writes plain lines in one write to a pipe (no style rendered) and
    gives the bytes rich prints line by line; a line wider than the console, or a terminal with
    colours, goes through rich (which wraps and styles it)."""
    import io

    from rich.console import Console
    from rich.text import Text

    from sagacity_agents.render import print_lines

    lines = [Text("verify: ", style="bold").append("ok", style="bold green").append(f"  saga s{i}")
             for i in range(3)] + [Text("[not markup] :smile: \\ end")]

    def printed(fast: bool, width: int = 120, color: bool = False) -> str:
        out = io.StringIO()
        console = Console(file=out, width=width, force_terminal=color, color_system="standard" if color else None)
        if fast:
            print_lines(console, lines)
        else:
            for line in lines:
                console.print(line)
        return out.getvalue()

    assert printed(True) == printed(False) == "".join(f"{t.plain}\n" for t in lines)
    assert printed(True, width=12) == printed(False, width=12) != "".join(f"{t.plain}\n" for t in lines)
    assert printed(True, color=True) == printed(False, color=True) and "\x1b[" in printed(True, color=True)
