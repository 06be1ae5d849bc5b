"""E-07: an exception whose ``str()`` / ``repr()`` raises is journaled FAILED with a safe
description and the saga compensates, for async and sync bodies, through the SDK, on each backend
(memory, SQLite, PostgreSQL): the description is what every journal must store."""

from __future__ import annotations

import pytest
from agents import function_tool

from sagacity_agents import Sagacity, SagaStatus, compensable
from sagacity_agents.backends import Phase
from sagacity_agents.saga import compensate
from sagacity_agents.errors import describe_error
from sagacity_agents.stores import open_journal

from ..sdk.helpers import agent, scripted


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def journal(request, tmp_path):
    """A journal of each backend (PostgreSQL: this test's schema), closed after the test."""
    location = {"memory": ":memory:", "sqlite": str(tmp_path / "j.db")}.get(request.param)
    if request.param == "postgres":
        location = request.getfixturevalue("pg_uri")
    opened = open_journal(location)
    yield opened
    await opened.close()


class Unprintable(Exception):
    __str__ = lambda self: 1 / 0  # noqa: E731 - the case as the issue states it
    __repr__ = lambda self: 1 / 0  # noqa: E731


def test_describe_error_never_raises():
    assert describe_error(Unprintable()) == (
        "Unprintable (message unavailable: its __str__ raised ZeroDivisionError)"
    )
    assert describe_error(ValueError("x")) == "ValueError: x"
    assert describe_error(ValueError()) == "ValueError"


LONE_SURROGATE = b"card \xff declined".decode("utf-8", "surrogateescape")


@pytest.mark.case("E-07")
@pytest.mark.parametrize(("error", "described"), [
    (Unprintable, "Unprintable (message unavailable: its __str__ raised ZeroDivisionError)"),
    # No JSON encoding for a lone surrogate: FAILED and SAGA_FAILED could not be written, the
    # run raised EncodingError and the hotel stayed booked. Escaped in the description.
    (lambda: ValueError(LONE_SURROGATE), "ValueError: card \\udcff declined"),
], ids=["str raises", "lone surrogate"])
@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_unprintable_exception_is_journaled_failed_and_compensated(journal, sync, error, described):
    """E-07: book a hotel (undoable), then a compensable body raises an exception whose str()
    raises, or whose message holds a lone surrogate (bytes decoded with surrogateescape): FAILED
    with a safe description, the hotel is cancelled, COMPENSATED at once (no in-flight wait:
    in_flight_timeout is 30 s by default and the run must not reach it), the chain verifies."""
    world: list[str] = []

    @function_tool
    @compensable(undo=lambda ctx: world.remove(ctx.args["city"]))
    async def book_hotel(city: str) -> str:
        world.append(city)
        return "booked"

    def charge_body(amount: int) -> str:
        raise error()

    async def charge_async(amount: int) -> str:
        raise error()

    body = charge_body if sync else charge_async
    body.__name__ = "charge"
    charge = function_tool(compensable(undo=lambda ctx: None)(body))
    model = scripted([("book_hotel", {"city": "Porto"}, "1")], [("charge", {"amount": 80}, "2")], "done")
    result = await Sagacity(journal, in_flight_timeout=5).run(agent(model, book_hotel, charge), "go")
    entries = await journal.entries(result.saga_id)
    failed = [e for e in entries if e.phase is Phase.FAILED]
    assert len(failed) == 1 and failed[0].tool == "charge"
    assert failed[0].payload["error"] == described
    assert result.status is SagaStatus.COMPENSATED
    assert world == []
    assert entries[-1].phase is Phase.SAGA_CLOSED and entries[-1].payload["status"] == "COMPENSATED"
    assert (await Sagacity(journal).verify(result.saga_id))[0].ok


@pytest.mark.case("E-07")
async def test_unprintable_exception_in_an_undo_is_journaled(journal):
    """An undo raising such an exception is journaled COMPENSATION_FAILED with the safe text."""
    from sagacity_agents.saga import ToolDeclaration, Reversibility  # noqa: PLC0415


    def undo(ctx):
        raise Unprintable()

    await journal.append("s", Phase.SAGA_OPENED, write_key="saga:open", payload={})
    intent = await journal.append("s", Phase.INTENT, write_key="i", tool="t", call_id="c",
                                  payload={"args": {}, "reversibility": "compensatable"})
    await journal.append("s", Phase.EXECUTED, write_key="o", tool="t", call_id="c",
                         payload={"intent_seq": intent.seq, "result": None})
    decl = ToolDeclaration(name="t", reversibility=Reversibility.COMPENSATABLE, undo=undo)
    report = await compensate(journal, "s", {"t": decl})
    assert report.failed[0].detail.startswith("Unprintable (message unavailable")

