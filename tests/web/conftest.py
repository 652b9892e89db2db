"""Fixtures of the web tests: one ``kvbudget serve`` and one headless Chromium per session (tests/web/browser.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.web.browser import Server, Tab, chromium, serve, tab

if TYPE_CHECKING:
    from playwright.sync_api import Browser


@pytest.fixture(scope="package")
def server() -> Iterator[Server]:
    with serve() as running:
        yield running


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    """One Chromium for tests/web, closed when its last test ends: Playwright's sync API keeps an event loop
    running in this thread while it is open, which would break every later test that calls asyncio.run."""
    with chromium() as launched:
        yield launched


@pytest.fixture
def calculator(browser: Browser, server: Server) -> Iterator[Tab]:
    """A laptop-sized page of the calculator, loaded and done with its first update."""
    with tab(browser) as opened:
        opened.page.goto(server.url)
        opened.page.wait_for_selector("body[data-state=ready]")
        yield opened
