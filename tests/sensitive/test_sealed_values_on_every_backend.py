"""The lead's key code over each backend's storage: a card number committed and sealed at append
time is stored encrypted beside its entry (never in the hashed bytes), comes back in clear only
with the master key, gives the same bytes on every backend from the same random source and
journal id, survives a master-key rotation (``rewrap_data_keys``), and is gone for good once the
saga's data key is erased: the chain still verifies."""

from __future__ import annotations

import hashlib

import pytest

from sagacity_agents.core.data_keys import DataKeys, MasterKey
from sagacity_agents.core.evidence import Evidence, verify_sagas
from sagacity_agents.core.entries import Phase
from sagacity_agents.core.journal import AppendRequest
from sagacity_agents.backends import InMemoryJournal
from sagacity_agents.errors import DataErasedError
from sagacity_agents.testing import FrozenClock
from tests.test_backend_contracts import backend, location  # noqa: F401 - the fixtures: each backend

CARD = "4000 0000 0000 0002"
JOURNAL_ID = "0123456789abcdef0123456789abcdef"
MASTER = MasterKey(bytes(range(32)))


def counter_random():
    """The same bytes each run: SHA-256 of a counter (an injectable key source)."""
    state = {"n": 0}

    def random_bytes(size: int) -> bytes:
        out = b""
        while len(out) < size:
            state["n"] += 1
            out += hashlib.sha256(state["n"].to_bytes(8, "big")).digest()
        return out[:size]

    return random_bytes


@pytest.fixture
async def journal(backend, location):
    journal = backend.journal(location, clock=FrozenClock(tick=0.001))
    await journal.assign_journal_id(JOURNAL_ID)
    yield journal
    await journal.close()


async def charge(journal, keys: DataKeys):
    secrets = await keys.for_saga(journal, "s")
    entries = []
    for phase, key, payload in (
            (Phase.SAGA_OPENED, "open", {"metadata": {}}),
            (Phase.INTENT, "intent", {"args": {"card_number": CARD, "amount": 5}}),
            (Phase.FAILED, "failed", {"intent_seq": 2, "error": f"card {CARD} declined"})):
        request = AppendRequest.build("s", phase, write_key=key, payload=payload, protect=secrets,
                                      **({} if phase is Phase.SAGA_OPENED else {"tool": "pay", "call_id": "c"}))
        entries.append(await journal.append(request))
    return secrets, entries


async def reference_entries():
    journal = InMemoryJournal(clock=FrozenClock(tick=0.001), journal_id=JOURNAL_ID)
    return (await charge(journal, DataKeys(MASTER, random_bytes=counter_random())))[1]


@pytest.mark.case("X-02")
async def test_values_are_sealed_beside_the_entry_and_the_same_on_every_backend(journal):
    secrets, written = await charge(journal, DataKeys(MASTER, random_bytes=counter_random()))
    stored = await journal.entries("s")
    assert [e.sealed for e in stored] == [e.sealed for e in written]
    assert stored[0].sealed is None and all(e.sealed for e in stored[1:])
    assert all(CARD.encode() not in e.canonical and b"0002" not in e.sealed for e in stored[1:])
    assert stored[1].payload["args"]["card_number"]["mask"] == "**** **** **** 0002"
    assert secrets.reveal(stored[1].payload, stored[1].sealed, "intent")["args"]["card_number"] == CARD
    reader = await DataKeys(MASTER).for_saga(journal, "s", create=False)  # another process
    assert reader.reveal(stored[2].payload, stored[2].sealed, "failed")["error"] == f"card {CARD} declined"
    reference = await reference_entries()
    assert [(e.canonical, e.hash, e.sealed) for e in stored] == [(e.canonical, e.hash, e.sealed) for e in reference]
    (result,) = await verify_sagas(journal, evidence=Evidence())
    assert result.ok and result.entries == 3


@pytest.mark.case("X-02")
async def test_a_master_key_rotation_rewraps_every_key_and_the_values_still_open(journal):
    await charge(journal, DataKeys(MASTER))
    new = MasterKey(bytes(range(32, 64)))
    rotating = DataKeys(new, previous=[MASTER])
    assert await journal.rewrap_data_keys(lambda row: rotating.rewrapped(JOURNAL_ID, row)) == 1
    (row,) = await journal.data_keys("s")
    assert row.master_key_id == new.key_id
    intent = (await journal.entries("s"))[1]
    opened = (await DataKeys(new).for_saga(journal, "s", create=False)).reveal(intent.payload, intent.sealed, "intent")
    assert opened["args"]["card_number"] == CARD


@pytest.mark.case("X-04")
async def test_after_erasure_the_value_is_gone_even_with_the_master_key_and_the_chain_verifies(journal):
    await charge(journal, DataKeys(MASTER))
    assert await journal.erase_data_keys("s", by="dpo", reason="request 7") == 1
    intent = (await journal.entries("s"))[1]
    assert intent.sealed is not None  # the ciphertext stays: nothing opens it any more
    with pytest.raises(DataErasedError):
        (await DataKeys(MASTER).for_saga(journal, "s", create=False)).reveal(intent.payload, intent.sealed, "intent")
    (result,) = await verify_sagas(journal, evidence=Evidence())
    assert result.ok and result.entries == 3
