"""A human's answer to a call in doubt is accepted only once the call's holder cannot still act:
a recovery took its lease over and reported the call in doubt, and the call's deadline (journaled
in its INTENT) plus one lease period has passed on the resolver's clock; ``force`` with a reason
overrides, journaled. Every protected call journals its deadline: the SDK tool's ``timeout``,
else the declaration's ``deadline``, else ``Sagacity(call_deadline=...)`` (300 s by default).
Far-side checks run by recovery before a human is asked (CHECKED). On every backend."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from agents import function_tool

from sagacity_agents import Sagacity, SagaStatus, compensable
from sagacity_agents.backends import Phase
from sagacity_agents.saga import CheckResult
from sagacity_agents.core.declarations import Reversibility, ToolDeclaration
from sagacity_agents.core.recovery import Recovery
from sagacity_agents.core.resolution import answer_not_yet
from sagacity_agents.errors import SagaStateError
from sagacity_agents.saga import call_idempotency_key
from sagacity_agents.testing import FrozenClock
from tests.backends import BACKENDS

from .helpers import agent, scripted

SAGA = "held-1"
AGO = dt.timedelta(hours=1)


@pytest.fixture(params=BACKENDS, ids=str)
def backend(request):
    """``(journal stamped an hour back, its approval store)`` of each backend in turn."""
    location = request.param.location(request)
    journal = request.param.journal(location, clock=FrozenClock(dt.datetime.now(dt.UTC) - AGO, tick=0.001))
    approvals = request.param.approvals(location) if request.param.name != "memory" else None
    yield journal, approvals
    asyncio.run(journal.close())


def _service(journal, approvals, **options) -> Recovery:
    from sagacity_agents.backends import InMemoryApprovalStore

    return Recovery(journal, approvals if approvals is not None else InMemoryApprovalStore(), **options)


async def _stalled_call(journal, deadline: float = 10.0) -> int:
    """A run (lease 1 s) that wrote a call's INTENT an hour ago and nothing since: its lease has
    expired, nobody took it over. Returns the INTENT's seq."""
    await journal.append(SAGA, Phase.SAGA_OPENED, write_key="open", payload={"metadata": {}})
    run = await journal.append(SAGA, Phase.RUN_STARTED, write_key="run:1", payload={
        "agent": "trip", "holder": "host:1:stalled", "lease_seconds": 1.0, "took_over": None})
    intent = await journal.append(SAGA, Phase.INTENT, write_key="c1:intent", tool="step", call_id="c1",
                                  payload={"args": {"n": 1}, "reversibility": "compensatable",
                                           "deadline_seconds": deadline}, fence=run.seq)
    return intent.seq


def _at(entry) -> dt.datetime:
    return dt.datetime.strptime(entry.recorded_at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)


async def test_an_expired_lease_nobody_took_over_is_not_enough_to_answer(backend):
    journal, approvals = backend
    seq = await _stalled_call(journal)
    service = _service(journal, approvals)
    with pytest.raises(SagaStateError, match="no recovery has taken its lease over yet") as caught:
        await service.resolve(SAGA, seq, ran=False, resolver="ops", reason="nothing at the hotel")
    assert "host:1:stalled" in str(caught.value) and "--force" in str(caught.value)
    assert (await journal.entries(SAGA))[-1].seq == seq  # nothing journaled


async def test_an_answer_waits_for_the_calls_deadline_after_a_takeover(backend):
    journal, approvals = backend
    seq = await _stalled_call(journal, deadline=10.0)
    first = await _service(journal, approvals).recover(SAGA, lambda saga: None)
    assert first.status is SagaStatus.IN_DOUBT
    intent = next(e for e in await journal.entries(SAGA) if e.seq == seq)
    early = _service(journal, approvals, clock=lambda: _at(intent) + dt.timedelta(seconds=5))
    with pytest.raises(SagaStateError, match="deadline passes at") as caught:
        await early.resolve(SAGA, seq, ran=False, resolver="ops", reason="checked")
    assert "+ deadline 10 s + one lease period 1 s" in str(caught.value)
    # After INTENT + 10 s + 1 s (the resolver's clock): accepted, not forced.
    late = _service(journal, approvals, clock=lambda: _at(intent) + dt.timedelta(seconds=12))
    answer = await late.resolve(SAGA, seq, ran=False, resolver="ops", reason="checked")
    assert answer.payload["answer"] == "not_run" and "forced" not in answer.payload
    second = await _service(journal, approvals).recover(SAGA, lambda saga: None)
    assert second.status is SagaStatus.COMPENSATED


