"""Session statistics of a trace, in one pass over its step records.

Definitions (tokens unless said otherwise):

* **context** of a step = prompt_tokens + output_tokens: what the KV cache holds when the step's
  decode ends, and what an engine's context cap (``--max-model-len``) bounds;
* **session end** = the context of a session's last step; **session peak** = its largest context
  (they differ only where the context was compacted). Sub-agents are sessions of their own (each
  holds its own cache), so every per-session figure counts them; ``sessions`` counts top-level
  sessions and ``subagents`` the rest;
* **growth** per step = context[t] - context[t-1] (tokens appended before the step plus its
  output); negative after a compaction;
* **pause** = ``pause_s`` of steps that have one (tool latency, think time before the next step);
  **paused share** = sum of pauses / sum of (next start - start) over the same steps: the share of
  session time (first start to last start) spent paused;
* **prefix reuse** of a step = longest common prefix of its block hashes with the previous step of
  the same session / its number of blocks (hash ids are chained, so a prefix cache can reuse exactly
  that prefix); over steps that have hashes and whose previous step has them too;
* **percentiles** are nearest-rank: the p-th percentile of n sorted values is the value at rank
  ceil(p/100 x n), so every percentile is a value that occurred (a p99 session length is a real
  session's length). That holds exactly up to ``EXACT_LIMIT`` (262,144) values of a statistic; past
  it the statistic's percentiles come from a log histogram and are within ``RELATIVE_ERROR`` (0.5%)
  of the exact value (whole numbers stay whole; count, min, max and mean stay exact), and
  ``percentile_relative_error`` in the JSON says so.

Memory is bounded: at most ``EXACT_LIMIT`` buffered values per statistic (2 MiB each) plus the
histograms' buckets, and per-session state (a few numbers and the previous step's hashes) only for
sessions still open: a record marked ``final`` by its reader (a plain Mooncake row, a WEKA session's
last request, the last step of a buffered session) closes its session and drops its state.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvbudget.workload.record import StepRecord, common_prefix

SCHEMA_VERSION = 1


def percentile(ordered: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of already sorted values (p in (0, 100])."""
    if not ordered:
        raise ValueError("percentile of no values")
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Distribution:
    """Nearest-rank summary of a set of values; ``count`` 0 means no data (the figures are None)."""

    count: int
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None
    min: float | None = None
    mean: float | None = None

    @classmethod
    def of(cls, values: Iterable[float]) -> Distribution:
        ordered = sorted(values)
        if not ordered:
            return cls(0)
        return cls(
            count=len(ordered),
            p50=percentile(ordered, 50),
            p90=percentile(ordered, 90),
            p99=percentile(ordered, 99),
            max=ordered[-1],
            min=ordered[0],
            mean=math.fsum(ordered) / len(ordered),
        )

    def to_json(self, *, digits: int | None = None) -> dict[str, object]:
        def num(v: float | None) -> object:
            if v is None:
                return None
            if digits is None:
                return int(v) if float(v).is_integer() else v
            return round(v, digits)

        out: dict[str, object] = {"count": self.count}
        for name in ("p50", "p90", "p99", "max", "min"):
            out[name] = num(getattr(self, name))
        out["mean"] = None if self.mean is None else round(self.mean, 6 if digits is None else digits)
        return out


