"""R-03 (issue 18): undo data that always lands. ``uuid.UUID``, ``pathlib`` paths and ``ipaddress``
values have a canonical form (their ``str``), which is what the undo gets back; a value that still
cannot be journaled never turns an effect into a clean FAILED: the call is journaled with the
encoding marker as its undo data, fails the saga, and is reported still dirty, naming the error.
On every backend of ``tests/backends.py``."""

from __future__ import annotations

import ipaddress
import pathlib
import uuid

import pytest
from agents import Runner, function_tool

from sagacity_agents import CompensationContext, Sagacity, SagaStatus, compensable, record_undo_data
from sagacity_agents.backends import InMemoryJournal, Phase
from sagacity_agents.core.canonical import canonical_bytes, to_canonical_value
from sagacity_agents.core.saga.verdict import read_verdict
from sagacity_agents.sdk.hooks import SagaRunHooks, SagaStopped
from tests.backends import BACKENDS

from .helpers import agent, scripted

pytestmark = pytest.mark.case("R-03")


class CardDeclined(Exception):
    pass


@pytest.fixture(params=BACKENDS, ids=str)
def location(request) -> str:
    """Each backend's fresh location in turn (``":memory:"``, a SQLite file, a PostgreSQL URI)."""
    return request.param.location(request)


def test_canonical_forms_of_uuid_paths_and_ip_values():
    """Each new type's canonical form is its ``str``; nested values and set members too."""
    booking = uuid.UUID("12345678-1234-5678-1234-567812345678")
    value = {
        "id": booking,
        "file": pathlib.PurePosixPath("/var/spool/booking.json"),
        "win": pathlib.PureWindowsPath("C:/spool/b.json"),
        "v4": ipaddress.ip_address("192.0.2.1"),
        "v6": ipaddress.ip_address("2001:DB8:0:0::1"),
        "net": ipaddress.ip_network("192.0.2.0/24"),
        "iface": ipaddress.ip_interface("2001:db8::1/64"),
        "ids": {uuid.UUID(int=2), uuid.UUID(int=1)},
    }
    assert to_canonical_value(value) == {
        "id": "12345678-1234-5678-1234-567812345678",
        "file": "/var/spool/booking.json",
        "win": "C:\\spool\\b.json",
        "v4": "192.0.2.1",
        "v6": "2001:db8::1",
        "net": "192.0.2.0/24",
        "iface": "2001:db8::1/64",
        "ids": ["00000000-0000-0000-0000-000000000001", "00000000-0000-0000-0000-000000000002"],
    }
    assert canonical_bytes(booking) == b'"12345678-1234-5678-1234-567812345678"'


def trip(hotels: dict[str, str], undone: list[CompensationContext], undo_value):
    """The README's flow: book a hotel, then ``record_undo_data`` with the new booking's id;
    then the card charge is declined, so the hotel is compensated."""

    def cancel_hotel(ctx: CompensationContext) -> None:
        undone.append(ctx)
        hotels.pop(ctx.undo_data["booking_id"])

    @function_tool
    @compensable(undo=cancel_hotel)
    async def book_hotel(city: str, nights: int) -> str:
        booking_id = uuid.uuid4()
        hotels[str(booking_id)] = city                      # the effect, then its undo data
        record_undo_data({"booking_id": undo_value(booking_id)})
        return f"booked {booking_id}"

    @function_tool
    @compensable(undo=lambda ctx: None)
    async def charge_card(amount: int) -> str:
        raise CardDeclined("card declined")

    model = scripted([("book_hotel", {"city": "Lisbon", "nights": 3}, "c1")],
                     [("charge_card", {"amount": 300}, "c2")], "Booked!")
    return agent(model, book_hotel, charge_card)


async def test_uuid_undo_data_reaches_the_undo_as_str(location):
    """``record_undo_data({"booking_id": uuid.uuid4()})`` after the booking: journaled, and the
    undo gets the id back as a ``str`` (its JSON form) and cancels that very booking."""
    hotels: dict[str, str] = {}
    undone: list[CompensationContext] = []
    s = Sagacity(location)
    try:
        result = await s.run(trip(hotels, undone, lambda booking_id: booking_id), "Book Lisbon")
        entries = await s.journal.entries(result.saga_id)
    finally:
        await s.aclose()
    assert result.status is SagaStatus.COMPENSATED, result.exception
    (ctx,) = undone
    assert isinstance(ctx.undo_data["booking_id"], str)
    assert uuid.UUID(ctx.undo_data["booking_id"])          # the canonical text of the UUID
    assert hotels == {}                                     # the booking was cancelled
    assert [i.tool for i in result.report.undone] == ["book_hotel"]
    assert result.report.still_dirty == () and result.report.clean
    executed = next(e for e in entries if e.phase is Phase.EXECUTED and e.tool == "book_hotel")
    assert executed.payload["undo_data"] == ctx.undo_data


