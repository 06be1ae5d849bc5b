"""A run cannot hang holding its lease: the keeper renews only while the run makes progress
(an append, a model-turn boundary, a tool body inside its deadline); a run stuck on an await that
never ends is stopped with an error naming the step it waits on, its lease expires and a recovery
takes the saga. Short leases, outcomes asserted (never durations)."""

from __future__ import annotations

import asyncio

import pytest
from agents import Runner, function_tool
from agents.testing import ScriptedModel

from sagacity_agents import Sagacity, compensable
from sagacity_agents.backends import InMemoryJournal, Phase, SqliteJournal
from sagacity_agents.core import lease as lease_module
from sagacity_agents.core.lease import LeaseKeeper, RunProgress, lease_of
from sagacity_agents.errors import LeaseLostError, RunStalledError
from sagacity_agents import SagaRunHooks

from .helpers import agent, scripted

LEASE = 0.3


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def journal(request, tmp_path):
    if request.param == "postgres":
        from sagacity_agents.backends import PostgresJournal

        j = PostgresJournal(request.getfixturevalue("pg_uri"))
    else:
        j = InMemoryJournal() if request.param == "memory" else SqliteJournal(tmp_path / "j.db")
    yield j
    await j.close()


def stuck_booking(log: list, never: asyncio.Event, deadline: float = 0.2):
    @function_tool
    @compensable(undo=lambda ctx: log.append("undo"), deadline=deadline)
    async def book_hotel(n: int) -> str:
        log.append("book-start")
        await never.wait()  # an await that never ends
        return "booked"

    return book_hotel


async def test_a_tool_body_past_its_deadline_stops_the_run_naming_it(journal, monkeypatch):
    """A body awaiting an Event never set, past its deadline: after three lease periods without
    progress the keeper stops renewing; the run fails with RunStalledError naming the call; the
    lease then expires and a recovery takes the saga and finishes it."""
    log: list = []
    never = asyncio.Event()
    a = agent(scripted([("book_hotel", {"n": 1}, "c2")], "done"), stuck_booking(log, never))
    hooks = SagaRunHooks(journal, agent=a, saga_id="trip-1", lease_seconds=LEASE)
    with pytest.raises(RunStalledError) as raised:
        async with hooks:
            await Runner.run(a, "go", hooks=hooks)
    stalled = raised.value
    assert "tool book_hotel (call c2) past its deadline" in str(stalled)
    assert stalled.waiting_on.startswith("tool book_hotel (call c2)")
    assert isinstance(stalled, LeaseLostError) and stalled.saga_id == "trip-1"
    assert hooks.saga.lifecycle.keeper.stopped_by is RunStalledError
    entries = await journal.entries("trip-1")
    assert not any(e.phase in (Phase.RUN_ENDED, Phase.SAGA_CLOSED) for e in entries)
    lease = lease_of(entries)
    assert lease is not None and not lease.ended
    # Nothing renews it now: once it expires, a recovery takes the saga over and ends it.
    while lease.held():
        await asyncio.sleep(LEASE / 3)
    report = await Sagacity(journal, lease_seconds=LEASE).recover("trip-1", a)
    assert report is not None
    entries = await journal.entries("trip-1")
    assert entries[-1].phase is Phase.SAGA_CLOSED
    assert any(e.phase is Phase.RUN_STARTED and (e.payload or {}).get("took_over") for e in entries)


class StuckModel(ScriptedModel):
    """A model whose first turn awaits an Event never set."""

    def __init__(self, never: asyncio.Event) -> None:
        super().__init__()
        self.never = never

    async def get_response(self, *args, **kwargs):
        await self.never.wait()
        raise AssertionError("unreachable")


async def test_a_model_turn_that_never_returns_stops_the_run_naming_the_turn(journal):
    never = asyncio.Event()
    a = agent(StuckModel(never))
    hooks = SagaRunHooks(journal, agent=a, saga_id="trip-2", lease_seconds=LEASE)
    hooks.saga.lifecycle.idle_periods = 3  # configurable: the model's own timeout is long
    with pytest.raises(RunStalledError, match="waiting on model turn 1"):
        async with hooks:
            await Runner.run(a, "go", hooks=hooks)
    entries = await journal.entries("trip-2")
    assert entries[-1].phase is not Phase.RUN_ENDED


