"""A real server and a real browser for the web tests (no mock stands in for either).

``serve()`` starts ``kvbudget serve --port 0`` as a subprocess and reads its URL from the first line it prints;
``chromium()`` launches the system's Chromium (Debian's ``chromium`` package, found on PATH) headless through
Playwright. Without the web extra, Playwright or Chromium the tests that need them are skipped with the reason,
unless ``$KVBUDGET_REQUIRE_BROWSER`` is set (``scripts/check`` sets it): then they fail, so CI cannot pass without
having run them. Reusable by any test that drives a page (``from tests.web.browser import chromium``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Page

LAPTOP = {"width": 1366, "height": 900}
PHONE = {"width": 390, "height": 844}


def unavailable(message: str) -> None:
    """Skip with ``message``, or fail when $KVBUDGET_REQUIRE_BROWSER says the browser tests must run."""
    if os.environ.get("KVBUDGET_REQUIRE_BROWSER"):
        pytest.fail(f"{message} (KVBUDGET_REQUIRE_BROWSER is set: the browser tests must run; run scripts/setup)")
    pytest.skip(message)


def require_modules(*names: str) -> None:
    missing = [name for name in names if importlib.util.find_spec(name) is None]
    if missing:
        unavailable(f"{' and '.join(missing)} not installed: pip install -e '.[dev,web]'")


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        unavailable("no chromium on PATH: scripts/setup installs Debian's chromium (apt-get install chromium)")
        raise AssertionError("unreachable")
    return path


@dataclass
class Server:
    url: str  # http://127.0.0.1:PORT/
    process: subprocess.Popen[str]

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        return self.request("GET", path, None, headers)

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        """(status, body) of one request to the server; an HTTP error status is returned, not raised."""
        req = urllib.request.Request(self.url + path.lstrip("/"), data=body, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=60) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()


@contextmanager
def serve(*options: str) -> Iterator[Server]:
    """``kvbudget serve --port 0 [options]`` running for the block; its URL is the first line it prints."""
    require_modules("starlette", "uvicorn")
    command = [sys.executable, "-m", "kvbudget", "serve", "--port", "0", *options]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            if not line.startswith("kvbudget serve: http://127.0.0.1:"):
                process.kill()
                _, err = process.communicate(timeout=30)
                raise AssertionError(f"kvbudget serve did not start: {line!r} {err!r}")
            yield Server(line.split()[2], process)
        finally:
            process.terminate()
            try:
                process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()


@contextmanager
def chromium() -> Iterator[Browser]:
    """The system Chromium, headless, through Playwright (no browser download)."""
    require_modules("playwright")
    path = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Tab:
    """A page with every console error and uncaught exception it raised."""

    page: Page
    errors: list[str] = field(default_factory=list)


@contextmanager
def tab(browser: Browser, viewport: dict[str, int] = LAPTOP) -> Iterator[Tab]:
    context = browser.new_context(viewport={"width": viewport["width"], "height": viewport["height"]})
    page = context.new_page()
    opened = Tab(page)

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            opened.errors.append(f"console: {message.text}")

    page.on("console", console)
    page.on("pageerror", lambda exc: opened.errors.append(f"page error: {exc}"))
    try:
        yield opened
    finally:
        context.close()
