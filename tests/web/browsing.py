"""Helpers of the browser tests (the ``browser`` fixture is in ``conftest.py``)."""

from __future__ import annotations

import time
from typing import Any

from tests.web.support import TOKENS, Server


def sign_in(driver: Any, server: Server, who: str = "alice") -> None:
    """Sign ``who`` in through the login form."""
    from selenium.webdriver.common.by import By

    driver.get(f"{server.url}/")
    assert driver.current_url.endswith("/login")
    driver.find_element(By.ID, "secret").send_keys(TOKENS[who])
    driver.find_element(By.CSS_SELECTOR, "form.login button").click()
    wait_for(lambda: driver.find_element(By.ID, "identity").text == who)


def wait_for(check: Any, timeout: float = 60.0) -> Any:
    """Poll ``check()`` until truthy (exceptions retried); return its value."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
            if value:
                return value
        except Exception:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s")
        time.sleep(0.1)


def no_dialog(driver: Any) -> None:
    """No alert, confirm or prompt is open (a script that ran would have opened one)."""
    from selenium.common.exceptions import NoAlertPresentException

    try:
        alert = driver.switch_to.alert
        text = alert.text
    except NoAlertPresentException:
        return
    raise AssertionError(f"a dialog opened: {text!r}")
