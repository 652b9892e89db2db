"""The event loop: sessions in, a router over N replicas, measurements out.

``simulate(sessions, config)`` consumes ``SessionPlan``s lazily in arrival order (one pending
arrival at a time) and keeps only live sessions, so memory is bounded by concurrency. It is a pure
function of its inputs: events at equal times run in scheduling order, replicas tie-break by index,
and nothing random happens inside (the randomness lives in the seeded session source).

Router (sessions are sticky to the replica they start on, which keeps their prefix cache local):
``least-loaded`` sends a new session to the replica with the fewest live sessions (lowest index on
ties); ``round-robin`` cycles through the replicas in arrival order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from heapq import heappop, heappush

from kvbudget.errors import InputError
from kvbudget.simulate.costs import CostTable, MemoryModel
from kvbudget.simulate.events import ARRIVAL, PAUSE_END, SWAP_DONE, EventQueue
from kvbudget.simulate.metrics import Counters, Sample, TimeSeries
from kvbudget.simulate.policies import MemoryPolicy, RouterName, TimeModel
from kvbudget.simulate.scheduler import Replica
from kvbudget.simulate.session import Session
from kvbudget.workload.record import SessionPlan, step_rows

Progress = Callable[[int, float], None]


@dataclass(frozen=True)
class SimConfig:
    memory: MemoryModel
    policy: MemoryPolicy = field(default_factory=MemoryPolicy)
    time: TimeModel = field(default_factory=TimeModel)
    replicas: int = 1
    router: RouterName = "least-loaded"
    host_bytes: int | None = None  # host tier for swap, per replica (None: unbounded)
    duration_s: float | None = None  # stop the clock here; live sessions stay live
    max_sessions: int | None = None  # consume at most this many sessions
    # A closed loop of N sessions (kvbudget loadtest's, measure/loadtest/ramp.py): a session arrives only when
    # fewer than N are live, at the moment one ends, whatever its plan's arrival time. None: the plans' arrivals.
    closed_loop: int | None = None
    # Per replica: the engine's limit on running requests (Plan.running_limit: vLLM max_num_seqs, SGLang
    # max_running_requests): a step that would run past it waits in the queue, FCFS (scheduler.py). None: memory alone.
    running_limit: int | None = None
    sample_interval_s: float = 1.0
    max_samples: int = 500
    check: bool = False  # assert the pool invariants at every allocation (tests)

    def validate(self) -> None:
        if self.replicas < 1:
            raise InputError(f"replicas must be at least 1, got {self.replicas}")
        if self.running_limit is not None and self.running_limit < 1:
            raise InputError(f"the running limit is at least 1 request per replica, got {self.running_limit}")
        if self.closed_loop is not None and self.closed_loop < 1:
            raise InputError(f"a closed loop holds at least 1 session, got {self.closed_loop}")
        t = self.time
        if not t.decode_tokens_per_s and t.step_s is None and not t.bandwidth_bytes_per_s > 0:
            raise InputError("the decode roofline needs a memory bandwidth (--bandwidth) or a fixed --decode-rate")
        if t.prefill_tokens_per_s < 0 or (t.decode_tokens_per_s is not None and t.decode_tokens_per_s <= 0):
            raise InputError("prefill and decode rates must be positive tokens per second")
        if not 0 <= self.policy.watermark < 1:
            raise InputError(f"the watermark is a share of the pool in [0, 1), got {self.policy.watermark}")


@dataclass(frozen=True)
class SimResult:
    """What one run measured. Bytes are per GPU of one replica; counts are over all replicas."""

    arrived: int
    finished: int
    refused_admission: int
    refused_at_cap: int
    refused_too_big: int
    live_at_end: int
    preemptions: int
    swaps: int
    swap_bytes: int
    compactions: int
    evictions: int
    steps: int
    prompt_tokens: int
    hit_tokens: int
    prefill_tokens: int
    decode_tokens: int
    recomputed_tokens: int
    pool_bytes: int
    peak_pool_bytes: int
    peak_resident_bytes: int
    queue_delay_s: dict[str, float]
    step_wait_s: dict[str, float]
    ttft_s: dict[str, float]  # per step: ready to first token (queue, prefill backlog, one iteration)
    itl_s: dict[str, float]  # per step: its mean inter-token latency
    prefill_busy_s: float  # seconds the replicas spent prefilling, summed
    queue_grows: bool  # the waiting queue grew through the arrivals (metrics.queue_grows): unstable at this load
    mean_concurrency: float
    concurrency_window_s: tuple[float, float]
    peak_concurrency: int
    peak_running: int  # the most sessions in one replica's batch at once (running requests)
    running_limit: int | None  # per replica (SimConfig.running_limit); None: none
    limit_waits: int  # steps that waited while the running limit held their queue (Replica.drain)
    limit_wait_s: dict[str, float]  # those steps: ready to admission (p50, p99)
    sim_time_s: float
    replicas: int
    samples: tuple[Sample, ...]

    @property
    def refused(self) -> int:
        return self.refused_admission + self.refused_at_cap + self.refused_too_big

    @property
    def prefix_hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def simulate(sessions: Iterable[SessionPlan], config: SimConfig, progress: Progress | None = None) -> SimResult:
    """Run the simulation to the end of the sessions (or ``duration_s``)."""
    config.validate()
    stats = Counters()
    events = EventQueue()
    heap, seq = events.heap, events.seq
    memory = config.memory
    costs = CostTable.for_memory(memory)
    replicas = [
        Replica(
            i,
            config.memory,
            config.policy,
            config.time,
            costs,
            stats,
            events,
            config.host_bytes,
            config.check,
            config.running_limit,
        )
        for i in range(config.replicas)
    ]
    batches = [r.batch for r in replicas]
    first = replicas[0]
    single_batch = first.batch if len(replicas) == 1 else None
    round_robin = config.router == "round-robin"
    series = TimeSeries(config.sample_interval_s, config.max_samples)
    source = iter(sessions)
    limit = config.max_sessions
    stop_at = config.duration_s if config.duration_s is not None else math.inf
    pending: SessionPlan | None = None
    now = 0.0
    inf = math.inf
    closed = config.closed_loop
    due = False  # the pending plan's arrival is in the heap

    def pull() -> None:
        nonlocal pending, due
        pending, due = None, False
        if limit is not None and stats.arrived >= limit:
            return
        plan = next(source, None)
        if plan is None or plan.arrival_s > stop_at:
            return
        pending = plan
        if closed is None:
            due = True
            heappush(heap, (plan.arrival_s if plan.arrival_s > now else now, next(seq), ARRIVAL, None, 0))

    def admit_closed() -> None:  # the closed loop: the next session's first request as soon as one is missing
        nonlocal due
        if pending is not None and not due and sum(r.live for r in replicas) < closed:  # type: ignore[operator]
            due = True
            heappush(heap, (now + config.time.first_token_s, next(seq), ARRIVAL, None, 0))

    pull()
    if closed is not None:
        admit_closed()
    loops = 0
    next_sample = series.next_t
    while True:
        r_dec = first
        if single_batch is not None:
            t_dec = single_batch.next_t
        else:
            t_dec = inf
            for r, b in zip(replicas, batches, strict=True):
                if b.next_t < t_dec:
                    t_dec, r_dec = b.next_t, r
        t_ev = heap[0][0] if heap else inf
        t = t_ev if t_ev <= t_dec else t_dec
        if t > stop_at:
            now = stop_at
            break
        if t == inf:
            break
        if t >= next_sample:
            # Every sample time before this event sees the state the last event left. Only the blocks a batch's
            # ledger takes as its token clock runs depend on the time: without them the gap's samples are equal.
            still = all(b.ledger is None or not b.ledger.keys for b in batches)
            state = _state(next_sample, replicas) if still else None
            while t >= next_sample:
                row = state if state is not None else _state(next_sample, replicas)
                series.add((next_sample, *row))
                next_sample = series.next_t
        now = t
        if t_ev <= t_dec:
            _, _, kind, s, version = heappop(heap)
            if kind == PAUSE_END:
                assert s is not None
                r = replicas[s.replica]
                r.paused -= 1
                r.step_ready(s, t)
            elif kind == ARRIVAL:
                plan = pending
                assert plan is not None
                _arrive(plan, t, stats, replicas, round_robin)
                pull()
            elif kind == SWAP_DONE and s is not None and s.dver == version:
                replicas[s.replica].swap_done(s, t)
        else:
            r_dec.decode_done(t)
        if single_batch is not None:  # the event is over: the next decode event of each batch it changed
            single_batch.settle()
        else:
            for b in batches:
                b.settle()
        if closed is not None:
            admit_closed()
        loops += 1
        if progress is not None and loops & 0xFFFF == 0:
            progress(stats.arrived, now)
    series.add((now, *_state(now, replicas)))
    for r in replicas:
        r.close_group()
    return _result(stats, replicas, series, now, config)


def _arrive(plan: SessionPlan, now: float, stats: Counters, replicas: list[Replica], round_robin: bool) -> None:
    stats.arrived += 1
    index = stats.arrived
    stats.concurrency.arrival(index, now)
    one = replicas[0] if len(replicas) == 1 else None
    stats.queue.arrival(
        index,
        len(one.waiting) + len(one.slot_wait)
        if one is not None
        else sum(len(r.waiting) + len(r.slot_wait) for r in replicas),
    )
    steps = step_rows(plan.steps)
    first = next(steps, None)
    if first is None:  # a session without a model call holds nothing
        stats.finished += 1
        return
    s = Session(index, now, steps, first)
    if one is not None:
        replica = one
    elif round_robin:
        replica = replicas[(index - 1) % len(replicas)]
    else:
        replica = min(replicas, key=lambda r: (r.live, r.index))
    replica.arrive(s, plan.prefix_tokens, now)


def _state(t: float, replicas: list[Replica]) -> tuple[int, int, int, int, int]:
    """The time series' row at ``t`` without its time: used and cached bytes, running, waiting, paused."""
    used = cached = running = waiting = paused = 0
    for r in replicas:
        pool = r.pool
        grown = r.batch.pending_bytes(t)  # blocks the batch took since its last event (ledger.py)
        used += pool.used + grown
        cached += pool.cached - max(0, grown - (pool.capacity - pool.used - pool.cached))
        running += r.batch.running
        waiting += len(r.waiting) + len(r.slot_wait)
        paused += r.paused
    return used, cached, running, waiting, paused


