"""Every journal has an id, and a saga's keys and tags are bound to it and to its SAGA_OPENED
(``core.identity``): two journals sharing saga ids never share an idempotency key at a far side
that deduplicates on it, a saga copied into another journal fails verification naming both ids,
and a saga re-created after a restore gets keys its lost tail never sent. On SQLite and
PostgreSQL (the in-memory journal where it makes sense)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sagacity_agents import Sagacity, SagaStatus
from sagacity_agents.backends import InMemoryJournal, Phase
from sagacity_agents.core.authenticity import TagCache, authenticity_fault, signing_view
from sagacity_agents.core.chain import ChainFault
from sagacity_agents.core.evidence import Evidence, verify_sagas
from sagacity_agents.core.identity import Derivation, derivation_of
from sagacity_agents.core.signing import Keyring, generate_key
from sagacity_agents.core.undo import call_idempotency_key, idempotency_key
from sagacity_agents.stores import open_journal
from sagacity_agents.testing import FaultyJournal
from tests.pg import SERVER, admin_connect, drop_schema, new_schema, run_in_thread, with_search_path

ROWS = "saga_id, seq, phase, tool, call_id, write_key, recorded_at, prev_hash, hash, canonical, tag_key, tag"


@pytest.fixture(params=["sqlite", "postgres"])
def two_journals(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Two journals of one backend (two SQLite files, two PostgreSQL schemas): two tenants."""
    if request.param == "sqlite":
        yield str(tmp_path / "a.db"), str(tmp_path / "b.db")
        return
    from sagacity_agents.backends.postgres.migrations import migrate

    first = request.getfixturevalue("pg_uri")
    schema = new_schema("sagacity_tenant")
    second = with_search_path(SERVER, schema)
    try:
        run_in_thread(migrate(second))
        yield first, second
    finally:
        drop_schema(schema)


def rows_of(location: str, saga_id: str) -> list[tuple[Any, ...]]:
    """The stored rows of ``saga_id``, as the backend keeps them."""
    if location.startswith("postgres"):
        with admin_connect(location) as conn:
            return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in conn.execute(
                f"SELECT {ROWS} FROM sagacity_journal WHERE saga_id = %s ORDER BY seq", (saga_id,))]
    with sqlite3.connect(location) as conn:
        return conn.execute(f"SELECT {ROWS} FROM sagacity_journal WHERE saga_id = ? ORDER BY seq",
                            (saga_id,)).fetchall()


def copy_rows(rows: list[tuple[Any, ...]], location: str) -> None:
    """Insert ``rows`` byte for byte into the journal at ``location`` (an operator with
    database access copying a saga, or a restore)."""
    if location.startswith("postgres"):
        with admin_connect(location) as conn:
            for row in rows:
                conn.execute(f"INSERT INTO sagacity_journal ({ROWS}) VALUES ({', '.join(['%s'] * 12)})", row)
        return
    with sqlite3.connect(location) as conn:
        conn.executemany(f"INSERT INTO sagacity_journal ({ROWS}) VALUES ({', '.join('?' * 12)})", rows)


def delete_saga(location: str, saga_id: str) -> None:
    """Lose every entry of ``saga_id`` (a restore from a backup taken before it)."""
    if location.startswith("postgres"):
        with admin_connect(location) as conn:
            conn.execute("DELETE FROM sagacity_journal WHERE saga_id = %s", (saga_id,))
        return
    with sqlite3.connect(location) as conn:
        conn.execute("DELETE FROM sagacity_journal WHERE saga_id = ?", (saga_id,))


async def journal_id(location: str) -> str:
    journal = open_journal(location)
    try:
        return await journal.journal_id()  # type: ignore[attr-defined,no-any-return]
    finally:
        await journal.close()


# --- a minimal far side that deduplicates on the idempotency key, as payment APIs do ---------


