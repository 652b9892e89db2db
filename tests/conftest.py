"""Test-suite settings.

* Hypothesis runs derandomized, so CI explores the same examples every run and a property failure is
  reproducible from the log (explore new examples by hand with --hypothesis-seed).
* Text output is checked for its content with lines unwrapped (KVBUDGET_WIDTH=0); its layout, every line within
  100 columns, is checked once for every command by tests/test_widths.py.
* The suite cannot quietly shrink: under KVBUDGET_REQUIRE_ALL=1 (scripts/check sets it) a skipped test fails,
  unless it is marked ``@pytest.mark.may_skip("why it is legitimately platform-dependent")``; the summary names
  those. Without the switch, skips stay skips (a developer without torch or SimPy can still run the rest).
* The summary ends with the count of tests that ran per group (the top-level directory under tests/), so a group
  that stopped running shows.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Generator, Iterator
from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("kvbudget", derandomize=True, print_blob=True)
settings.load_profile("kvbudget")

REQUIRE_ALL = "KVBUDGET_REQUIRE_ALL"


def _required() -> bool:
    return os.environ.get(REQUIRE_ALL, "") not in ("", "0")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "may_skip(reason): the test may skip even under KVBUDGET_REQUIRE_ALL=1, for the platform reason given",
    )


@pytest.fixture(autouse=True)
def _unwrapped_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVBUDGET_WIDTH", "0")


def _allowed(item: pytest.Item) -> bool:
    mark = item.get_closest_marker("may_skip")
    return mark is not None and bool(mark.args or mark.kwargs.get("reason"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and _required() and not _allowed(item):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (
            f"skipped under {REQUIRE_ALL}=1, where every test must run: {reason}\n"
            "install what it needs (scripts/setup), or mark it @pytest.mark.may_skip(reason) if the skip is "
            "legitimately platform-dependent"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.CollectReport = outcome.get_result()
    if report.skipped and _required():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"{collector.nodeid} skipped at collection under {REQUIRE_ALL}=1: {reason}"


def _group(nodeid: str) -> str:
    parts = nodeid.split("::", 1)[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else "(top level)"


def _reports(terminalreporter: Any) -> Iterator[pytest.TestReport]:
    for key in ("passed", "failed", "skipped", "error", "xfailed", "xpassed"):
        for report in terminalreporter.stats.get(key, []):
            if isinstance(report, pytest.TestReport):
                yield report


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    ran: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    allowed: list[str] = []
    for report in _reports(terminalreporter):
        group = _group(report.nodeid)
        if report.when == "call" and (not report.skipped or hasattr(report, "wasxfail")):
            ran[group] += 1
        elif report.skipped and report.when in ("setup", "call") and not hasattr(report, "wasxfail"):
            skipped[group] += 1
            if _required():
                allowed.append(report.nodeid)
    if not ran and not skipped:
        return
    terminalreporter.section("tests run per group")
    for group in sorted(set(ran) | set(skipped)):
        extra = f", {skipped[group]} skipped" if skipped[group] else ""
        terminalreporter.write_line(f"{group:<14} {ran[group]:>5} ran{extra}")
    terminalreporter.write_line(f"{'all':<14} {sum(ran.values()):>5} ran")
    for nodeid in allowed:
        terminalreporter.write_line(f"allowed skip (may_skip): {nodeid}")
