"""A ``kvbudget loadtest --json`` result read back (``report --loadtest``): impossible figures are refused.

The document is kvbudget's own (measure/loadtest/result.py), but a file is what a user gives: edited, cut,
or another tool's. Counts are whole numbers in 0..2^40; times are finite and not negative; levels run
forward (each level's ``duration_s`` not negative, together no longer than the run plus a second of
rounding); the sessions sustained are a level that was held and passed; a run that sustained sessions
produced output tokens.
"""

from __future__ import annotations

import math
from typing import Any

from kvbudget.errors import InputError

MAX_COUNT = 2**40
COUNTS = (
    "sessions_started",
    "sessions_completed",
    "sessions_failed",
    "requests",
    "errors",
    "refused",
)


def _count(doc: dict[str, Any], key: str, path: str, where: str = "") -> int | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise InputError(
            f"--loadtest {path}: {where}{key} {str(value)[:40]!r} is not a count in 0..2^40; not a "
            "load test result kvbudget wrote: run kvbudget loadtest ... --out RESULT.json"
        )
    return value


def _seconds(doc: dict[str, Any], key: str, path: str, where: str = "") -> float | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise InputError(
            f"--loadtest {path}: {where}{key} {str(value)[:40]!r} is not a time (seconds, not "
            "negative): the times of this result go backwards; run the load test again"
        )
    return float(value)


def check(doc: dict[str, Any], path: str) -> None:
    """InputError naming the first impossible figure of a load test result."""
    for key in COUNTS:
        _count(doc, key, path)
    tokens = doc.get("tokens")
    output = _count(tokens, "output", path, "tokens.") if isinstance(tokens, dict) else None
    if isinstance(tokens, dict):
        _count(tokens, "prompt", path, "tokens.")
    total = _seconds(doc, "duration_s", path)
    levels = doc.get("levels")
    levels = levels if isinstance(levels, list) else []
    held = 0.0
    passed: set[int] = set()
    for i, level in enumerate(levels[:100_000]):
        if not isinstance(level, dict):
            raise InputError(f"--loadtest {path}: levels[{i}] is not a level; not a load test result kvbudget wrote")
        sessions = _count(level, "sessions", path, f"levels[{i}].")
        held += _seconds(level, "duration_s", path, f"levels[{i}].") or 0.0
        if level.get("passed") is True and sessions is not None:
            passed.add(sessions)
    if total is not None and held > total + 1.0:
        raise InputError(
            f"--loadtest {path}: its levels last {held:,.1f} s, longer than the whole run ({total:,.1f} s): the "
            "times of this result do not add up; run the load test again"
        )
    sustained = doc.get("sessions_sustained")
    if isinstance(sustained, int) and not isinstance(sustained, bool) and sustained > 0:
        if levels and sustained not in passed:
            raise InputError(
                f"--loadtest {path}: sessions_sustained {sustained:,} is no level that passed "
                f"({', '.join(map(str, sorted(passed))) or 'none passed'}); run the load test again"
            )
        if output == 0:
            raise InputError(
                f"--loadtest {path}: {sustained:,} sessions sustained with no output token: the server answered "
                "nothing; check the server and run the load test again"
            )
