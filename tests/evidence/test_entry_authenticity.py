"""Issue 19: authenticate what recovery acts on. A writer that can only INSERT journal rows (on
PostgreSQL: the least-privilege role of docs/postgres.md, which runs the library here too)
appends forged entries through the library's own ``Journal.append``; with a keyring each is
refused with its seq named, nothing is undone and nothing is closed on it (A-01..A-04); without
one, the same attacks behave as docs/threat-model.md states.

The saga under attack is in doubt: a run booked Alice's hotel (booking ``b-alice``) and died
before its EXECUTED; Bob's booking ``b-bob`` is the victim a forged undo aims at."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from agents import function_tool

from sagacity_agents import Sagacity, SagaStatus, compensable
from sagacity_agents.backends import Phase
from sagacity_agents.errors import EvidenceError
from sagacity_agents.evidence import ChainFault
from sagacity_agents.backends.postgres.journal import PostgresJournal
from sagacity_agents.backends.sqlite.journal import SqliteJournal
from sagacity_agents.core.authenticity import ADOPTION_SAGA, adopt_keyring, signing_view
from sagacity_agents.core.journal import Journal
from sagacity_agents.core.signing import Keyring, generate_key
from sagacity_agents.stores import open_journal
from tests.sdk.test_postgres_saga import app_role_uri  # noqa: F401 - the least-privilege role fixture

from ..sdk.helpers import agent, scripted

CANCELLED: list[str] = []


def cancel_hotel(ctx):
    CANCELLED.append((ctx.undo_data or {}).get("booking_id") or f"args:{ctx.args.get('city')}")


@function_tool
@compensable(undo=cancel_hotel)
async def book_hotel(city: str) -> str:
    return city


@pytest.fixture(autouse=True)
def far_side():
    CANCELLED.clear()
    yield CANCELLED


@pytest.fixture(params=["sqlite", "postgres"])
def db(request, tmp_path):
    """The journal: a SQLite file, or a PostgreSQL schema reached as the least-privilege role."""
    if request.param == "postgres":
        return request.getfixturevalue("app_role_uri")
    return str(tmp_path / "j.db")


@pytest.fixture
def keys(tmp_path):
    """A keyring directory: the agent host's key and the approver's (decision) key."""
    root = tmp_path / "keys"
    generate_key(root, "writer-1")
    generate_key(root, "alice-1")
    return root


def host(db: str, keys, key_id: str = "writer-1") -> Sagacity:
    if keys is None:
        return Sagacity(db)
    return Sagacity(db, keyring=Keyring.load(keys, signing_key_id=key_id), decision_keys=["alice-1"])


async def writer_journal(db: str, keys) -> Journal:
    """The library's own writer (the agent host), tagging under the keyring when there is one."""
    journal = open_journal(db)
    if keys is not None:
        journal = signing_view(journal, Keyring.load(keys, signing_key_id="writer-1"))
    return journal


async def in_doubt_saga(db: str, keys, sid: str = "trip-1") -> dict:
    """What a process leaves that booked the hotel and died before its EXECUTED (short lease)."""
    journal = await writer_journal(db, keys)
    try:
        await journal.append(sid, Phase.SAGA_OPENED, write_key="open", payload={"metadata": {}})
        run = await journal.append(sid, Phase.RUN_STARTED, write_key="run:1", expected_seq=1,
                                   payload={"agent": "agent", "holder": "h:1:dead", "lease_seconds": 0.05,
                                            "took_over": None})
        intent = await journal.append(sid, Phase.INTENT, write_key="c1:intent", tool="book_hotel", call_id="c1",
                                      payload={"args": {"city": "Lisbon"}, "reversibility": "compensatable"},
                                      fence=run.seq)
    finally:
        await journal.close()
    await asyncio.sleep(0.1)  # the dead run's lease expires
    return {"sid": sid, "run": run.seq, "intent": intent.seq}


async def forge(db: str, sid: str, phase: Phase, key: str, **fields) -> int:
    """Append through the library's own Journal.append with no key: what an INSERT-only writer can."""
    journal = open_journal(db)
    try:
        return (await journal.append(sid, phase, write_key=key, **fields)).seq
    finally:
        await journal.close()