@dataclass(frozen=True)
class TraceStats:
    sessions: int
    subagents: int
    steps: int
    bad_rows: int
    steps_per_session: Distribution
    context_tokens: Distribution
    session_end_tokens: Distribution
    session_peak_tokens: Distribution
    growth_tokens_per_step: Distribution
    compacting_steps: int
    new_tokens_per_step: Distribution
    output_tokens_per_step: Distribution
    pause_seconds: Distribution
    paused_share: float | None
    prefix_reuse: Distribution
    prefix_reuse_blocks_share: float | None
    cached_share: float | None
    sources: tuple[str, ...] = field(default=())
    exact: bool = True  # every percentile nearest-rank exact; False: some from a log histogram

    def to_json(self) -> dict[str, object]:
        """The ``trace stats --json`` contract (schema_version 1; fields may be added)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "sessions": self.sessions,
            "subagents": self.subagents,
            "steps": self.steps,
            "bad_rows": self.bad_rows,
            "steps_per_session": self.steps_per_session.to_json(),
            "context_tokens": self.context_tokens.to_json(),
            "session_end_tokens": self.session_end_tokens.to_json(),
            "session_peak_tokens": self.session_peak_tokens.to_json(),
            "growth_tokens_per_step": self.growth_tokens_per_step.to_json(),
            "compacting_steps": self.compacting_steps,
            "new_tokens_per_step": self.new_tokens_per_step.to_json(),
            "output_tokens_per_step": self.output_tokens_per_step.to_json(),
            "pause_seconds": self.pause_seconds.to_json(digits=6),
            "paused_share": None if self.paused_share is None else round(self.paused_share, 6),
            "prefix_reuse": self.prefix_reuse.to_json(digits=6),
            "prefix_reuse_blocks_share": _round(self.prefix_reuse_blocks_share),
            "cached_share": _round(self.cached_share),
            "percentiles": "nearest-rank",
            "percentile_relative_error": 0 if self.exact else RELATIVE_ERROR,
            "sources": list(self.sources),
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


class _Session:
    __slots__ = ("end", "hashes", "last_start", "pause", "peak", "steps", "top")

    def __init__(self, top: bool) -> None:
        self.top = top
        self.steps = 0
        self.end = 0
        self.peak = 0
        self.last_start = 0.0
        self.pause: float | None = None
        self.hashes: tuple[int, ...] = ()


EXACT_LIMIT = 1 << 18  # values per statistic kept exactly (2 MiB each); past it, a log histogram
RELATIVE_ERROR = 0.005  # of a percentile from the log histogram, against the exact nearest-rank value
_GAMMA = (1 + RELATIVE_ERROR) / (1 - RELATIVE_ERROR)
_LOG_GAMMA = math.log(_GAMMA)
_TINY = 1e-9  # magnitudes below this share the smallest bucket (pauses are rounded to 1e-6 s)
_CHECK_EVERY = 4096  # steps between checks of the exact buffers' length
_FOLD_BATCH = 1 << 16  # once a histogram, values buffered between folds (512 KiB)


class Quantiles:
    """The values of one statistic in bounded memory: exact up to ``limit`` values, then a histogram.

    Values are appended to ``values`` (a typed array, the hot loop's ``append``); ``settle()`` moves
    them into a log histogram once there are more than ``limit`` of them (a DDSketch-style sketch:
    bucket i holds magnitudes in (gamma^(i-1), gamma^i], gamma = (1+a)/(1-a), negative values
    mirrored, zero apart). A percentile from the histogram is the bucket's centre 2 gamma^i / (gamma+1),
    within a relative error ``a`` = RELATIVE_ERROR of the exact nearest-rank value (rounded to a whole
    number for integer statistics, clamped to the exact min and max). Count, min, max and mean stay
    exact (the mean of float statistics to float rounding). Memory: ``limit`` values plus one counter
    per occupied bucket (at most about 2 x 7,000 over magnitudes 1e-9 to 2^40); once a histogram, new
    values are buffered and folded in batches of ``_FOLD_BATCH`` (sorted, then one bisect a bucket).
    """

    __slots__ = ("buckets", "count", "hi", "integer", "limit", "lo", "total", "values")

    def __init__(self, typecode: str, limit: int = EXACT_LIMIT) -> None:
        self.integer = typecode == "q"
        self.values: array[Any] = array(typecode)
        self.limit = limit
        self.buckets: dict[tuple[int, int], int] | None = None  # (sign, i): count
        self.count = 0
        self.total: float | int = 0
        self.lo: float | None = None
        self.hi: float | None = None

    def settle(self) -> None:
        """Fold the buffered values into the histogram when past the exact limit (then in batches)."""
        if len(self.values) <= (self.limit if self.buckets is None else min(self.limit, _FOLD_BATCH)):
            return
        self._fold()

    def _fold(self) -> None:
        values = self.values
        if not values:
            return
        if self.buckets is None:
            self.buckets = {}
        self.count += len(values)
        self.total += sum(values) if self.integer else math.fsum(values)
        ordered = sorted(values)  # in C; the buckets are then runs of it, one bisect each
        del values[:]
        self.lo = ordered[0] if self.lo is None else min(self.lo, ordered[0])
        self.hi = ordered[-1] if self.hi is None else max(self.hi, ordered[-1])
        negative, positive = bisect_left(ordered, 0), bisect_right(ordered, 0)
        if positive > negative:
            self.buckets[(0, 0)] = self.buckets.get((0, 0), 0) + positive - negative
        _count_runs(ordered, positive, 1, self.buckets)
        if negative:
            _count_runs([-v for v in ordered[:negative][::-1]], 0, -1, self.buckets)

    @property
    def exact(self) -> bool:
        return self.buckets is None

    def distribution(self) -> Distribution:
        if self.buckets is None:
            return Distribution.of(self.values)
        self._fold()
        assert self.lo is not None and self.hi is not None
        lo, hi = self.lo, self.hi
        ordered = sorted(self.buckets.items(), key=lambda item: _centre(item[0]))
        count = self.count

        def at(p: float) -> float:
            rank = max(1, math.ceil(p / 100 * count))
            seen = 0
            for key, n in ordered:
                seen += n
                if seen >= rank:
                    value = min(max(_centre(key), lo), hi)
                    return float(round(value)) if self.integer else value
            return hi

        return Distribution(count=count, p50=at(50), p90=at(90), p99=at(99), max=hi, min=lo, mean=self.total / count)


def _bucket(magnitude: float) -> int:
    """The histogram bucket of a magnitude > 0: i with gamma^(i-1) < magnitude <= gamma^i."""
    return math.ceil(math.log(max(magnitude, _TINY)) / _LOG_GAMMA)


def _count_runs(ordered: Sequence[float], start: int, sign: int, buckets: dict[tuple[int, int], int]) -> None:
    """Add the magnitudes ``ordered[start:]`` (ascending, > 0) to their buckets: one bisect a bucket,
    so the work follows the buckets occupied, not the values (token counts: ~1,000 buckets)."""
    stop = len(ordered)
    i = start
    while i < stop:
        key = _bucket(ordered[i])
        j = bisect_right(ordered, _GAMMA**key, i, stop)
        # float rounding at a bucket's edge: the run is exactly the values _bucket puts in this bucket
        while j > i + 1 and _bucket(ordered[j - 1]) != key:
            j = bisect_left(ordered, ordered[j - 1], i, j)
        while j < stop and _bucket(ordered[j]) == key:
            j = bisect_right(ordered, ordered[j], j, stop)
        buckets[(sign, key)] = buckets.get((sign, key), 0) + j - i
        i = j


def _centre(key: tuple[int, int]) -> float:
    sign, i = key
    return sign * 2 * _GAMMA**i / (_GAMMA + 1)


def trace_stats(records: Iterable[StepRecord], bad_rows: int, *, exact_limit: int = EXACT_LIMIT) -> TraceStats:
    """Statistics of a stream of records (a session's steps in order, sessions interleaved freely).

    A record with ``final`` set closes its session: its figures join the per-session statistics and
    its state is dropped, so memory follows the sessions still open, not the sessions seen."""
    open_sessions: dict[str, _Session] = {}
    contexts, growth, new, outputs = (Quantiles("q", exact_limit) for _ in range(4))
    pauses, reuse = Quantiles("d", exact_limit), Quantiles("d", exact_limit)
    lengths, ends, peaks = (Quantiles("q", exact_limit) for _ in range(3))
    every = (contexts, growth, new, outputs, pauses, reuse, lengths, ends, peaks)
    add_context, add_growth, add_new = contexts.values.append, growth.values.append, new.values.append
    add_output, add_pause, add_reuse = outputs.values.append, pauses.values.append, reuse.values.append
    add_length, add_end, add_peak = lengths.values.append, ends.values.append, peaks.values.append
    paused = spanned = 0.0
    reused_blocks = total_blocks = 0
    cached = cached_prompt = 0
    compacting = steps = 0
    top_sessions = subagents = 0
    sources: dict[str, None] = {}
    last_source = ""
    for r in records:
        steps += 1
        if not steps % _CHECK_EVERY:
            for q in every:
                q.settle()
        if r.source is not last_source:
            last_source = r.source
            if last_source:
                sources.setdefault(last_source, None)
        context = r.prompt_tokens + r.output_tokens
        add_context(context)
        add_output(r.output_tokens)
        if r.pause_s is not None:
            add_pause(r.pause_s)
        if r.cached_tokens is not None:
            cached += r.cached_tokens
            cached_prompt += r.prompt_tokens
        s = open_sessions.get(r.session)
        if s is None:
            if r.final:  # a one-step session (a plain Mooncake row): nothing to keep
                if r.parent is None:
                    top_sessions += 1
                else:
                    subagents += 1
                add_length(1)
                add_end(context)
                add_peak(context)
                continue
            s = open_sessions[r.session] = _Session(top=r.parent is None)
        elif s.steps:
            delta = context - s.end
            add_growth(delta)
            compacting += delta < 0
            if r.new_tokens is not None:
                add_new(r.new_tokens)
            if s.pause is not None:
                paused += s.pause
                spanned += max(r.start_s - s.last_start, s.pause)
            blocks = r.block_hashes
            if blocks and s.hashes:
                shared = r.shared_blocks
                if shared is None:
                    shared = common_prefix(blocks, s.hashes)
                add_reuse(shared / len(blocks))
                reused_blocks += shared
                total_blocks += len(blocks)
        s.steps += 1
        s.end = context
        s.peak = max(s.peak, context)
        if r.final:
            del open_sessions[r.session]
            if s.top:
                top_sessions += 1
            else:
                subagents += 1
            add_length(s.steps)
            add_end(s.end)
            add_peak(s.peak)
            continue
        s.last_start = r.start_s
        s.pause = r.pause_s
        s.hashes = r.block_hashes
    for s in open_sessions.values():
        if s.top:
            top_sessions += 1
        else:
            subagents += 1
        add_length(s.steps)
        add_end(s.end)
        add_peak(s.peak)
    for q in every:
        q.settle()
    return TraceStats(
        sessions=top_sessions,
        subagents=subagents,
        steps=steps,
        bad_rows=bad_rows,
        steps_per_session=lengths.distribution(),
        context_tokens=contexts.distribution(),
        session_end_tokens=ends.distribution(),
        session_peak_tokens=peaks.distribution(),
        growth_tokens_per_step=growth.distribution(),
        compacting_steps=compacting,
        new_tokens_per_step=new.distribution(),
        output_tokens_per_step=outputs.distribution(),
        pause_seconds=pauses.distribution(),
        paused_share=paused / spanned if spanned > 0 else None,
        prefix_reuse=reuse.distribution(),
        prefix_reuse_blocks_share=reused_blocks / total_blocks if total_blocks else None,
        cached_share=cached / cached_prompt if cached_prompt else None,
        sources=tuple(sources),
        exact=all(q.exact for q in every),
    )
