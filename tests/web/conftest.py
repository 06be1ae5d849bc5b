"""The inbox's browser tests share Debian's headless Chromium (Selenium + chromedriver from
``chromium-driver``; both installed by ``.ci/run``). Without them the tests skip, except under CI
(``$CI`` set), where they fail, as the PostgreSQL tests do."""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest

from sagacity_agents.web import TokenLogin, create_app
from tests.web.support import TOKENS, Server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture
def browser() -> Any:
    """A headless Chromium (``--no-sandbox``: CI runs as root)."""
    if not (CHROMIUM and CHROMEDRIVER):
        message = "no chromium / chromedriver (apt-get install chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(f"{message} and CI is set: the browser tests must run", pytrace=False)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1100,1400"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture
def db(tmp_path) -> str:
    """A SQLite journal path in the test's folder."""
    return str(tmp_path / "inbox.db")


@pytest.fixture
def serve() -> Any:
    """``serve(location, **create_app options)``: the app on a real uvicorn server, stopped
    after the test (``TokenLogin(TOKENS)`` unless another authenticator is given)."""
    servers: list[Server] = []

    def start(location, **options):
        options.setdefault("authenticator", TokenLogin(TOKENS))
        server = Server(create_app(location, **options))
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
