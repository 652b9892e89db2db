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

# One exact, bounded reader for every number a person writes (issue 22): ASCII digits only (no ``٣٢``, no
# ``1_000``, no sign, no exponent, no ``Infinity`` or ``nan``), at most MAX_DIGITS significant digits (a
# 400-digit value is refused before any arithmetic), and the value kept exact as a fraction of integers: never a
# float on the way in, so a 40-digit count is refused by its range, not rounded into it.
MAX_TEXT = 64  # characters in one written value; longer is a paste accident, not a number
MAX_DIGITS = 30
_NUMBER = r"([0-9]+(?:\.[0-9]+)?|\.[0-9]+)"
_TOKEN_PATTERN = r"^\s*" + _NUMBER + r"\s*([kKmM]?)\s*$"
_TOKEN_MULT = {"": 1, "k": 1024, "m": 1024 * 1024}
_MEM_PATTERN = r"^\s*" + _NUMBER + r"\s*([kKmMgGtTpP]?)(i?)([bB]?)\s*$"
_MEM_POW = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}

# The plausible range of each quantity, named in its error (requests/values.py reads every request field
# through these): far above any deployment, low enough that arithmetic on them stays exact and fast.
MAX_TOKENS = 2**40  # tokens in one context, prefix or batch
MAX_COUNT = 2**32  # a generic count (block size, micro-batch, weight bits, probes)
MAX_GPUS = 2**16  # tensor / pipeline parallel size, GPUs, replicas
MAX_SESSIONS = 10**9  # concurrent sessions or sequences
# an engine's running limit (vLLM --max-num-seqs): 1,048,576, 1,024x vLLM's largest default (1,024)
MAX_RUNNING = 2**20
MAX_BYTES = 2**60  # one exbibyte