async def test_a_forced_answer_is_accepted_and_journaled_with_its_reason(backend):
    journal, approvals = backend
    seq = await _stalled_call(journal)
    answer = await _service(journal, approvals).resolve(
        SAGA, seq, ran=True, resolver="ops", reason="killed pid 4242 myself; booking seen",
        force=True, undo_data={"booking_id": "B-7"})
    assert answer.payload["forced"] == {"reason": "killed pid 4242 myself; booking seen"}
    assert answer.payload["undo_data"] == {"booking_id": "B-7"}
    entries = await journal.entries(SAGA)
    assert entries[-1].phase is Phase.RESOLVED and entries[-1].payload == answer.payload


async def test_the_rule_reads_an_intent_without_a_deadline_as_the_default():
    from sagacity_agents.backends import InMemoryJournal

    journal = InMemoryJournal()
    await journal.append(SAGA, Phase.SAGA_OPENED, write_key="open", payload={"metadata": {}})
    intent = await journal.append(SAGA, Phase.INTENT, write_key="i", tool="step", call_id="c1",
                                  payload={"args": {}, "reversibility": "compensatable"})
    entries = await journal.entries(SAGA)
    why = answer_not_yet(entries, intent, "call", _at(intent) + dt.timedelta(seconds=60))
    assert "+ deadline 300 s + one lease period 30 s" in why


# --- deadlines journaled --------------------------------------------------------------------

@function_tool(timeout=7)
@compensable(undo=lambda ctx: None, deadline=42)
async def timed(n: int) -> int:
    """The SDK's timeout wins over the declaration's deadline."""
    return n


@function_tool
@compensable(undo=lambda ctx: None, deadline=42)
async def declared(n: int) -> int:
    """The declaration's deadline."""
    return n


@function_tool
@compensable(undo=lambda ctx: None)
async def plain(n: int) -> int:
    """No deadline of its own."""
    return n


@pytest.mark.parametrize("tool, options, expected", [
    (timed, {}, 7.0), (declared, {}, 42.0), (plain, {}, 300.0), (plain, {"call_deadline": 12}, 12.0),
])
async def test_every_call_journals_its_deadline_in_its_intent(tool, options, expected):
    sagacity = Sagacity(":memory:", **options)
    result = await sagacity.run(agent(scripted([(tool.name, {"n": 1}, "c1")], "done"), tool), "go")
    assert result.status is SagaStatus.COMPLETED
    (intent,) = [e for e in await sagacity.journal.entries(result.saga_id) if e.phase is Phase.INTENT]
    assert intent.payload["deadline_seconds"] == expected


def test_a_bad_deadline_is_refused_at_declaration():
    from sagacity_agents.errors import DeclarationError

    with pytest.raises(DeclarationError, match="deadline must be a finite number of seconds"):
        compensable(undo=lambda ctx: None, deadline=0)(lambda n: n)
    with pytest.raises(DeclarationError, match="undo_needs must be a tuple"):
        compensable(undo=lambda ctx: None, undo_needs="booking_id")(lambda n: n)
    with pytest.raises(ValueError, match="call_deadline"):
        Sagacity(":memory:", call_deadline=float("nan"))


# --- far-side checks ------------------------------------------------------------------------

UNDONE: list = []
SEEN: list = []


def _undo(ctx) -> None:
    UNDONE.append((ctx.undo_data, ctx.intent_seq, ctx.call_idempotency_key))


def _bind_check(check):
    decl = ToolDeclaration(name="step", reversibility=Reversibility.COMPENSATABLE, undo=_undo,
                           check=check, check_timeout=0.5 if check is _slow else 5.0)
    return lambda saga: saga.register("step", decl)


def _ran(ctx):
    SEEN.append(ctx)
    return CheckResult.ran({"booking_id": "B-1"}, saw={"status": "booked"})


async def _not_run(ctx):
    return CheckResult.not_run(saw={"found": None})


def _unknown(ctx):
    return CheckResult.unknown(saw="far side down")


def _raises(ctx):
    raise ConnectionError("payments API unreachable")


