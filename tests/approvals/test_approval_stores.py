"""Approval requests (the record every store keeps), and what only one backend's store can show:
SQLite (several processes on one file: decisions seen by polling, consume races) and PostgreSQL
(NOTIFY across processes, a lost LISTEN connection, a two-process consume race). The conformance
suite every store passes is ``approval_contract.py``, run on every backend by
``tests/test_backend_contracts.py``."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import multiprocessing
import sqlite3
import time
from decimal import Decimal

import pytest

from sagacity_agents.core.approval import (
    ApprovalRequest,
    ApprovalStore,
    args_hash,
    wait_for_decision,
)
from sagacity_agents.backends.sqlite.approvals import SqliteApprovalStore
from sagacity_agents.core.canonical import canonical_bytes, format_timestamp
from sagacity_agents.errors import ApprovalError, EncodingError, JournalError

from . import _workers
from .approval_contract import T0, UTC, make_request

# --- the request record --------------------------------------------------------------------


def test_args_hash_is_sha256_of_canonical_bytes():
    args = {"b": 1, "a": [True, None, "é"]}
    assert args_hash(args) == hashlib.sha256(canonical_bytes(args)).hexdigest()
    assert args_hash({"a": [True, None, "é"], "b": 1}) == args_hash(args)
    assert len(args_hash(args)) == 64


def test_build_canonicalizes_and_hashes():
    request = make_request()
    assert request.args == {"amount": "10.10", "currency": "EUR", "n": 1, "ratio": 0.5}
    assert request.args_hash == args_hash(request.args)
    assert request.created_at == "2026-01-01T12:00:01.000000Z"
    assert request.expires_at == "2026-01-02T12:00:01.000000Z"
    assert request.pending and request.decision is None and request.consumed_at is None
    assert request.matches({"currency": "EUR", "amount": Decimal("10.10"), "n": 1, "ratio": 0.5})
    assert not request.matches({**request.args, "n": 2})
    assert ApprovalRequest.from_dict(request.to_dict()) == request
    fresh = ApprovalRequest.build(saga_id="s", tool="t", args={}, created_at=T0)
    assert len(fresh.request_id) == 36 and fresh.expires_at == "2026-01-02T12:00:00.000000Z"
    with pytest.raises(ValueError):
        ApprovalRequest.build(saga_id="s", tool="t", args=[1], created_at=T0)
    with pytest.raises(EncodingError):
        ApprovalRequest.build(saga_id="s", tool="t", args={}, created_at=dt.datetime(2026, 1, 1))
    with pytest.raises(ValueError):
        ApprovalRequest(**{**request.to_dict(), "decision": "maybe"})


def test_expiry():
    request = make_request(created_at=T0, ttl=dt.timedelta(hours=1))
    assert not request.expired(T0)
    assert not request.expired(T0 + dt.timedelta(minutes=59, seconds=59, microseconds=999999))
    assert request.expired(T0 + dt.timedelta(hours=1))
    assert request.expired(T0 + dt.timedelta(days=3))
    elsewhere = dt.timezone(dt.timedelta(hours=-5))
    assert request.expired((T0 + dt.timedelta(hours=2)).astimezone(elsewhere))
    assert not request.expired((T0 + dt.timedelta(minutes=30)).astimezone(elsewhere))
    never = make_request(created_at=T0, ttl=None)
    assert never.expires_at is None
    assert not never.expired(T0 + dt.timedelta(days=10_000))
    with pytest.raises(EncodingError):
        request.expired(dt.datetime(2030, 1, 1))


async def race_two_processes(store: ApprovalStore, location: str) -> None:
    """Two processes resume at once: both consume ``req-1`` (approved) on the store at
    ``location``; exactly one wins, the other is refused."""
    await store.create(make_request(1))
    await store.decide("req-1", "approved", "alice", None, T0)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    results = ctx.Queue()
    racers = [
        ctx.Process(target=_workers.race_consume, args=(location, "req-1", barrier, results))
        for _ in range(2)
    ]
    for racer in racers:
        racer.start()
    outcomes = [await asyncio.to_thread(results.get, True, 60) for _ in racers]
    for racer in racers:
        await asyncio.to_thread(racer.join, 30)
    results.close()
    results.join_thread()
    assert [r.exitcode for r in racers] == [0, 0]
    kinds = sorted(kind for kind, _ in outcomes)
    assert kinds == ["ok", "refused"], outcomes
    refusal = next(message for kind, message in outcomes if kind == "refused")
    assert "already consumed: 'req-1'" in refusal
    assert (await store.get("req-1")).consumed_at is not None


def _local_tcp_ports() -> set[int]:
    """Local ports of this process's TCP sockets (Linux /proc): which server connections are
    ours, whatever other processes use the same server."""
    import os

    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs Linux /proc to tell this process's connections apart")
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with contextlib.suppress(OSError), open(table, encoding="ascii") as fh:
            next(fh)
            for line in fh:
                fields = line.split()
                if fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


# --- SQLite ---------------------------------------------------------------------------------


class TestSqliteApprovalStore:
    """What only a SQLite file shows: a reopened file, a file shared with the journal, wrapped
    errors, a guarded UPDATE, and decisions and consumes by other objects and processes."""

    @pytest.fixture
    async def store(self, tmp_path):
        store = SqliteApprovalStore(tmp_path / "sagacity.db")
        yield store
        await store.close()

    async def test_persists_across_reopen(self, store, tmp_path):
        await store.create(make_request(1))
        await store.decide("req-1", "approved", "alice", "ok", T0)
        await store.save_snapshot("saga-a", "snap")
        expected = await store.get("req-1")
        await store.close()
        reopened = SqliteApprovalStore(tmp_path / "sagacity.db")
        try:
            assert await reopened.get("req-1") == expected
            assert await reopened.load_snapshot("saga-a") == "snap"
        finally:
            await reopened.close()

    async def test_shares_the_journal_file(self, tmp_path):
        from sagacity_agents.core.entries import Phase
        from sagacity_agents.backends.sqlite.journal import SqliteJournal

        path = tmp_path / "shared.db"
        journal = SqliteJournal(path)
        store = SqliteApprovalStore(path)
        try:
            await journal.append("saga-a", Phase.SAGA_OPENED, write_key="open", payload={})
            await store.create(make_request(1))
            assert len(await journal.entries("saga-a")) == 1
            assert (await store.get("req-1")).tool == "charge_card"
        finally:
            await store.close()
            await journal.close()

    async def test_sqlite_errors_are_wrapped(self, store, tmp_path):
        bad = tmp_path / "not-a-db"
        bad.write_bytes(b"this is not an SQLite file" * 100)
        with pytest.raises(JournalError) as info:
            SqliteApprovalStore(bad)
        assert isinstance(info.value.__cause__, sqlite3.DatabaseError)
        await store.close()
        await store.close()  # idempotent
        with pytest.raises(JournalError, match="closed"):
            await store.get("req-1")

    async def test_consume_row_count_check_rolls_back(self, store, tmp_path):
        """The guarded UPDATE's row count is checked: a row that was not updated (here a trigger
        silently skips req-2) rolls the whole consume back, req-1 included."""
        await store.create(make_request(1))
        await store.create(make_request(2))
        conn = sqlite3.connect(tmp_path / "sagacity.db")
        try:
            conn.execute(
                "CREATE TRIGGER skip_req_2 BEFORE UPDATE OF consumed_at "
                "ON sagacity_approval_requests WHEN NEW.request_id = 'req-2' "
                "BEGIN SELECT RAISE(IGNORE); END"
            )
            conn.commit()
        finally:
            conn.close()
        with pytest.raises(ApprovalError, match="changed concurrently"):
            await store.consume(["req-1", "req-2"], T0)
        assert (await store.get("req-1")).consumed_at is None
        assert (await store.get("req-2")).consumed_at is None

    async def test_wait_polls_a_second_store_object(self, store, tmp_path):
        await store.create(make_request(1))
        other = SqliteApprovalStore(tmp_path / "sagacity.db")

        async def decide_elsewhere() -> None:
            await asyncio.sleep(0.1)
            await other.decide("req-1", "approved", "other-object", None, T0)

        try:
            task = asyncio.create_task(decide_elsewhere())
            result = await wait_for_decision(
                store, "req-1", timeout=5, poll_interval=0.02, max_interval=0.1
            )
            await task
        finally:
            await other.close()
        assert result.approver == "other-object"

    @pytest.mark.multiprocess
    async def test_wait_sees_decision_made_by_another_process(self, store, tmp_path):
        await store.create(make_request(1))
        ctx = multiprocessing.get_context("spawn")
        waiting_since = format_timestamp(dt.datetime.now(UTC))
        child = ctx.Process(
            target=_workers.decide_later,
            args=(str(tmp_path / "sagacity.db"), "req-1", 0.2, "other-process"),
        )
        child.start()
        try:
            result = await wait_for_decision(
                store, "req-1", timeout=30, poll_interval=0.05, max_interval=0.2
            )
        finally:
            await asyncio.to_thread(child.join, 30)
        assert child.exitcode == 0
        assert result.decision == "approved" and result.approver == "other-process"
        assert result.reason == "from another process"
        assert result.decided_at > waiting_since  # decided while we waited: seen by polling

    @pytest.mark.multiprocess
    async def test_two_processes_racing_consume(self, store, tmp_path):
        await race_two_processes(store, str(tmp_path / "sagacity.db"))


# --- PostgreSQL -----------------------------------------------------------------------------


class TestPostgresApprovalStore:
    """What only a shared server shows: NOTIFY across processes, a dropped notification, a lost
    LISTEN connection, a two-process consume race."""

    uri = ""

    @pytest.fixture
    async def store(self, pg_uri):
        from sagacity_agents.backends.postgres.approvals import PostgresApprovalStore

        self.uri = pg_uri
        store = PostgresApprovalStore(pg_uri)
        yield store
        await store.close()

    @pytest.mark.multiprocess
    async def test_notify_wakes_a_waiter_for_a_decision_made_by_another_process(self, store):
        await store.create(make_request(1))
        ctx = multiprocessing.get_context("spawn")
        child = ctx.Process(
            target=_workers.decide_later, args=(self.uri, "req-1", 0.5, "other-host")
        )
        child.start()
        try:
            # Polls 30 s apart: only the NOTIFY heard by this process's LISTEN connection can
            # end the wait before the 20 s timeout.
            result = await wait_for_decision(
                store, "req-1", timeout=20, poll_interval=30, max_interval=30
            )
        finally:
            await asyncio.to_thread(child.join, 30)
        assert child.exitcode == 0
        assert (result.decision, result.approver) == ("approved", "other-host")

    async def test_dropped_notification_only_delays(self, store):
        """A decision written without its NOTIFY (lost hint) is still seen: the waiter re-reads
        the table each time its wait times out."""
        await store.create(make_request(1))

        def decide_silently() -> None:
            time.sleep(0.2)
            from tests.pg import admin_connect

            with admin_connect(self.uri) as conn:
                conn.execute(
                    "UPDATE sagacity_approval_requests SET decision = 'approved', "
                    "approver = 'silent', decided_at = %s WHERE request_id = 'req-1'",
                    (format_timestamp(T0),),
                )

        waiter = asyncio.create_task(
            wait_for_decision(store, "req-1", timeout=20, poll_interval=0.1, max_interval=0.3)
        )
        await asyncio.to_thread(decide_silently)
        result = await waiter
        assert (result.decision, result.approver) == ("approved", "silent")

    async def test_lost_listen_connection_makes_waiters_reread(self, store):
        """The LISTEN connection is killed after a silent decision: the reconnect wakes every
        waiter, which re-reads and finds it (polls are 30 s apart, the timeout 20 s)."""
        from sagacity_agents.backends.postgres.setup import LISTENER_NAME
        from tests.pg import admin_connect

        await store.create(make_request(1))
        waiter = asyncio.create_task(
            wait_for_decision(store, "req-1", timeout=20, poll_interval=30, max_interval=30)
        )

        listener = store.database.listener()
        for _ in range(3_000):  # until the waiter's LISTEN connection is up (a minute at most)
            if listener.backend_pid is not None:
                break
            await asyncio.sleep(0.02)
        pid = listener.backend_pid

        def decide_silently_then_kill_listener() -> int:
            with admin_connect(self.uri) as conn:
                conn.execute(
                    "UPDATE sagacity_approval_requests SET decision = 'rejected', "
                    "approver = 'silent', decided_at = %s WHERE request_id = 'req-1'",
                    (format_timestamp(T0),),
                )
                killed = conn.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE application_name = %s AND pid = %s",
                    (LISTENER_NAME, pid),
                ).fetchone()
            return int(killed[0])

        assert await asyncio.to_thread(decide_silently_then_kill_listener) >= 1
        result = await waiter
        assert (result.decision, result.approver) == ("rejected", "silent")

    @pytest.mark.multiprocess
    async def test_two_processes_racing_consume(self, store):
        await race_two_processes(store, self.uri)

    async def test_one_listen_connection_serves_every_waiter(self, store):
        """Six waiters on two stores sharing one database (as a journal and its store do) hold
        one LISTEN connection between them, and a decision made through another database's
        pool (no in-process wake-up) reaches each through it (polls 30 s apart)."""
        from sagacity_agents.backends.postgres.approvals import PostgresApprovalStore
        from sagacity_agents.backends.postgres.setup import LISTENER_NAME
        from tests.pg import admin_connect

        def listen_connections_of_this_process() -> int:
            with admin_connect(self.uri) as conn:
                (count,) = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE application_name = %s AND client_port = ANY(%s)",
                    (LISTENER_NAME, sorted(_local_tcp_ports())),
                ).fetchone()
            return int(count)

        sibling = PostgresApprovalStore(store.database)
        for n in range(1, 7):
            await store.create(make_request(n))
        waiters = [
            asyncio.create_task(wait_for_decision(
                store if n % 2 else sibling, f"req-{n}", timeout=20, poll_interval=30,
                max_interval=30,
            ))
            for n in range(1, 7)
        ]
        listener = store.database.listener()
        for _ in range(3_000):  # until the waiters' LISTEN connection is up (a minute at most)
            if listener.backend_pid is not None:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
        assert await asyncio.to_thread(listen_connections_of_this_process) == 1
        elsewhere = PostgresApprovalStore(self.uri)  # its own pools, its own notifier
        try:
            for n in range(1, 7):
                await elsewhere.decide(f"req-{n}", "approved", "other-host", None, T0)
        finally:
            await elsewhere.close()
        results = await asyncio.wait_for(asyncio.gather(*waiters), 60)
        assert {r.approver for r in results} == {"other-host"}
        assert await asyncio.to_thread(listen_connections_of_this_process) == 1

    async def test_notification_payload_is_the_request_id_only(self, store):
        """What a decision announces on the channel is its request id, nothing of the request
        (any role that may LISTEN hears it)."""
        import secrets

        from sagacity_agents.backends.postgres.setup import NOTIFY_CHANNEL
        from tests.pg import admin_connect

        request = make_request(1)
        request_id = f"req-{secrets.token_hex(8)}"
        await store.create(ApprovalRequest.build(
            saga_id=request.saga_id, tool=request.tool, args={"amount": "10.10"},
            created_at=T0, call_id="call-1", raw_args=None, request_id=request_id,
        ))
        with admin_connect(self.uri) as conn:
            conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
            await store.decide(request_id, "approved", "alice", "a reason", T0)
            heard = [n.payload for n in conn.notifies(timeout=2)]
        ours = [payload for payload in heard if request_id in payload]
        assert ours == [request_id], heard
