"""What an approver sees of a request whose arguments hold a card number: the inbox and
``sagacity approvals show`` show the clear number only where the saga's key is, the mask
otherwise; ``hash_ok`` is computed from the committed arguments, with no key."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt

import pytest
from click.testing import CliRunner

from sagacity_agents import Sagacity, SagaStatus
from sagacity_agents.backends import SqliteJournal
from sagacity_agents.backends.sqlite.approvals import SqliteApprovalStore
from sagacity_agents.cli import cli
from sagacity_agents.core.approval_args import approver_view
from sagacity_agents.core.data_keys import DataKeys
from sagacity_agents.web.views import request_view

from . import card_app
from .test_sensitive_approvals import SharedKeyStore

pytestmark = pytest.mark.case("X-03")

KEY = base64.b64encode(bytes(range(32))).decode()
MASK = "**** **** **** 0002"


@pytest.fixture
def paused_file(tmp_path, monkeypatch):
    """A SQLite file holding a saga paused on a card charge (paused with the master key)."""
    monkeypatch.setattr(card_app, "LEDGER", tmp_path / "ledger.txt")
    monkeypatch.setenv("SAGACITY_DATA_KEY", KEY)
    path = str(tmp_path / "sagacity.db")
    keys = SharedKeyStore()

    async def pause():
        s = Sagacity(keys.attach(SqliteJournal(path)), approvals=SqliteApprovalStore(path))
        try:
            result = await s.run(card_app.paused_agent(), card_app.PROMPT)
            assert result.status is SagaStatus.AWAITING_APPROVAL
            return result.approvals[0]
        finally:
            await s.aclose()

    request = asyncio.run(pause())
    monkeypatch.delenv("SAGACITY_DATA_KEY")
    return path, keys, request


def test_the_inbox_checks_the_hash_with_no_key_and_shows_the_mask(paused_file):
    _path, _keys, request = paused_file
    view = request_view(request, dt.datetime.now(dt.UTC), full=True)
    assert view["hash_ok"] is True and view["args_version"] == 2
    assert view["args"] == {"card_number": MASK, "amount": 5} and view["args_clear"] is False
    assert card_app.CARD not in str(view)


def test_the_inbox_shows_the_card_where_the_key_is(paused_file, monkeypatch):
    path, keys, request = paused_file
    monkeypatch.setenv("SAGACITY_DATA_KEY", KEY)

    async def shown():
        journal = keys.attach(SqliteJournal(path))
        try:
            return await approver_view(request, journal, DataKeys.from_env())
        finally:
            await journal.close()

    view = request_view(request, dt.datetime.now(dt.UTC), full=True, shown=asyncio.run(shown()))
    assert view["args"] == {"card_number": card_app.CARD, "amount": 5} and view["args_clear"]
    assert view["hash_ok"] is True  # still the committed arguments' hash


def test_approvals_show_masks_without_the_key_and_shows_with_it(paused_file, monkeypatch):
    path, keys, request = paused_file
    from sagacity_agents.cli import approvals as cli_approvals

    opened = cli_approvals.open_journal
    monkeypatch.setattr(cli_approvals, "open_journal", lambda db: keys.attach(opened(db)))
    runner = CliRunner()
    masked = runner.invoke(cli, ["approvals", "show", request.request_id, "--db", path])
    assert masked.exit_code == 0, masked.output
    assert MASK in masked.output and card_app.CARD not in masked.output
    assert "masked" in masked.output
    monkeypatch.setenv("SAGACITY_DATA_KEY", KEY)
    clear = runner.invoke(cli, ["approvals", "show", request.request_id, "--db", path])
    assert clear.exit_code == 0, clear.output
    assert card_app.CARD in clear.output
