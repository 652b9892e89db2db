"""Estimate a ``Workload`` from trace records, and write a workload back as TOML.

Choices (docs/workload.md):

* Every session counts, sub-agents included: each holds a cache of its own while it runs.
* Arrival rate: (n - 1) / (last start - first start) over the n top-level session starts (the
  n - 1 gaps of a Poisson process; the maximum-likelihood rate conditional on the first start).
  Traces that restart their clock per session (WEKA files all start at 0) cannot give one: pass
  ``rate_per_s`` (top-level sessions per second). Sub-agents arrive with their parents, so the
  workload's rate is that times (all sessions / top-level sessions).
* Steps per session: always empirical (whole numbers; the tail of session lengths is the point).
* Token counts and pauses: ``method="empirical"`` (default) keeps the observed values, merging
  them into at most ``max_points`` equal-count bins (each bin's mean, weighted by its size) so a
  large trace still gives a readable file; the mean is preserved exactly. ``method="lognormal"``
  matches the mean and variance (sigma^2 = ln(1 + var/mean^2), mu = ln(mean) - sigma^2/2), which
  also preserves the mean; it smooths the tail, and a constant sample stays a constant.
* Appended tokens come from ``replay_steps``: the trace's ``new_tokens`` or the prompt's growth.
  Steps where the client compacted its context are left out of the append distribution and make
  the cap policy ``compact``: the cap is the largest context seen before a compaction, the target
  the median context kept.
* Pauses: the trace's ``pause_s``, else the gap between step starts (an upper bound). A trace does
  not separate tool latency from think time: all of it goes to ``tool_latency_s``.
* The shared prefix: ``prefix_tokens`` when given (taken off every first prompt). Otherwise the
  prefix the trace declares per session (WEKA's ``system_tokens`` and ``tool_tokens``, the
  records' ``declared_prefix``): the workload's prefix is their mean over the sessions (system
  prompt and tool catalogue apart, whole tokens), and each session's first prompt loses its own
  declared prefix, so the mean context is kept. Sessions that declare none lose the workload's.
  The block-hash prefix reuse between a session's steps goes into the notes (the simulator keeps a
  session's cache between its steps, so it reuses the whole previous context).
* Clean numbers: token bins are whole tokens (duplicates merged), pauses and the rate keep
  ``SIGNIFICANT`` significant digits, lognormal parameters too: the mean moves by the rounding only.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from kvbudget.errors import InputError
from kvbudget.workload.distributions import Constant, Distribution, Empirical, LogNormal
from kvbudget.workload.generate import replay_steps
from kvbudget.workload.model import DISTRIBUTIONS, Arrival, CapPolicy, Prefix, Workload
from kvbudget.workload.record import StepRecord, common_prefix
from kvbudget.workload.stats import percentile

FitMethod = Literal["empirical", "lognormal"]
MAX_POINTS = 256
SIGNIFICANT = 4  # significant digits of a fitted pause, rate or lognormal parameter


def clean(value: float, digits: int = SIGNIFICANT) -> float | int:
    """``value`` to ``digits`` significant digits, an int when that is whole: no float noise in a file."""
    if value == 0 or not math.isfinite(value):
        return 0 if value == 0 else value
    rounded = float(f"{value:.{digits}g}")
    return int(rounded) if rounded.is_integer() else rounded


def _tidy(dist: Distribution, whole: bool) -> Distribution:
    """The distribution with clean numbers: whole values for token counts (equal ones merged), else
    ``SIGNIFICANT`` digits."""
    if isinstance(dist, Constant):
        return Constant(round(dist.value) if whole else clean(dist.value))
    if isinstance(dist, LogNormal):
        return LogNormal(mu=float(clean(dist.mu, 6)), sigma=float(clean(dist.sigma, 6)))
    if isinstance(dist, Empirical):
        merged: dict[float, float] = {}
        weights = dist.weights or (1,) * len(dist.values)
        for v, w in zip(dist.values, weights, strict=True):
            key = round(v) if whole else clean(v)
            merged[key] = merged.get(key, 0) + w
        if len(merged) == 1:
            return Constant(next(iter(merged)))
        keys = sorted(merged)
        counts = [int(merged[k]) if float(merged[k]).is_integer() else merged[k] for k in keys]
        return Empirical(tuple(keys), tuple(counts) if len(set(counts)) > 1 else ())
    return dist


def empirical_of(values: Sequence[float], max_points: int = MAX_POINTS) -> Distribution:
    """The observed values as an empirical distribution of at most ``max_points`` points."""
    if not values:
        return Constant(0)
    counts = Counter(values)
    if len(counts) == 1:
        return Constant(values[0])
    if len(counts) <= max_points:
        keys = sorted(counts)
        weights = [counts[k] for k in keys]
        return Empirical(tuple(keys), tuple(weights) if len(set(weights)) > 1 else ())
    ordered = sorted(values)
    n = len(ordered)
    bins: list[float] = []
    sizes: list[int] = []
    for b in range(max_points):
        chunk = ordered[b * n // max_points : (b + 1) * n // max_points]
        if chunk:
            bins.append(math.fsum(chunk) / len(chunk))
            sizes.append(len(chunk))
    return Empirical(tuple(bins), tuple(sizes))


def lognormal_of(values: Sequence[float]) -> Distribution:
    """Method-of-moments lognormal: same mean and variance as the sample (E[X] = e^(mu + s^2/2),
    Var[X] = (e^(s^2) - 1) E[X]^2)."""
    if not values:
        return Constant(0)
    mean = math.fsum(values) / len(values)
    var = statistics.pvariance(values, mu=mean)
    if mean <= 0 or var <= 0:
        return Constant(mean)
    sigma2 = math.log1p(var / (mean * mean))
    return LogNormal(mu=math.log(mean) - sigma2 / 2, sigma=math.sqrt(sigma2))


def fit_workload(
    records: Iterable[StepRecord],
    *,
    rate_per_s: float | None = None,
    prefix_tokens: int | None = None,
    method: FitMethod = "empirical",
    max_points: int = MAX_POINTS,
    name: str = "",
) -> Workload:
    """A workload whose distributions are those of the trace's sessions (choices: module docstring).

    ``prefix_tokens`` None: the prefix the trace declares (module docstring). Notes on what was estimated and
    how land in the workload's ``description``."""
    if method not in ("empirical", "lognormal"):
        raise InputError(f"fit method must be empirical or lognormal, got {method!r}")
    if prefix_tokens is not None and prefix_tokens < 0:
        raise InputError(f"prefix tokens must not be negative, got {prefix_tokens}")
    groups: dict[str, list[StepRecord]] = {}
    for rec in records:
        groups.setdefault(rec.session, []).append(rec)
    if not groups:
        raise InputError("the trace has no usable steps to fit a workload from")

    declared = [r[0].declared_prefix for r in groups.values() if r and r[0].declared_prefix is not None]
    given = prefix_tokens is not None
    if given:
        system, tool = int(prefix_tokens or 0), 0
    elif declared:
        system = round(math.fsum(d[0] for d in declared) / len(declared))
        tool = round(math.fsum(d[1] for d in declared) / len(declared))
    else:
        system, tool = 0, 0
    prefix = system + tool
    steps: list[int] = []
    first: list[int] = []
    appends: list[int] = []
    outputs: list[int] = []
    pauses: list[float] = []
    starts: list[float] = []  # of top-level sessions: sub-agents arrive with their parents
    before_compaction: list[int] = []
    kept: list[int] = []
    short_first = guessed_pauses = subagents = 0
    reused_blocks = total_blocks = 0
    paused = spanned = 0.0
    for rows in groups.values():
        rows.sort(key=lambda r: (r.step, r.start_s))
        own = rows[0].declared_prefix
        session_prefix = prefix if given or own is None else own[0] + own[1]
        if any(r.parent is not None for r in rows):
            subagents += 1
        else:
            starts.append(min(r.start_s for r in rows))
        steps.append(len(rows))
        context = 0
        for i, (rec, step) in enumerate(zip(rows, replay_steps(rows), strict=True)):
            if i and rec.block_hashes and rows[i - 1].block_hashes:
                shared = rec.shared_blocks
                reused_blocks += common_prefix(rec.block_hashes, rows[i - 1].block_hashes) if shared is None else shared
                total_blocks += len(rec.block_hashes)
            if i == 0:
                first.append(max(0, step.append_tokens - session_prefix))
                short_first += step.append_tokens < session_prefix
            elif step.compact_to is not None:
                before_compaction.append(context)
                kept.append(step.compact_to)
            else:
                appends.append(step.append_tokens)
            outputs.append(step.output_tokens)
            if i + 1 < len(rows):
                pauses.append(step.pause_s)
                guessed_pauses += rec.pause_s is None
                paused += step.pause_s
                spanned += max(rows[i + 1].start_s - rec.start_s, step.pause_s)
            context = rec.prompt_tokens + rec.output_tokens

    notes = [f"fit of {len(steps)} sessions ({subagents} sub-agents counted as sessions), {sum(steps)} steps"]
    top = len(starts)
    if rate_per_s is None:
        starts.sort()
        span = starts[-1] - starts[0] if starts else 0.0
        if top < 2 or span <= 0:
            raise InputError(
                f"cannot estimate an arrival rate: the trace's {top} top-level sessions all start at one "
                "instant (traces like WEKA's restart the clock per session); pass a rate (--rate)"
            )
        rate_per_s = (top - 1) / span
        basis = f"({top} - 1) / {clean(span, 6)} s between the first and last top-level session start"
    elif not (math.isfinite(rate_per_s) and rate_per_s > 0):
        raise InputError(f"rate must be a positive number of sessions per second, got {rate_per_s}")
    else:
        basis = "given"
    if subagents and top:
        # Sub-agents arrive with their parents: all sessions arrive (sessions / top-level) times as often.
        notes.append(
            f"arrival rate {rate_per_s:.6g}/s of top-level sessions ({basis}) x {len(steps)}/{top} for their sub-agents"
        )
        rate_per_s *= len(steps) / top
    else:
        notes.append(f"arrival rate {rate_per_s:.6g}/s ({basis})")

    cap = CapPolicy()
    if kept:
        target = round(statistics.median(kept))
        limit = max(before_compaction)
        if prefix < target < limit:
            cap = CapPolicy(action="compact", tokens=limit, target_tokens=target)
            notes.append(
                f"{len(kept)} compactions seen: compact at {limit} tokens (largest context before one) "
                f"to {target} (median kept)"
            )
        else:
            notes.append(f"{len(kept)} compactions seen, but no consistent cap/target to infer from them")
    if given:
        notes.append(f"shared prefix {prefix} tokens (given)")
    elif declared:
        lows = min(d[0] + d[1] for d in declared)
        highs = max(d[0] + d[1] for d in declared)
        notes.append(
            f"shared prefix {prefix} tokens = mean of what {len(declared)} of {len(steps)} sessions declare "
            f"({system} system prompt + {tool} tool catalogue; {lows} to {highs} per session), each session's "
            "own taken off its first prompt"
        )
    else:
        notes.append("shared prefix 0: the trace declares none (give --prefix)")
    if total_blocks:
        notes.append(
            f"prefix reuse between a session's steps in the trace: {reused_blocks / total_blocks:.1%} of blocks "
            "(the simulator keeps each session's cache between its steps)"
        )
    if pauses:
        ordered = sorted(pauses)
        share = f", {paused / spanned:.1%} of session time" if spanned > 0 else ""
        notes.append(
            f"{len(pauses)} pauses: median {clean(percentile(ordered, 50), 6)} s, "
            f"p99 {clean(percentile(ordered, 99), 6)} s{share}"
        )
    if short_first:
        notes.append(f"{short_first} first prompts shorter than their session's shared prefix counted as 0")
    if guessed_pauses:
        notes.append(f"{guessed_pauses} pauses taken as gaps between step starts (upper bounds)")
    notes.append("tool latency holds every pause (a trace does not separate think time)")

    def fit(values: Sequence[float], whole: bool = True) -> Distribution:
        dist = lognormal_of(values) if method == "lognormal" else empirical_of(values, max_points)
        return _tidy(dist, whole)

    return Workload(
        arrival=Arrival(rate_per_s=float(clean(rate_per_s, 6))),
        steps=_tidy(empirical_of(steps, max_points), True),
        first_prompt_tokens=fit(first),
        append_tokens=fit(appends),
        output_tokens=fit(outputs),
        tool_latency_s=fit(pauses, whole=False),
        think_time_s=Constant(0),
        prefix=Prefix(system_prompt_tokens=system, tool_catalog_tokens=tool),
        cap=cap,
        name=name,
        description="; ".join(notes),
        source=f"fit of {len(steps)} sessions",
    )