async def test_a_body_inside_its_deadline_keeps_the_lease(journal):
    """Progress: a slow body inside its deadline (the default) is renewed for and completes."""
    release = asyncio.Event()
    log: list = []

    @function_tool
    @compensable(undo=lambda ctx: log.append("undo"))
    async def slow(n: int) -> str:
        log.append("start")
        await release.wait()
        return "ok"

    a = agent(scripted([("slow", {"n": 1}, "c1")], "done"), slow)
    hooks = SagaRunHooks(journal, agent=a, saga_id="trip-3", lease_seconds=LEASE)
    hooks.saga.lifecycle.idle_periods = 3
    async with hooks:
        run = asyncio.ensure_future(Runner.run(a, "go", hooks=hooks))
        keeper = None
        while keeper is None or keeper.renewals < 12:  # four times the idle limit of 3 periods
            await asyncio.sleep(LEASE / 3)
            keeper = hooks.saga.lifecycle.keeper
        release.set()
        await run
    assert hooks.saga.lifecycle.keeper.stopped_by is None
    phases = [e.phase for e in await journal.entries("trip-3")]
    assert phases[-1] is Phase.SAGA_CLOSED and Phase.LEASE_RENEWED in phases


def test_progress_judges_with_an_injected_clock():
    """The keeper's rule, on a clock the test moves: bodies inside their deadline are progress,
    past it they are not; the limit is max(3, ceil(longest wait / lease)) periods."""
    now = [100.0]
    progress = RunProgress(lambda: now[0], model_timeout=50.0)
    keeper = LeaseKeeper(InMemoryJournal(), "s", "h", 10.0, lambda: 0.0, fence=1,
                         progress=progress)
    token = object()
    progress.body_started(token, "book", "c1", {"deadline_seconds": 45.0})
    now[0] += 44.0
    assert keeper.check_progress() is None  # inside its deadline
    now[0] += 1.0 + 50.0  # 50 s past the deadline: ceil(45 / 10) = 5 periods = 50 s allowed
    assert keeper.check_progress() is None
    now[0] += 1.0
    stalled = keeper.check_progress()
    assert stalled is not None and stalled.waiting_on == "tool book (call c1) past its deadline of 45 s"
    progress.body_ended(token)  # an end is progress
    assert keeper.check_progress() is None
    progress.turn_started()
    now[0] += 50.0  # the model's timeout: 5 periods
    assert keeper.check_progress() is None
    now[0] += 1.0
    assert "model turn 1" in str(keeper.check_progress())
    with pytest.raises(ValueError):
        LeaseKeeper(InMemoryJournal(), "s", "h", 10.0, lambda: 0.0, idle_periods=0)


