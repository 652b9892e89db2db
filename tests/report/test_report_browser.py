"""The report in a real browser (Playwright driving the system's Chromium, headless), from a file:// URL:
no console errors, no request beyond the file itself, every chart rendered with a non-zero box and its
marks drawn, no sideways scrolling, and chart text at a readable size, at laptop (1366 x 900) and phone
(390 x 844) widths. Screenshots of both are saved; with KVBUDGET_UPDATE_SCREENSHOTS=1 they replace
docs/img/report-laptop.png and docs/img/report-phone.png (the docs' example, docs/report.md).

Skipped, with the reason, when Chromium or the playwright package is missing, unless
KVBUDGET_REQUIRE_BROWSER=1 (CI with the browser installed), where a missing browser fails the test.
"""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.report.cli_runs import DOCS_EXAMPLE, ROOT, run

VIEWPORTS = {"laptop": (1366, 900), "phone": (390, 844)}
CHARTS = {"per-token", "ledger", "sessions", "curve", "cdf", "levers"}
CHART_WIDTH = 420  # the charts' viewBox width (kvbudget.report.svg.WIDTH)
TICK_FONT = 13  # the smallest chart text, in viewBox units

_CHARTS_JS = """() => [...document.querySelectorAll('svg.chart')].map(svg => {
  const box = svg.getBoundingClientRect();
  const marks = [...svg.querySelectorAll('.bar, .segment, .line, .point')].filter(e => {
    const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; });
  return {chart: svg.dataset.chart, width: box.width, height: box.height, marks: marks.length};
})"""


def _browser() -> tuple[Any, str]:
    """Playwright's sync API and the system Chromium, or skip (fail under KVBUDGET_REQUIRE_BROWSER=1)."""
    reason = None
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        # imported by name: playwright is a test-only tool, not a dependency of kvbudget or its type check
        api = importlib.import_module("playwright.sync_api")
    except ImportError:
        api, reason = None, "the playwright package is not installed (pip install playwright)"
    if chromium is None:
        reason = "no chromium on PATH (Debian: apt-get install chromium)"
    if reason is not None or api is None or chromium is None:
        if os.environ.get("KVBUDGET_REQUIRE_BROWSER") == "1":
            pytest.fail(f"KVBUDGET_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(str(reason))
    return api, chromium


def test_the_report_renders_in_chromium_at_laptop_and_phone_widths(tmp_path: Path) -> None:
    api, chromium = _browser()
    page_file = tmp_path / "report.html"
    code, _, err = run("report", *DOCS_EXAMPLE, "--out", str(page_file))
    assert code == 0, err
    update = os.environ.get("KVBUDGET_UPDATE_SCREENSHOTS") == "1"
    with api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True)
        try:
            for name, (width, height) in VIEWPORTS.items():
                page = browser.new_page(viewport={"width": width, "height": height})
                errors: list[str] = []
                requests: list[str] = []
                page.on("console", lambda m, errors=errors: errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda exc, errors=errors: errors.append(str(exc)))
                page.on("request", lambda r, requests=requests: requests.append(r.url))
                page.goto(page_file.as_uri(), wait_until="load")
                assert errors == [], name
                assert requests == [page_file.as_uri()], name  # the page itself, nothing else
                charts = page.evaluate(_CHARTS_JS)
                assert {c["chart"] for c in charts} == CHARTS, name
                for c in charts:
                    assert c["width"] > 0 and c["height"] > 0 and c["marks"] > 0, (name, c)
                    text_px = TICK_FONT * c["width"] / CHART_WIDTH
                    assert 10 <= text_px <= 17, (name, c["chart"], text_px)  # readable, not shouting
                assert page.evaluate("document.documentElement.scrollWidth") <= width, name  # no sideways scroll
                shot = tmp_path / f"report-{name}.png"
                page.screenshot(path=str(shot), full_page=True)
                assert shot.stat().st_size > 10_000
                if update:
                    shutil.copyfile(shot, ROOT / "docs" / "img" / f"report-{name}.png")
                page.close()
        finally:
            browser.close()