def _result(stats: Counters, replicas: list[Replica], series: TimeSeries, now: float, config: SimConfig) -> SimResult:
    mean, start, end = stats.concurrency.mean(now)
    return SimResult(
        arrived=stats.arrived,
        finished=stats.finished,
        refused_admission=stats.refused,
        refused_at_cap=stats.cap_refused,
        refused_too_big=stats.too_big,
        live_at_end=sum(r.live for r in replicas),
        preemptions=stats.preemptions,
        swaps=stats.swaps,
        swap_bytes=stats.swap_bytes,
        compactions=stats.compactions,
        evictions=sum(r.pool.evictions for r in replicas),
        steps=stats.steps,
        prompt_tokens=stats.prompt_tokens,
        hit_tokens=stats.hit_tokens,
        prefill_tokens=stats.prefill_tokens,
        decode_tokens=stats.decode_tokens,
        recomputed_tokens=stats.recomputed_tokens,
        pool_bytes=config.memory.pool_bytes,
        peak_pool_bytes=max(r.pool.peak_used for r in replicas),
        peak_resident_bytes=max(r.pool.peak_resident for r in replicas),
        queue_delay_s=stats.queue_delay.summary(),
        step_wait_s=stats.step_wait.summary(),
        ttft_s=stats.ttft.summary(),
        itl_s=stats.itl.summary(),
        prefill_busy_s=sum(r.batch.prefill_busy for r in replicas),
        queue_grows=stats.queue.grows(len(replicas)),
        mean_concurrency=mean,
        concurrency_window_s=(start, end),
        peak_concurrency=stats.concurrency.peak,
        peak_running=max(r.batch.peak for r in replicas),
        running_limit=config.running_limit,
        limit_waits=stats.limit_wait.count,
        limit_wait_s=stats.limit_wait.summary(),
        sim_time_s=now,
        replicas=len(replicas),
        samples=tuple(series.samples),
    )
