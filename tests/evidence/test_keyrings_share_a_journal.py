"""Two ``Sagacity`` objects with different keyrings share one journal object (in memory, SQLite,
one PostgreSQL database and its pools): each signs with its own key, so each verifies, resumes
and recovers its own sagas; a third without a keyring signs nothing. Signing is the instance's
view of the journal, not state of the shared backend."""

from __future__ import annotations

import pytest
from agents import function_tool

from sagacity_agents import Sagacity, SagaStatus, compensable, irreversible
from sagacity_agents.backends import InMemoryJournal, Phase, PostgresJournal, SqliteJournal
from sagacity_agents.core.signing import Keyring, generate_key

from ..sdk.helpers import agent, scripted

UNDONE: list[str] = []


@function_tool
@compensable(undo=lambda ctx: UNDONE.append(ctx.args["city"]))
async def book(city: str) -> str:
    return f"booked {city}"


@function_tool(needs_approval=True)
@irreversible
async def pay(amount: int) -> str:
    return f"paid {amount}"


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def journal(request, tmp_path):
    """One journal object, shared by every instance of the test."""
    if request.param == "postgres":
        shared = PostgresJournal(request.getfixturevalue("pg_uri"))
    elif request.param == "sqlite":
        shared = SqliteJournal(tmp_path / "j.db")
    else:
        shared = InMemoryJournal()
    UNDONE.clear()
    yield shared
    await shared.close()


def keyring(tmp_path, key_id: str) -> Keyring:
    """A keyring holding only ``key_id`` (the other instance's key is unknown to it)."""
    generate_key(tmp_path / key_id, key_id)
    return Keyring.load(tmp_path / key_id, signing_key_id=key_id)


async def own_saga(host: Sagacity, sid: str) -> None:
    """A run that books (left open), then one that pays: it waits for approval, is approved and
    resumed by ``host``; ``host`` recovers the saga at the end (the booking is undone)."""
    booked = await host.run(agent(scripted([("book", {"city": sid}, f"{sid}-1")], "ok"), book, pay),
                            "go", saga_id=sid, close=False)
    assert booked.status is SagaStatus.OPEN, booked.exception
    paused = await host.run(agent(scripted([("pay", {"amount": 5}, f"{sid}-2")], "ok"), book, pay),
                            "go", saga_id=sid, close=False)
    assert paused.status is SagaStatus.AWAITING_APPROVAL, paused.exception
    await host.approve(paused.approvals[0].request_id, approver="ops")


async def test_two_keyrings_on_one_journal_object_each_verify_resume_and_recover(journal, tmp_path):
    alice = Sagacity(journal, keyring=keyring(tmp_path, "alice-1"))
    bob = Sagacity(journal, keyring=keyring(tmp_path, "bob-1"))  # after alice: takes nothing of hers
    await own_saga(alice, "a")
    await own_saga(bob, "b")

    for host, sid, key in ((alice, "a", "alice-1"), (bob, "b", "bob-1")):
        (verdict,) = await host.verify(sid)
        assert verdict.ok, verdict
        assert {e.tag_key for e in await journal.entries(sid)} == {key}
        resumed = await host.resume(sid, agent(scripted("done"), book, pay), close=False)
        assert resumed.status is SagaStatus.OPEN, resumed.exception
        recovered = await host.recover(sid, agent(scripted(), book, pay))
        assert recovered.status is SagaStatus.COMPENSATED, recovered.exception
        assert {e.tag_key for e in await journal.entries(sid)} == {key}
    assert sorted(UNDONE) == ["a", "b"]

    # Each keyring knows only its own key: the other's sagas are not its to act on.
    (foreign,) = await alice.verify("b")
    assert not foreign.ok and "unknown key" in foreign.detail

    plain = Sagacity(journal)  # no keyring: signs nothing, whoever shared the journal before
    done = await plain.run(agent(scripted([("book", {"city": "c"}, "c-1")], "ok"), book), "go",
                           saga_id="c")
    assert done.status is SagaStatus.COMPLETED, done.exception
    entries = await journal.entries("c")
    assert entries[-1].phase is Phase.SAGA_CLOSED
    assert {(e.tag_key, e.tag) for e in entries} == {(None, None)}
    (verdict,) = await alice.verify("a")  # alice's sagas still verify after both others wrote
    assert verdict.ok, verdict
