"""Invisible, control and reordering characters in model-written values: the inbox (API, pages,
timeline, a real browser) and ``sagacity approvals show`` show them escaped and warn, so what a
human reads is exactly what the tool receives."""

from __future__ import annotations

import asyncio

from click.testing import CliRunner

from sagacity_agents.cli import cli
from sagacity_agents.visible import escape, hidden_in
from sagacity_agents.web.timeline import timeline_svg
from tests.web.browsing import sign_in, wait_for
from tests.web.support import Bank, Server, client, paused_saga

BIDI_IBAN = "DE89 3704 0044 \u202e0003 1025 3200\u202c"
"""An IBAN whose last groups a browser shows reversed (right-to-left override ... pop)."""
ZW_MEMO = "invoice\u200b 42\u00a0ok\u2028next\ufeff"
"""Zero-width space, no-break space, line separator, BOM."""
CALL_ID = "call\u2066_wire\u2069"
"""A call id with an isolate pair (model-written too)."""
HOSTILE = {"iban": BIDI_IBAN, "call_id": CALL_ID}


def test_the_rule():
    assert escape(BIDI_IBAN) == "DE89 3704 0044 \\u202e0003 1025 3200\\u202c"
    assert escape(ZW_MEMO) == "invoice\\u200b 42\\u00a0ok\\u2028next\\ufeff"
    assert escape("tab\there \x1b[31m \x7f \x85 \U000e0041 \ufe0f \u3164") == \
        "tab\\there \\u001b[31m \\u007f \\u0085 \\U000e0041 \\ufe0f \\u3164"
    assert escape("plain text, naïve, 東京, emoji 😀") == "plain text, naïve, 東京, emoji 😀"
    assert hidden_in([{"k\u200d": ["x\u202e"]}, None, 3]) == [
        "U+200D ZERO WIDTH JOINER", "U+202E RIGHT-TO-LEFT OVERRIDE"]


async def test_the_api_names_them_and_the_pages_escape_them(db, serve):
    saga_id, request = await paused_saga(db, Bank(), ZW_MEMO, agent=HOSTILE)
    server = serve(db)
    async with client(server) as http:
        shown = (await http.get(f"/api/approvals/{request.request_id}")).json()
        assert shown["args"]["iban"] == BIDI_IBAN  # JSON carries the value as it is
        assert shown["hidden_characters"] == [
            "U+2066 LEFT-TO-RIGHT ISOLATE", "U+2069 POP DIRECTIONAL ISOLATE",
            "U+202E RIGHT-TO-LEFT OVERRIDE", "U+202C POP DIRECTIONAL FORMATTING",
            "U+200B ZERO WIDTH SPACE", "U+00A0 NO-BREAK SPACE", "U+2028 LINE SEPARATOR",
            "U+FEFF ZERO WIDTH NO-BREAK SPACE"]
        listed = (await http.get("/api/approvals")).json()["items"][0]
        assert "U+202E RIGHT-TO-LEFT OVERRIDE" in listed["hidden_characters"]
        for page in (f"/requests/{request.request_id}", "/", f"/sagas/{saga_id}"):
            html = (await http.get(page)).text
            for char in "\u202e\u202c\u2066\u2069\u200b\u00a0\u2028\ufeff":
                assert char not in html, (page, hex(ord(char)))
        html = (await http.get(f"/requests/{request.request_id}")).text
        assert 'id="hidden-warning"' in html and "U+202E RIGHT-TO-LEFT OVERRIDE" in html
        assert '<span class="esc" title="U+202E RIGHT-TO-LEFT OVERRIDE">\\u202e</span>' in html
        assert html.count("\\u202e</span>") >= 3  # table, canonical JSON, raw arguments
        assert "\\u2066</span>" in html  # the call id
        assert "\\u2066</tspan>" in html  # the timeline's label
        inbox = (await http.get("/")).text
        assert "hidden-chars" in inbox and "\\u2066</span>" in inbox


def test_the_timeline_escapes_and_cuts_between_escapes():
    from sagacity_agents.core.entries import JournalEntry, Phase

    entry = JournalEntry(saga_id="s", seq=1, phase=Phase.AWAITING_APPROVAL, tool="t\u202eool",
                         call_id="c" * 60 + "\u200b", payload={"request_id": "r"},
                         recorded_at="2024-01-01T00:00:00.000000Z", prev_hash="0" * 64,
                         hash="1" * 64, write_key="k", canonical=b"")
    svg = timeline_svg([entry])
    assert "\u202e" not in svg and "\u200b" not in svg
    assert '<tspan class="esc">\\u202e</tspan>' in svg and "\\u200b" in svg  # the <title> has all


def test_the_cli_shows_them_escaped_and_warns(tmp_path):
    db = str(tmp_path / "inbox.db")
    _, request = asyncio.run(paused_saga(db, Bank(), ZW_MEMO, agent=HOSTILE))
    out = CliRunner().invoke(cli, ["approvals", "show", request.request_id, "--db", db])
    assert out.exit_code == 0, out.output
    for char in "\u202e\u202c\u2066\u200b\u00a0\u2028\ufeff":
        assert char not in out.output, hex(ord(char))
    assert "WARNING" in out.output and "U+202E RIGHT-TO-LEFT OVERRIDE" in out.output
    assert "\\u202e0003 1025 3200\\u202c" in out.output


async def test_a_browser_shows_the_escapes_where_the_value_is(db, serve, browser):
    from selenium.webdriver.common.by import By

    _, request = await paused_saga(db, Bank(), ZW_MEMO, agent=HOSTILE)
    server: Server = serve(db)
    await asyncio.to_thread(sign_in, browser, server)
    browser.get(f"{server.url}/requests/{request.request_id}")
    assert "U+202E" in browser.find_element(By.ID, "hidden-warning").text
    iban = browser.find_element(By.XPATH, "//table[@id='args']//tr[th/code='iban']/td")
    assert iban.text == "DE89 3704 0044 \\u202e0003 1025 3200\\u202c"  # in order, no override
    for box in ("args", "canonical", "raw-args"):
        element = browser.find_element(By.ID, box)
        assert "\u202e" not in element.text and "\\u202e0003 1025 3200" in element.text, box
        escapes = element.find_elements(By.CSS_SELECTOR, "span.esc")
        assert escapes and escapes[0].value_of_css_property("background-color") != "rgba(0, 0, 0, 0)"
    assert browser.find_element(By.XPATH, "//dt[.='Call id']/following-sibling::dd").text == \
        "call\\u2066_wire\\u2069"
    label = wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "svg.timeline tspan.esc"))
    assert label[0].text.startswith("\\u")
