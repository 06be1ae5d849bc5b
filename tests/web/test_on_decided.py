"""``create_app(on_decided=...)``: called back when a saga's requests are all decided, through
the app at once or elsewhere by polling; with two replicas both may call back, and the resume
each starts still runs the wire exactly once (run lease, CONSUMED claim)."""

from __future__ import annotations

import asyncio

import pytest

from sagacity_agents import Sagacity
from sagacity_agents.core.entries import Phase
from sagacity_agents.errors import SagacityError
from sagacity_agents.web import TokenLogin, create_app
from tests.backends import BACKENDS
from tests.web.support import (
    TOKENS,
    Bank,
    Server,
    client,
    eventually,
    make_agent,
    paused_saga,
)

SQL = [b for b in BACKENDS if b.name != "memory"]


async def test_called_back_once_after_a_decision_through_the_app(tmp_path):
    db = str(tmp_path / "inbox.db")
    saga_id, request = await paused_saga(db, Bank())
    calls: list[tuple[str, list[str]]] = []

    def on_decided(saga: str, requests: list) -> None:
        calls.append((saga, [r.request_id for r in requests]))

    server = Server(create_app(db, authenticator=TokenLogin(TOKENS), on_decided=on_decided,
                               poll_interval=None))
    try:
        async with client(server) as alice:
            body = {"args_hash": request.args_hash}
            assert (await alice.post(f"/api/approvals/{request.request_id}/approve", json=body)).status_code == 200
            await eventually(lambda: calls)
            assert (await alice.post(f"/api/approvals/{request.request_id}/approve", json=body)).status_code == 200
        await asyncio.sleep(0.3)
        assert calls == [(saga_id, [request.request_id])]  # the double submit calls nobody
    finally:
        server.stop()


async def test_a_decision_made_elsewhere_is_picked_up_by_polling(tmp_path):
    db = str(tmp_path / "inbox.db")
    saga_id, request = await paused_saga(db, Bank())
    calls: list[str] = []

    async def on_decided(saga: str, requests: list) -> None:
        calls.append(saga)

    server = Server(create_app(db, authenticator=TokenLogin(TOKENS), on_decided=on_decided,
                               poll_interval=0.1))
    try:
        await asyncio.sleep(0.3)
        assert calls == []  # pending: nothing to resume
        cli = Sagacity(db)  # what `sagacity approvals approve` runs, in another "process"
        await cli.approve(request.request_id, approver="carol", reason="by phone")
        await cli.aclose()
        await eventually(lambda: calls)
        await asyncio.sleep(0.3)
        assert calls == [saga_id]
    finally:
        server.stop()


@pytest.mark.parametrize("backend", SQL, ids=str)
async def test_two_replicas_both_resume_and_the_wire_runs_once(backend, request):
    location = backend.location(request)
    bank = Bank()
    saga_id, paused = await paused_saga(location, bank)
    outcomes: list[str] = []
    called: list[str] = []

    def resumer(name: str):
        async def on_decided(saga: str, requests: list) -> None:
            # Both replicas resume at once: each waits until the other was called back too (a
            # replica that polls after the first resume consumed the request is not called).
            called.append(name)
            await eventually(lambda: len(called) == 2, timeout=60)
            sagacity = Sagacity(location)
            try:
                result = await sagacity.resume(saga, make_agent(bank))
                outcomes.append(f"{name}:{result.status.value}")
            except SagacityError as exc:
                outcomes.append(f"{name}:refused:{type(exc).__name__}")
            finally:
                await sagacity.aclose()
        return on_decided

    replicas = [Server(create_app(location, authenticator=TokenLogin(TOKENS), secret_key="k" * 32,
                                  on_decided=resumer(name), poll_interval=0.05)) for name in ("a", "b")]
    try:
        async with client(replicas[0]) as alice:
            response = await alice.post(f"/api/approvals/{paused.request_id}/approve",
                                        json={"args_hash": paused.args_hash})
            assert response.status_code == 200
        await eventually(lambda: len(outcomes) == 2, timeout=30)
    finally:
        for server in replicas:
            server.stop()
    assert len(bank.wires) == 1, (bank.wires, outcomes)
    assert sum(o.endswith(":COMPLETED") for o in outcomes) == 1, outcomes
    assert sum(":refused:" in o for o in outcomes) == 1, outcomes
    sagacity = Sagacity(location)
    try:
        entries = await sagacity.journal.entries(saga_id)
        assert [e.phase for e in entries].count(Phase.CONSUMED) == 1
        assert [e.tool for e in entries if e.phase is Phase.EXECUTED].count("send_wire") == 1
    finally:
        await sagacity.aclose()
