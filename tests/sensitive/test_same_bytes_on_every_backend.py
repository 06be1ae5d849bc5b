"""One saga, the same bytes on every backend: with an injected deterministic key source
(``DataKeys(master, random_bytes=...)``), the same appends (same saga id, write keys, frozen
clock, journal id) give byte-identical hashed entries, commitments included, on memory, SQLite
and PostgreSQL, and the same sealed bytes under a master key; each verifies, and each reveals
the same clear values with the key."""

from __future__ import annotations

import datetime as dt

import pytest

from sagacity_agents.core.chain import verify_journal
from sagacity_agents.core.entries import Phase
from sagacity_agents.core.fence import JournalView
from sagacity_agents.core.sensitive import Sensitivity, is_committed
from sagacity_agents.testing import FrozenClock
from tests.backends import BACKENDS
from tests.pg import admin_connect

from .helpers import CARD, CVV, IBAN, PASSWORD, TOKEN, data_keys, leaks

pytestmark = pytest.mark.case("X-02")

JOURNAL_ID = "e2e-same-bytes-journal"
"""Every backend's journal gets this id: sealed values and wrapped keys are bound to it."""

APPENDS = [
    dict(phase=Phase.INTENT, write_key="w1", tool="charge_card", call_id="c1",
         payload={"args": {"card_number": CARD, "cvv": CVV, "amount_eur": 120}}),
    dict(phase=Phase.EXECUTED, write_key="w2", tool="charge_card", call_id="c1",
         payload={"result": "charged", "undo_data": {"charge_id": "ch_1"}}),
    dict(phase=Phase.INTENT, write_key="w3", tool="fetch_api_token", call_id="c2",
         payload={"args": {"service": "payments"}}),
    dict(phase=Phase.EXECUTED, write_key="w4", tool="fetch_api_token", call_id="c2",
         payload={"result": {"service": "payments", "token": TOKEN}}),
    dict(phase=Phase.INTENT, write_key="w5", tool="open_account", call_id="c3",
         payload={"args": {"holder": "Alice", "iban": IBAN}},
         sensitive=Sensitivity(frozenset({"iban"}))),
    dict(phase=Phase.INTENT, write_key="w6", tool="login", call_id="c4",
         payload={"args": {"user": "alice", "password": PASSWORD}}),
    dict(phase=Phase.FAILED, write_key="w7", tool="login", call_id="c4",
         payload={"error": f"LoginRefused: password {PASSWORD!r} is wrong"}),
]
"""A saga's appends with a card number, a CVV, a token in a result, a declared IBAN and a
password an error quotes."""


def _forget_data_keys(location: str, saga_id: str) -> None:
    """The session's PostgreSQL schema is shared by this process's tests: drop an earlier
    test's key for this saga id, if the schema has a key table."""
    with admin_connect(location) as conn:
        exists = conn.execute("SELECT to_regclass('sagacity_data_keys')").fetchone()[0]
        if exists is not None:
            conn.execute("DELETE FROM sagacity_data_keys WHERE saga_id = %s", (saga_id,))


@pytest.fixture
async def journals(request):
    """A journal of every backend of ``tests/backends.py``, each on a frozen clock of its own
    (the same times on each), all named :data:`JOURNAL_ID`."""
    opened = {}
    for backend in BACKENDS:
        location = backend.location(request)  # PostgreSQL: skipped without a server (CI: fails)
        clock = FrozenClock(dt.datetime(2026, 12, 1, tzinfo=dt.UTC), tick=0.001)
        opened[backend.name] = (backend.journal(location, clock=clock), location)
    for journal, _ in opened.values():
        await journal.assign_journal_id(JOURNAL_ID)
    yield opened
    for journal, _ in opened.values():
        await journal.close()


@pytest.mark.parametrize("master", [False, True], ids=["no-master-key", "master-key"])
async def test_one_saga_gives_the_same_bytes_on_every_backend(journals, master):
    saga_id = f"x02-same-bytes-{int(master)}"
    written = {}
    for name, (journal, location) in journals.items():
        if name == "postgres":
            _forget_data_keys(location, saga_id)
        keys = data_keys(master, seed=36)  # the same random source on every backend
        view = JournalView(journal)
        secrets = await keys.for_saga(journal, saga_id)
        assert secrets.stored == (master and hasattr(journal, "add_data_key"))
        view.secrets[saga_id] = secrets
        for append in APPENDS:
            await view.append(saga_id, **append)
        written[name] = (await journal.entries(saga_id), secrets)
    (first, _), *others = written.values()
    for name, (entries, _) in written.items():
        assert [(e.canonical, e.hash) for e in entries] == [(e.canonical, e.hash) for e in first], name
        assert [getattr(e, "sealed", None) for e in entries] == [
            getattr(e, "sealed", None) for e in first], name
        for entry in entries:
            assert leaks(entry.canonical) == [], (name, entry.seq)
        (verified,) = await verify_journal(journals[name][0], saga_id)
        assert verified.ok, (name, verified)
    args = first[0].payload["args"]
    assert is_committed(args["card_number"]) and is_committed(args["cvv"])
    assert is_committed(first[3].payload["result"]["token"])
    assert is_committed(first[4].payload["args"]["iban"]) and first[4].payload["args"]["holder"] == "Alice"
    error = first[6].payload["error"]  # free text quoting a known value: committed whole, masked
    assert is_committed(error) and error["mask"] == "LoginRefused: password '****' is wrong"
    if master:
        for name, (entries, secrets) in written.items():
            if not secrets.stored:
                continue
            clear = secrets.reveal(entries[0].payload, entries[0].sealed, entries[0].write_key)
            assert clear["args"] == {"card_number": CARD, "cvv": CVV, "amount_eur": 120}, name