async def _slow(ctx):
    await asyncio.sleep(60)


@pytest.mark.parametrize("check, verdict, status, undone", [
    (_ran, "ran", SagaStatus.COMPENSATED, [{"booking_id": "B-1"}]),
    (_not_run, "not_run", SagaStatus.COMPENSATED, []),
    (_unknown, "unknown", SagaStatus.IN_DOUBT, []),
    (_raises, "unknown", SagaStatus.IN_DOUBT, []),
    (_slow, "unknown", SagaStatus.IN_DOUBT, []),
])
async def test_recovery_checks_the_far_side_before_asking_a_human(backend, check, verdict, status, undone):
    UNDONE.clear()
    SEEN.clear()
    journal, approvals = backend
    seq = await _stalled_call(journal)
    result = await _service(journal, approvals).recover(SAGA, _bind_check(check))
    assert result.status is status
    (checked,) = [e for e in await journal.entries(SAGA) if e.phase is Phase.CHECKED]
    assert checked.payload["target_seq"] == seq and checked.payload["verdict"] == verdict
    assert checked.payload["checker"] == check.__qualname__
    assert [u[0] for u in UNDONE] == undone
    key = call_idempotency_key(SAGA, seq)
    if verdict == "ran":
        assert checked.payload["undo_data"] == {"booking_id": "B-1"}
        assert checked.payload["saw"] == {"status": "booked"}
        assert UNDONE == [({"booking_id": "B-1"}, seq, key)]
        assert SEEN[0].call_idempotency_key == key and SEEN[0].args == {"n": 1}
    from sagacity_agents.render import summarize_payload

    assert summarize_payload(checked).startswith(
        f"call at seq {seq}: far-side check says {verdict} ({check.__qualname__})")
    if check is _raises:
        assert "ConnectionError" in checked.payload["error"]
        assert [i.seq for i in result.in_doubt] == [seq]  # left for a human
    if check is _slow:
        assert checked.payload["error"] == "check timed out after 0.5 s"
        (item,) = result.report.in_doubt
        assert item.detail.endswith(f"its far-side check (_slow, CHECKED seq {checked.seq}) could "
                                    "not tell: check timed out after 0.5 s")


def test_protect_tool_takes_a_deadline_undo_needs_and_a_check():
    """The SDK tool's own timeout is the deadline when it has one; else ``deadline=``."""
    from agents import FunctionTool

    from sagacity_agents import protect_tool
    from sagacity_agents.sdk.tools import declaration_of

    @function_tool(timeout=9)
    async def charge(amount: int) -> str:
        """Charge."""
        return "ok"

    protected = protect_tool(charge, reversibility="compensatable", undo=lambda ctx: None,
                             deadline=30, undo_needs=("charge_id",), check=_ran)
    decl = declaration_of(protected)
    assert isinstance(protected, FunctionTool)
    assert (decl.deadline, decl.undo_needs, decl.check) == (9.0, ("charge_id",), _ran)
    plain = protect_tool(plain_tool, reversibility="no_undo", deadline=30)
    assert declaration_of(plain).deadline == 30.0


@function_tool
def plain_tool(amount: int) -> str:
    """No timeout."""
    return "ok"


def test_the_cli_refuses_an_early_answer_saying_what_is_missing_and_force_accepts_it(tmp_path):
    from click.testing import CliRunner

    from sagacity_agents.backends import SqliteJournal
    from sagacity_agents.cli import cli

    db = str(tmp_path / "j.db")

    async def stalled() -> int:
        journal = SqliteJournal(db, clock=FrozenClock(dt.datetime.now(dt.UTC) - AGO, tick=0.001))
        try:
            return await _stalled_call(journal)
        finally:
            await journal.close()

    seq = asyncio.run(stalled())
    args = ["saga", "resolve", SAGA, str(seq), "--not-run", "--as", "ops", "--reason", "pid 7 killed",
            "--db", db]
    early = CliRunner().invoke(cli, args, env={"COLUMNS": "400"})
    assert early.exit_code == 1 and "no recovery has taken its lease over yet" in early.output
    forced = CliRunner().invoke(cli, [*args[:4], "--force", *args[4:]], env={"COLUMNS": "400"})
    assert forced.exit_code == 0, forced.output
    assert "forced: pid 7 killed" in forced.output
