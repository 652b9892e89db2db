"""What a run measured: per concurrency level and in total, from the client and the server's metrics.

A **level** is one concurrency held for a while. Requests count in the level they were sent in;
scrapes in the level they were taken in. A level fails at the first of (docs/loadtest.md):

* a refused request: an HTTP error answer (4xx/5xx, the context-size refusal among them) or an
  output cut short by the context (``finish_reason`` ``length`` before ``max_tokens``);
* a transport error (connection lost, timeout);
* a deferred request: the engine's queue gauge above zero (llama.cpp ``requests_deferred`` on any
  scrape: a request waits only when every slot is busy; vLLM ``num_requests_waiting`` and SGLang
  ``num_queue_reqs`` on consecutive scrapes spanning ``DEFER_PERSIST_S``: every request passes
  through their waiting queue for a scheduler step);
* a preemption: the preemption counter rose (vLLM preemptions, SGLang retractions);

and, judged at its end, when its p99 time to first token is above the target or it completed no
request at all.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from dataclasses import dataclass, field

from kvbudget.measure.loadtest.flow import SAMPLE_CAP, Reservoir
from kvbudget.measure.loadtest.metrics import Snapshot
from kvbudget.measure.loadtest.reply import Reply
from kvbudget.units import counted

DEFER_PERSIST_S = {"llamacpp": 0.0}
DEFAULT_DEFER_PERSIST_S = 1.0
FATAL_STREAK = 10  # consecutive failed requests (no success between) that end a run as an error


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Level:
    sessions: int
    started_s: float
    ended_s: float | None = None
    requests: int = 0
    errors: int = 0
    refusals: Counter[str] = field(default_factory=Counter)
    ttfts: list[float] = field(default_factory=list)
    decode_rates: list[float] = field(default_factory=list)  # per request: decode tokens/s (server timings)
    prefill_rates: list[float] = field(default_factory=list)  # per request: prompt tokens/s (server timings)
    itls: list[float] = field(default_factory=list)  # per request: (latency - ttft) / (output - 1), client side
    scrapes: int = 0
    deferred_scrapes: int = 0
    deferred_peak: float = 0.0
    defer_since: float | None = None
    preempt_base: float | None = None
    preempted: int = 0
    kv_usage_peak: float | None = None
    sessions_started: int = 0
    sessions_completed: int = 0
    failure: str | None = None  # the first failure signal, in words
    passed: bool | None = None
    reasons: list[str] = field(default_factory=list)

    @property
    def refused(self) -> int:
        return sum(self.refusals.values())


class Recorder:
    """Accumulates every measurement; wakes the ramp when a level fails or the run must stop."""

    def __init__(self, engine: str, max_requests: int | None) -> None:
        self.engine = engine
        self.persist_s = DEFER_PERSIST_S.get(engine, DEFAULT_DEFER_PERSIST_S)
        self.max_requests = max_requests
        self.wake = asyncio.Event()
        self.levels: list[Level] = []
        self.sent = 0
        self.requests = 0
        self.errors = 0
        self.aborted = 0
        self.refusals: Counter[str] = Counter()
        self.ttfts: list[float] = []
        self.tokens = Counter[str]()
        self.sessions = Counter[str]()
        self.streak = 0
        self.fatal: str | None = None
        self.budget_spent = False
        self.first_snapshot: Snapshot | None = None
        self.last_snapshot: Snapshot | None = None
        self.kv_usage_peak: float | None = None
        self.deferred_peak = 0.0
        self.scrapes = 0
        self.scrape_errors = 0
        self.decode_rates: list[float] = []
        self.prefill_rates: list[float] = []
        self.last_error: str | None = None
        # The mechanism's speeds (flow.py, speeds.py): clean decode gaps by sessions decoding, every prompt
        self.decode_gaps: dict[int, Reservoir] = {}
        # (sent s, TTFT s, new, cached, decoding, s waited for the running batch, server's prompt s: speeds.Prefill)
        self.prefills: list[tuple[float, float, int, int, int, float, float]] = []

    @property
    def level(self) -> Level:
        return self.levels[-1]

    def begin_level(self, sessions: int, now: float) -> Level:
        level = Level(sessions, now)
        if self.last_snapshot is not None and self.last_snapshot.preemptions is not None:
            level.preempt_base = self.last_snapshot.preemptions
        self.levels.append(level)
        return level

    def fail(self, level: Level, reason: str) -> None:
        if level.failure is None:
            level.failure = reason
            self.wake.set()

    # -- requests ----------------------------------------------------------------------------

    def permit(self) -> bool:
        """Whether one more request may be sent (``--max-requests``)."""
        if self.max_requests is not None and self.sent >= self.max_requests:
            if not self.budget_spent:
                self.budget_spent = True
                self.wake.set()
            return False
        self.sent += 1
        return True

    def request_done(self, level: Level, reply: Reply, planned_prompt: int, max_tokens: int) -> None:
        self.requests += 1
        level.requests += 1
        if level.requests == level.sessions:
            self.wake.set()  # a level stretched past --level-time for evidence may now end (ramp)
        kind = reply.error_kind
        if reply.ok and reply.finish_reason == "length" and (reply.completion_tokens or 0) < max_tokens:
            kind = "truncated"  # the context ran out before max_tokens (llama.cpp cuts silently)
            reply.error = f"output cut at {reply.completion_tokens} of {max_tokens} tokens by the context size"
        if kind in (None, "truncated") and reply.ttft_s is not None:
            self.ttfts.append(reply.ttft_s)
            level.ttfts.append(reply.ttft_s)
        if kind is None:
            self.streak = 0
            self._tokens(reply, planned_prompt)
            self._speeds(level, reply)
            return
        self.last_error = reply.error
        if kind in ("transport", "stream"):
            self.errors += 1
            level.errors += 1
            self.fail(level, f"request failed: {reply.error}")
        else:
            self.refusals[kind] += 1
            level.refusals[kind] += 1
            self.fail(level, f"request refused ({kind}): {reply.error}")
            if kind == "truncated":
                self._tokens(reply, planned_prompt)
                return
        self.streak += 1
        if self.streak >= FATAL_STREAK and self.fatal is None:
            self.fatal = f"{self.streak} requests in a row failed; the last: {reply.error}"
            self.wake.set()

    def _speeds(self, level: Level, reply: Reply) -> None:
        """The level's speeds from one completed request (``--speed-from`` reads them, simulate/measured.py)."""
        out = reply.completion_tokens or 0
        itl: float | None = None
        if reply.ttft_s is not None and reply.latency_s and out > 1 and reply.latency_s > reply.ttft_s:
            itl = (reply.latency_s - reply.ttft_s) / (out - 1)
            level.itls.append(itl)  # as the client's stream saw it, like its TTFT
        if reply.predicted_per_s:
            level.decode_rates.append(reply.predicted_per_s)  # the server's own timing (used without a stream)
        # Prefill as the simulator charges it (TTFT = the prompt's new tokens at this rate + one iteration):
        # the new tokens over (TTFT - one inter-token gap), as the client saw them; else the server's timing.
        new = (reply.prompt_tokens or 0) - (reply.cached_tokens or 0)
        span = reply.ttft_s - itl if reply.ttft_s is not None and itl is not None else 0.0
        if new > 0 and span > 0:
            level.prefill_rates.append(new / span)
        elif reply.prompt_per_s:
            level.prefill_rates.append(reply.prompt_per_s)
        for running, held, gap in reply.gaps:
            self.decode_gaps.setdefault(running, Reservoir()).add((held, gap))
        if new > 0 and reply.ttft_s and len(self.prefills) < SAMPLE_CAP:
            waited = min(reply.waited_s, reply.ttft_s)
            # the server's own time of the batch that computed the prompt (llama.cpp timings.prompt_ms), -1 unknown
            served = reply.prompt_ms / 1e3 if reply.prompt_ms is not None and 0 < reply.prompt_ms < 1e6 else -1.0
            served = min(served, reply.ttft_s - waited)
            row = (reply.sent_s, reply.ttft_s, new, reply.cached_tokens or 0, reply.beside, waited, served)
            self.prefills.append(row)

    def _tokens(self, reply: Reply, planned_prompt: int) -> None:
        t = self.tokens
        t["requests_with_usage"] += reply.prompt_tokens is not None
        t["prompt"] += reply.prompt_tokens or 0
        t["planned_prompt"] += planned_prompt
        t["output"] += reply.completion_tokens or 0
        if reply.cached_tokens is not None and reply.prompt_tokens is not None:
            t["cached"] += reply.cached_tokens
            t["prompt_with_cached"] += reply.prompt_tokens
        if reply.predicted_per_s:
            self.decode_rates.append(reply.predicted_per_s)
        elif reply.ttft_s is not None and reply.latency_s and (reply.completion_tokens or 0) > 1:
            span = reply.latency_s - reply.ttft_s
            if span > 0:
                self.decode_rates.append(((reply.completion_tokens or 0) - 1) / span)
        if reply.prompt_per_s:
            self.prefill_rates.append(reply.prompt_per_s)

    # -- server metrics ----------------------------------------------------------------------

    def observe(self, snap: Snapshot) -> None:
        self.scrapes += 1
        if self.first_snapshot is None:
            self.first_snapshot = snap
        self.last_snapshot = snap
        if not self.levels:
            return
        level = self.level
        level.scrapes += 1
        if snap.kv_usage is not None:
            level.kv_usage_peak = max(level.kv_usage_peak or 0.0, snap.kv_usage)
            self.kv_usage_peak = max(self.kv_usage_peak or 0.0, snap.kv_usage)
        if snap.waiting is not None and snap.waiting > 0:
            level.deferred_scrapes += 1
            level.deferred_peak = max(level.deferred_peak, snap.waiting)
            self.deferred_peak = max(self.deferred_peak, snap.waiting)
            level.defer_since = snap.t if level.defer_since is None else level.defer_since
            if snap.t - level.defer_since >= self.persist_s:
                self.fail(level, f"{counted(snap.waiting, 'request')} deferred (waiting in the server's queue)")
        else:
            level.defer_since = None
        if snap.preemptions is not None:
            if level.preempt_base is None:
                level.preempt_base = snap.preemptions
            level.preempted = int(snap.preemptions - level.preempt_base)
            if level.preempted > 0:
                self.fail(level, f"{counted(level.preempted, 'preemption')} counted by the server")

    @property
    def preempted(self) -> int | None:
        first, last = self.first_snapshot, self.last_snapshot
        if first is None or last is None or first.preemptions is None or last.preemptions is None:
            return None
        return int(last.preemptions - first.preemptions)

    def prefix_hit_rate(self) -> tuple[float | None, str]:
        """(rate, source): the server's counters over the run, else what the replies reported."""
        first, last = self.first_snapshot, self.last_snapshot
        if first is not None and last is not None and None not in (first.prefix_hits, last.prefix_queries):
            assert first.prefix_hits is not None and last.prefix_hits is not None
            assert first.prefix_queries is not None and last.prefix_queries is not None
            queries = last.prefix_queries - first.prefix_queries
            if queries > 0:
                return (last.prefix_hits - first.prefix_hits) / queries, "server metrics"
        if self.tokens["prompt_with_cached"]:
            return self.tokens["cached"] / self.tokens["prompt_with_cached"], "replies (cached tokens)"
        return None, "not reported"
