"""The approval-store conformance suite: what every :class:`ApprovalStore` must do.

A backend passes it by subclassing :class:`ApprovalStoreConformance` with a ``store`` fixture (a
fresh, empty store, closed after the test); ``tests/test_backend_contracts.py`` does that for every
backend of ``tests/backends.py``. What only one backend can show stays in
``tests/approvals/test_approval_stores.py``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import time
from decimal import Decimal

import pytest

from sagacity_agents.core.approval import (
    DEFAULT_APPROVAL_TTL,
    ApprovalRequest,
    ApprovalStore,
    wait_for_decision,
)
from sagacity_agents.errors import ApprovalError, EncodingError

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def make_request(
    n: int = 1,
    *,
    saga_id: str = "saga-a",
    created_at: dt.datetime | None = None,
    ttl: dt.timedelta | None = DEFAULT_APPROVAL_TTL,
) -> ApprovalRequest:
    return ApprovalRequest.build(
        saga_id=saga_id,
        tool="charge_card",
        args={"amount": Decimal("10.10"), "currency": "EUR", "n": n, "ratio": 0.5},
        created_at=created_at or T0 + dt.timedelta(seconds=n),
        call_id=f"call-{n}",
        raw_args='{"amount": "10.10"}',
        ttl=ttl,
        request_id=f"req-{n}",
    )


class ApprovalStoreConformance:
    """What every :class:`ApprovalStore` must do. Subclass and provide ``store``."""

    async def test_is_an_approval_store(self, store):
        assert isinstance(store, ApprovalStore)

    async def test_create_get_list_pending_filter(self, store):
        r3 = make_request(3, saga_id="saga-a")
        r1 = make_request(1, saga_id="saga-a")
        r2 = make_request(2, saga_id="saga-b")
        for r in (r3, r1, r2):  # inserted out of time order: list sorts by created_at
            await store.create(r)
        assert await store.get("req-1") == r1
        assert await store.get("nope") is None
        assert [r.request_id for r in await store.list()] == ["req-1", "req-2", "req-3"]
        assert [r.request_id for r in await store.list("saga-a")] == ["req-1", "req-3"]
        assert await store.list("saga-z") == []

        await store.decide("req-1", "approved", "alice", "fine", T0)
        await store.consume(["req-2"], T0)
        assert [r.request_id for r in await store.list(pending_only=True)] == ["req-3"]
        assert [r.request_id for r in await store.list("saga-b", pending_only=True)] == []
        assert len(await store.list()) == 3

    async def test_same_created_at_keeps_insertion_order(self, store):
        for n in (5, 4, 6):
            await store.create(make_request(n, created_at=T0))
        assert [r.request_id for r in await store.list()] == ["req-5", "req-4", "req-6"]

    async def test_duplicate_create_refused(self, store):
        await store.create(make_request(1))
        other = make_request(1, saga_id="saga-other")
        with pytest.raises(ApprovalError, match="req-1"):
            await store.create(other)
        assert (await store.get("req-1")).saga_id == "saga-a"

    async def test_decide_and_redecide(self, store):
        await store.create(make_request(1))
        at = T0 + dt.timedelta(minutes=5)
        decided = await store.decide("req-1", "approved", "alice", "looks right", at)
        assert decided.decision == "approved"
        assert (decided.approver, decided.reason) == ("alice", "looks right")
        assert decided.decided_at == "2026-01-01T12:05:00.000000Z"
        assert decided.consumed_at is None  # deciding does not consume
        assert await store.get("req-1") == decided

        again = await store.decide("req-1", "approved", "bob", "me too", at + dt.timedelta(hours=1))
        assert again == decided  # same decision: idempotent, first approver kept

        with pytest.raises(ApprovalError, match="already approved"):
            await store.decide("req-1", "rejected", "bob", "no", at)
        assert (await store.get("req-1")).decision == "approved"

        await store.consume(["req-1"], at)  # a decided request can still be consumed once

    async def test_decide_refusals(self, store):
        await store.create(make_request(1))
        with pytest.raises(ApprovalError, match="unknown"):
            await store.decide("nope", "approved", "alice", None, T0)
        with pytest.raises(ValueError):
            await store.decide("req-1", "yes", "alice", None, T0)  # type: ignore[arg-type]
        with pytest.raises(EncodingError):
            await store.decide("req-1", "approved", "alice", None, dt.datetime(2026, 1, 1))
        assert (await store.get("req-1")).pending

        rejected = await store.decide("req-1", "rejected", None, None, T0)
        assert rejected.decision == "rejected" and rejected.approver is None

    async def test_decide_of_consumed_refused(self, store):
        await store.create(make_request(1))
        await store.consume(["req-1"], T0)
        with pytest.raises(ApprovalError, match="consumed"):
            await store.decide("req-1", "approved", "alice", None, T0)
        stored = await store.get("req-1")
        assert stored.decision is None and stored.consumed_at == "2026-01-01T12:00:00.000000Z"

    async def test_consume_all_or_nothing(self, store):
        await store.create(make_request(1))
        await store.create(make_request(2))
        await store.consume(["req-1"], T0)
        with pytest.raises(ApprovalError, match="already consumed: 'req-1'") as info:
            await store.consume(["req-2", "req-1"], T0 + dt.timedelta(seconds=1))
        assert "req-2" not in str(info.value)
        assert (await store.get("req-2")).consumed_at is None  # untouched
        assert (await store.get("req-1")).consumed_at == "2026-01-01T12:00:00.000000Z"
        await store.consume(["req-2"], T0)
        with pytest.raises(ApprovalError):
            await store.consume(["req-2"], T0)

    async def test_consume_unknown_refused(self, store):
        await store.create(make_request(1))
        with pytest.raises(ApprovalError, match="unknown: 'ghost'"):
            await store.consume(["req-1", "ghost"], T0)
        assert (await store.get("req-1")).consumed_at is None
        with pytest.raises(ApprovalError):
            await store.consume(["ghost"], T0)

    async def test_consume_duplicates_and_empty(self, store):
        await store.create(make_request(1))
        await store.consume([], T0)
        await store.consume(["req-1", "req-1"], T0)  # counts once
        assert (await store.get("req-1")).consumed_at is not None

    async def test_consume_race_between_threads(self, store):
        await store.create(make_request(1))
        start = threading.Barrier(4)

        def racer() -> str:
            start.wait(timeout=10)
            try:
                asyncio.run(store.consume(["req-1"], T0))
            except ApprovalError:
                return "refused"
            return "ok"

        outcomes = await asyncio.gather(*(asyncio.to_thread(racer) for _ in range(4)))
        assert sorted(outcomes) == ["ok"] + ["refused"] * 3

    async def test_snapshots(self, store):
        assert await store.load_snapshot("saga-a") is None
        await store.save_snapshot("saga-a", '{"state": 1}')
        await store.save_snapshot("saga-b", "other")
        assert await store.load_snapshot("saga-a") == '{"state": 1}'
        await store.save_snapshot("saga-a", '{"state": 2, "text": "é"}')
        assert await store.load_snapshot("saga-a") == '{"state": 2, "text": "é"}'
        await store.delete_snapshot("saga-a")
        assert await store.load_snapshot("saga-a") is None
        await store.delete_snapshot("saga-a")  # idempotent
        assert await store.load_snapshot("saga-b") == "other"

    async def test_wait_woken_in_process_by_another_task(self, store):
        await store.create(make_request(1))
        decided_at: list[float] = []

        async def decide_soon() -> None:
            await asyncio.sleep(0.1)
            decided_at.append(time.monotonic())
            await store.decide("req-1", "approved", "alice", None, T0)

        task = asyncio.create_task(decide_soon())
        # Polling alone would take 60 s: only the in-process notification can be this fast.
        result = await wait_for_decision(
            store, "req-1", timeout=120, poll_interval=60, max_interval=60
        )
        woke = time.monotonic() - decided_at[0]
        await task
        assert result.decision == "approved" and result.approver == "alice"
        # Woken by the notification, not by the 60 s poll: half the poll interval is a bound no
        # loaded host misses (the decide itself fsyncs).
        assert woke < 30

    async def test_wait_woken_by_decide_on_another_thread(self, store):
        await store.create(make_request(1))

        def decide_from_thread() -> None:
            time.sleep(0.1)
            asyncio.run(store.decide("req-1", "rejected", "bot", "rule 7", T0))

        started = time.monotonic()
        waiter = asyncio.create_task(
            wait_for_decision(store, "req-1", timeout=120, poll_interval=60, max_interval=60)
        )
        await asyncio.to_thread(decide_from_thread)
        result = await waiter
        assert result.decision == "rejected"
        assert time.monotonic() - started < 30  # not the 60 s poll (see above)

    async def test_wait_returns_at_once_when_decided(self, store):
        await store.create(make_request(1))
        await store.decide("req-1", "approved", "alice", None, T0)
        result = await wait_for_decision(store, "req-1", timeout=0.01)
        assert result.decision == "approved"

    async def test_wait_timeout(self, store):
        await store.create(make_request(1))
        started = time.monotonic()
        with pytest.raises(asyncio.TimeoutError):
            await wait_for_decision(store, "req-1", timeout=0.2, poll_interval=60, max_interval=60)
        elapsed = time.monotonic() - started
        assert 0.18 <= elapsed < 30  # the timeout, not the next (60 s) poll
        with pytest.raises(TimeoutError):  # the same class since Python 3.11
            await wait_for_decision(store, "req-1", timeout=0)
        assert store.notifier._waiters == {}  # waiters are cleaned up

    async def test_wait_refusals(self, store):
        with pytest.raises(ApprovalError, match="unknown"):
            await wait_for_decision(store, "ghost", timeout=1)
        await store.create(make_request(1))
        await store.consume(["req-1"], T0)
        with pytest.raises(ApprovalError, match="consumed without a decision"):
            await wait_for_decision(store, "req-1", timeout=1)
        with pytest.raises(ValueError):
            await wait_for_decision(store, "req-1", timeout=1, poll_interval=0)
