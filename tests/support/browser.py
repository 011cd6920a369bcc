"""Headless Chromium for the tests: Debian's ``chromium`` driven by Playwright for Python's sync
API (no browser download). A plugin of ``tests/conftest.py``: its fixtures need no import.

* ``chromium``: the browser, launched once per test module (a module that uses none never
  starts it); a test that asks for it is marked ``browser`` (tests/support/markers.py);
* ``new_page(**options)``: a tab in a fresh browser context of its own (its own cookies and
  storage: a user of its own) with Playwright's ``new_context`` options (``viewport``,
  ``permissions``, ``extra_http_headers``...); every context closed after the test.

Without chromium a test skips, or fails when ``CI`` is set (tests/support/servers.py's ``require``).
"""

from __future__ import annotations

import datetime
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.servers import require

CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--no-first-run", "--disable-sync",
]
# The sale page tests set the browser's clock an hour behind: the page must follow the server's.
BROWSER_CLOCK_SKEW = datetime.timedelta(hours=-1)


def chromium_executable() -> str:
    """The system chromium, or the test stops (a skip that says how to install it)."""
    found = shutil.which("chromium") or next(
        (p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if Path(p).exists()), None
    )
    return require(found, "chromium", "sudo apt-get install -y chromium chromium-driver")


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """A headless Chromium (a Playwright ``Browser``) for this module's tests."""
    executable = chromium_executable()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True,
                                             args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def new_page(chromium: Any) -> Iterator[Callable[..., Any]]:
    """``new_page(**options)``: a Playwright ``Page`` in a new context made with ``options``."""
    contexts: list[Any] = []

    def open_page(**options: Any) -> Any:
        context = chromium.new_context(**options)
        contexts.append(context)
        return context.new_page()

    yield open_page
    for context in contexts:
        context.close()


def skewed(page: Any) -> Any:
    """``page`` with its clock :data:`BROWSER_CLOCK_SKEW` off the real one."""
    page.clock.set_system_time(datetime.datetime.now() + BROWSER_CLOCK_SKEW)
    return page
