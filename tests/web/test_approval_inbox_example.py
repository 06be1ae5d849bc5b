"""examples/approval_inbox: the app mounts the inbox under /approvals, a payment pauses, an
approval through the mounted API resumes it in on_decided, and the wire runs once."""

from __future__ import annotations

import importlib
import sqlite3

import httpx

from tests.web.support import Server, eventually


def _load_example(tmp_path, monkeypatch):
    """The example's module, reloaded with its journal and bank in ``tmp_path``."""
    monkeypatch.setenv("INBOX_TOKEN", "example-token-for-alice")
    monkeypatch.setenv("WIRE_BANK_DB", str(tmp_path / "bank.db"))
    import examples.wire_transfer.app as wire

    monkeypatch.setattr(wire, "BANK_DB", tmp_path / "bank.db")
    return importlib.reload(importlib.import_module("examples.approval_inbox.app"))


async def test_the_example_resumes_the_saga_it_mounted_the_inbox_for(tmp_path, monkeypatch):
    monkeypatch.setenv("SAGACITY_DB", str(tmp_path / "journal.db"))
    example = _load_example(tmp_path, monkeypatch)
    server = Server(example.app)
    try:
        headers = {"Authorization": "Bearer example-token-for-alice"}
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            started = (await http.post("/pay")).json()
            assert started["status"] == "AWAITING_APPROVAL"
            (page,) = started["approvals"]
            assert (await http.get(page)).status_code == 303  # the inbox wants a sign-in
            request_id = page.rsplit("/", 1)[1]
            shown = (await http.get(f"/approvals/api/approvals/{request_id}", headers=headers)).json()
            assert shown["args"]["amount_eur"] == 2500
            decided = await http.post(f"/approvals/api/approvals/{request_id}/approve", headers=headers,
                                      json={"args_hash": shown["args_hash"], "reason": "checked"})
            assert decided.status_code == 200
            login = await http.get("/approvals/login")
            assert login.status_code == 200 and 'action="/approvals/login"' in login.text
        await eventually(lambda: example.resumed, timeout=30)
        assert example.resumed == ["COMPLETED"]
        with sqlite3.connect(tmp_path / "bank.db") as conn:
            assert conn.execute("SELECT amount, iban FROM wires").fetchall() == [(2500, "DE89370400440532013000")]
    finally:
        server.stop()


async def test_a_cli_decision_resumes_with_no_request_to_the_inbox(tmp_path, monkeypatch):
    """Wired as documented (``mount_inbox``), the poller starts with the host app: an approval
    made with the CLI reaches ``on_decided`` although nothing ever asks the inbox anything."""
    import asyncio

    from click.testing import CliRunner

    from sagacity_agents.cli import cli

    db = str(tmp_path / "journal.db")
    monkeypatch.setenv("SAGACITY_DB", db)
    example = _load_example(tmp_path, monkeypatch)
    server = Server(example.app)
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            started = (await http.post("/pay")).json()  # the host's route, not the inbox's
        request_id = started["approvals"][0].rsplit("/", 1)[1]
        approved = await asyncio.to_thread(CliRunner().invoke, cli, [
            "approvals", "approve", request_id, "--as", "carol", "--reason", "by phone", "--db", db])
        assert approved.exit_code == 0, approved.output
        await eventually(lambda: example.resumed, timeout=30)
        assert example.resumed == ["COMPLETED"]
        assert not example.inbox.state.inbox.closed and example.inbox.state.inbox.started
    finally:
        server.stop()
    assert example.inbox.state.inbox.closed  # the host's shutdown closed it
