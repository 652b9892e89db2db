"""Parsing of token counts and memory sizes, and rendering of byte counts with labelled units.

Bytes are integers everywhere; a unit is chosen only here, when rendering, and is always labelled:
SI (``GB`` = 10^9 bytes) or IEC (``GiB`` = 2^30 bytes).
"""

from __future__ import annotations

import re

from kvbudget.errors import InputError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from typing import Literal

    # for the type checker only (import it under TYPE_CHECKING): no typing at start-up
    UnitSystem = Literal["si", "iec"]

_TOKEN_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*$")
_TOKEN_MULT = {"": 1, "k": 1024, "m": 1024 * 1024}

# Compiled on first use, by re's own cache: an answer that reads no such value does not pay for the pattern.
_MEM_PATTERN = r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(i?)([bB]?)\s*$"
_MEM_POW = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}


def parse_tokens(text: str, *, what: str = "--tokens") -> int:
    """Parse a token count: ``32768``, ``32k`` or ``128K`` (k = 1024 tokens, m = 1024^2).

    Token counts in this field use binary multiples because every context window is quoted so
    (a "32K" model has 32,768 positions). Raises InputError on anything else or on values < 1.
    """
    match = _TOKEN_RE.match(text)
    if match is None:
        raise InputError(f"{what}: cannot read {text!r} as a token count; write e.g. 32768, 32k or 128K")
    number, suffix = match.groups()
    value = float(number) * _TOKEN_MULT[suffix.lower()]
    if value != int(value):
        raise InputError(f"{what}: {text!r} is not a whole number of tokens")
    if value < 1:
        raise InputError(f"{what}: {text!r} must be at least 1 token")
    return int(value)


def parse_token_list(text: str, *, what: str = "--tokens") -> list[int]:
    """Parse a comma-separated list of token counts (``8k,32k,128k``)."""
    items = [item for item in text.split(",") if item.strip()]
    if not items:
        raise InputError(f"{what}: give at least one value, e.g. 8k,32k,128k")
    return [parse_tokens(item, what=what) for item in items]


def parse_count(text: str, *, what: str) -> int:
    """Parse a positive integer count (sequences, tensor-parallel size)."""
    try:
        value = int(text.strip())
    except ValueError:
        raise InputError(f"{what}: cannot read {text!r} as a whole number") from None
    if value < 1:
        raise InputError(f"{what}: {text!r} must be at least 1")
    return value


def parse_count_list(text: str, *, what: str) -> list[int]:
    """Parse a comma-separated list of positive integers (``1,8``)."""
    items = [item for item in text.split(",") if item.strip()]
    if not items:
        raise InputError(f"{what}: give at least one value, e.g. 1,8")
    return [parse_count(item, what=what) for item in items]


def parse_memory(text: str, *, what: str = "--memory") -> int:
    """Parse a memory size into bytes: ``80GB`` (10^9), ``80GiB`` (2^30), ``512MiB``, ``1.5GB``.

    A bare number is bytes. A unit must say which system it is in (``G``/``GB`` is SI, ``Gi``/``GiB``
    is binary), because the two differ by 7% at GB scale.
    """
    match = re.match(_MEM_PATTERN, text)
    if match is None:
        raise InputError(f"{what}: cannot read {text!r} as a memory size; write e.g. 80GB, 80GiB or 512MiB")
    number, prefix, binary, _b = match.groups()
    power = _MEM_POW[prefix.lower()]
    if binary and not prefix:
        raise InputError(f"{what}: {text!r} has 'i' without a prefix; write e.g. 24GiB")
    base = 1024 if binary else 1000
    value = float(number) * float(base**power)
    if value < 1:
        raise InputError(f"{what}: {text!r} must be a positive size")
    return round(value)


_SI = [(10**12, "TB"), (10**9, "GB"), (10**6, "MB"), (10**3, "kB")]
_IEC = [(2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")]


def format_bytes(value: int, units: UnitSystem = "iec", *, digits: int = 2) -> str:
    """Render a byte count with a labelled unit, e.g. ``10.00 GiB`` or ``10.74 GB``."""
    table = _IEC if units == "iec" else _SI
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    for scale, label in table:
        if magnitude >= scale:
            return f"{sign}{magnitude / scale:.{digits}f} {label}"
    return f"{sign}{magnitude} B"


def exact_bytes(value: int, units: UnitSystem = "iec") -> str:
    """Exact bytes plus a labelled human unit: ``21,000,000,000 B (19.56 GiB)``."""
    return f"{value:,} B ({format_bytes(value, units)})"


def format_int(value: int) -> str:
    """Render an integer with thousands separators (``327,680``)."""
    return f"{value:,}"


def counted(n: int | float, noun: str, plural: str | None = None) -> str:
    """``n`` and its noun, singular for exactly one (``1 session``, ``2 sessions``, ``1,024 GPUs``)."""
    number = f"{n:,}" if isinstance(n, int) else f"{n:g}"
    return f"{number} {noun if n == 1 else (plural or noun + 's')}"


def format_duration(seconds: float) -> str:
    """A duration a reader can take in: seconds below two minutes, then minutes, hours, days (``95.0 s``,
    ``12.5 min``, ``3.2 h``, ``2.1 days``)."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def format_tokens(value: int) -> str:
    """Render a token count compactly when it is an exact binary multiple (``32K``), else with commas."""
    if value >= 1024 * 1024 and value % (1024 * 1024) == 0:
        return f"{value // (1024 * 1024)}M"
    if value >= 1024 and value % 1024 == 0:
        return f"{value // 1024}K"
    return f"{value:,}"


_PER = {
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hour": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
}
# Compiled on first use, by re's own cache: an answer that reads no such value does not pay for the pattern.
_PER_PATTERN = r"^\s*(\d+(?:\.\d+)?(?:e-?\d+)?)\s*(?:/\s*([a-z]+))?\s*$"


def parse_per_second(text: str, *, what: str, default_unit: str) -> float:
    """A rate as a number per second: ``50/h``, ``0.2/s``, ``1200/day``, ``2.49/h``; a bare number is per
    ``default_unit``."""
    match = re.match(_PER_PATTERN, text, re.IGNORECASE)
    unit = (match.group(2) or default_unit).lower() if match else ""
    if match is None or unit not in _PER:
        raise InputError(f"{what}: cannot read {text!r}; write e.g. 50/h, 0.2/s or 1200/day")
    import math  # a shared library to load: only for a rate

    value = float(match.group(1))
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{what}: {text!r} must be a positive number")
    return value / _PER[unit]
