"""A real browser for the tests: Debian's Chromium (`make browser-deps`) driven by Playwright.

Never `playwright install`: the system Chromium at /usr/bin/chromium is used, headless, with
the flags this closed network needs. A missing browser fails the test with the command that
installs it; nothing is skipped.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
INSTALL_HINT = (
    "the browser tests need Debian's Chromium and Playwright: run `make browser-deps` "
    "(apt-get install -y chromium) and `make venv` (playwright from requirements/dev.lock); "
    "never `playwright install`: the system Chromium at /usr/bin/chromium is used"
)


@contextmanager
def chromium() -> Iterator[Any]:
    """A launched headless Chromium (a Playwright Browser)."""
    if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
        pytest.fail(f"{CHROMIUM} not found: {INSTALL_HINT}", pytrace=False)
    try:
        from playwright.sync_api import sync_playwright  # noqa: PLC0415
    except ImportError:
        pytest.fail(f"playwright is not installed: {INSTALL_HINT}", pytrace=False)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def outcome(page: Any) -> str:
    """The approval page's outcome (`<p id="outcome" data-outcome=...>`)."""
    element = page.locator("#outcome")
    element.wait_for()
    return str(element.get_attribute("data-outcome"))
