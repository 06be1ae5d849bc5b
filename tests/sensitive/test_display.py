"""Nothing this library shows carries a sensitive value: ``journal show`` (table and ``--full``),
``saga show``, audit exports and the inbox's saga page and API show masks, ``[erased]`` once the
saga's data key is erased, and a value in clear only with ``--reveal`` (the master key, an
access-log entry written first; refused when it cannot be written). The saga here has no
declaration at all: a card number and a CVV in the arguments, a token in the result, and a
password quoted in an exception, found by the defaults alone."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import stat
import subprocess
import sys

import pytest
from click.testing import CliRunner

from sagacity_agents.backends import InMemoryJournal
from sagacity_agents.cli import cli
from sagacity_agents.core import data_keys as data_keys_module
from sagacity_agents.core.access_log import reveals
from sagacity_agents.core.data_keys import DataKeys, MasterKey
from sagacity_agents.core.entries import ACCESS_SAGA, Phase
from sagacity_agents.core.evidence import Evidence, verify_sagas
from sagacity_agents.core.journal import AppendRequest
from sagacity_agents.core.shown import read_shown, reveal_saga
from sagacity_agents.errors import DataKeyError, JournalWriteError
from sagacity_agents.stores import open_journal
from sagacity_agents.testing import FrozenClock
from tests.backends import BACKENDS, Backend
from tests.evidence.test_audit_export import run_doc_verifier

pytestmark = pytest.mark.case("X-03")

CARD = "4000 0000 0000 0002"
CVV = "737"
TOKEN = "tok_live_8f3kQ9zLm2"
PASSWORD = "correct-horse-battery"
SECRETS = (CARD, CARD.replace(" ", ""), TOKEN, PASSWORD)
"""What must never be shown (a 3-digit CVV is checked where it stands: too short to grep)."""
MASTER_BYTES = bytes(range(32))
MASTER_ENV = {"SAGACITY_DATA_KEY": base64.b64encode(MASTER_BYTES).decode()}
SQL = [b for b in BACKENDS if b.name != "memory"]  # a command line reaches these


@pytest.fixture(params=BACKENDS, ids=str)
def backend(request) -> Backend:
    return request.param


async def write_saga(journal, keys: DataKeys | None = None, saga_id: str = "s") -> None:
    """A saga with no declaration: card number and CVV in the arguments, a token in a result,
    a password in the arguments and quoted in a later exception."""
    secrets = await (keys or DataKeys(MasterKey(MASTER_BYTES))).for_saga(journal, saga_id)
    call = {"tool": "pay", "call_id": "c1"}
    for phase, key, payload, extra in (
            (Phase.SAGA_OPENED, "open", {"metadata": {}}, {}),
            (Phase.INTENT, "i1", {"args": {"card_number": CARD, "cvv": CVV, "amount": 5},
                                  "reversibility": "compensatable"}, call),
            (Phase.EXECUTED, "o1", {"intent_seq": 2, "result": {"token": TOKEN, "ok": True}}, call),
            (Phase.INTENT, "i2", {"args": {"user": "ann", "password": PASSWORD},
                                  "reversibility": "read_only"}, {"tool": "login", "call_id": "c2"}),
            (Phase.FAILED, "o2", {"intent_seq": 4, "error": f"LoginError: bad password {PASSWORD!r}"},
             {"tool": "login", "call_id": "c2"})):
        request = AppendRequest.build(saga_id, phase, write_key=key, payload=payload, protect=secrets,
                                      **extra)
        await journal.append(request)


def assert_clean(text: str) -> None:
    for value in SECRETS:
        assert value not in text, value


async def test_shown_entries_hold_masks_on_every_backend(backend, request):
    journal = backend.journal(backend.location(request), clock=FrozenClock(tick=0.001))
    try:
        await write_saga(journal)
        shown = await read_shown(journal, "s")
        text = json.dumps([e.payload for e in shown])
        assert_clean(text)
        assert shown[1].payload["args"] == {"card_number": "**** **** **** 0002", "cvv": "****", "amount": 5}
        assert shown[2].payload["result"]["token"] == "****"
        assert shown[4].payload["error"] == "LoginError: bad password '****'"
        assert [e.hash for e in shown] == [e.hash for e in await journal.entries("s")]
    finally:
        await journal.close()


def test_a_scrub_is_idempotent():
    from sagacity_agents.core.scrub import Scrubber
    payload = {"args": {"card_number": {"$sensitive": "ab", "mask": "**** **** **** 0002"}, "pin": "1234"}}
    once = Scrubber().payload(payload)
    assert once == {"args": {"card_number": "**** **** **** 0002", "pin": "****"}}
    assert Scrubber().payload(once) == once


def test_shown_entries_mask_clear_values_an_older_writer_left():
    """Entries written without protection (before this version): the display masks them all
    the same, the password quoted later included."""
    journal = InMemoryJournal()

    async def work():
        for phase, key, payload in (
                (Phase.INTENT, "i", {"args": {"password": PASSWORD, "card": CARD}}),
                (Phase.FAILED, "o", {"intent_seq": 1, "error": f"denied for {PASSWORD}"})):
            await journal.append("old", phase, write_key=key, tool="t", call_id="c", payload=payload)
        return await read_shown(journal, "old")

    assert_clean(json.dumps([e.payload for e in asyncio.run(work())]))


def _cli(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "200", "SAGACITY_DATA_KEY": "", **(env or {})})


@pytest.fixture(params=SQL, ids=str)
def location(request) -> str:
    backend = request.param
    where = backend.location(request)

    async def make():
        journal = backend.journal(where)
        try:
            await write_saga(journal)
        finally:
            await journal.close()

    asyncio.run(make())
    return where


def test_journal_show_and_saga_show_print_masks(location):
    for args in (["journal", "show", "s"], ["journal", "show", "s", "--full"], ["saga", "show", "s"]):
        result = _cli(*args, "--db", location)
        assert result.exit_code == 0, result.output
        assert_clean(result.output)
    assert "**** **** **** 0002" in _cli("journal", "show", "s", "--db", location).output


def test_reveal_needs_the_key_a_name_and_a_reason(location):
    refused = _cli("journal", "show", "s", "--reveal", "--as", "ann", "--reason", "dispute 7", "--db", location)
    assert refused.exit_code != 0 and "SAGACITY_DATA_KEY" in refused.output
    assert_clean(refused.output)
    assert _cli("journal", "show", "s", "--reveal", "--db", location, env=MASTER_ENV).exit_code == 2

    async def logged():
        journal = open_journal(location)
        try:
            return await reveals(journal, "s")
        finally:
            await journal.close()

    assert asyncio.run(logged()) == []  # refused before anything was recorded


def test_reveal_shows_the_values_after_recording_who_and_why(location):
    result = _cli("journal", "show", "s", "--full", "--reveal", "--as", "ann", "--reason", "dispute 7",
                  "--db", location, env=MASTER_ENV)
    assert result.exit_code == 0, result.output
    for value in (CARD, TOKEN, PASSWORD):
        assert value in result.output

    async def logged():
        journal = open_journal(location)
        try:
            return await reveals(journal, "s"), await verify_sagas(journal, ACCESS_SAGA, evidence=Evidence())
        finally:
            await journal.close()

    (entry,), (verified,) = asyncio.run(logged())
    assert entry.payload["by"] == "ann" and entry.payload["reason"] == "dispute 7"
    assert entry.payload["saga_id"] == "s"
    assert {"/args/card_number", "/args/cvv", "/result/token", "/args/password", "/error"} <= set(entry.payload["paths"])
    assert verified.ok


async def test_the_access_log_entry_is_written_before_any_value_is_opened(monkeypatch):
    journal = InMemoryJournal()
    await write_saga(journal)
    order: list[str] = []
    opened = data_keys_module.SagaSecrets.reveal

    def reveal(self, *args):
        order.append("open")
        return opened(self, *args)

    monkeypatch.setattr(data_keys_module.SagaSecrets, "reveal", reveal)
    keys = DataKeys(MasterKey(MASTER_BYTES))

    async def record(target, phase, payload):
        order.append("log")
        return await target.append(AppendRequest.build(ACCESS_SAGA, phase, write_key="r", payload=payload))

    done = await reveal_saga(journal, "s", by="ann", reason="dispute", keys=keys, record=record)
    assert order[0] == "log" and order.count("log") == 1 and "open" in order
    assert done.entries[1].payload["args"]["card_number"] == CARD
    assert done.entries[4].payload["error"] == f"LoginError: bad password {PASSWORD!r}"

    order.clear()

    async def failing(target, phase, payload):
        raise JournalWriteError("read-only journal")

    with pytest.raises(DataKeyError) as refused:
        await reveal_saga(journal, "s", by="ann", reason="dispute", keys=keys, record=failing)
    assert refused.value.code == "REVEAL_NOT_LOGGED" and order == []


def test_a_reveal_on_a_read_only_sqlite_file_is_refused(tmp_path):
    """A file only readable (chmod; root ignores it, so a ``mode=ro`` URI too): refused."""
    path = tmp_path / "j.db"

    async def make():
        journal = open_journal(str(path))
        try:
            await write_saga(journal)
        finally:
            await journal.close()

    asyncio.run(make())
    for name in os.listdir(tmp_path):
        os.chmod(tmp_path / name, stat.S_IRUSR)
    os.chmod(tmp_path, stat.S_IRUSR | stat.S_IXUSR)
    try:
        for where in ([] if os.geteuid() == 0 else [str(path)]) + [f"file:{path}?mode=ro"]:
            result = _cli("journal", "show", "s", "--reveal", "--as", "ann", "--reason", "why",
                          "--db", where, env=MASTER_ENV)
            assert result.exit_code != 0, result.output
            assert_clean(result.output)
    finally:
        os.chmod(tmp_path, stat.S_IRWXU)


async def test_an_erased_saga_shows_erased(backend, request):
    journal = backend.journal(backend.location(request))
    try:
        await write_saga(journal)
        await journal.erase_data_keys("s", by="dpo", reason="request 9")
        shown = await read_shown(journal, "s")
        assert shown[1].payload["args"]["card_number"] == "[erased]"
        assert shown[4].payload["error"] == "[erased]"
        done = await reveal_saga(journal, "s", by="ann", reason="after erasure",
                                 keys=DataKeys(MasterKey(MASTER_BYTES)))
        assert done.entries[1].payload["args"]["card_number"] == "[erased]"
        assert_clean(json.dumps([e.payload for e in done.entries]))
    finally:
        await journal.close()


def test_audit_export_keeps_the_committed_bytes_and_no_sealed_value(location, tmp_path):
    out = tmp_path / "audit.jsonl"
    result = _cli("audit", "export", "--out", str(out), "--db", location)
    assert result.exit_code == 0, result.output
    text = out.read_text()
    records = [json.loads(line) for line in text.splitlines()]
    decoded = "".join(base64.b64decode(r["canonical"]).decode() for r in records if r["type"] == "entry")
    assert_clean(text + decoded)
    assert "$sensitive" in decoded and "sealed" not in text

    async def sealed():
        journal = open_journal(location)
        try:
            return [e.sealed for e in await journal.entries("s") if e.sealed]
        finally:
            await journal.close()

    for blob in asyncio.run(sealed()):
        assert base64.b64encode(blob).decode() not in text and blob.decode() not in text
    assert run_doc_verifier(out) == (0, {"s": None})
    verify = subprocess.run([sys.executable, "-m", "sagacity_agents", "audit", "verify", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert verify.returncode == 0 and "BROKEN" not in verify.stdout, verify.stdout + verify.stderr
