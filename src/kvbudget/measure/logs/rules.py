"""The machinery every engine's reader shares: phrase rules and how repeated figures combine.

A rule is a regex and a handler; each reader is a list of rules applied to every line. A figure
printed once per GPU (vLLM "Available KV cache memory", SGLang "KV Cache is allocated") is kept at
its smallest for capacity (the smallest GPU governs: vLLM takes the minimum across workers,
vllm/v1/engine/core.py) and at its largest for consumption (weights, activations, graphs).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from kvbudget.measure.logs.record import EngineLog, Figure, Setting, SettingValue, Unit
from kvbudget.measure.logs.text import number, size

Policy = Literal["min", "max", "first", "last"]
Once = Literal["engine", "rank"] | None  # printed once per start-up ("engine") or once per GPU of a start-up
Handler = Callable[[EngineLog, "re.Match[str]", int, "str | None"], None]


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]
    handle: Handler
    needle: str  # a literal every matching line contains: a cheap filter before the regex
    once: Once = None  # a line a start-up prints once (per engine, or per GPU): seen twice, the log holds two


def rule(needle: str, pattern: str, handle: Handler, flags: int = 0, *, once: Once = None) -> Rule:
    return Rule(re.compile(pattern, flags), handle, needle, once)


def put(log: EngineLog, name: str, fig: Figure, policy: Policy = "first") -> None:
    """Record ``fig`` as ``name`` unless the policy keeps the one already there."""
    if fig.rank is not None:
        log.ranks.add(fig.rank)
    old = log.measured.get(name)
    if (
        old is None
        or policy == "last"
        or (policy == "min" and fig.value < old.value)
        or (policy == "max" and fig.value > old.value)
    ):
        log.measured[name] = fig


def set_setting(log: EngineLog, name: str, value: SettingValue, line: int, *, override: bool = False) -> None:
    if override or name not in log.settings:
        log.settings[name] = Setting(value, line)


def bytes_figure(
    m: re.Match[str],
    group_num: str | int,
    group_unit: str | int | None,
    line: int,
    rank: str | None,
    *,
    unit_text: str = "GiB",
    binary_gb: bool = False,
) -> Figure:
    num = m.group(group_num)
    unit = m.group(group_unit) if group_unit is not None else unit_text
    value, resolution = size(num, unit, binary_gb=binary_gb)
    return Figure(value, "bytes", line, f"{num} {unit}", resolution, rank)


def size_rule(
    needle: str,
    pattern: str,
    name: str,
    policy: Policy = "first",
    *,
    binary_gb: bool = False,
    flags: int = 0,
    once: Once = None,
) -> Rule:
    """A rule for ``(?P<num>...)`` with an optional ``(?P<unit>...)`` group (GiB when absent)."""

    def handle(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
        unit = "unit" if "unit" in m.groupdict() and m.group("unit") else None
        put(log, name, bytes_figure(m, "num", unit, line, rank, binary_gb=binary_gb), policy)

    return rule(needle, pattern, handle, flags, once=once)


def count_rule(
    needle: str, pattern: str, name: str, unit: Unit, policy: Policy = "first", flags: int = 0, *, once: Once = None
) -> Rule:
    def handle(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
        put(log, name, Figure(number(m.group("num")), unit, line, m.group("num"), 0, rank), policy)

    return rule(needle, pattern, handle, flags, once=once)


def setting_rule(
    needle: str, pattern: str, name: str, kind: Callable[[str], SettingValue] = str, flags: int = 0
) -> Rule:
    def handle(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
        set_setting(log, name, kind(m.group("v")), line)

    return rule(needle, pattern, handle, flags)


MAX_STARTUPS = 1_000  # lines kept per phrase: a file of more start-ups is refused (startups.begins)
MAX_SEEN = 10_000  # (phrase, rank) pairs remembered: a hostile log cannot grow the record past this
MAX_KEPT = 100_000  # line numbers kept over every pair (a few MB at most, whatever the file holds)


def seen(log: EngineLog, r: Rule, line: int, rank: str | None) -> None:
    """Remember where a once-per-start-up line was printed: its lines (up to MAX_STARTUPS) and how often."""
    if rank is not None and rank.startswith("pid"):  # a process id names no role: a second start-up has another
        rank = None
    # a per-GPU line without its worker prefix: several GPUs print it, nothing tells them apart ("?": not counted)
    key = (r.needle, "?" if r.once == "rank" and rank is None else rank)
    lines = log.once.get(key)
    if lines is None:
        if len(log.once) < MAX_SEEN:
            log.once[key] = [line, 1]
        return
    if len(lines) <= MAX_STARTUPS and log.once_kept < MAX_KEPT:  # every line it was printed at (startups.begins)
        lines.insert(-1, line)
        log.once_kept += 1
    lines[-1] += 1


def apply(rules: Sequence[Rule], log: EngineLog, line_no: int, text: str, rank: str | None) -> bool:
    """Apply every rule whose needle is on the line; True when one matched."""
    hit = False
    for r in rules:
        if r.needle in text:
            m = r.pattern.search(text)
            if m:
                if r.once is not None:
                    seen(log, r, line_no, rank)
                r.handle(log, m, line_no, rank)
                hit = True
    return hit


_PAIR = re.compile(
    r"""['"]?(\w+)['"]?\s*[:=]\s*('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:e-?\d+)?|True|False|None|true|false|null|[A-Za-z_][\w.\-/]*)"""
)


def literal_pairs(text: str) -> dict[str, SettingValue]:
    """Simple ``key: value`` / ``key=value`` pairs from a printed dict or dataclass (never evaluated)."""
    out: dict[str, SettingValue] = {}
    for key, raw in _PAIR.findall(text):
        if raw in ("None", "null"):
            continue
        value: SettingValue
        if raw in ("True", "true"):
            value = True
        elif raw in ("False", "false"):
            value = False
        elif raw[0] in "'\"":
            value = raw[1:-1]
        elif not re.fullmatch(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", raw):
            value = raw
        elif re.fullmatch(r"-?\d+", raw):
            value = int(raw)
        else:
            value = float(raw)
        out.setdefault(key, value)
    return out