async def forged_executed(db: str, saga: dict) -> int:
    """The careful forgery: right INTENT, call, tool and fence, another customer's undo data."""
    seq = await forge(db, saga["sid"], Phase.EXECUTED, "forged:outcome", tool="book_hotel", call_id="c1",
                       payload={"intent_seq": saga["intent"], "result": "booked",
                                "undo_data": {"booking_id": "b-bob"}}, fence=saga["run"])
    await asyncio.sleep(0.1)  # it renewed the dead run's lease (its fence): let it expire again
    return seq


async def entries(db: str, sid: str):
    journal = open_journal(db)
    try:
        return await journal.entries(sid)
    finally:
        await journal.close()


async def refused(db: str, keys, sid: str, seq: int, fault: ChainFault) -> None:
    """verify names ``seq`` and ``fault``; recover and resolve refuse naming it; nothing undone,
    nothing closed."""
    s = host(db, keys)
    try:
        (verdict,) = await s.verify(sid)
        assert (verdict.ok, verdict.bad_seq, verdict.fault) == (False, seq, fault), verdict
        with pytest.raises(EvidenceError, match=f"first bad seq {seq}"):
            await s.recover(sid, agent(scripted(), book_hotel))
    finally:
        await s.aclose()
    human = host(db, keys, "alice-1")  # the resolver holds a decision key
    try:
        with pytest.raises(EvidenceError, match=f"first bad seq {seq}"):
            await human.resolve(sid, 3, ran=True, resolver="ops", reason="checked", force=True)
    finally:
        await human.aclose()
    assert CANCELLED == []
    assert not any(e.phase is Phase.SAGA_CLOSED for e in await entries(db, sid))


@pytest.mark.case("A-01")
async def test_a_forged_executed_with_another_customers_undo_data_is_refused(db, keys):
    """A-01: under a keyring the forged EXECUTED carries no tag: refused at its seq; Bob's
    booking is not cancelled, the saga is not closed. A genuine recovery of the same saga (no
    forgery) reports the call in doubt and cancels nothing either."""
    saga = await in_doubt_saga(db, keys)
    seq = await forged_executed(db, saga)
    await refused(db, keys, saga["sid"], seq, ChainFault.UNAUTHENTICATED)


@pytest.mark.case("A-01")
async def test_without_a_keyring_the_forged_executed_directs_the_undo(db):
    """The same attack without a keyring (docs/threat-model.md): the forgery copies the
    structure (fence, intent, call), so it is a valid extension of the chain; recovery cancels
    Bob's booking and closes the saga. This is what the keyring is for."""
    saga = await in_doubt_saga(db, None)
    await forged_executed(db, saga)
    s = host(db, None)
    try:
        result = await s.recover(saga["sid"], agent(scripted(), book_hotel))
    finally:
        await s.aclose()
    assert result.status is SagaStatus.COMPENSATED and CANCELLED == ["b-bob"]


@pytest.mark.case("A-01")
async def test_a_tag_that_does_not_verify_is_refused(db, keys, tmp_path):
    """A tag by a key the keyring does not hold (the forger made its own key) is refused."""
    saga = await in_doubt_saga(db, keys)
    generate_key(tmp_path / "mallory", "writer-1")  # the same key id, another key
    journal = open_journal(db)
    journal = signing_view(journal, Keyring.load(tmp_path / "mallory"))
    try:
        seq = (await journal.append(saga["sid"], Phase.EXECUTED, write_key="forged:outcome", tool="book_hotel",
                                    call_id="c1", fence=saga["run"],
                                    payload={"intent_seq": saga["intent"], "undo_data": {"booking_id": "b-bob"}})).seq
    finally:
        await journal.close()
    await refused(db, keys, saga["sid"], seq, ChainFault.BAD_SIGNATURE)


