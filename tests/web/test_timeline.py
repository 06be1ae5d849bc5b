"""The saga timeline (server-drawn SVG): what each row says, and every text escaped."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from sagacity_agents import Sagacity
from sagacity_agents.backends.memory.journal import InMemoryJournal
from sagacity_agents.core.entries import Phase
from sagacity_agents.web.timeline import timeline_rows, timeline_svg
from tests.web.support import Bank, make_agent, paused_saga


async def test_hostile_tool_names_are_escaped_in_the_svg():
    journal = InMemoryJournal()
    evil = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    await journal.append("s", Phase.INTENT, write_key="i", tool=evil, call_id='c"1<',
                         payload={"reversibility": "compensatable"})
    await journal.append("s", Phase.EXECUTED, write_key="o", tool=evil, call_id='c"1<',
                         payload={"intent_seq": 1})
    svg = timeline_svg(await journal.entries("s"))
    assert "<script" not in svg and "<img" not in svg and "&lt;script&gt;" in svg
    root = ET.fromstring(svg)  # well-formed XML: nothing broke out of an attribute or a text
    tags = {el.tag.split("}")[-1] for el in root.iter()}
    assert tags <= {"svg", "g", "title", "text", "rect"}
    assert [r.kind for r in timeline_rows(await journal.entries("s"))] == ["executed", "would-undo"]


async def test_a_paused_then_recovered_saga_shows_its_undo_and_nothing_left_to_undo(tmp_path):
    db = str(tmp_path / "t.db")
    bank = Bank()
    saga_id, request = await paused_saga(db, bank)
    sagacity = Sagacity(db)
    try:
        paused = timeline_rows(await sagacity.journal.entries(saga_id), request.request_id)
        assert [(r.kind, r.current) for r in paused] == [("executed", False), ("awaiting", True),
                                                         ("would-undo", False)]
        await sagacity.recover(saga_id, make_agent(bank))
        rows = timeline_rows(await sagacity.journal.entries(saga_id))
    finally:
        await sagacity.aclose()
    kinds = [r.kind for r in rows]
    assert "undo" in kinds and "would-undo" not in kinds  # closed: nothing would be undone
    assert kinds.index("undo") > kinds.index("executed")
