"""Audit export (issue 8, item 4): `sagacity audit export` writes JSON Lines that our own
verifier and the stand-alone verifier printed in docs/audit-format.md both check; the doc's
code is extracted and run here against a real export."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from agents import function_tool
from click.testing import CliRunner

from sagacity_agents import Sagacity, SagaStatus, compensable
from sagacity_agents.backends import DirectoryCheckpointStore, PostgresCheckpointStore
from sagacity_agents.evidence import Checkpoint
from sagacity_agents.cli import cli
from sagacity_agents.settings import checkpoint_store_at

from ..sdk import wire_app
from ..sdk.helpers import agent, scripted
from .tamper import edit_entries, sql

DOC = Path(__file__).resolve().parents[2] / "docs" / "audit-format.md"


def doc_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text("utf-8"), re.S)


def test_the_stand_alone_verifier_needs_cryptography_only_for_keys():
    """The doc's verifier imports the standard library at the top; `cryptography` only inside
    the function that loads keys (an export without keys verifies without it)."""
    verifier = doc_blocks()[0]
    assert len(verifier.strip().splitlines()) <= 90
    imports = {m for line in verifier.splitlines() for m in re.findall(r"^import (.*)", line)}
    assert imports == {"base64, hashlib, json, pathlib, sys"}
    assert all(line.startswith("    ") for line in verifier.splitlines() if "cryptography" in line)


@pytest.fixture
def populated(tmp_path, checkpoints_at):
    """A journal with a completed saga (3 calls), a saga paused for approval (approved and
    signed), checkpoints (a directory, then a PostgreSQL table) and a keyring; returns (db,
    checkpoints location, keyring dir, saga ids)."""
    db, cps, keys = str(tmp_path / "j.db"), checkpoints_at, str(tmp_path / "keys")
    assert CliRunner().invoke(cli, ["audit", "keygen", "auditor-1", "--keyring", keys]).exit_code == 0

    @function_tool
    @compensable(undo=lambda ctx: None)
    def book(n: int) -> str:
        return f"booked {n}"

    async def make() -> list[str]:
        s = Sagacity(db, checkpoints=cps, keyring=keys)
        try:
            model = scripted([("book", {"n": 1}, "1")], [("book", {"n": 2}, "2")], [("book", {"n": 3}, "3")], "ok")
            done = await s.run(agent(model, book), "go")
            assert done.status is SagaStatus.COMPLETED
            paused = await s.run(wire_app.paused_agent(("transfer", '{"amount": 5, "to": "a"}', "w1")), "go")
            await s.approve(paused.approvals[0].request_id, approver="alice")
            return [done.saga_id, paused.saga_id]
        finally:
            await s.aclose()

    return db, cps, keys, asyncio.run(make())


def export(db: str, cps: str, out: Path, *ids: str) -> None:
    result = CliRunner().invoke(cli, ["audit", "export", *ids, "--out", str(out), "--db", db, "--checkpoints", cps])
    assert result.exit_code == 0, result.output


def run_doc_verifier(path: Path, *keyring: str) -> tuple[int, dict]:
    script = path.parent / "verify_export.py"
    script.write_text(doc_blocks()[0], "utf-8")
    proc = subprocess.run([sys.executable, str(script), str(path), *keyring], capture_output=True, text=True,
                          timeout=60)
    return proc.returncode, json.loads(proc.stdout)


def test_export_verifies_with_ours_and_with_the_documented_verifier(populated, tmp_path):
    db, cps, keys, (done, paused) = populated
    out = tmp_path / "audit.jsonl"
    export(db, cps, out)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records[0]["type"] == "sagacity.audit.v1" and records[0]["sagas"] == 2
    assert {r["type"] for r in records} == {"sagacity.audit.v1", "entry", "head", "checkpoint"}
    code, verdict = run_doc_verifier(out)
    assert (code, verdict) == (0, {done: None, paused: None})
    ours = CliRunner().invoke(cli, ["audit", "verify", str(out), "--keyring", keys])
    assert ours.exit_code == 0 and "BROKEN" not in ours.output, ours.output
    # With the keys pinned, the doc's verifier checks every tag and checkpoint signature too.
    assert run_doc_verifier(out, keys) == (0, {done: None, paused: None})
    checkpoints = [r for r in records if r["type"] == "checkpoint"]
    assert len(checkpoints) == 2  # the close of `done`, the pause of `paused`
    lines = out.read_text().splitlines()
    at = lines.index(json.dumps(checkpoints[0], sort_keys=True, ensure_ascii=True))
    lines[at] = json.dumps({**checkpoints[0], "time": "2020-01-01T00:00:00.000000Z"}, sort_keys=True)
    write(out, "\n".join(lines) + "\n")
    assert run_doc_verifier(out) == (0, {done: None, paused: None})  # no keys: not checked
    assert run_doc_verifier(out, keys)[1][checkpoints[0]["saga_id"]] == checkpoints[0]["seq"]


async def stored_checkpoints(location: str, saga_id: str) -> list[Checkpoint]:
    """The checkpoints of ``saga_id`` in the store at ``location``."""
    store = checkpoint_store_at(location)
    try:
        return await store.list(saga_id)
    finally:
        if isinstance(store, PostgresCheckpointStore):
            await store.close()


def write(path: Path, text: str) -> Path:
    path.write_text(text, "utf-8")
    return path


def test_a_tampered_journal_exports_as_broken_with_the_first_bad_seq(populated, tmp_path):
    db, cps, keys, (done, paused) = populated
    edit_entries(db, done, lambda o: {**o, "payload": {**o["payload"], "result": "x"}} if o["seq"] == 5 else None)
    # The paused saga's tail from its checkpointed head (the pause) on is removed.
    (n_paused,) = [c.seq for c in asyncio.run(stored_checkpoints(cps, paused))]
    sql(db, "DELETE FROM sagacity_journal WHERE saga_id = ? AND seq >= ?", (paused, n_paused))
    out = tmp_path / "audit.jsonl"
    export(db, cps, out)
    code, verdict = run_doc_verifier(out)
    assert (code, verdict) == (1, {done: 5, paused: n_paused})
    ours = CliRunner().invoke(cli, ["audit", "verify", str(out), "--keyring", keys])
    assert ours.exit_code == 1
    assert "at seq 5: hash mismatch" in ours.output and f"at seq {n_paused}: truncated" in ours.output


def test_audit_checkpoint_signs_on_demand_and_refuses_a_broken_saga(populated):
    db, cps, keys, (done, paused) = populated
    ok = CliRunner().invoke(cli, ["audit", "checkpoint", paused, "--db", db, "--checkpoints", cps, "--keyring", keys])
    assert ok.exit_code == 0 and "signed seq" in ok.output, ok.output
    edit_entries(db, done, lambda o: {**o, "payload": {**o["payload"], "result": "x"}} if o["seq"] == 5 else None)
    bad = CliRunner().invoke(cli, ["audit", "checkpoint", done, "--db", db, "--checkpoints", cps, "--keyring", keys])
    assert bad.exit_code == 1 and "first bad seq 5" in bad.output
    verify = CliRunner().invoke(cli, ["journal", "verify", "--db", db, "--checkpoints", cps, "--keyring", keys])
    assert verify.exit_code == 1 and "at seq 5: hash mismatch" in verify.output


@pytest.mark.parametrize("how", ["option", "environment"])
def test_audit_verify_and_journal_verify_agree_on_who_may_sign_decisions(populated, tmp_path, monkeypatch, how):
    """The approval in the export is signed by `auditor-1`; only `alice-1` may sign decisions.
    `journal verify` and `audit verify` both report it (--decision-keys, or
    $SAGACITY_DECISION_KEYS), naming the APPROVED entry: the two verifiers never disagree."""
    db, cps, keys, (done, paused) = populated
    out = tmp_path / "audit.jsonl"
    export(db, cps, out)
    extra = ["--decision-keys", "alice-1"] if how == "option" else []
    if how == "environment":
        monkeypatch.setenv("SAGACITY_DECISION_KEYS", "alice-1")
    journal = CliRunner().invoke(cli, ["journal", "verify", "--db", db, "--checkpoints", cps, "--keyring", keys, *extra])
    exported = CliRunner().invoke(cli, ["audit", "verify", str(out), "--keyring", keys, *extra])
    for result in (journal, exported):
        assert result.exit_code == 1, result.output
        assert re.search(r"BROKEN .*at seq \d+: bad signature: .*may not sign decisions", result.output), result.output
    assert "1 of 2" in journal.output and "1 of 2" in exported.output


@pytest.mark.parametrize("checkpoints_at", ["directory"], indirect=True)  # a file to damage
def test_a_damaged_checkpoint_file_is_reported_by_verify_and_export_not_a_traceback(populated, tmp_path):
    """A line appended to one saga's checkpoint file that is not a checkpoint (damage, or a
    write cut short): `journal verify` reports that saga BROKEN, still verifies the other one,
    and exits 1; `audit export` exits 1 naming the problem."""
    db, cps, keys, (done, paused) = populated
    path = DirectoryCheckpointStore(cps)._file(done)
    with path.open("a") as fh:
        fh.write('{"saga_id": "cut sh\n')
    verify = CliRunner().invoke(cli, ["journal", "verify", "--db", db, "--checkpoints", cps, "--keyring", keys])
    assert verify.exit_code == 1 and isinstance(verify.exception, SystemExit), verify.output
    assert "unreadable checkpoint" in verify.output and "1 of 2" in verify.output, verify.output
    out = CliRunner().invoke(cli, ["audit", "export", "--out", str(tmp_path / "a.jsonl"), "--db", db, "--checkpoints", cps])
    assert out.exit_code == 1 and isinstance(out.exception, SystemExit), out.output
    assert "cannot export the checkpoints" in out.output


def test_a_deleted_checkpointed_saga_is_in_a_full_export_and_reported_missing(populated, tmp_path):
    """The completed saga is deleted from the journal: `journal verify --checkpoints` reports it
    missing, and so do `audit verify` and the stand-alone verifier on a full export (it carries
    the saga's checkpoints), rather than an export that simply leaves the saga out."""
    db, cps, keys, (done, paused) = populated
    sql(db, "DELETE FROM sagacity_journal WHERE saga_id = ?", (done,))
    journal = CliRunner().invoke(cli, ["journal", "verify", "--db", db, "--checkpoints", cps, "--keyring", keys])
    assert journal.exit_code == 1 and "missing saga" in journal.output
    out = tmp_path / "audit.jsonl"
    export(db, cps, out)
    assert json.loads(out.read_text().splitlines()[0])["sagas"] == 2
    ours = CliRunner().invoke(cli, ["audit", "verify", str(out), "--keyring", keys])
    assert ours.exit_code == 1 and "missing saga" in ours.output, ours.output
    assert run_doc_verifier(out) == (1, {paused: None, done: 1})


@pytest.mark.parametrize("edit", ["duplicated entry line", "seq true in a line", "two lines swapped"])
def test_ours_and_the_documented_verifier_name_the_same_first_bad_seq(populated, tmp_path, edit):
    """An export edited by hand: both verifiers name the same first bad seq (a duplicated line
    of seq 3 is bad at position 4, not at seq 3, which is sound; a non-integer seq is reported
    as the position, never as `True`)."""
    db, cps, keys, (done, paused) = populated
    out = tmp_path / "audit.jsonl"
    export(db, cps, out, done)
    lines = out.read_text().splitlines()
    if edit == "duplicated entry line":
        lines.insert(4, lines[3])
        expected = 4
    elif edit == "seq true in a line":
        lines[3] = json.dumps({**json.loads(lines[3]), "seq": True})
        expected = 3
    else:
        lines[2], lines[3] = lines[3], lines[2]
        expected = 2
    write(out, "\n".join(lines) + "\n")
    assert run_doc_verifier(out) == (1, {done: expected})
    ours = CliRunner().invoke(cli, ["audit", "verify", str(out), "--keyring", keys])
    assert ours.exit_code == 1 and f"BROKEN  saga {done}  at seq {expected}:" in ours.output, ours.output
