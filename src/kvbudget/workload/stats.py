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
  session's length).

Memory: per-session state (a few numbers and the previous step's hashes) for every session seen,
plus one 8-byte value per step for each exact per-step distribution (context, growth, new tokens,
output, pause, reuse) kept in typed arrays: exact percentiles need the values.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kvbudget.workload.record import StepRecord

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


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def trace_stats(records: Iterable[StepRecord], bad_rows: int) -> TraceStats:
    """Statistics of a stream of records (a session's steps in order, sessions interleaved freely)."""
    sessions: dict[str, _Session] = {}
    contexts, growth, new, outputs = array("q"), array("q"), array("q"), array("q")
    pauses, reuse = array("d"), array("d")
    paused = spanned = 0.0
    reused_blocks = total_blocks = 0
    cached = cached_prompt = 0
    compacting = steps = 0
    sources: dict[str, None] = {}
    for r in records:
        steps += 1
        if r.source:
            sources.setdefault(r.source, None)
        s = sessions.get(r.session)
        if s is None:
            s = sessions[r.session] = _Session(top=r.parent is None)
        context = r.prompt_tokens + r.output_tokens
        contexts.append(context)
        outputs.append(r.output_tokens)
        if s.steps:
            delta = context - s.end
            growth.append(delta)
            compacting += delta < 0
            if r.new_tokens is not None:
                new.append(r.new_tokens)
            if s.pause is not None:
                paused += s.pause
                spanned += max(r.start_s - s.last_start, s.pause)
            if r.block_hashes and s.hashes:
                shared = _common_prefix(r.block_hashes, s.hashes)
                reuse.append(shared / len(r.block_hashes))
                reused_blocks += shared
                total_blocks += len(r.block_hashes)
        if r.pause_s is not None:
            pauses.append(r.pause_s)
        if r.cached_tokens is not None:
            cached += r.cached_tokens
            cached_prompt += r.prompt_tokens
        s.steps += 1
        s.end = context
        s.peak = max(s.peak, context)
        s.last_start = r.start_s
        s.pause = r.pause_s
        s.hashes = r.block_hashes
    every = sessions.values()
    return TraceStats(
        sessions=sum(1 for s in every if s.top),
        subagents=sum(1 for s in every if not s.top),
        steps=steps,
        bad_rows=bad_rows,
        steps_per_session=Distribution.of(s.steps for s in every),
        context_tokens=Distribution.of(contexts),
        session_end_tokens=Distribution.of(s.end for s in every),
        session_peak_tokens=Distribution.of(s.peak for s in every),
        growth_tokens_per_step=Distribution.of(growth),
        compacting_steps=compacting,
        new_tokens_per_step=Distribution.of(new),
        output_tokens_per_step=Distribution.of(outputs),
        pause_seconds=Distribution.of(pauses),
        paused_share=paused / spanned if spanned > 0 else None,
        prefix_reuse=Distribution.of(reuse),
        prefix_reuse_blocks_share=reused_blocks / total_blocks if total_blocks else None,
        cached_share=cached / cached_prompt if cached_prompt else None,
        sources=tuple(sources),
    )
