"""R-04 f and g (issue 18): ``SagaRunHooks`` takes a path or URI as ``Sagacity`` does, and the
README's ``Runner.run`` + ``SagaRunHooks`` snippet runs as shown: ``SagaStopped`` out of
``Runner.run`` under STOP, the verdict read from the hooks once it is caught."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from agents import Runner, function_tool

from sagacity_agents import SagaRunHooks, SagaStatus, compensable
from sagacity_agents.backends import Phase, SqliteJournal
from sagacity_agents.errors import SagaStateError
from sagacity_agents.stores import open_journal
from tests.backends import BACKENDS

from .helpers import agent, scripted

README = Path(__file__).resolve().parents[2] / "README.md"


class CardDeclined(Exception):
    pass


def trip_agent(*, declined: bool, undone: list[str]):
    """Book a hotel, then charge the card (declined or not)."""

    @function_tool
    @compensable(undo=lambda ctx: undone.append(ctx.tool), scope="trip")
    def book_hotel(city: str) -> str:
        return f"booked {city}"

    @function_tool
    @compensable(undo=lambda ctx: undone.append(ctx.tool), scope="trip")
    def charge_card(amount: int) -> str:
        if declined:
            raise CardDeclined("card declined")
        return "charged"

    model = scripted([("book_hotel", {"city": "Lisbon"}, "c1")],
                     [("charge_card", {"amount": 300}, "c2")], "Your trip is booked!")
    return agent(model, book_hotel, charge_card, name="travel")


@pytest.fixture(params=BACKENDS, ids=str)
def location(request) -> str:
    return request.param.location(request)


@pytest.mark.case("R-04f")
async def test_hooks_take_a_path_or_uri_as_sagacity_does(location):
    """``SagaRunHooks(location)`` for each backend's location form (``":memory:"``, a SQLite
    path, a ``postgresql://`` URI): the saga is journaled there (read back through a journal
    opened on the same location), and the hooks close what they opened when the block is left,
    so they refuse a second block (new hooks continue the saga)."""
    undone: list[str] = []
    hooks = SagaRunHooks(location, agent=trip_agent(declined=False, undone=undone))
    async with hooks:
        result = await Runner.run(hooks.agent, "Book Lisbon", hooks=hooks)
    assert result.final_output == "Your trip is booked!"
    assert hooks.status is SagaStatus.COMPLETED
    if location != ":memory:":
        journal = open_journal(location)
        try:
            assert [e.phase for e in await journal.entries(hooks.saga_id)][-1] is Phase.SAGA_CLOSED
        finally:
            await journal.close()
    with pytest.raises(SagaStateError, match="make new ones"):
        async with hooks:
            pass


@pytest.mark.case("R-04f")
async def test_hooks_take_a_pathlib_path(tmp_path):
    """A ``pathlib.Path`` is a SQLite file too, created when missing."""
    db = tmp_path / "journal.db"
    undone: list[str] = []
    hooks = SagaRunHooks(db, agent=trip_agent(declined=True, undone=undone))
    with pytest.raises(Exception, match="card declined"):
        async with hooks:
            await Runner.run(hooks.agent, "Book Lisbon", hooks=hooks)
    assert hooks.status is SagaStatus.COMPENSATED and undone == ["book_hotel"]
    journal = SqliteJournal(db)
    try:
        assert (await journal.entries(hooks.saga_id))[-1].phase is Phase.SAGA_CLOSED
    finally:
        await journal.close()


def readme_hooks_snippet() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text("utf-8"), re.DOTALL)
    (block,) = [b for b in blocks if "except SagaStopped" in b]
    return block


async def run_snippet(snippet: str, agent_: object) -> None:
    namespace: dict[str, object] = {}
    code = compile("async def snippet(agent):\n" + textwrap.indent(snippet, "    "), str(README), "exec")
    exec(code, namespace)  # noqa: S102 - the README's snippet is the code under test
    await namespace["snippet"](agent_)  # type: ignore[operator]


@pytest.mark.case("R-04g")
async def test_readme_hooks_snippet_shows_saga_stopped_and_the_verdict(tmp_path, monkeypatch, capsys):
    """The README's snippet, run as printed (its ``journal.db`` in a fresh directory): the card is
    declined, ``Runner.run`` raises ``SagaStopped`` (caught by the snippet), and by then the
    hooks say COMPENSATED and what was undone; with the card accepted, the same code prints the
    final output and COMPLETED."""
    monkeypatch.chdir(tmp_path)
    snippet = readme_hooks_snippet()
    undone: list[str] = []
    await run_snippet(snippet, trip_agent(declined=True, undone=undone))
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "charge_card failed: CardDeclined: card declined"
    assert out[1] == "SagaStatus.COMPENSATED"
    assert "book_hotel" in out[2] and out[2].endswith(" ()")  # undone: the hotel; nothing dirty
    assert undone == ["book_hotel"] and (tmp_path / "journal.db").exists()

    await run_snippet(snippet, trip_agent(declined=False, undone=undone))
    assert capsys.readouterr().out.splitlines() == ["Your trip is booked!", "SagaStatus.COMPLETED"]
