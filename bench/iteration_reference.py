"""A per-iteration model of one vLLM V1 replica: the reference ``kvbudget simulate`` is checked against
(issue 20). Written here from vLLM's scheduler rules, with no external simulator.

Every iteration is one batch, and every block is allocated when it is taken:

* **Running first** (vllm/v1/core/sched/scheduler.py, ``schedule``: the running queue is scheduled
  before the waiting one): each running request takes the slot of the token this iteration writes;
  when no block is free (free blocks include the prefix cache's evictable ones), the **newest running
  request is preempted** (``self.running.pop()``) until the block is had, the requester included.
  A preempted request frees its blocks into the prefix cache (hashes kept) and goes to the **front**
  of the waiting queue; it **recomputes** its prompt plus generated tokens, less what the cache still
  holds when it is scheduled again.
* **Then waiting**, only in an iteration without preemptions (``if not preempted_reqs``), first come
  first served with head-of-line blocking (``if new_blocks is None: break``): a request is admitted
  when its prompt's blocks fit in free plus evictable blocks; its own cached blocks are re-used.
* **Each agent call is a request**: a finished request's blocks go to the prefix cache
  (least-recently-freed evicted first, a request's tail before its head); the session's next call
  re-uses what survived.

Time, the same model as the simulator's (docs/simulate.md) so that the two can be compared: an
iteration that prefills runs only prefill, at ``prefill_tokens_per_s`` (the simulator's prefill
stalls decode; chunked prefill is not modelled by either); a decode iteration emits one token per
running request and takes ``(weights + KV bytes of every running request at its step's end) /
bandwidth``. The shared prefix is not modelled (compare with ``share_prefix=False``); the cap
refuses (``at_cap = "refuse"``) and a trace's own compactions are replayed. Token counts per block:
``block_size``; the pool is ``pool_blocks`` blocks.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from kvbudget.workload.record import Row, SessionPlan, step_rows

ARRIVAL, PAUSE_END = 0, 1


@dataclass(frozen=True)
class RefConfig:
    pool_blocks: int
    block_size: int
    bytes_per_token: int
    cap_tokens: int
    weights_bytes: int
    bandwidth_bytes_per_s: float
    prefill_tokens_per_s: float


@dataclass
class RefResult:
    arrived: int = 0
    finished: int = 0
    refused_at_cap: int = 0
    refused_too_big: int = 0
    preemptions: int = 0
    peak_running: int = 0
    steps: int = 0
    prefill_tokens: int = 0
    recomputed_tokens: int = 0
    decode_tokens: int = 0
    iterations: int = 0
    end_s: float = 0.0
    queue_delays: list[float] = field(default_factory=list)

    def delay(self, q: float) -> float:
        """The ``q`` quantile of the queue delays (nearest rank), 0 when none."""
        d = sorted(self.queue_delays)
        return d[min(len(d) - 1, max(0, math.ceil(q * len(d)) - 1))] if d else 0.0


class _Session:
    __slots__ = (
        "admitted",
        "append",
        "arrival",
        "blocks",
        "cached",
        "compact_to",
        "context",
        "kv",
        "left",
        "output",
        "pause",
        "resident",
        "steps",
        "tokens",
    )

    def __init__(self, arrival: float, steps: Iterator[Row], first: Row) -> None:
        self.arrival = arrival
        self.steps = steps
        self.append, self.output, self.pause, self.compact_to = first
        self.context = self.tokens = self.left = self.blocks = self.cached = self.resident = self.kv = 0
        self.admitted = False


def run_reference(sessions: Iterable[SessionPlan], cfg: RefConfig) -> RefResult:
    """Iterate the replica until every session is served; a pure function of its inputs."""
    b, total = cfg.block_size, cfg.pool_blocks
    per_block = b * cfg.bytes_per_token
    out = RefResult()
    lru: OrderedDict[_Session, None] = OrderedDict()  # sessions with cached blocks, least recently freed first
    used = cached = 0
    running: list[_Session] = []
    waiting: deque[_Session] = deque()
    events: list[tuple[float, int, int, _Session]] = []
    seq = itertools.count()
    source = iter(sessions)
    pending = next(source, None)
    now = 0.0

    def blocks(tokens: int) -> int:
        return -(-tokens // b)

    def take(n: int) -> None:
        nonlocal used, cached
        short = n - (total - used - cached)
        while short > 0:  # evict the least recently freed blocks, a request's tail first
            s = next(iter(lru))
            k = min(short, s.cached)
            s.cached -= k
            cached -= k
            short -= k
            s.resident = min(s.resident, s.cached * b)
            if s.cached == 0:
                del lru[s]
        used += n

    def to_cache(s: _Session) -> None:
        nonlocal used, cached
        used -= s.blocks
        cached += s.blocks
        s.cached, s.blocks, s.resident = s.blocks, 0, s.tokens
        lru[s] = None

    def drop(s: _Session) -> None:
        nonlocal cached
        cached -= s.cached
        s.cached = s.resident = 0
        lru.pop(s, None)

    def ready(s: _Session) -> None:
        """A step is ready (arrival or pause end): the cap, a compaction, or the waiting queue."""
        if s.compact_to is not None and s.compact_to < s.context:
            drop(s)  # the compacted text after the prefix is new: prefilled again
            s.append += s.compact_to
            s.context = 0
            s.compact_to = None
        if s.context + s.append + s.output > cfg.cap_tokens:
            out.refused_at_cap += 1
            drop(s)
            return
        if blocks(s.context + s.append + s.output) > total:
            out.refused_too_big += 1
            drop(s)
            return
        waiting.append(s)

    def complete(s: _Session, t: float) -> None:
        out.decode_tokens += s.output
        s.context = s.tokens
        to_cache(s)  # a finished request's blocks stay valid in the prefix cache
        nxt = next(s.steps, None)
        if nxt is None:
            out.finished += 1
            return
        pause = s.pause
        s.append, s.output, s.pause, s.compact_to = nxt
        heapq.heappush(events, (t + pause, next(seq), PAUSE_END, s))

    while True:
        while pending is not None and pending.arrival_s <= now:
            out.arrived += 1
            rows = step_rows(pending.steps)
            first = next(rows, None)
            if first is None:  # a session without a model call holds nothing
                out.finished += 1
            else:
                s = _Session(pending.arrival_s, rows, first)
                heapq.heappush(events, (pending.arrival_s, next(seq), ARRIVAL, s))
            pending = next(source, None)
        while events and events[0][0] <= now:
            ready(heapq.heappop(events)[3])
        if not running and not waiting:
            t_next = min(events[0][0] if events else math.inf, pending.arrival_s if pending else math.inf)
            if t_next == math.inf:
                break
            now = t_next
            continue
        # 1. running requests take the slot of the token this iteration writes
        preempted = False
        i = 0
        while i < len(running):
            r = running[i]
            need = blocks(r.tokens + 1) - r.blocks
            if need > 0:
                while total - used < need:
                    v = running.pop()  # vLLM V1: preempt the newest running request
                    out.preemptions += 1
                    preempted = True
                    out.decode_tokens += v.output - v.left
                    v.output, v.append = v.left, 0
                    v.context = v.tokens
                    to_cache(v)
                    waiting.appendleft(v)
                    if v is r:
                        break
                if i >= len(running):
                    break
                take(need)
                r.blocks += need
            i += 1
        # 2. waiting requests, FCFS with head-of-line blocking, in an iteration without preemptions
        prefill = admitted = 0
        while waiting and not preempted:
            s = waiting[0]
            prompt = s.context + s.append
            own = s.cached
            need = blocks(prompt) - own
            if need > total - used - own:
                break
            waiting.popleft()
            hits = min(s.resident, prompt) if own else 0
            if own:
                del lru[s]
                cached -= own
                used += own
                s.cached = 0
            take(need)
            s.blocks = own + need
            out.recomputed_tokens += max(0, s.context - hits)
            out.prefill_tokens += prompt - hits
            prefill += prompt - hits
            out.steps += 1
            if not s.admitted:
                s.admitted = True
                out.queue_delays.append(now - s.arrival)
            s.tokens, s.left = prompt, s.output
            s.kv = blocks(prompt + s.output) * per_block
            running.append(s)
            admitted += 1
        out.peak_running = max(out.peak_running, len(running))
        out.iterations += 1
        if admitted or not running:  # a prefill iteration: decode stands still (as in the simulator)
            now += prefill / cfg.prefill_tokens_per_s if cfg.prefill_tokens_per_s else 0.0
            done = [r for r in running if r.left == 0]
        else:
            now += (cfg.weights_bytes + sum(r.kv for r in running)) / cfg.bandwidth_bytes_per_s
            for r in running:
                r.tokens += 1
                r.left -= 1
            done = [r for r in running if r.left == 0]
        if done:
            running = [r for r in running if r.left]
            for r in done:
                complete(r, now)
    out.end_s = now
    return out
