"""Approvals, snapshots and the approver's view of a call whose arguments hold a card number, on
every backend: the request is bound to the committed card (version 2), the snapshot is sealed
under the saga's key (or masked without a master key), and no stored byte holds the number."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from sagacity_agents import Sagacity, SagaStatus
from sagacity_agents.core.approval import ARGS_VERSION, args_hash
from sagacity_agents.core.approval_args import approver_view, committed_args
from sagacity_agents.core.data_keys import DataKeys, DataKeyStore, MasterKey, StoredDataKey
from sagacity_agents.core.entries import Phase
from sagacity_agents.core.sensitive import is_committed
from sagacity_agents.errors import ApprovalError, DataKeyError
from sagacity_agents.saga import Saga
from tests.backends import BACKENDS

from . import card_app

pytestmark = pytest.mark.case("X-03")

KEY = base64.b64encode(bytes(range(32))).decode()
OTHER_KEY = base64.b64encode(bytes(range(1, 33))).decode()
CLEAR = (card_app.CARD, card_app.CARD.replace(" ", ""))
"""The card number as the prompt and the arguments carry it, and its digits alone."""


class SharedKeyStore:
    """A data-key store the tests give a journal that has none of its own yet (the backends' own
    store, ``core.data_keys.DataKeyStore``, is used when the journal is one): shared by every
    journal object opened on one location, like the backend's table would be."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int], StoredDataKey] = {}

    async def data_keys(self, saga_id: str) -> list[StoredDataKey]:
        return [row for (sid, _), row in sorted(self.rows.items()) if sid == saga_id]

    async def add_data_key(self, saga_id: str, generation: int, master_key_id: str,
                           wrapped: bytes) -> StoredDataKey:
        return self.rows.setdefault((saga_id, generation), StoredDataKey(
            saga_id, generation, master_key_id, wrapped, "2026-01-01T00:00:00.000000Z"))

    async def erase_data_keys(self, saga_id: str, *, by: str, reason: str) -> int:
        raise NotImplementedError

    async def may_erase_data_keys(self) -> bool:
        return False

    def attach(self, journal: Any) -> Any:
        if not isinstance(journal, DataKeyStore):
            journal.data_keys, journal.add_data_key = self.data_keys, self.add_data_key
            journal.erase_data_keys = self.erase_data_keys
            journal.may_erase_data_keys = self.may_erase_data_keys
        return journal


@dataclasses.dataclass
class Place:
    """One backend location: opens its journal and approval store (memory: the same objects)."""

    backend: Any
    location: str
    keys: SharedKeyStore = dataclasses.field(default_factory=SharedKeyStore)
    opened: list[Any] = dataclasses.field(default_factory=list)
    _memory: tuple[Any, Any] | None = None

    def open(self) -> tuple[Any, Any]:
        if self.backend.name == "memory":
            if self._memory is None:
                self._memory = (self.keys.attach(self.backend.journal(self.location)),
                                self.backend.approvals(self.location))
            return self._memory
        journal = self.keys.attach(self.backend.journal(self.location))
        store = self.backend.approvals(self.location)
        self.opened += [journal, store]
        return journal, store

    def sagacity(self) -> Sagacity:
        journal, store = self.open()
        return Sagacity(journal, approvals=store)

    def stored_text(self) -> bytes:
        """Every byte this location stores (SQLite: the file and its -wal; PostgreSQL: the
        journal's, the requests' and the snapshots' rows as text; memory: the stores' objects)."""
        if self.backend.name == "sqlite":
            return b"".join(Path(self.location + suffix).read_bytes() for suffix in ("", "-wal")
                            if Path(self.location + suffix).exists())
        if self.backend.name == "postgres":
            from tests.pg import admin_connect

            with admin_connect(self.location) as conn:
                parts = [str(conn.execute(f"SELECT coalesce(string_agg(t::text, ' '), '') FROM {table} t")
                             .fetchone()[0])
                         for table in ("sagacity_journal", "sagacity_approval_requests",
                                       "sagacity_snapshots")]
                parts.append(str(conn.execute("SELECT coalesce(string_agg(convert_from(canonical, "
                                              "'UTF8'), ' '), '') FROM sagacity_journal").fetchone()[0]))
            return " ".join(parts).encode()
        journal, store = self.open()
        chains = [e.canonical for chain in journal._chains.values() for e in chain]
        return b" ".join([*chains, repr(store._requests).encode(), repr(store._snapshots).encode()])


