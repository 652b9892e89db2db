"""A SimPy model of the simulator's paged policy (blocks on demand, recompute preemption, pauses
holding their blocks), the second reference ``kvbudget simulate`` is checked and timed against
(issue 10, goal 1; bench/simpy_reference.py runs it, tests/simulate/test_simpy_reference.py checks it).

The system, written the plain SimPy way: one process per session, decode and pauses as timeouts,
preemption of a decoding session as ``Process.interrupt``. SimPy has no resource whose holders grow
and can be preempted, so the KV pool is a plain object (``_Pool``, tokens at one byte each):

* a step's prompt (the context so far plus its appended tokens; the first also carries the shared
  prefix, which this model does not share) is admitted first come first served with head-of-line
  blocking when it fits in the pool less the referenced blocks; a session admitted before only
  asks again after being preempted;
* a holder's blocks grow when its decode completes (by the step's output) and when its next step
  appends (after the pause, which holds the blocks); when they do not fit, the most recently
  admitted holder is preempted, the grower itself included;
* a preempted session's blocks stay in the pool as evictable cache (least recently freed evicted
  first, a session's tail before its head; a finished session's blocks likewise, evicted whole); it
  waits at the front of the queue when it was decoding (with the output it still has to generate),
  at the back at the end of its pause otherwise; on admission it reuses what of its blocks is still
  cached and prefills the rest again (``recomputed_tokens``);
* a step whose whole context cannot fit in the empty pool ends its session (``too_big``).

Decode runs at a fixed ``decode_tokens_per_s`` per session and prefill is instantaneous, as in
``simulator_config`` (bench/simpy_reference.py). SimPy is a dev dependency.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from kvbudget.workload.record import SessionPlan, step_rows

RUNNING, PAUSED, WAITING, DONE = range(4)


@dataclass
class PagedOutcome:
    arrived: int = 0
    finished: int = 0
    too_big: int = 0
    steps: int = 0
    prompt_tokens: int = 0
    hit_tokens: int = 0
    decode_tokens: int = 0
    recomputed_tokens: int = 0
    preemptions: int = 0
    live: int = 0
    peak_concurrency: int = 0
    end_s: float = 0.0


class _Session:
    __slots__ = (
        "admitted",
        "append",
        "cached",
        "context",
        "held",
        "output",
        "process",
        "prompt",
        "start",
        "state",
        "wake",
    )

    def __init__(self, append: int, output: int) -> None:
        self.append, self.output = append, output
        self.context = self.prompt = self.held = self.cached = 0
        self.start = 0.0
        self.state = WAITING
        self.admitted = False
        self.process: Any = None
        self.wake: Any = None


class _Pool:
    """Referenced tokens, and an LRU of cached (unreferenced, still valid) ones per session."""

    def __init__(self, capacity: int, block: int = 1) -> None:
        self.capacity = capacity
        self.block = block
        self.used = 0
        self.cached = 0
        self.lru: OrderedDict[_Session, None] = OrderedDict()

    def take(self, tokens: int) -> None:
        short = tokens - (self.capacity - self.used - self.cached)
        while short > 0 and self.lru:
            entry = next(iter(self.lru))
            whole = -(-short // self.block) * self.block  # a session's tail goes in whole blocks
            freed = entry.cached if whole >= entry.cached or entry.state == DONE else whole
            entry.cached -= freed
            self.cached -= freed
            short -= freed
            if entry.cached == 0:
                del self.lru[entry]
        self.used += tokens

    def to_cache(self, s: _Session) -> None:
        self.used -= s.held
        self.cached += s.held
        s.cached, s.held = s.held, 0
        self.lru[s] = None
        self.lru.move_to_end(s)

    def from_cache(self, s: _Session) -> int:
        tokens = s.cached
        self.lru.pop(s, None)
        self.cached -= tokens
        self.used += tokens
        s.cached = 0
        return tokens


def simpy_paged(
    sessions: Iterable[SessionPlan], *, pool_tokens: int, decode_tokens_per_s: float, block: int = 1
) -> PagedOutcome:
    import simpy  # dev dependency

    def size(tokens: int) -> int:  # tokens held, in whole blocks
        return -(-tokens // block) * block

    env = simpy.Environment()
    pool = _Pool(pool_tokens, block)
    out = PagedOutcome()
    per_token = 1.0 / decode_tokens_per_s
    waiting: deque[_Session] = deque()
    holders: OrderedDict[_Session, None] = OrderedDict()  # admission order: last = newest

    def start(s: _Session, hits: int, lost: int) -> None:
        s.prompt = prompt = s.context + s.append
        out.steps += 1
        out.prompt_tokens += prompt
        out.hit_tokens += hits
        out.recomputed_tokens += lost
        s.state, s.start = RUNNING, env.now
        if s.wake is not None:
            s.wake.succeed()
            s.wake = None

    def admit(s: _Session) -> bool:
        prompt = s.context + s.append
        if size(prompt) - s.cached > pool.capacity - pool.used - s.cached:
            return False
        own = s.cached
        pool.from_cache(s)
        hits = min(own, s.context)
        pool.take(size(prompt) - own)
        s.held = size(prompt)
        holders[s] = None
        if not s.admitted:
            s.admitted = True
            out.live += 1
            out.peak_concurrency = max(out.peak_concurrency, out.live)
        start(s, hits, max(0, s.context - hits))
        return True

    def drain() -> None:
        while waiting and admit(waiting[0]):
            waiting.popleft()

    def preempt(v: _Session) -> None:
        out.preemptions += 1
        if v.state == RUNNING:
            decoded = (env.now - v.start) / per_token
            remaining = max(0, min(v.output, math.ceil(v.output - decoded - 1e-6)))  # batch.TOKEN_TOLERANCE
            out.decode_tokens += v.output - remaining
            v.context = v.prompt + v.output - remaining
            v.append, v.output = 0, remaining
            v.state = WAITING
            waiting.appendleft(v)
            v.wake = env.event()
            if v.process is not env.active_process:  # a grower preempting itself is not waiting on a timeout
                v.process.interrupt()
        pool.to_cache(v)
        del holders[v]

    def grow(s: _Session, tokens: int) -> bool:
        need = size(tokens) - s.held
        if need <= 0:
            return True
        while pool.capacity - pool.used < need:
            victim = next(reversed(holders))
            preempt(victim)
            if victim is s:
                return False
        pool.take(need)
        s.held = size(tokens)
        return True

    def finish(s: _Session) -> None:
        out.end_s = env.now  # the last session's end (an interrupted decode's stale timeout may follow)
        if s.admitted:
            out.live -= 1
        if s in holders:
            pool.to_cache(s)
            del holders[s]
        s.state = DONE
        drain()

    def step_ready(s: _Session) -> bool:
        """The step can run (started now), waits for admission (``s.wake``), or ended the session."""
        if s.context + s.append + s.output > pool.capacity:  # never fits, even in an empty pool
            out.too_big += 1
            finish(s)
            return False
        if s in holders:
            if grow(s, s.context + s.append):
                start(s, s.context, 0)
                return True
            s.state = WAITING
            waiting.appendleft(s)
        else:
            s.state = WAITING
            waiting.append(s)
        s.wake = env.event()
        drain()
        return True

    def decode(s: _Session) -> Generator[Any, Any, None]:
        """Run the admitted step's decode to completion, through preemptions and re-admissions, taking the
        block of token ``g`` when the iteration that writes it starts (``(g - prompt - 1)`` tokens in)."""
        while True:
            try:
                if s.state != RUNNING:
                    yield s.wake
                g = s.held + 1  # the first token of the next block
                while g <= s.prompt + s.output:
                    at = s.start + (g - s.prompt - 1) * per_token
                    if at > env.now:
                        yield env.timeout(at - env.now)
                    if not grow(s, g):
                        break  # it preempted itself: it waits at the front of the queue
                    g = s.held + 1
                if s.state != RUNNING:
                    continue
                rest = s.start + s.output * per_token - env.now
                yield env.timeout(rest if rest > 0 else 0.0)
                return
            except simpy.Interrupt:
                continue

    def session(plan: SessionPlan) -> Generator[Any, Any, None]:
        out.arrived += 1
        steps = step_rows(plan.steps)
        first = next(steps, None)
        if first is None:
            out.finished += 1
            out.end_s = env.now
            return
        s = _Session(first[0] + plan.prefix_tokens, first[1])
        s.process = env.active_process
        pause = first[2]
        while True:
            if not step_ready(s):
                return
            yield from decode(s)
            out.decode_tokens += s.output
            s.context = s.prompt + s.output
            following = next(steps, None)
            if following is None:
                out.finished += 1
                finish(s)
                return
            s.state = PAUSED
            if s in holders and not grow(s, s.context):
                drain()
            yield env.timeout(pause)
            s.append, s.output, pause = following[0], following[1], following[2]

    def source(plans: Iterator[SessionPlan]) -> Generator[Any, Any, None]:
        for plan in plans:
            if plan.arrival_s > env.now:
                yield env.timeout(plan.arrival_s - env.now)
            env.process(session(plan))

    env.process(source(iter(sessions)))
    env.run()
    return out