@pytest.mark.case("A-01")
async def test_the_libraries_own_entries_verify_and_a_genuine_answer_is_acted_on(db, keys):
    """Every entry the library writes under the keyring is tagged (the in-doubt run's, the
    recovery's, the signed answer's): verify passes, recovery reports the call in doubt, a
    human's signed "ran" makes the next recovery undo it, once, and close the saga."""
    saga = await in_doubt_saga(db, keys)
    s = host(db, keys)
    try:
        first = await s.recover(saga["sid"], agent(scripted(), book_hotel))
        assert first.status is SagaStatus.IN_DOUBT and CANCELLED == []
        approver = host(db, keys, "alice-1")
        try:
            answer = await approver.resolve(saga["sid"], saga["intent"], ran=True, resolver="ops", reason="booked",
                                            force=True)
        finally:
            await approver.aclose()
        assert answer.payload["signature"]["key_id"] == "alice-1" and answer.tag_key == "alice-1"
        second = await s.recover(saga["sid"], agent(scripted(), book_hotel))
        assert second.status is SagaStatus.COMPENSATED and CANCELLED == ["args:Lisbon"]
        (verdict,) = await s.verify(saga["sid"])
        assert verdict.ok and verdict.unauthenticated == 0
    finally:
        await s.aclose()
    assert all(e.tag_key in ("writer-1", "alice-1") for e in await entries(db, saga["sid"]))


@pytest.mark.case("A-04")
async def test_a_forged_resolved_is_refused(db, keys):
    """A-04: a forged RESOLVED "not run" (no key, no signature) is refused at its seq: the
    saga is not closed with the booking left in place."""
    saga = await in_doubt_saga(db, keys)
    seq = await forge(db, saga["sid"], Phase.RESOLVED, f"resolve:{saga['intent']}", tool="book_hotel",
                      call_id="c1", payload={"target_seq": saga["intent"], "target": "call",
                                             "answer": "not_run", "resolver": "alice", "reason": "x"})
    await refused(db, keys, saga["sid"], seq, ChainFault.UNAUTHENTICATED)


@pytest.mark.case("A-04")
async def test_an_unsigned_resolved_is_refused_even_when_tagged(db, keys):
    """A-04: a RESOLVED the agent host itself wrote (tagged by its key, but not signed as a
    human's decision by a decision key) is refused: a human's answer is signed."""
    saga = await in_doubt_saga(db, keys)
    journal = await writer_journal(db, keys)
    try:
        seq = (await journal.append(saga["sid"], Phase.RESOLVED, write_key=f"resolve:{saga['intent']}",
                                    tool="book_hotel", call_id="c1",
                                    payload={"target_seq": saga["intent"], "target": "call",
                                             "answer": "not_run", "resolver": "alice", "reason": "x"})).seq
    finally:
        await journal.close()
    await refused(db, keys, saga["sid"], seq, ChainFault.BAD_SIGNATURE)


@pytest.mark.case("A-04")
async def test_without_a_keyring_a_forged_resolved_closes_the_saga(db):
    """Without a keyring (docs/threat-model.md): the forged "not run" is read as a human's
    answer; recovery closes the saga and Alice's booking stays, undone by nobody."""
    saga = await in_doubt_saga(db, None)
    await forge(db, saga["sid"], Phase.RESOLVED, f"resolve:{saga['intent']}", tool="book_hotel", call_id="c1",
                payload={"target_seq": saga["intent"], "target": "call", "answer": "not_run",
                         "resolver": "alice", "reason": "x"})
    s = host(db, None)
    try:
        result = await s.recover(saga["sid"], agent(scripted(), book_hotel))
    finally:
        await s.aclose()
    assert result.status is SagaStatus.COMPENSATED and CANCELLED == []


async def forged_run_and_outcome(db: str, saga: dict) -> tuple[int, int]:
    run = await forge(db, saga["sid"], Phase.RUN_STARTED, "forged:run",
                      payload={"agent": "agent", "holder": "mallory", "lease_seconds": 0.01, "took_over": None})
    outcome = await forge(db, saga["sid"], Phase.EXECUTED, "forged:outcome", tool="book_hotel", call_id="c1",
                          payload={"intent_seq": saga["intent"], "undo_data": {"booking_id": "b-bob"}}, fence=run)
    await asyncio.sleep(0.05)
    return run, outcome


@pytest.mark.case("A-03")
async def test_a_forged_run_started_and_outcome_are_refused_with_a_keyring(db, keys):
    """A forged RUN_STARTED followed by a forged outcome under it: with a keyring, refused at
    the RUN_STARTED (the first entry without a tag)."""
    saga = await in_doubt_saga(db, keys)
    run, _ = await forged_run_and_outcome(db, saga)
    await refused(db, keys, saga["sid"], run, ChainFault.UNAUTHENTICATED)


