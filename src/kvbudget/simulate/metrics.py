"""Bounded-memory measurements: percentiles, a sampled time series, time-averaged concurrency.

Nothing here grows with the number of steps or sessions:

* ``LogHistogram``: delays in log-spaced buckets (ratio 1.01 from 1 µs), so a percentile is exact
  to within 1% relative error, with at most ~2,800 buckets up to 10^6 s;
* ``TimeSeries``: samples every ``interval`` seconds; when it holds ``2 x max_samples`` it keeps
  every other sample and doubles the interval (so it always spans the whole run);
* ``Concurrency``: the time integral of sessions in service, with checkpoints at every k-th arrival
  (k doubles as they fill) to cut a warm-up off the average afterwards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ZERO_S = 1e-6
RATIO = 1.01
_LOG_RATIO = math.log(RATIO)


class LogHistogram:
    __slots__ = ("buckets", "count", "max", "zero")

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}
        self.zero = 0
        self.count = 0
        self.max = 0.0

    def add(self, value: float) -> None:
        self.count += 1
        if value <= ZERO_S:
            self.zero += 1
            return
        if value > self.max:  # noqa: PLR1730 - once per step: a compare, not a call
            self.max = value
        key = math.ceil(math.log(value / ZERO_S) / _LOG_RATIO)
        self.buckets[key] = self.buckets.get(key, 0) + 1

    def quantile(self, q: float) -> float:
        """The ``q`` quantile (upper bucket edge, capped at the maximum seen); 0 when empty."""
        if self.count == 0:
            return 0.0
        rank = max(1, math.ceil(q * self.count))
        seen = self.zero
        if seen >= rank:
            return 0.0
        for key in sorted(self.buckets):
            seen += self.buckets[key]
            if seen >= rank:
                return min(ZERO_S * RATIO**key, self.max)
        return self.max

    def summary(self) -> dict[str, float]:
        return {"p50": round(self.quantile(0.5), 6), "p99": round(self.quantile(0.99), 6)}


@dataclass(frozen=True)
class Sample:
    t: float
    used_bytes: int
    cached_bytes: int
    running: int
    waiting: int
    paused: int

    def to_json(self) -> dict[str, float | int]:
        return {
            "t": round(self.t, 6),
            "used_bytes": self.used_bytes,
            "cached_bytes": self.cached_bytes,
            "running": self.running,
            "waiting": self.waiting,
            "paused": self.paused,
        }


class TimeSeries:
    """Rows ``(t, used_bytes, cached_bytes, running, waiting, paused)``, one every ``interval`` seconds; a ``Sample``
    each only when read (``samples``): the run adds thousands, most thinned away, and keeps at most ``2 x max``."""

    __slots__ = ("interval", "max_samples", "next_t", "rows")

    def __init__(self, interval: float = 1.0, max_samples: int = 500) -> None:
        self.interval = interval
        self.max_samples = max_samples
        self.next_t = 0.0
        self.rows: list[tuple[float, int, int, int, int, int]] = []

    def add(self, row: tuple[float, int, int, int, int, int]) -> None:
        self.rows.append(row)
        if len(self.rows) >= 2 * self.max_samples:
            self.rows = self.rows[::2]
            self.interval *= 2
        self.next_t = row[0] + self.interval

    @property
    def samples(self) -> list[Sample]:
        return [Sample(*row) for row in self.rows]


class QueueTrend:
    """The waiting queue (all replicas) seen at arrivals: a checkpoint every k-th arrival, k doubling past 64
    checkpoints (as ``Concurrency``), so it spans every arrival in bounded memory."""

    __slots__ = ("checkpoints", "every")

    def __init__(self) -> None:
        self.every = 1
        self.checkpoints: list[tuple[int, int]] = []  # (arrival index, sessions waiting)

    def arrival(self, index: int, waiting: int) -> None:
        if index % self.every == 0:
            self.checkpoints.append((index, waiting))
            if len(self.checkpoints) > 64:
                self.every *= 2
                self.checkpoints = [c for c in self.checkpoints if c[0] % self.every == 0]

    def grows(self, replicas: int) -> bool:
        """Whether the queue grows through the arrivals (the load is past capacity, not queueing in bursts)."""
        return queue_grows([w for _, w in self.checkpoints], replicas)


def queue_grows(waiting: list[int], replicas: int) -> bool:
    """Queue lengths in arrival order grow: the mean over the last quarter is at least one session per replica
    and more than twice the mean over the second quarter."""
    quarter = len(waiting) // 4
    if quarter < 2:
        return False
    early = sum(waiting[quarter : 2 * quarter]) / quarter
    late = sum(waiting[-quarter:]) / quarter
    return late >= replicas and late > 2 * early


class Concurrency:
    """Time integral of sessions in service (admitted, not finished), with arrival checkpoints."""

    __slots__ = ("area", "checkpoints", "every", "last_arrival", "live", "peak", "t")

    def __init__(self) -> None:
        self.area = 0.0
        self.live = 0
        self.peak = 0
        self.t = 0.0
        self.every = 1
        self.checkpoints: list[tuple[int, float, float]] = []  # (arrival index, time, area)
        self.last_arrival: tuple[int, float, float] = (0, 0.0, 0.0)

    def change(self, now: float, delta: int) -> None:
        self.area += self.live * (now - self.t)
        self.t = now
        self.live += delta
        if self.live > self.peak:  # noqa: PLR1730 - once per admission: a compare, not a call
            self.peak = self.live

    def arrival(self, index: int, now: float) -> None:
        self.area += self.live * (now - self.t)
        self.t = now
        self.last_arrival = (index, now, self.area)
        if index % self.every == 0:
            self.checkpoints.append(self.last_arrival)
            if len(self.checkpoints) > 64:
                self.every *= 2
                self.checkpoints = [c for c in self.checkpoints if c[0] % self.every == 0]

    def mean(self, end: float, warmup_share: float = 0.1) -> tuple[float, float, float]:
        """(mean, window start, window end): the average over [arrival at ``warmup_share`` of the
        arrivals, last arrival] when that window is long enough, else over [0, ``end``]."""
        n, t_last, a_last = self.last_arrival
        start = (0, 0.0, 0.0)
        for c in self.checkpoints:
            if c[0] <= warmup_share * n:
                start = c
        if n >= 10 and t_last - start[1] > 0:
            return (a_last - start[2]) / (t_last - start[1]), start[1], t_last
        area = self.area + self.live * (end - self.t)
        return (area / end if end > 0 else 0.0), 0.0, end


class Counters:
    """Run-wide counts, shared by every replica."""

    __slots__ = (
        "arrived",
        "cap_refused",
        "compactions",
        "concurrency",
        "decode_tokens",
        "finished",
        "hit_tokens",
        "itl",
        "limit_wait",
        "preemptions",
        "prefill_tokens",
        "prompt_tokens",
        "queue",
        "queue_delay",
        "recomputed_tokens",
        "refused",
        "step_wait",
        "steps",
        "swap_bytes",
        "swaps",
        "too_big",
        "ttft",
    )

    def __init__(self) -> None:
        self.arrived = 0
        self.finished = 0
        self.refused = 0
        self.cap_refused = 0
        self.too_big = 0
        self.preemptions = 0
        self.swaps = 0
        self.swap_bytes = 0
        self.compactions = 0
        self.steps = 0
        self.prompt_tokens = 0
        self.hit_tokens = 0
        self.prefill_tokens = 0
        self.decode_tokens = 0
        self.recomputed_tokens = 0
        self.queue_delay = LogHistogram()
        self.step_wait = LogHistogram()
        self.ttft = LogHistogram()  # per step: ready (arrival or pause end) to its first token
        self.itl = LogHistogram()  # per step of 2+ output tokens: (last token - first token) / (output - 1)
        self.limit_wait = LogHistogram()  # per step the running limit held: ready to admission (Replica.drain)
        self.concurrency = Concurrency()
        self.queue = QueueTrend()