def shown(text: str, limit: int = 40) -> str:
    """``text`` quoted for a one-line error: control characters escaped, long values cut (``'aaaa…' (5,000
    characters)``)."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text):,} characters)"


def _match(pattern: str, text: str, what: str, example: str, reading: str = "a number") -> re.Match[str]:
    if not isinstance(text, str):
        raise InputError(f"{what}: give text or a number, not {type(text).__name__}")
    match = re.match(pattern, text, re.ASCII) if len(text) <= MAX_TEXT else None
    if match is None:
        raise InputError(f"{what}: cannot read {shown(text)} as {reading}; write e.g. {example}")
    digits = len(match.group(1).replace(".", "").lstrip("0"))
    if digits > MAX_DIGITS:
        raise InputError(f"{what}: {shown(text)} has {digits} significant digits; at most {MAX_DIGITS} are read")
    return match


def exact(number: str) -> tuple[int, int]:
    """``"12.50"`` -> ``(1250, 100)``: a decimal matched by ``_NUMBER`` as numerator and denominator."""
    whole, _, frac = number.partition(".")
    return int(whole or "0") * 10 ** len(frac) + int(frac or "0"), 10 ** len(frac)


def in_range(value: int, what: str, low: int, high: int, noun: str) -> int:
    """``value`` if ``low <= value <= high``; otherwise an InputError naming the range (a huge value by its
    digits, not printed in full)."""
    if not low <= value <= high:
        size = f"{value:,}" if abs(value) < 10**MAX_DIGITS else f"{a_or_an(f'{len(str(abs(value))):,}')}-digit number"
        raise InputError(f"{what}: {size} is outside {low:,}..{high:,} {noun}")
    return value


def parse_tokens(text: str, *, what: str = "--tokens", high: int = MAX_TOKENS) -> int:
    """Parse a token count: ``32768``, ``32k`` or ``128K`` (k = 1024 tokens, m = 1024^2), exactly.

    Token counts in this field use binary multiples because every context window is quoted so
    (a "32K" model has 32,768 positions). Raises InputError on anything else or outside 1..``high``.
    """
    match = _match(_TOKEN_PATTERN, text, what, "32768, 32k or 128K", "a token count")
    num, den = exact(match.group(1))
    num *= _TOKEN_MULT[match.group(2).lower()]
    if num % den:
        raise InputError(f"{what}: {shown(text)} is not a whole number of tokens")
    return in_range(num // den, what, 1, high, "tokens")


def parse_token_list(text: str, *, what: str = "--tokens") -> list[int]:
    """Parse a comma-separated list of token counts (``8k,32k,128k``)."""
    items = [item for item in text.split(",") if item.strip()]
    if not items:
        raise InputError(f"{what}: give at least one value, e.g. 8k,32k,128k")
    return [parse_tokens(item, what=what) for item in items]


def parse_count(
    text: str, *, what: str, low: int = 1, high: int = MAX_COUNT, noun: str = "", example: str = "8"
) -> int:
    """Parse a whole count (sequences, tensor-parallel size) in ``low..high``: ASCII digits only."""
    match = _match(r"^\s*([0-9]+)\s*$", text, what, example, "a whole number")
    return in_range(int(match.group(1)), what, low, high, noun or "(a whole number)")


def parse_count_list(text: str, *, what: str) -> list[int]:
    """Parse a comma-separated list of positive integers (``1,8``)."""
    items = [item for item in text.split(",") if item.strip()]
    if not items:
        raise InputError(f"{what}: give at least one value, e.g. 1,8")
    return [parse_count(item, what=what) for item in items]


def parse_decimal(text: str, *, what: str, example: str = "0.9") -> tuple[int, int]:
    """A non-negative decimal written plainly (``0.9``, ``2.5``, ``.5``), exactly, as (numerator, denominator)."""
    return exact(_match(r"^\s*" + _NUMBER + r"\s*$", text, what, example).group(1))


def parse_real(text: str, *, what: str, low: float, high: float, noun: str, example: str = "2.5") -> float:
    """A plain decimal in ``low..high`` (``0.5``, ``12``), read exactly and divided once: no exponent, no
    ``inf``/``nan``, no sign (a range may include 0)."""
    num, den = parse_decimal(text, what=what, example=example)
    if not low * den <= num <= high * den:
        raise InputError(f"{what}: {shown(text)} is outside {low:g}..{high:g} {noun}")
    return num / den


def parse_memory(text: str, *, what: str = "--memory", high: int = MAX_BYTES) -> int:
    """Parse a memory size into bytes: ``80GB`` (10^9), ``80GiB`` (2^30), ``512MiB``, ``1.5GB``, exactly
    (a fraction of a byte rounds half up), in 1..``high`` bytes.

    A bare number is bytes. A unit must say which system it is in (``G``/``GB`` is SI, ``Gi``/``GiB``
    is binary), because the two differ by 7% at GB scale.
    """
    match = _match(_MEM_PATTERN, text, what, "80GB, 80GiB or 512MiB", "a memory size")
    number, prefix, binary, _b = match.groups()
    if binary and not prefix:
        raise InputError(f"{what}: {shown(text)} has 'i' without a prefix; write e.g. 24GiB")
    num, den = exact(number)
    num *= (1024 if binary else 1000) ** _MEM_POW[prefix.lower()]
    return in_range((2 * num + den) // (2 * den), what, 1, high, "bytes")


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


def money(x: float | None) -> str:
    """A price as every face writes one: ``-`` when there is none, 4 decimals under 1 (``0.1197``), else 2."""
    return "-" if x is None else f"{x:,.4f}" if x < 1 else f"{x:,.2f}"


def fixed(value: float, digits: int) -> str:
    """``value`` with ``digits`` decimals and thousands commas, rounded as the web page rounds (JavaScript's
    toLocaleString: the float's shortest decimal, ties away from zero), not as ``f"{value:.1f}"`` does (the binary
    value, whose 157.35 lies just below the tie: 157.3 where the page and a reader write 157.4)."""
    from decimal import ROUND_HALF_UP, Decimal

    exact = Decimal(repr(float(value))).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)
    return f"{exact:,.{digits}f}"


def latency_text(value: float | None) -> str:
    """A latency as the report and the page write it: milliseconds under a second, else seconds; "-" for none."""
    if value is None:
        return "-"
    return f"{fixed(value * 1e3, 1)} ms" if value < 1 else f"{fixed(value, 2)} s"


def counted(n: int | float, noun: str, plural: str | None = None) -> str:
    """``n`` and its noun, singular for exactly one (``1 session``, ``2 sessions``, ``1,024 GPUs``)."""
    number = f"{n:,}" if isinstance(n, int) else f"{n:g}"
    return f"{number} {noun if n == 1 else (plural or noun + 's')}"


def counted_verb(n: int, noun: str, one: str, many: str) -> str:
    """``n`` and its noun with the verb agreeing (``1 GPU stays``, ``3 GPUs stay``)."""
    return f"{counted(n, noun)} {one if n == 1 else many}"


def a_or_an(label: str) -> str:
    """``label`` (a number as written: ``8K``, ``18,432``, ``32K``; or a dtype read letter by letter: ``fp16``,
    ``q8_0``) after the article its spoken form takes: ``an`` before eight, eleven, eighteen, eighty, eight hundred
    (``an 8K``, ``an 11,000``) and before a letter named with a vowel sound (``an fp16``, ``an int4``), ``a``
    otherwise (``a 32K``, ``a 110``, ``a bf16``)."""
    lead = label.split(",", maxsplit=1)[0].rstrip("KMG")  # the group spoken first: 11 of 11,000 and of 11K
    letter = label[:1].lower()
    vowel = label.startswith("8") or lead in ("11", "18") or (letter.isalpha() and letter in "aefhilmnorsx")
    return f"{'an' if vowel else 'a'} {label}"


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


_PER = {  # seconds in each unit, as integers (the rate stays exact until one final division)
    "s": 1,
    "sec": 1,
    "second": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "h": 3600,
    "hr": 3600,
    "hour": 3600,
    "d": 86400,
    "day": 86400,
}
_PER_PATTERN = r"^\s*" + _NUMBER + r"\s*(?:/\s*([a-z]+))?\s*$"
MIN_RATE, MAX_RATE = 1e-9, 1e9  # per second: once in 30 years .. a billion a second


def parse_per_second(text: str, *, what: str, default_unit: str) -> float:
    """A rate as a number per second: ``50/h``, ``0.2/s``, ``1200/day``, ``2.49/h``; a bare number is per
    ``default_unit``. Read exactly, then divided once (no exponent, no ``inf``), within MIN_RATE..MAX_RATE."""
    if isinstance(text, str) and len(text) <= MAX_TEXT:
        match = re.match(_PER_PATTERN, text, re.ASCII | re.IGNORECASE)
    else:
        match = None
    unit = (match.group(2) or default_unit).lower() if match else ""
    if match is None or unit not in _PER:
        raise InputError(f"{what}: cannot read {shown(str(text))}; write e.g. 50/h, 0.2/s or 1200/day")
    num, den = exact(_match(_PER_PATTERN, text, what, "50/h").group(1))
    value = num / (den * _PER[unit])
    if not MIN_RATE <= value <= MAX_RATE:
        raise InputError(f"{what}: {shown(text)} is outside {MIN_RATE:g}..{MAX_RATE:g} per second")
    return value