@pytest.mark.case("A-03")
async def test_without_a_keyring_an_outcome_under_another_lease_is_refused(db):
    """A-03, independently of keys: the forged outcome was not written by the lease holder
    that wrote its INTENT; it is refused at its seq (structure), nothing undone, not closed."""
    saga = await in_doubt_saga(db, None)
    _, outcome = await forged_run_and_outcome(db, saga)
    await refused(db, None, saga["sid"], outcome, ChainFault.STRUCTURE)


@pytest.mark.case("A-03")
async def test_without_a_keyring_an_outcome_under_a_superseded_lease_is_refused(db):
    """A-03: after a recovery took the saga over (and reported the call in doubt), an outcome
    under the dead run's lease that is not marked late is a shape the journal never writes."""
    saga = await in_doubt_saga(db, None)
    s = host(db, None)
    try:
        assert (await s.recover(saga["sid"], agent(scripted(), book_hotel))).status is SagaStatus.IN_DOUBT
    finally:
        await s.aclose()
    journal = open_journal(db)  # written as if unfenced-checked: the fence key set by hand
    try:
        seq = (await journal.append(saga["sid"], Phase.EXECUTED, write_key="forged:outcome", tool="book_hotel",
                                    call_id="c1", payload={"intent_seq": saga["intent"], "fence": saga["run"],
                                                           "undo_data": {"booking_id": "b-bob"}})).seq
    finally:
        await journal.close()
    await refused(db, None, saga["sid"], seq, ChainFault.STRUCTURE)


@pytest.mark.case("A-02")
async def test_adopting_a_keyring_on_a_live_journal(db, keys):
    """A-02: a journal written without a keyring adopts one: its sagas are "unauthenticated,
    before the keyring" (not BROKEN) and are recovered under the keyring; a fresh unauthenticated
    saga after the marker (even backdated) and an untagged entry appended to an old saga are
    BROKEN at their seq, nothing undone."""
    await in_doubt_saga(db, None, sid="old-1")
    await in_doubt_saga(db, None, sid="old-2")
    journal = open_journal(db)
    try:
        written = await adopt_keyring(journal, Keyring.load(keys, signing_key_id="writer-1"))
    finally:
        await journal.close()
    assert written[0].saga_id == ADOPTION_SAGA and set(written[0].payload["heads"]) == {"old-1", "old-2"}
    s = host(db, keys)
    try:
        results = {r.saga_id: r for r in await s.verify()}
        assert results["old-1"].ok and results["old-1"].unauthenticated == 3
        assert "3 unauthenticated, before the keyring" in str(results["old-1"])
        assert results[ADOPTION_SAGA].ok
        assert (await s.recover("old-1", agent(scripted(), book_hotel))).status is SagaStatus.IN_DOUBT
    finally:
        await s.aclose()
    # A fresh saga by the INSERT-only writer, its clock set before the adoption.
    old_clock = lambda: dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)  # noqa: E731
    journal = PostgresJournal(db, clock=old_clock) if "postgresql" in db else SqliteJournal(db, clock=old_clock)
    try:
        await journal.append("fresh-1", Phase.SAGA_OPENED, write_key="open", payload={"metadata": {}})
        await journal.append("fresh-1", Phase.INTENT, write_key="i", tool="book_hotel", call_id="c9",
                             payload={"args": {"city": "Oslo"}, "reversibility": "compensatable"})
        await journal.append("fresh-1", Phase.EXECUTED, write_key="o", tool="book_hotel", call_id="c9",
                             payload={"intent_seq": 2, "undo_data": {"booking_id": "b-bob"}})
        late = (await journal.append("old-2", Phase.EXECUTED, write_key="forged", tool="book_hotel", call_id="c1",
                                     payload={"intent_seq": 3, "undo_data": {"booking_id": "b-bob"}})).seq
    finally:
        await journal.close()
    await refused(db, keys, "fresh-1", 1, ChainFault.UNAUTHENTICATED)
    await refused(db, keys, "old-2", late, ChainFault.UNAUTHENTICATED)


@pytest.mark.case("A-02")
async def test_without_the_adoption_old_entries_are_refused(db, keys):
    """Turning a keyring on without adopting it: the old sagas' untagged entries are refused
    (fail closed), first one named."""
    saga = await in_doubt_saga(db, None)
    await refused(db, keys, saga["sid"], 1, ChainFault.UNAUTHENTICATED)