class Payments:
    """Charges by idempotency key: a repeated key returns the first charge and charges nothing."""

    def __init__(self) -> None:
        self.charges: dict[str, dict[str, Any]] = {}
        self.by_key: dict[str, str] = {}

    def charge(self, key: str, tenant: str, amount: int) -> str:
        if key in self.by_key:
            return self.by_key[key]  # deduplicated: the first charge's id
        charge_id = f"ch{len(self.charges) + 1}"
        self.charges[charge_id] = {"tenant": tenant, "amount": amount, "refunds": 0, "key": key}
        self.by_key[key] = charge_id
        return charge_id

    def refund(self, key: str, charge_id: str) -> None:
        if key in self.by_key:
            return
        self.by_key[key] = charge_id
        self.charges[charge_id]["refunds"] += 1


def shop(payments: Payments, tenant: str) -> Any:
    """A tenant's agent: charge 10, then a step that fails (the saga compensates: refund)."""
    from agents import Agent, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from sagacity_agents import compensable, current_idempotency_key, record_undo_data

    def refund(ctx: Any) -> None:
        payments.refund(ctx.idempotency_key, ctx.undo_data["charge_id"])

    @function_tool
    @compensable(undo=refund, declaration_id=f"shop.charge.{tenant}")
    def charge(amount: int) -> str:
        """Charge the customer."""
        charge_id = payments.charge(current_idempotency_key() or "", tenant, amount)
        record_undo_data({"charge_id": charge_id})
        return charge_id

    @function_tool
    @compensable(undo=lambda ctx: None, declaration_id=f"shop.ship.{tenant}")
    def ship() -> str:
        """Ship the order."""
        raise RuntimeError("no address")

    model = ScriptedModel()
    model.enqueue([function_call("charge", {"amount": 10}, call_id="c1")])
    model.enqueue([function_call("ship", {}, call_id="c2")])
    model.enqueue([assistant_message("done")])
    return Agent(name="shop", model=model, tools=[charge, ship])


async def one_order(location: str) -> tuple[str, list[Any]]:
    """Run tenant A's order ``order-1`` at ``location``; its journal's id and the saga's entries."""
    assert await run_order(location, Payments(), "A") is SagaStatus.COMPENSATED
    journal = open_journal(location)
    try:
        return await journal.journal_id(), await journal.entries("order-1")  # type: ignore[attr-defined]
    finally:
        await journal.close()


async def run_order(location: str, payments: Payments, tenant: str, saga_id: str = "order-1") -> SagaStatus:
    sagacity = Sagacity(location)
    try:
        result = await sagacity.run(shop(payments, tenant), "go", saga_id=saga_id)
        return result.status
    finally:
        await sagacity.aclose()


def test_two_journals_sharing_saga_ids_never_share_keys_at_a_deduplicating_far_side(two_journals):
    payments = Payments()

    async def main() -> None:
        assert await journal_id(two_journals[0]) != await journal_id(two_journals[1])
        assert await run_order(two_journals[0], payments, "A") is SagaStatus.COMPENSATED
        assert await run_order(two_journals[1], payments, "B") is SagaStatus.COMPENSATED

    asyncio.run(main())
    # B's charge is its own (not deduplicated against A's), and B's refund refunded B's charge.
    assert [(c["tenant"], c["refunds"]) for c in payments.charges.values()] == [("A", 1), ("B", 1)]


