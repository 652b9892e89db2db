"""Growth into the pool and preemption when it falls short: the ``paged`` rules of one replica (scheduler.py).

A running session takes its next blocks when its decode crosses a block boundary (an event on the batch's
token clock, batch.py; vLLM V1 ``allocate_slots`` before each iteration). When they do not fit, the most
recently admitted session holding blocks is preempted, or the requester itself when it is the most recent
(vLLM V1: ``self.running.pop()`` until ``allocate_slots`` succeeds); under SGLang's rule (``victim =
"fewest-decoded"``) the running session with the fewest tokens generated in its step (schedule_batch.py
``retract_decode``). ``recompute`` frees the victim's blocks into the prefix cache (vLLM V1 keeps their hashes)
and sends it to the *front* of the waiting queue; ``swap`` moves them to the host tier (vLLM V0
``PreemptionMode.SWAP``), paid in link time on resumption (scheduler.py ``_admit``).
"""

from __future__ import annotations

from collections import OrderedDict, deque

from kvbudget.simulate.batch import DecodeBatch
from kvbudget.simulate.costs import CostTable
from kvbudget.simulate.ledger import GROWTH_TOKENS
from kvbudget.simulate.metrics import Counters
from kvbudget.simulate.policies import MemoryPolicy
from kvbudget.simulate.pool import Pool
from kvbudget.simulate.session import RUNNING, SWAP_IN, WAITING, Session


class Preemption:
    """The replica's growth and preemption (a base of scheduler.Replica, which sets these attributes)."""

    costs: CostTable
    pool: Pool
    batch: DecodeBatch
    stats: Counters
    policy: MemoryPolicy
    holders: OrderedDict[Session, None]
    waiting: deque[Session]
    slot_wait: deque[Session]
    slots: int
    host_free: int
    fewest_decoded: bool

    def _grow(self, s: Session, tokens: int, now: float) -> bool:
        """Holder ``s`` grows to ``tokens`` tokens, preempting newer holders when the pool is short;
        False if ``s`` itself was preempted (it was the newest)."""
        need = self.costs.bytes(tokens) - s.pbytes - s.held
        if need <= 0:
            s.resident = tokens
            return True
        pool = self.pool
        used = pool.used + need
        if used + pool.cached <= pool.capacity:  # the common case: free blocks suffice (inlined take)
            pool.used = used
            if used > pool.peak_used:  # noqa: PLR1730 - hot path: a compare, not a call
                pool.peak_used = used
            if used + pool.cached > pool.peak_resident:  # noqa: PLR1730
                pool.peak_resident = used + pool.cached
            s.held += need
            s.resident = tokens
            return True
        while pool.capacity - pool.used < need:
            victim = self._victim() if self.fewest_decoded else next(reversed(self.holders))
            self._preempt(victim, now)
            if victim is s:
                return False
        pool.take(need, self.costs)
        s.held += need
        s.resident = tokens
        return True

    def _short(self, s: Session, q: int, now: float) -> None:
        """``s``'s boundary at period ``q`` is the first the pool cannot give: take it as every boundary was
        taken before the ledger (``_grow``: the engine's preemption), then pass the ledger's cursor over it."""
        ledger = self.batch.ledger
        assert ledger is not None
        c = ledger.charged(s)
        g = s.rtok + c * ledger.period
        s.held = s.rheld + c * ledger.nb
        end = s.prompt + s.output
        chunk = -(-g // GROWTH_TOKENS) * GROWTH_TOKENS
        if self._grow(s, chunk if chunk < end else end, now):
            ledger.took(s, q)

    def _victim(self) -> Session:
        """SGLang's retraction order (schedule_batch.py ``retract_decode``): the running session with the fewest
        tokens generated in its step, the longest prompt among equals; the newest holder if none runs."""
        v = self.batch.v
        running = [s for s in self.holders if s.state == RUNNING]
        if not running:
            return next(reversed(self.holders))
        return min(running, key=lambda s: (s.output - (s.vfinish - v), -s.prompt, -s.order))

    def _preempt(self, v: Session, now: float) -> None:
        self.stats.preemptions += 1
        if v.state == RUNNING:
            remaining = self.batch.leave(v, now)
            self.stats.decode_tokens += v.output - remaining  # generated tokens are kept (and recomputed)
            v.context = v.prompt + v.output - remaining
            v.append, v.output = 0, remaining
            v.state = WAITING
            self.waiting.appendleft(v)
        elif v.state == SWAP_IN:
            self.slots += 1
            v.dver += 1  # its SWAP_DONE event is stale
            v.state = WAITING
            self.waiting.appendleft(v)
        elif v.state == WAITING:  # a holder's step waiting for a slot: now it waits for its blocks too
            if v in self.slot_wait:  # not when it is the one resuming (drain)
                self.slot_wait.remove(v)
            self.waiting.appendleft(v)
        if self.policy.preempt == "swap" and v.held <= self.host_free:
            self.stats.swaps += 1
            self.stats.swap_bytes += v.held
            self.host_free -= v.held
            v.swapped = v.held
            self.pool.release(v.held)
            v.held = 0
            self._unref(v)
        else:
            self._unhold(v)

    def _unhold(self, s: Session) -> None:
        """``s`` stops referencing its blocks; they stay valid in the prefix cache (LRU)."""
        self.pool.to_cache(s, s.held)
        s.held = 0
        self._unref(s)

    def _unref(self, s: Session) -> None:
        del self.holders[s]
        s.holder = False
        entry = s.prefix
        if entry is not None:
            entry.refs -= 1
            if entry.refs == 0:
                self.pool.to_cache(entry, entry.bytes)
