"""Erasure (crypto-shredding) on every backend: destroying a saga's data key makes its sensitive
values unrecoverable even with the master key, while the chain, the entry tags and the
stand-alone verifier of docs/audit-format.md still pass; the wrapped key's bytes leave the
SQLite file and its -wal, and ``pg_dump``; the erasure is in the access log; an open, paused or
dirty saga is refused unless forced, and a recovery that would need the erased undo data
refuses clearly instead of running the undo on masks."""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import json

import pytest
from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from click.testing import CliRunner

from sagacity_agents import SagaStatus
from sagacity_agents.backends import Phase
from sagacity_agents.core.audit import export_audit
from sagacity_agents.core.data_keys import DataKeys, MasterKey
from sagacity_agents.core.erasure import erase
from sagacity_agents.errors import DataErasedError, SagacityError
from tests.evidence.test_audit_export import doc_blocks

from .helpers import (
    CARD, MASTER_TEXT, charge_and_ship, data_keys, leaks, open_sagacity, payment_agent, sqlite_files, stored_bytes,
)

pytestmark = pytest.mark.case("X-04")

ACCESS_SAGA = "sagacity.access"


@pytest.fixture
def keyring(tmp_path) -> str:
    """A keyring with one signing key: the run's entries are tagged."""
    from sagacity_agents.cli import cli

    keys = str(tmp_path / "keys")
    assert CliRunner().invoke(cli, ["audit", "keygen", "writer-1", "--keyring", keys]).exit_code == 0
    return keys


FAR = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)
"""A clock past every call's deadline: a closed saga erases without force."""


async def _erase(s, saga_id: str, *, force: bool = False, reason: str = "GDPR art. 17, ticket 12"):
    """The erasure API (``sagacity saga erase SAGA_ID --as NAME --reason TEXT``), judged now: a
    saga just run has calls before their deadline (a late outcome could still land)."""
    return await s.erase(saga_id, by="dpo", reason=reason, force=force)


async def _erase_later(s, saga_id: str):
    """The same erasure judged at :data:`FAR` (``core.erasure.erase``, which ``Sagacity.erase``
    calls with the system clock), with the instance's keys and evidence."""
    return await erase(s.journal, s.data_keys, saga_id, by="dpo", reason="GDPR art. 17, ticket 12",
                       now=FAR, evidence=s.evidence)


async def _cli(*args: str, env: dict[str, str] | None = None):
    """``sagacity ARGS`` (its own event loop: in a thread, out of the test's)."""
    from sagacity_agents.cli import cli

    runner = CliRunner(env={"COLUMNS": "250", **(env or {})})
    return await asyncio.to_thread(runner.invoke, cli, list(args))


async def test_erased_values_are_gone_and_the_evidence_still_verifies(place, with_master, keyring, tmp_path):
    s = open_sagacity(place.sagacity_location(), data_keys(True), keyring=keyring)
    try:
        result = await s.run(payment_agent([]), "pay")
        assert result.status is SagaStatus.COMPENSATED, result.exception
        store = s.journal.backend if hasattr(s.journal, "backend") else s.journal
        (key,) = await store.data_keys(result.saga_id)
        assert key.wrapped is not None
        entries = await s.journal.entries(result.saga_id)
        sealed = [e for e in entries if e.sealed is not None]
        assert sealed
        with pytest.raises(SagacityError, match="deadline"):
            await _erase(s, result.saga_id)  # now: a late outcome could still land
        await _erase_later(s, result.saga_id)
        (gone,) = await store.data_keys(result.saga_id)
        assert gone.wrapped is None and gone.erased_by == "dpo" and gone.erased_at
        stored = await stored_bytes(place.name, place.location, s.journal, s.approvals)
        assert key.wrapped not in stored  # secure_delete + wal_checkpoint(TRUNCATE) on SQLite
        assert leaks(stored) == []
        fresh = DataKeys(MasterKey.from_text(MASTER_TEXT))  # the master key does not help
        secrets = await fresh.for_saga(s.journal, result.saga_id, create=False)
        with pytest.raises(DataErasedError):
            secrets.reveal(sealed[0].payload, sealed[0].sealed, sealed[0].write_key)
        for verified in await s.verify(result.saga_id):
            assert verified.ok, verified  # chain and tags: they cover commitments only
        log = await s.journal.entries(ACCESS_SAGA)
        (erased,) = [e for e in log if e.phase is Phase.DATA_ERASED]
        assert erased.payload["saga_id"] == result.saga_id and erased.payload["by"] == "dpo"
        assert erased.payload["forced"] is False and erased.payload["generations"] == [1]
        out = io.StringIO()
        await export_audit(s.journal, out, [result.saga_id], keyring=s.evidence.keyring)
    finally:
        await s.aclose()
    path = tmp_path / "audit.jsonl"
    path.write_text(out.getvalue())
    namespace: dict = {}
    exec(doc_blocks()[0], namespace)  # noqa: S102 - the documented stand-alone verifier
    assert namespace["verify"](str(path)) == {result.saga_id: None}
    assert leaks(out.getvalue()) == []