@pytest.fixture(params=BACKENDS, ids=str)
async def place(request, tmp_path, monkeypatch):
    monkeypatch.setattr(card_app, "LEDGER", tmp_path / "ledger.txt")
    monkeypatch.delenv("SAGACITY_DATA_KEY", raising=False)
    here = Place(request.param, request.param.location(request))
    yield here
    for thing in here.opened:
        await thing.close()


async def paused(place: Place, card: str = card_app.CARD) -> tuple[Sagacity, str, Any]:
    s = place.sagacity()
    result = await s.run(card_app.paused_agent(card), card_app.PROMPT)
    assert result.status is SagaStatus.AWAITING_APPROVAL
    return s, result.saga_id, result.approvals[0]


def assert_no_clear_card(data: bytes) -> None:
    for clear in CLEAR:
        assert clear.encode() not in data, clear


async def test_a_request_is_bound_to_the_committed_card_number(place, monkeypatch):
    monkeypatch.setenv("SAGACITY_DATA_KEY", KEY)
    s, saga_id, request = await paused(place)
    assert request.args_version == ARGS_VERSION
    card = request.args["card_number"]
    assert is_committed(card) and card["mask"] == "**** **** **** 0002"
    assert request.args_hash == args_hash(request.args) and request.args_sealed is not None
    paused_entry = next(e for e in await s.journal.entries(saga_id)
                        if e.phase is Phase.AWAITING_APPROVAL)
    assert paused_entry.payload["args_version"] == ARGS_VERSION
    assert paused_entry.payload["args"] == request.args  # committed: the hash is checked keyless
    assert_no_clear_card(place.stored_text())


async def test_resume_with_the_key_in_a_fresh_sagacity_runs_the_real_card_once(place, monkeypatch):
    monkeypatch.setenv("SAGACITY_DATA_KEY", KEY)
    first, saga_id, request = await paused(place)
    await first.approve(request.request_id, approver="alice")
    fresh = place.sagacity()  # another Sagacity, journal and store objects (memory: the same)
    done = await fresh.resume(saga_id, card_app.resumed_agent())
    assert done.status is SagaStatus.COMPLETED
    assert card_app.executions() == [f"5 on {card_app.CARD}"]
    intent = next(e for e in await fresh.journal.entries(saga_id) if e.phase is Phase.INTENT)
    assert is_committed(intent.payload["args"]["card_number"])
    assert args_hash(intent.payload["args"]) == request.args_hash  # the approval rule's check
    assert all(r.ok for r in await fresh.verify(saga_id))
    assert_no_clear_card(place.stored_text())


async def test_the_call_time_grant_refuses_another_card_number(place, monkeypatch):
    """The approval covers the committed card: the same call with another number hashes to
    another commitment, and the irreversible body is refused before its INTENT."""
    monkeypatch.setenv("SAGACITY_DATA_KEY", KEY)
    s, saga_id, request = await paused(place)
    await s.approve(request.request_id, approver="alice")
    saga = Saga(s.journal, saga_id)
    await s.desk.restore(saga, card_app.resumed_agent())  # consumes: CONSUMED journaled
    secrets = saga.core.journal.secrets[saga_id]
    other = {"card_number": card_app.OTHER_CARD, "amount": 5}
    assert args_hash(committed_args(secrets, other)) != request.args_hash
    with pytest.raises(ApprovalError) as refused:
        await saga.refusals.check_grant("charge", "c1", other, "inv-1")
    assert refused.value.code == "ARGS_HASH_MISMATCH_AT_CALL"
    same = {"card_number": card_app.CARD, "amount": 5}
    assert await saga.refusals.check_grant("charge", "c1", same, "inv-2") == request.request_id


