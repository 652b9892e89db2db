"""The values a request is built from, and how each kind is read and checked (one place, every face).

A request field names its kind in its metadata (``option(default, "tokens")``). Each kind takes the typed
value (an ``int`` for tokens, counts and bytes; ``float`` for rates and fractions; ``bool`` for switches) or
the text a person writes (``"32k"``, ``"80GB"``, ``"50/h"``), so the command line, the web API and a script
give the same value the same meaning; a value of the wrong type or out of range is one InputError naming
the option (``--context: ...``), whichever face it came through.
"""

from __future__ import annotations

import math

from kvbudget.errors import InputError
from kvbudget.units import parse_count, parse_memory, parse_per_second, parse_tokens

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from collections.abc import Callable

# Upper bounds of a plausible value: far above any deployment, low enough that arithmetic on them stays exact
# and fast (a token count past 2^40 or a GPU count past a million is a typo, not a plan).
MAX_TOKENS = 2**40
MAX_COUNT = 2**40
MAX_BYTES = 2**60
MAX_LIST = 64  # items in one comma-separated list (a sweep's axes multiply; compare bounds the product)


class Tokens(int):
    """A token count: ``Tokens("32k") == 32768``, ``Tokens(4096)`` (k = 1024, as context windows are quoted)."""

    def __new__(cls, value: int | str) -> Tokens:
        return super().__new__(cls, read_tokens(value, "tokens"))


class Memory(int):
    """A size in bytes: ``Memory("80GB") == 80 * 10**9``, ``Memory("24GiB") == 24 * 2**30``, ``Memory(2**30)``."""

    def __new__(cls, value: int | str) -> Memory:
        return super().__new__(cls, read_memory(value, "memory"))


def flag(name: str) -> str:
    """The option a field is given as on the command line (and named as in every error)."""
    return "--" + name.replace("_", "-")


def _whole(value: object, what: str, low: int, high: int, noun: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{what}: give a whole number of {noun}, not {value!r}")
    if not low <= value <= high:
        raise InputError(f"{what}: {value:,} is outside {low:,}..{high:,} {noun}")
    return int(value)


def read_tokens(value: object, what: str) -> int:
    if isinstance(value, str):
        value = parse_tokens(value, what=what)
    return _whole(value, what, 1, MAX_TOKENS, "tokens")


def read_count(value: object, what: str) -> int:
    if isinstance(value, str):
        value = parse_count(value, what=what)
    return _whole(value, what, 1, MAX_COUNT, "units")


def read_index(value: object, what: str) -> int:
    """A whole number from 0 (a seed)."""
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise InputError(f"{what}: cannot read {value!r} as a whole number") from None
    return _whole(value, what, 0, 2**63 - 1, "units")


def read_memory(value: object, what: str) -> int:
    if isinstance(value, str):
        value = parse_memory(value, what=what)
    return _whole(value, what, 1, MAX_BYTES, "bytes")


def _number(value: object, what: str, noun: str) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise InputError(f"{what}: cannot read {value!r} as {noun}") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{what}: give {noun}, not {value!r}")
    return float(value)


def read_positive(value: object, what: str) -> float:
    """A positive finite number (tokens per second)."""
    number = _number(value, what, "a number")
    if not number > 0 or not math.isfinite(number):
        raise InputError(f"{what}: {value!r} must be a positive number")
    return number


def read_fraction(value: object, what: str) -> float:
    """A fraction above 0 and at most 1 (gpu_memory_utilization, mem_fraction_static)."""
    number = _number(value, what, "a fraction like 0.9")
    if not 0 < number <= 1:
        raise InputError(f"{what}: {value} must be above 0 and at most 1")
    return number


def read_share(value: object, what: str) -> float:
    """A share of the pool below 1: ``0.05`` or ``5%``."""
    if isinstance(value, str) and value.strip().endswith("%"):
        number = read_positive(value.strip()[:-1], what) / 100
    else:
        number = read_positive(value, what)
    if number >= 1:
        raise InputError(f"{what}: {value!r} must be below 1 (100%)")
    return number


_SECONDS = {None: 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def read_seconds(value: object, what: str) -> float:
    """Seconds from ``600``, ``90s``, ``10m`` or ``2h`` (or a number of seconds)."""
    if isinstance(value, str):
        import re

        match = re.match(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h)?\s*$", value)
        if match is None or float(match.group(1)) <= 0:
            raise InputError(f"{what}: cannot read {value!r} as a positive time; write e.g. 600, 90s, 10m or 2h")
        return float(match.group(1)) * _SECONDS[match.group(2)]
    return read_positive(value, what)


_RATE_MULT = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def read_bandwidth(value: object, what: str) -> float:
    """Bytes per second from ``3.35TB/s``, ``3350GB/s`` or a plain number (decimal units, as published)."""
    if isinstance(value, str):
        import re

        match = re.match(r"^\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([kMGT]?)B?(?:/s)?\s*$", value)
        if match is None:
            raise InputError(f"{what}: cannot read {value!r}; write e.g. 3.35TB/s, 3350GB/s or 3.35e12")
        number = float(match.group(1)) * _RATE_MULT[match.group(2)]
        if not number > 0 or not math.isfinite(number):
            raise InputError(f"{what}: {value!r} must be positive")
        return number
    return read_positive(value, what)


def read_per_second(value: object, what: str) -> float:
    """A rate per second: ``50/h``, ``0.2/s``, ``1200/day``; a bare number is per second."""
    if isinstance(value, str):
        return parse_per_second(value, what=what, default_unit="s")
    return read_positive(value, what)


def read_text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"{what}: give text, not {value!r}")
    if not value.strip():
        raise InputError(f"{what}: give a value, not an empty text")
    return value


def read_switch(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{what}: a switch; give True or False, not {value!r}")
    return value


def read_list(value: object, what: str, item: Callable[[object, str], object]) -> tuple[object, ...]:
    """A comma-separated text or a list of values, each read as ``item`` reads one; at least one value."""
    if isinstance(value, str):
        items: list[object] = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        items = [value]
    if not items:
        raise InputError(f"{what}: give at least one value (comma-separated)")
    if len(items) > MAX_LIST:
        raise InputError(f"{what}: {len(items):,} values; give at most {MAX_LIST}")
    return tuple(item(part, what) for part in items)


READERS: dict[str, Callable[[object, str], object]] = {
    "text": read_text,
    "tokens": read_tokens,
    "count": read_count,
    "index": read_index,
    "memory": read_memory,
    "positive": read_positive,
    "fraction": read_fraction,
    "share": read_share,
    "seconds": read_seconds,
    "bandwidth": read_bandwidth,
    "per_second": read_per_second,
    "switch": read_switch,
}