class SwallowingJournal:
    """A journal whose LEASE_RENEWED append, when cancelled while it waits, returns as if it had
    got through: what Python 3.11's ``asyncio.wait_for`` inside psycopg_pool's wait for a
    connection does when the cancellation and the connection arrive together (the pool of 10
    exhausted, under load)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.waiting = asyncio.Event()
        self.renewals_after_stop = 0
        self.stopped = False

    async def append(self, saga_id, phase, **fields):
        if phase is Phase.LEASE_RENEWED:
            if self.stopped:
                self.renewals_after_stop += 1
            self.waiting.set()
            try:
                await asyncio.sleep(3600)  # queued for a pooled connection
            except asyncio.CancelledError:
                pass  # the cancellation is lost; the append goes on
        return await self.inner.append(saga_id, phase, **fields)

    def __getattr__(self, name):
        return getattr(self.inner, name)


async def test_stopping_a_keeper_whose_beat_swallows_its_cancellation_ends_it():
    """The hang of a loaded PostgreSQL: the run ends, stops its keeper while the keeper's beat
    waits for a pooled connection; the cancellation is swallowed. Stop still returns (the run
    returns) and the keeper journals nothing after it."""
    inner = InMemoryJournal()
    await inner.append("s", Phase.SAGA_OPENED, write_key="open", payload={})
    run = await inner.append("s", Phase.RUN_STARTED, write_key="run",
                             payload={"holder": "h", "lease_seconds": 0.3})
    journal = SwallowingJournal(inner)
    keeper = LeaseKeeper(journal, "s", "h", 0.3, lambda: 0.0, fence=run.seq)
    keeper.start()
    await journal.waiting.wait()  # the beat is queued inside its append
    await asyncio.wait_for(keeper.stop(), timeout=30)  # a guard, not a measure: it used to hang
    journal.stopped = True
    count = [e.phase for e in await inner.entries("s")].count(Phase.LEASE_RENEWED)
    await asyncio.sleep(1.0)  # three beats' worth: none may come
    assert [e.phase for e in await inner.entries("s")].count(Phase.LEASE_RENEWED) == count
    assert journal.renewals_after_stop == 0


async def test_sagacity_run_returns_the_stall_as_its_exception(monkeypatch):
    log: list = []
    never = asyncio.Event()
    a = agent(scripted([("book_hotel", {"n": 1}, "c2")], "done"), stuck_booking(log, never))
    result = await Sagacity(InMemoryJournal(), lease_seconds=LEASE).run(a, "go")
    assert isinstance(result.exception, RunStalledError)
    assert "book_hotel (call c2)" in str(result.exception)
    assert log == ["book-start"]  # nothing undone by the stalled run: recovery's job


async def test_an_inline_approver_slower_than_the_idle_limit_keeps_the_run(tmp_path, monkeypatch):
    """Waiting for a human's decision (within the requests' lifetime) is progress: an approver
    that answers after more than three lease periods still gets its call run."""
    from sagacity_agents import Decision, SagaStatus

    from . import wire_app

    monkeypatch.setattr(wire_app, "LEDGER", tmp_path / "ledger.txt")
    s = Sagacity(str(tmp_path / "j.db"), lease_seconds=LEASE)
    renewed_before_answer: list[int] = []

    async def slow_human(request):
        start = len(await s.journal.entries(request.saga_id))
        while len(await s.journal.entries(request.saga_id)) < start + 15:  # 15 beats: 5 periods
            await asyncio.sleep(LEASE / 3)
        renewed_before_answer.append(15)
        return Decision(approved=True, approver="alice")

    try:
        result = await s.run(wire_app.paused_agent(("transfer", '{"amount": 5, "to": "acct-9"}', "w1")),
                             "go", approver=slow_human)
    finally:
        await s.aclose()
    assert result.status is SagaStatus.COMPLETED, result.exception
    assert renewed_before_answer and wire_app.executions() == ["5 USD -> acct-9"]


async def test_a_recovery_stuck_in_an_undo_ends_naming_it(journal):
    """A recovery whose undo awaits for ever (its undo_timeout far longer than the idle limit)
    is stopped by its keeper: LEASE_LOST, the exception a RunStalledError naming the undo's
    COMPENSATING entry; its lease then expires for the next recovery."""
    never = asyncio.Event()
    undo_started: list = []

    async def hanging_undo(ctx):
        undo_started.append(ctx.args["n"])
        await never.wait()

    @function_tool
    @compensable(undo=hanging_undo, undo_timeout=3600)
    async def book_hotel(n: int) -> str:
        return "booked"

    a = agent(scripted([("book_hotel", {"n": 1}, "c2")], "done"), book_hotel)
    s = Sagacity(journal, lease_seconds=LEASE)
    first = await s.run(a, "go", saga_id="trip-9", close=False)
    recovered = await s.recover("trip-9", a)
    assert undo_started == [1]
    assert isinstance(recovered.exception, RunStalledError), recovered
    assert "COMPENSATING of book_hotel (call c2)" in str(recovered.exception)
    assert first.saga_id == "trip-9"


async def test_a_run_stopped_while_it_compensates_raises_the_stall(journal):
    """The stall arrives while the block is being left (its compensation's undo awaits for
    ever): the block raises the RunStalledError, not a bare cancellation."""
    never = asyncio.Event()

    async def hanging_undo(ctx):
        await never.wait()

    @function_tool
    @compensable(undo=hanging_undo, undo_timeout=3600)
    async def book_hotel(n: int) -> str:
        return "booked"

    @function_tool
    @compensable(undo=lambda ctx: None)
    async def charge(n: int) -> str:
        raise RuntimeError("card declined")

    a = agent(scripted([("book_hotel", {"n": 1}, "c1")], [("charge", {"n": 1}, "c2")], "done"),
              book_hotel, charge)
    hooks = SagaRunHooks(journal, agent=a, saga_id="trip-7", lease_seconds=LEASE)
    with pytest.raises(RunStalledError, match="COMPENSATING of book_hotel"):
        async with hooks:
            await Runner.run(a, "go", hooks=hooks)