async def test_unencodable_undo_data_is_reported_still_dirty_never_clean(location):
    """An undo-data value with no canonical encoding (``object()``) after the booking: the body is
    not interrupted (its result reaches the model), the call is journaled EXECUTED with the
    encoding marker as its undo data, the saga fails, the undo is never run blind, and the report
    lists the booking still dirty, naming the encoding error. Never COMPENSATED with nothing
    dirty."""
    hotels: dict[str, str] = {}
    undone: list[CompensationContext] = []
    s = Sagacity(location)
    try:
        result = await s.run(trip(hotels, undone, lambda booking_id: object()), "Book Lisbon")
        entries = await s.journal.entries(result.saga_id)
    finally:
        await s.aclose()
    assert undone == [] and len(hotels) == 1               # the effect exists; no blind undo
    (failure,) = result.failures                           # STOP: charge_card never ran
    assert failure.tool == "book_hotel" and "undo data could not be journaled" in failure.error
    assert "no canonical encoding for type object" in failure.error
    report = result.report
    assert not report.clean and report.undone == ()
    (dirty,) = report.still_dirty
    assert dirty.tool == "book_hotel" and dirty in report.no_undo
    assert "undo data could not be journaled" in dirty.detail
    assert "$.booking_id: no canonical encoding for type object" in dirty.detail
    executed = next(e for e in entries if e.phase is Phase.EXECUTED and e.tool == "book_hotel")
    assert executed.payload["undo_data"] == {
        "$encoding_error": "$.booking_id: no canonical encoding for type object", "type": "dict"}
    assert executed.payload["result"].startswith("booked ")
    closed = next(e for e in entries if e.phase is Phase.SAGA_CLOSED)
    assert closed.payload["report"]["no_undo"][0]["detail"] == dirty.detail
    assert result.status is SagaStatus.COMPENSATED         # closed, and says what is still dirty


async def test_unencodable_undo_data_then_a_raise_is_still_dirty(location):
    """The body records unencodable undo data, then raises: FAILED, but with the marker as its
    undo data, so compensation counts the call as an effect that may exist (still dirty),
    never as a clean failure."""

    @function_tool
    @compensable(undo=lambda ctx: None)
    def book(n: int) -> str:
        record_undo_data({"id": 7, "conn": object()})
        raise RuntimeError("timeout after the booking was sent")

    s = Sagacity(location)
    try:
        result = await s.run(agent(scripted([("book", {"n": 1}, "1")], "x"), book), "go")
        entries = await s.journal.entries(result.saga_id)
    finally:
        await s.aclose()
    failed = next(e for e in entries if e.phase is Phase.FAILED)
    assert "$encoding_error" in failed.payload["undo_data"]
    (dirty,) = result.report.still_dirty
    assert dirty.tool == "book" and "$.conn: no canonical encoding" in dirty.detail
    assert not result.report.clean


async def test_verdict_counts_lost_undo_data_as_cannot_be_undone():
    """While the run is still going, the saga's verdict (guardrails, REFUSE_EFFECTS) lists the
    call under ``kept`` (cannot be undone), not under ``to_undo``, and counts the saga failed."""
    seen = []

    @function_tool
    @compensable(undo=lambda ctx: None)
    async def book(n: int) -> str:
        record_undo_data({"id": object()})
        return "booked"

    model = scripted([("book", {"n": 1}, "1")], "x")
    hooks = SagaRunHooks(InMemoryJournal(), agent=agent(model, book))
    with pytest.raises(SagaStopped):
        async with hooks:
            try:
                await Runner.run(hooks.agent, "go", hooks=hooks)
            finally:
                seen.append(await read_verdict(hooks.saga))
    (verdict,) = seen
    assert verdict.failed and verdict.to_undo == ()
    (kept,) = verdict.kept
    assert kept.tool == "book" and "undo data could not be journaled" in kept.detail
    assert "cannot be undone: book" in verdict.summary()