async def test_resume_without_the_key_or_with_another_refuses_clearly(place, monkeypatch):
    monkeypatch.setenv("SAGACITY_DATA_KEY", KEY)
    s, saga_id, request = await paused(place)
    await s.approve(request.request_id, approver="alice")
    # No master key: the desk cannot open the sealed snapshot. Another master key: the run is
    # refused before it takes the lease (it could open neither the snapshot nor the saga's key).
    for env, error, code in ((None, ApprovalError, "NO_DATA_KEY"),
                             (OTHER_KEY, DataKeyError, "WRONG_MASTER_KEY")):
        if env is None:
            monkeypatch.delenv("SAGACITY_DATA_KEY")
        else:
            monkeypatch.setenv("SAGACITY_DATA_KEY", env)
        before = len(await s.journal.entries(saga_id))
        with pytest.raises(error) as refused:
            await place.sagacity().resume(saga_id, card_app.resumed_agent())
        assert refused.value.code == code, refused.value
    assert len(await s.journal.entries(saga_id)) == before  # another key: nothing written
    assert card_app.executions() == []
    assert (await s.approvals.get(request.request_id)).consumed_at is None  # nothing consumed


async def test_without_a_master_key_the_snapshot_is_masked_and_resume_refuses(place):
    s, saga_id, request = await paused(place)
    assert request.args_sealed is None and is_committed(request.args["card_number"])
    snapshot = await s.approvals.load_snapshot(saga_id)
    assert "**** **** **** 0002" in snapshot
    assert_no_clear_card(snapshot.encode())
    assert_no_clear_card(place.stored_text())
    await s.approve(request.request_id, approver="alice")
    with pytest.raises(ApprovalError) as refused:
        await s.resume(saga_id, card_app.resumed_agent())
    assert refused.value.code == "SENSITIVE_NOT_STORED"
    assert card_app.executions() == []


async def test_the_approver_sees_the_card_only_where_the_key_is(place, monkeypatch):
    monkeypatch.setenv("SAGACITY_DATA_KEY", KEY)
    s, _, request = await paused(place)
    stored = await s.approvals.get(request.request_id)
    args, _raw, clear = await approver_view(stored, s.journal, DataKeys.from_env())
    assert clear and args == {"card_number": card_app.CARD, "amount": 5}
    for keys in (DataKeys(), DataKeys(MasterKey.from_text(OTHER_KEY))):
        args, _raw, clear = await approver_view(stored, s.journal, keys)
        assert not clear and args == {"card_number": "**** **** **** 0002", "amount": 5}


async def test_an_undeclared_tool_journaled_from_its_raw_text_is_bound_too(place, monkeypatch):
    """A call journaled from outside its body stores its raw text, committed as a whole when it
    holds the card: the approval rule checks that commitment against the pause's, with no key."""
    monkeypatch.setenv("SAGACITY_DATA_KEY", KEY)
    s = place.sagacity()
    result = await s.run(card_app.undeclared_agent(), card_app.PROMPT)
    assert result.status is SagaStatus.AWAITING_APPROVAL
    request = result.approvals[0]
    await s.approve(request.request_id, approver="alice")
    done = await place.sagacity().resume(result.saga_id, card_app.undeclared_agent(False))
    assert done.status is SagaStatus.COMPLETED
    assert card_app.executions() == [f"5 paid on {card_app.CARD}"]
    entries = await s.journal.entries(result.saga_id)
    intent = next(e for e in entries if e.phase is Phase.INTENT)
    assert intent.payload["request_id"] == request.request_id
    assert is_committed(intent.payload["raw_args"])
    assert all(r.ok for r in await s.verify(result.saga_id))
    assert_no_clear_card(place.stored_text())
