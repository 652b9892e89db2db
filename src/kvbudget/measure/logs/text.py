"""Reading real log lines: colour codes, worker prefixes, sizes with their printed resolution.

Real logs carry ANSI colours (sometimes with the ESC byte lost in a copy), timestamps, worker or
rank prefixes (``(VllmWorker rank=1 pid=..)``, ``(EngineCore_DP0 pid=..)``, ``[... TP2]``) and
interleaved lines from several ranks. Figures are found by phrase anywhere on a line, so the
prefixes never matter; the rank is kept so that per-GPU figures can be compared across GPUs.
"""

from __future__ import annotations

import re

from kvbudget.errors import InputError
from kvbudget.units import MAX_DIGITS, exact

ANSI = re.compile(r"(?:\x1b)?\[[0-9;]{1,8}m")
RANK = re.compile(
    r"\((?:VllmWorker(?:Process)?|Worker|EngineCore)[^)]*?(?:rank=(\d+)|pid=(\d+)|TP(\d+)|DP(\d+))[^)]*\)"
    r"|\[[^\]]*\b(TP\d+(?:\s*(?:PP|EP|DP)\d+)*)\]"
)
MAX_LOG_BYTES = 2 * 2**30  # a start-up log is megabytes; refuse anything that is not a log

UNIT_BYTES = {"b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "kb": 10**3, "mb": 10**6, "gb": 10**9}


def size(number: str, unit: str, *, binary_gb: bool = False) -> tuple[int, int]:
    """(bytes, resolution) of a printed size; ``binary_gb`` reads "GB"/"MB" as 2^30/2^20.

    The resolution is half the last printed digit: "11.12 GiB" is 11.12 x 2^30 ± 0.005 x 2^30.
    """
    key = unit.strip().lower()
    if binary_gb and key in ("gb", "mb", "kb"):
        key = key[0] + "ib"
    if key not in UNIT_BYTES:
        raise ValueError(f"unknown size unit {unit!r}")
    scale = UNIT_BYTES[key]
    digits = number.replace(".", "").lstrip("0")
    if len(digits) > MAX_DIGITS or not number.replace(".", "", 1).isascii():
        raise InputError(f"a printed size of {len(digits):,} digits ({number[:20]}...) is no figure an engine prints")
    sign = -1 if number.startswith("-") else 1  # vLLM prints a negative KV memory when nothing is left
    num, den = exact(number.lstrip("+-"))  # exact integers: a Decimal of 28 digits would round a long figure silently
    value = sign * ((2 * num * scale + den) // (2 * den))
    resolution = (scale + den) // (2 * den) if den > 1 else scale // 2
    return value, resolution


def number(text: str) -> int:
    """An integer printed with or without thousands separators ("91,056")."""
    digits = text.replace(",", "").replace("_", "")
    if len(digits.lstrip("-0")) > MAX_DIGITS:
        raise InputError(f"a printed count of {len(digits):,} digits ({digits[:20]}...) is no figure an engine prints")
    return int(digits)


def clean(line: str) -> str:
    return ANSI.sub("", line).rstrip("\r\n")


def rank_of(line: str) -> str | None:
    m = RANK.search(line)
    if not m:
        return None
    if m.group(5):
        return m.group(5).replace(" ", "")
    rank, pid, tp, dp = m.group(1), m.group(2), m.group(3), m.group(4)
    return f"rank{rank}" if rank else f"TP{tp}" if tp else f"DP{dp}" if dp else f"pid{pid}"