def test_tenants_of_the_payments_example_server_keep_their_own_charges(two_journals, tmp_path, monkeypatch):
    """The same with examples/mcp_payments's MCP server, which deduplicates on the key in
    ``_meta``: two shops, one saga id, one server database."""
    monkeypatch.setenv("PAYMENTS_DB", str(tmp_path / "payments.db"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    from examples.mcp_payments.app import agent

    async def run(location: str) -> SagaStatus:
        shop_agent = agent()
        async with shop_agent.mcp_servers[0]:
            sagacity = Sagacity(location)
            try:
                return (await sagacity.run(shop_agent, "charge and ship", saga_id="order-17")).status
            finally:
                await sagacity.aclose()

    async def main() -> None:
        assert await run(two_journals[0]) is SagaStatus.COMPENSATED
        assert await run(two_journals[1]) is SagaStatus.COMPENSATED

    asyncio.run(main())
    with sqlite3.connect(tmp_path / "payments.db") as db:
        charges = db.execute("SELECT key, refunded FROM charges ORDER BY rowid").fetchall()
    assert len(charges) == 2 and charges[0][0] != charges[1][0]
    assert [refunded for _, refunded in charges] == [1, 1]


@pytest.mark.parametrize("keys", [False, True], ids=["no-keyring", "keyring"])
def test_a_saga_copied_into_another_journal_fails_verify_naming_both_ids(two_journals, keys, tmp_path):
    first, second = two_journals
    keyring = None
    if keys:
        generate_key(tmp_path / "keys", "writer-1")
        keyring = Keyring.load(tmp_path / "keys", signing_key_id="writer-1")

    async def main() -> None:
        sagacity = Sagacity(first, keyring=keyring)
        try:
            assert (await sagacity.run(shop(Payments(), "A"), "go", saga_id="order-1")).status \
                is SagaStatus.COMPENSATED
        finally:
            await sagacity.aclose()
        ids = await journal_id(first), await journal_id(second)
        copy_rows(rows_of(first, "order-1"), second)
        evidence = Evidence(keyring=keyring)
        journal = open_journal(second)
        try:
            (verdict,) = await verify_sagas(journal, "order-1", evidence=evidence)
            entries = await journal.entries("order-1")
        finally:
            await journal.close()
        assert not verdict.ok and verdict.bad_seq == 1 and verdict.fault is ChainFault.OTHER_JOURNAL
        assert ids[0] in verdict.detail and ids[1] in verdict.detail
        if keyring is not None:  # the tags alone refuse it too: they bind the journal id
            fault, _ = authenticity_fault("order-1", entries, keyring, None, TagCache(), journal_id=ids[1])
            assert fault is not None and fault[1] is ChainFault.BAD_SIGNATURE
            fault, _ = authenticity_fault("order-1", entries, keyring, None, TagCache(), journal_id=ids[0])
            assert fault is None
        source = open_journal(first)
        try:
            (verdict,) = await verify_sagas(source, "order-1", evidence=evidence)
        finally:
            await source.close()
        assert verdict.ok, verdict

    asyncio.run(main())


def test_a_saga_re_created_after_a_restore_gets_keys_its_lost_tail_never_sent(two_journals):
    location = two_journals[0]
    payments = Payments()

    async def main() -> None:
        assert await run_order(location, payments, "A") is SagaStatus.COMPENSATED
        delete_saga(location, "order-1")  # restored from a backup taken before the saga
        assert await run_order(location, payments, "A") is SagaStatus.COMPENSATED

    asyncio.run(main())
    keys = [c["key"] for c in payments.charges.values()]
    assert len(keys) == 2 and keys[0] != keys[1]  # the re-created saga charged anew, and refunded its own
    assert [c["refunds"] for c in payments.charges.values()] == [1, 1]


def test_keys_under_derivation_2_bind_journal_and_saga_opened_and_version_1_keeps_the_old_rule():
    assert idempotency_key("s", 4) == Derivation().undo_key("s", 4)  # the rule before journal ids
    assert call_idempotency_key("s", 3) == Derivation().call_key("s", 3)
    bound = Derivation(2, "a" * 32, "b" * 64)
    assert bound.undo_key("s", 4) == idempotency_key("s", 4, journal_id="a" * 32, opened_hash="b" * 64)
    assert len({bound.undo_key("s", 4), Derivation(2, "c" * 32, "b" * 64).undo_key("s", 4),
                Derivation(2, "a" * 32, "d" * 64).undo_key("s", 4), idempotency_key("s", 4)}) == 4
    assert bound.call_key("s", 4) != bound.undo_key("s", 4)
    with pytest.raises(ValueError, match="both"):
        idempotency_key("s", 4, journal_id="a" * 32)


def test_every_backend_keeps_its_journal_id_and_sagas_record_it(tmp_path):
    async def main() -> None:
        path = str(tmp_path / "j.db")
        first = await journal_id(path)
        assert first == await journal_id(path) and len(first) == 32 and int(first, 16) >= 0
        memory = InMemoryJournal()
        assert await FaultyJournal(memory).journal_id() == await memory.journal_id()
        assert await InMemoryJournal().journal_id() != await memory.journal_id()
        assert (await one_order(path))[0] == first
        entries = (await one_order(path.replace("j.db", "k.db")))[1]
        first = await journal_id(path.replace("j.db", "k.db"))
        assert entries[0].payload["derivation"] == 2 and entries[0].payload["journal_id"] == first
        assert derivation_of(entries, first) == Derivation(2, first, entries[0].hash)

    asyncio.run(main())


def test_tags_are_byte_identical_on_every_backend_under_derivation_2(two_journals, tmp_path):
    """The same appends with a frozen clock and one journal id give the same tags on memory
    and on the backend (PostgreSQL signs the pieces it sends)."""
    from sagacity_agents.testing import FrozenClock

    generate_key(tmp_path / "keys", "writer-1")
    keyring = Keyring.load(tmp_path / "keys", signing_key_id="writer-1")
    location = two_journals[0]

    async def write(journal: Any) -> list[tuple[str, str | None]]:
        view = signing_view(journal, keyring)
        await view.append_many("s", [
            {"phase": Phase.SAGA_OPENED, "write_key": "saga:open",
             "payload": {"metadata": {}, "derivation": 2, "journal_id": "f" * 32}},
            {"phase": Phase.RUN_STARTED, "write_key": "run:1", "payload": {"holder": "h"}}])
        await view.append("s", Phase.INTENT, write_key="i1", tool="t", call_id="c", payload={"args": {}})
        return [(e.hash, e.tag) for e in await journal.entries("s")]

    async def main() -> None:
        memory = InMemoryJournal(clock=FrozenClock(), journal_id="f" * 32)
        backend = open_journal(location)
        backend._clock = FrozenClock()  # type: ignore[attr-defined]
        backend._journal_id = "f" * 32  # type: ignore[attr-defined]
        try:
            assert await write(memory) == await write(backend)
            evidence = Evidence(keyring=keyring)
            (verdict,) = await verify_sagas(memory, "s", evidence=evidence)
            assert verdict.ok, verdict
        finally:
            await backend.close()

    asyncio.run(main())


def test_recover_all_does_not_act_on_a_saga_copied_from_another_journal(two_journals):
    """An open saga (a charge done, the run ended without closing) copied into another journal:
    ``recover --all`` there reports it (it does not verify) and undoes nothing."""
    from agents import Agent, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from sagacity_agents import SagacityError, compensable

    first, second = two_journals
    refunds: list[str] = []

    @function_tool
    @compensable(undo=lambda ctx: refunds.append(ctx.idempotency_key), declaration_id="copy.charge")
    def charge(amount: int) -> int:
        """Charge the customer."""
        return amount

    def agent(*calls: int) -> Any:
        model = ScriptedModel()
        for n in calls:
            model.enqueue([function_call("charge", {"amount": n}, call_id=f"c{n}")])
        model.enqueue([assistant_message("done")])
        return Agent(name="shop", model=model, tools=[charge])

    async def main() -> None:
        await journal_id(second)  # the other journal exists, with its own id
        sagacity = Sagacity(first)
        try:
            assert (await sagacity.run(agent(5), "go", saga_id="open-1", close=False)).status \
                is SagaStatus.OPEN
        finally:
            await sagacity.aclose()
        copy_rows(rows_of(first, "open-1"), second)
        other = Sagacity(second)
        try:
            found = await other.recover_all(agent())
        finally:
            await other.aclose()
        assert [(sid, type(outcome).__name__) for sid, _, outcome in found] == [("open-1", "EvidenceError")]
        assert isinstance(found[0][2], SagacityError) and "other journal" in str(found[0][2])
        assert refunds == []

    asyncio.run(main())
