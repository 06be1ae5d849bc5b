"""The inbox in a real browser: Debian's headless Chromium driven by Selenium (chromedriver from
``chromium-driver``; both installed by ``.ci/run``). Without them the tests skip, except under CI
(``$CI`` set), where they fail, as the PostgreSQL tests do.

Set ``SAGACITY_SCREENSHOT=PATH`` to save the request page's screenshot there (docs/ holds one).
"""

from __future__ import annotations

import asyncio
import json
import os

from sagacity_agents import Sagacity
from sagacity_agents.web import TokenLogin, create_app
from tests.web.browsing import no_dialog, sign_in, wait_for
from tests.web.support import (
    HOSTILE_MEMO,
    TOKENS,
    Bank,
    Server,
    eventually,
    make_agent,
    paused_saga,
)


async def test_approve_a_wire_and_the_callback_resumes_it_once(tmp_path, browser):
    from selenium.webdriver.common.by import By

    db = str(tmp_path / "inbox.db")
    bank = Bank()
    saga_id, request = await paused_saga(db, bank)
    results: list[str] = []

    async def on_decided(saga: str, requests: list) -> None:
        sagacity = Sagacity(db)
        try:
            results.append((await sagacity.resume(saga, make_agent(bank))).status.value)
        finally:
            await sagacity.aclose()

    server = Server(create_app(db, authenticator=TokenLogin(TOKENS), on_decided=on_decided))
    try:
        await asyncio.to_thread(sign_in, browser, server)
        row = browser.find_element(By.CSS_SELECTOR, "#pending tbody tr")
        assert "send_wire" in row.text and "ago" in row.text
        await asyncio.to_thread(wait_for, lambda: browser.find_element(By.ID, "pending-count").text == "1")
        row.find_element(By.LINK_TEXT, "send_wire").click()
        cells = {r.find_element(By.TAG_NAME, "th").text: r.find_element(By.TAG_NAME, "td").text
                 for r in browser.find_elements(By.CSS_SELECTOR, "#args tbody tr")}
        assert cells == {"amount_eur": "2500", "iban": "DE89370400440532013000", "memo": "invoice 42"}
        assert browser.find_element(By.ID, "args-hash").text == request.args_hash
        assert browser.find_element(By.ID, "canonical").text == \
            '{"amount_eur":2500,"iban":"DE89370400440532013000","memo":"invoice 42"}'
        svg = browser.find_element(By.CSS_SELECTOR, "svg.timeline")
        assert len(svg.find_elements(By.CSS_SELECTOR, "rect.executed")) == 1  # the hold
        assert len(svg.find_elements(By.CSS_SELECTOR, "rect.awaiting.current")) == 1  # this pause
        assert len(svg.find_elements(By.CSS_SELECTOR, "rect.would-undo")) == 1  # the hold's undo
        if os.environ.get("SAGACITY_SCREENSHOT"):
            browser.save_screenshot(os.environ["SAGACITY_SCREENSHOT"])
        browser.find_element(By.ID, "reason").send_keys("invoice 42 checked against the PO")
        browser.find_element(By.ID, "approve").click()
        await asyncio.to_thread(wait_for, lambda: "approved by alice" in browser.find_element(By.ID, "decided-by").text)
        assert "invoice 42 checked" in browser.find_element(By.ID, "decided-by").text
        await eventually(lambda: results, timeout=30)
        assert results == ["COMPLETED"] and len(bank.wires) == 1
        browser.refresh()
        assert browser.find_element(By.ID, "state").text == "consumed"
        browser.get(f"{server.url}/")
        decided = browser.find_element(By.CSS_SELECTOR, "#decided tbody tr")
        assert "alice" in decided.text and "resumed" in decided.text
        assert "decided" in decided.get_attribute("class")
        browser.get(f"{server.url}/sagas/{saga_id}")
        assert browser.find_element(By.ID, "saga-status").text == "COMPLETED"
        assert browser.find_element(By.ID, "verify").text.startswith("Verified")
        await asyncio.sleep(0.5)
        assert len(bank.wires) == 1 and results == ["COMPLETED"]
        no_dialog(browser)
    finally:
        server.stop()


async def test_hostile_arguments_render_as_text_and_run_nothing(tmp_path, browser):
    from selenium.webdriver.common.by import By

    db = str(tmp_path / "inbox.db")
    saga_id, request = await paused_saga(db, Bank(), memo=HOSTILE_MEMO)
    server = Server(create_app(db, authenticator=TokenLogin(TOKENS)))
    try:
        await asyncio.to_thread(sign_in, browser, server)
        for page in (f"/requests/{request.request_id}", "/", f"/sagas/{saga_id}"):
            browser.get(f"{server.url}{page}")
            no_dialog(browser)
            assert browser.execute_script("return window.__pwned === undefined") is True, page
        browser.get(f"{server.url}/requests/{request.request_id}")
        memo = browser.find_element(By.CSS_SELECTOR, "#args tbody tr:nth-child(3) td")
        assert memo.text == HOSTILE_MEMO  # shown exactly, as text
        assert browser.find_elements(By.CSS_SELECTOR, "#args img, #args script, #canonical img") == []
        assert json.loads(browser.find_element(By.ID, "raw-args").text)["memo"] == HOSTILE_MEMO
        assert browser.find_elements(By.CSS_SELECTOR, "main script, main img") == []
        await asyncio.sleep(0.3)
        no_dialog(browser)
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"
                  and "favicon" not in e["message"]]
        assert errors == [], errors  # nothing was even attempted (no CSP violation, no bad image)
    finally:
        server.stop()


async def test_the_pending_count_updates_without_reloading(tmp_path, browser):
    from selenium.webdriver.common.by import By

    db = str(tmp_path / "inbox.db")
    bank = Bank()
    await paused_saga(db, bank)
    server = Server(create_app(db, authenticator=TokenLogin(TOKENS)))
    try:
        await asyncio.to_thread(sign_in, browser, server)
        await asyncio.to_thread(wait_for, lambda: browser.find_element(By.ID, "pending-count").text == "1")
        assert not browser.find_element(By.ID, "live-notice").is_displayed()
        browser.execute_script("document.body.setAttribute('data-marker', 'same page')")
        await paused_saga(db, bank)  # a new request arrives
        await asyncio.to_thread(wait_for, lambda: browser.find_element(By.ID, "pending-count").text == "2")
        assert browser.find_element(By.ID, "live-notice").is_displayed()
        assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-marker") == "same page"
    finally:
        server.stop()
