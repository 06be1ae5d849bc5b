"""No sensitive value in any stored byte, on every backend, with and without a master key.

An agent charges a card (card number and CVV in the arguments), fetches an API token (in the
result), opens an account (an IBAN and a recovery phrase sensitive by declaration only) and
logs in with a password that its exception then quotes; none of the first three tools declares
anything. The login fails, so the saga undoes the account and the charge. Then every place the
library writes to is searched for each secret in every form it could take: the SQLite file and
its -wal read as raw bytes, ``pg_dump`` of the test's PostgreSQL schema, the in-memory journal's
objects, an audit export (its base64 bytes decoded), the ``saga.*`` spans in the SDK's trace,
the OpenTelemetry spans and the library's log lines. The chain still verifies.
"""

from __future__ import annotations

import hashlib
import logging

import pytest

from sagacity_agents import SagaStatus
from sagacity_agents.backends import Phase
from sagacity_agents.core.sensitive import MASK, SENSITIVE_KEY, is_committed

from .helpers import (
    CARD, CVV, IBAN, PASSWORD, PHRASE, TOKEN, audit_text, data_keys, leaks, log_text, open_sagacity,
    otel_text, payment_agent, sqlite_files, span_text, stored_bytes,
)

pytestmark = [pytest.mark.case("X-01"), pytest.mark.case("X-02")]

PROMPT = f"Pay my order with card {CARD}, then open my account."
"""The user prompt holds the card too: it reaches only the (scripted) model and the RunState."""


def _by(entries, phase, tool):
    (entry,) = [e for e in entries if e.phase is phase and e.tool == tool]
    return entry


def _committed_where_expected(entries) -> None:
    """Each secret stands as a committed value (commitment + mask) where it was."""
    args = _by(entries, Phase.INTENT, "charge_card").payload["args"]
    assert is_committed(args["card_number"]) and args["card_number"]["mask"] == "**** **** **** 1111"
    assert is_committed(args["cvv"]) and args["cvv"]["mask"] == MASK
    assert len(args["card_number"][SENSITIVE_KEY]) == 64 and args["amount_eur"] == 120
    token = _by(entries, Phase.EXECUTED, "fetch_api_token").payload["result"]
    assert is_committed(token["token"]) and token["service"] == "payments"
    account = _by(entries, Phase.INTENT, "open_account").payload["args"]
    assert is_committed(account["iban"]) and account["holder"] == "Alice Martin"
    opened = _by(entries, Phase.EXECUTED, "open_account").payload
    assert is_committed(opened["result"]["recovery_phrase"])
    assert opened["result"]["account_id"] == "AC-1"
    login = _by(entries, Phase.INTENT, "login").payload["args"]
    assert is_committed(login["password"]) and login["user"] == "alice"
    error = _by(entries, Phase.FAILED, "login").payload["error"]
    text = error if isinstance(error, str) else error.get("mask", str(error))
    assert MASK in text and "login refused for alice" in text


async def test_no_sensitive_value_in_any_stored_byte(place, master):
    """Undeclared card number, CVV, token in a result, password quoted in an exception, and a
    declared IBAN and result field: committed in the journal, in no stored byte or audit export;
    the saga still compensates and verifies."""
    undone: list[dict] = []
    s = open_sagacity(place.sagacity_location(), data_keys(master))
    try:
        result = await s.run(payment_agent(undone), PROMPT)
        assert result.status is SagaStatus.COMPENSATED, result.exception
        assert undone == [{"account_id": "AC-1"}, {"charge_id": "ch_0001", "amount_eur": 120}]
        entries = await s.journal.entries(result.saga_id)
        _committed_where_expected(entries)
        for entry in entries:
            assert leaks(entry.canonical) == [], (entry.seq, entry.phase)
            sealed = getattr(entry, "sealed", None)
            assert sealed is None or leaks(sealed) == [], (entry.seq, entry.phase)
        sealed_entries = [e for e in entries if getattr(e, "sealed", None) is not None]
        assert bool(sealed_entries) == master  # stored encrypted only under a master key
        assert leaks(await stored_bytes(place.name, place.location, s.journal, s.approvals)) == []
        assert leaks(await audit_text(s.journal)) == []
        for verified in await s.verify(result.saga_id):
            assert verified.ok, verified
    finally:
        await s.aclose()
    if place.name == "sqlite":
        assert leaks(sqlite_files(place.location)) == []  # after the close (-wal checkpointed)


async def test_no_sensitive_value_in_spans_or_logs(place, sdk_spans, otel, caplog):
    """The same saga: the ``saga.*`` spans in the SDK's trace, the OpenTelemetry spans and the
    library's log lines (DEBUG up) carry masks only, the failed login's error text included."""
    caplog.set_level(logging.DEBUG)
    s = open_sagacity(place.sagacity_location(), data_keys(False))
    try:
        result = await s.run(payment_agent([]), PROMPT)
        assert result.status is SagaStatus.COMPENSATED, result.exception
    finally:
        await s.aclose()
    assert sdk_spans.ours() and leaks(span_text(sdk_spans)) == []
    # This library's own OpenTelemetry spans are those of what runs outside an SDK run
    # (recover, resolve, approval decisions): none here, but nothing may leak into any span.
    assert leaks(otel_text(otel[0])) == []
    assert leaks(log_text(caplog.records)) == []


async def test_equal_values_commit_alike_within_a_saga_and_differ_across_sagas(place, master):
    """The commitment is keyed per saga: the same card twice in one saga commits alike (an
    approval can bind to it), and in another saga differently (no cross-saga linking, and no
    unkeyed hash to brute-force: a plain SHA-256 of the number is nowhere)."""
    s = open_sagacity(place.sagacity_location(), data_keys(master))
    commitments = []
    try:
        for _ in range(2):
            result = await s.run(payment_agent([]), PROMPT)
            entries = await s.journal.entries(result.saga_id)
            args = _by(entries, Phase.INTENT, "charge_card").payload["args"]
            commitments.append(args["card_number"][SENSITIVE_KEY])
            everything = b"".join(e.canonical for e in entries)
            for form in (CARD, CARD.replace(" ", "")):
                plain = hashlib.sha256(form.encode()).hexdigest().encode()
                assert plain not in everything
                assert hashlib.sha256(f'"{form}"'.encode()).hexdigest().encode() not in everything
    finally:
        await s.aclose()
    assert commitments[0] != commitments[1]


def test_the_secrets_are_found_in_their_own_bytes():
    """The search itself finds what it looks for (else every test above passes vacuously)."""
    assert leaks(f'{{"card_number":"{CARD.replace(" ", "")}"}}'.encode()) == [CARD]
    assert leaks(b'{"args":{"cvv":"737"}}') == [CVV]
    assert leaks(f"error: password '{PASSWORD}' is wrong") == [PASSWORD]
    assert sorted(leaks(f"{TOKEN} {IBAN} {PHRASE}")) == sorted([TOKEN, IBAN, PHRASE])
    assert leaks('{"cvv":{"$sensitive":"ab","mask":"****"},"n":737}') == []