# ---------------------------------------------------------------------------------------------
# TOML out (stdlib has a reader only; the format is small enough to write by hand).


TOML_WIDTH = 100
"""The widest line of a workload file kvbudget writes (a string or list that would be wider continues on more
lines)."""


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputError(f"cannot write {value} to a workload file")
        return repr(value)  # shortest repr round-trips exactly, and is valid TOML
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)  # a TOML basic string uses JSON's escapes
        if len(text) <= TOML_WIDTH - 16:
            return text
        # A multi-line basic string: a line-ending backslash drops the newline and the next line's indentation.
        words = text[1:-1].split(" ")
        lines, current = [], ""
        for word in words:
            if current and len(current) + len(word) + 1 > TOML_WIDTH - 4:
                lines.append(current + " \\")
                current = word
            else:
                current = f"{current} {word}" if current else word
        return '"""\\\n  ' + "\n  ".join([*lines, current]) + '"""'
    if isinstance(value, (list, tuple)):
        items = [_toml_value(v) for v in value]
        if len(items) <= 12 and sum(len(i) + 2 for i in items) <= TOML_WIDTH - 24:
            return "[" + ", ".join(items) + "]"
        rows, current = [], ""
        for item in items:  # as many values a line as fit in TOML_WIDTH
            if current and len(current) + len(item) + 5 > TOML_WIDTH:  # "  " + row + ", " + item + ","
                rows.append(current)
                current = item
            else:
                current = f"{current}, {item}" if current else item
        return "[\n  " + ",\n  ".join([*rows, current]) + ",\n]"
    raise InputError(f"cannot write {value!r} to a workload file")


def dump_toml(workload: Workload) -> str:
    """The workload as a TOML workload file; ``load_workload`` reads it back to an equal Workload."""
    data = workload.to_dict()
    lines = ["# kvbudget workload file (docs/workload.md)"]
    for key in ("name", "description"):
        if key in data:
            lines.append(f"{key} = {_toml_value(data[key])}")
    for section, table in data.items():
        if not isinstance(table, dict):
            continue
        lines += ["", f"[{section}]"]
        if section in DISTRIBUTIONS:
            lines.append(f"# {DISTRIBUTIONS[section]}; mean {getattr(workload, section).mean():.6g}")
        lines += [f"{key} = {_toml_value(value)}" for key, value in table.items()]
        dist = getattr(workload, section, None)
        if isinstance(dist, LogNormal):
            lines.append(f"# lognormal mean = {dist.mean():.6g}, p99 = {dist.p99():.6g}")
    return "\n".join(lines) + "\n"
