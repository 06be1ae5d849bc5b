"""Undo data recorded from a thread the tool body starts (``loop.run_in_executor``,
``threading.Thread``): with ``carry_context`` it reaches the undo, which undoes the effect;
without it ``record_undo_data`` raises ``CallContextLostError`` (naming the helper) and the call is
reported still dirty, never hidden under a clean COMPENSATED. Outside any saga both functions stay
no-ops. On every backend of ``tests/backends.py``."""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest
from agents import function_tool

from sagacity_agents import (
    CompensationContext, Sagacity, SagaStatus, compensable, current_idempotency_key, record_undo_data,
)
from sagacity_agents.errors import CallContextLostError
from sagacity_agents.saga import carry_context
from tests.backends import BACKENDS

from .helpers import agent, scripted

pytestmark = pytest.mark.case("I-35")


@pytest.fixture(params=BACKENDS, ids=str)
def location(request) -> str:
    return request.param.location(request)


def _book(hotels: dict[str, str], errors: list[BaseException], keys: list[str | None]):
    """The effect, then its undo data, both from the thread: what a blocking client in an
    executor does."""

    def work() -> str:
        booking_id = str(uuid.uuid4())
        hotels[booking_id] = "Lisbon"
        try:
            record_undo_data({"booking_id": booking_id})
            keys.append(current_idempotency_key())
        except CallContextLostError as exc:
            errors.append(exc)
            raise
        return booking_id

    return work


def _trip(hotels: dict[str, str], undone: list[str], how, *, errors, keys):
    def cancel(ctx: CompensationContext) -> None:
        data = ctx.undo_data or {}
        undone.append(str(data.get("booking_id")))
        hotels.pop(data.get("booking_id", ""), None)

    @function_tool
    @compensable(undo=cancel)
    async def book_hotel(city: str) -> str:
        return f"booked {await how(_book(hotels, errors, keys))}"

    @function_tool
    @compensable(undo=lambda ctx: None)
    async def charge_card(amount: int) -> str:
        raise RuntimeError("card declined")

    model = scripted([("book_hotel", {"city": "Lisbon"}, "c1")],
                     [("charge_card", {"amount": 300}, "c2")], "done")
    return agent(model, book_hotel, charge_card)


async def _executor(work, *, carry: bool) -> str:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, carry_context(work) if carry else work)


async def _thread(work, *, carry: bool) -> str:
    out: list[str] = []

    def target() -> None:
        try:
            out.append(work())
        except CallContextLostError:
            pass  # seen by the test through ``errors``; a thread's exception goes nowhere

    thread = threading.Thread(target=carry_context(target) if carry else target)
    thread.start()
    await asyncio.get_running_loop().run_in_executor(None, thread.join)
    return out[0] if out else "lost"


STARTERS = {"run_in_executor": _executor, "threading.Thread": _thread}


async def _run(location: str, starter: str, carry: bool):
    hotels: dict[str, str] = {}
    undone: list[str] = []
    errors: list[BaseException] = []
    keys: list[str | None] = []

    async def how(work):
        return await STARTERS[starter](work, carry=carry)

    s = Sagacity(location)
    try:
        result = await s.run(_trip(hotels, undone, how, errors=errors, keys=keys), "go")
    finally:
        await s.aclose()
    return result, hotels, undone, errors, keys


@pytest.mark.parametrize("starter", sorted(STARTERS))
async def test_undo_data_from_a_thread_with_carry_context_undoes_the_effect(location, starter):
    """``carry_context(work)`` handed to the executor or thread: the key is the call's, the undo
    gets the booking id and cancels it; the saga is cleanly COMPENSATED."""
    result, hotels, undone, errors, keys = await _run(location, starter, carry=True)
    assert errors == []
    assert keys and keys[0] is not None
    assert result.status is SagaStatus.COMPENSATED, result.exception
    assert hotels == {} and len(undone) == 1
    assert [i.tool for i in result.report.undone] == ["book_hotel"]
    assert result.report.clean


@pytest.mark.parametrize("starter", sorted(STARTERS))
async def test_undo_data_from_a_thread_without_context_is_never_a_clean_compensation(location, starter):
    """Without the helper, the thread's ``record_undo_data`` raises ``CallContextLostError``
    naming ``carry_context``, ``copy_context().run`` and ``asyncio.to_thread``; the booking made there stands and the
    report lists it still dirty (its undo is not run blind), never a clean COMPENSATED."""
    result, hotels, undone, errors, keys = await _run(location, starter, carry=False)
    (error,) = errors
    assert isinstance(error, CallContextLostError) and error.code == "CALL_CONTEXT_LOST"
    assert "carry_context" in str(error) and "asyncio.to_thread" in str(error)
    assert "copy_context().run" in str(error)
    assert len(hotels) == 1 and undone == []               # the effect exists; no blind undo
    report = result.report
    assert report is not None and not report.clean
    dirty = [i for i in report.still_dirty if i.tool == "book_hotel"]
    assert dirty and "outside the call's context" in dirty[0].detail
    assert not (result.status is SagaStatus.COMPENSATED and report.clean)


async def _in_executor_without_context(call) -> tuple[object, list[BaseException]]:
    """A saga whose one tool runs ``call`` in an executor thread without the call's context,
    swallowing the ``CallContextLostError`` there, then returns as if all went well."""
    caught: list[BaseException] = []

    @function_tool
    @compensable(undo=lambda ctx: None)
    async def book(n: int) -> str:
        def work() -> None:
            try:
                call()
            except CallContextLostError as exc:
                caught.append(exc)
        await asyncio.get_running_loop().run_in_executor(None, work)
        return "booked"

    s = Sagacity(":memory:")
    try:
        result = await s.run(agent(scripted([("book", {"n": 1}, "1")], "x"), book), "go")
    finally:
        await s.aclose()
    return result, caught


async def test_undo_data_lost_in_a_thread_the_body_swallowed_is_still_dirty():
    """The body catches the thread's ``CallContextLostError`` and returns as if all went well:
    the call in flight was marked when the error was raised, so it is reported still dirty."""
    result, caught = await _in_executor_without_context(lambda: record_undo_data({"id": 1}))
    assert len(caught) == 1 and "record_undo_data" in str(caught[0])
    (dirty,) = result.report.still_dirty
    assert dirty.tool == "book" and "outside the call's context" in dirty.detail
    assert not result.report.clean


async def test_idempotency_key_from_a_thread_without_context_raises():
    """``current_idempotency_key`` from a context-less executor thread while a call is in flight
    raises rather than return ``None`` (a request sent without its key)."""
    _result, caught = await _in_executor_without_context(current_idempotency_key)
    assert len(caught) == 1 and "current_idempotency_key" in str(caught[0])


def test_outside_any_saga_both_stay_no_ops():
    """No saga call in flight anywhere in this process: nothing raises, the key is ``None``."""
    seen: list[object] = []

    def work() -> None:
        record_undo_data({"id": 1})
        seen.append(current_idempotency_key())

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    record_undo_data({"id": 2})
    assert seen == [None] and current_idempotency_key() is None
    assert carry_context(lambda x: x + 1)(1) == 2