async def test_journal_show_prints_erased_and_the_command_line_erases(tmp_path, with_master):
    """On SQLite, ``sagacity saga erase SAGA_ID --as NAME --reason TEXT`` (forced: the calls are
    still before their deadline) then ``journal show`` prints ``[erased]`` where the values stood,
    and ``journal verify`` passes."""
    db = str(tmp_path / "journal.db")
    s = open_sagacity(db, data_keys(True))
    try:
        result = await s.run(payment_agent([]), "pay")
    finally:
        await s.aclose()
    env = {"SAGACITY_DATA_KEY": MASTER_TEXT}
    refused = await _cli("saga", "erase", result.saga_id, "--as", "dpo", "--reason", "GDPR", "--db", db,
                         env=env)
    assert refused.exit_code == 1, refused.output
    done = await _cli("saga", "erase", result.saga_id, "--as", "dpo", "--reason",
                      "GDPR art. 17, no late outcome possible: the provider confirmed", "--force",
                      "--db", db, env=env)
    assert done.exit_code == 0, done.output
    shown = await _cli("journal", "show", result.saga_id, "--full", "--db", db)
    assert shown.exit_code == 0, shown.output
    assert "[erased]" in shown.output and leaks(shown.output) == []
    verified = await _cli("journal", "verify", "--db", db)
    assert verified.exit_code == 0, verified.output
    assert leaks(sqlite_files(db)) == []


def _paused_agent() -> Agent:
    from sagacity_agents import irreversible

    @function_tool(needs_approval=True)
    @irreversible(scope="sensitive-erasure")
    def payout(card_number: str) -> str:
        """Pay out to a card."""
        return "paid"

    model = ScriptedModel([[function_call("payout", {"card_number": CARD}, call_id="p1")],
                           [assistant_message("done")]])
    return Agent(name="payouts", model=model, tools=[payout])


async def test_erasing_a_paused_saga_is_refused_unless_forced(place, with_master):
    s = open_sagacity(place.sagacity_location(), data_keys(True))
    try:
        result = await s.run(_paused_agent(), "pay out")
        assert result.status is SagaStatus.AWAITING_APPROVAL
        with pytest.raises(SagacityError):
            await _erase(s, result.saga_id)
        store = s.journal.backend if hasattr(s.journal, "backend") else s.journal
        assert [k.wrapped is not None for k in await store.data_keys(result.saga_id)] == [True]
        await _erase(s, result.saga_id, force=True, reason="customer left; approval abandoned")
        log = await s.journal.entries(ACCESS_SAGA)
        assert [e.payload["forced"] for e in log if e.phase is Phase.DATA_ERASED] == [True]
    finally:
        await s.aclose()


def _refund_agent(refunds: list, *, fail: bool, first: bool) -> Agent:
    """A charge whose undo needs the card (declared sensitive undo data), then a failing step;
    the refund fails when ``fail`` (the saga is left dirty)."""

    def refund(ctx) -> None:
        if fail:
            raise RuntimeError("bank offline")
        refunds.append(dict(ctx.undo_data))

    model = ScriptedModel()
    if first:
        model.enqueue([function_call("charge_card", {"card_number": CARD, "amount_eur": 5},
                                     call_id="c1")])
        model.enqueue([function_call("ship", {"order": "o-1"}, call_id="c2")])
    model.enqueue([assistant_message("done")])
    tools = charge_and_ship(refund, scope="sensitive-erasure", sensitive={"undo_data.card"})
    return Agent(name="shop", model=model, tools=tools)


async def test_a_recovery_that_needs_erased_undo_data_refuses_clearly(place, with_master):
    refunds: list = []
    s = open_sagacity(place.sagacity_location(), data_keys(True))
    try:
        result = await s.run(_refund_agent(refunds, fail=True, first=True), "charge and ship")
        assert result.report is not None and result.report.still_dirty, result.status
        with pytest.raises(SagacityError):
            await _erase(s, result.saga_id)  # dirty: an undo still needs the data
        await _erase(s, result.saga_id, force=True, reason="court order 7")
        try:
            recovered = await s.recover(result.saga_id, _refund_agent(refunds, fail=False, first=False))
        except SagacityError as refused:
            assert "erased" in str(refused).lower()
        else:
            assert recovered.report is not None and recovered.report.still_dirty
            assert "erased" in json.dumps([str(i.detail) for i in recovered.report.still_dirty]).lower()
        assert refunds == []  # never run on masks
    finally:
        await s.aclose()
