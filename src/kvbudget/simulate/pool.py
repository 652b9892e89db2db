"""Block accounting of one replica's KV pool, and the prefix cache's LRU of unreferenced blocks.

Bytes are counted in three states, as vLLM's KV cache manager keeps blocks
(vllm/v1/core/block_pool.py):

* ``used``: blocks referenced by a session (running, or holding its cache through a pause);
* ``cached``: blocks no request references but that still hold valid KV under their hash — a
  finished step's blocks, a preempted session's blocks, the shared prefix when nobody uses it. They
  count as free for allocation and are evicted least-recently-freed first (the free block queue is
  FIFO in the order blocks were freed; a request's blocks are freed tail first, so a partly evicted
  session keeps its leading tokens);
* free: the rest.

``used + cached <= capacity`` always; ``check=True`` asserts it at every allocation.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol

from kvbudget.simulate.costs import CostTable


class Evictable(Protocol):
    cached: int

    def evict(self, want: int, costs: CostTable) -> int:
        """Drop at least ``want`` cached bytes (or all); return the bytes dropped."""
        ...


class SharedPrefix:
    """One block-aligned prefix held once per replica and referenced by every session using it."""

    __slots__ = ("bytes", "cached", "ever", "refs", "resident", "tokens")

    def __init__(self, tokens: int, nbytes: int) -> None:
        self.tokens = tokens
        self.bytes = nbytes
        self.refs = 0
        self.cached = 0
        self.resident = False
        self.ever = False  # computed at least once (a later prefill of it is a recomputation)

    def evict(self, want: int, costs: CostTable) -> int:
        # A block's hash chains over its predecessors, so the prefix goes as a whole.
        freed, self.cached, self.resident = self.cached, 0, False
        return freed


class Pool:
    """Byte accounting with an LRU of evictable (unreferenced, still valid) entries."""

    __slots__ = ("cached", "capacity", "check", "evictions", "lru", "peak_resident", "peak_used", "used")

    def __init__(self, capacity: int, check: bool = False) -> None:
        self.capacity = capacity
        self.used = 0
        self.cached = 0
        self.peak_used = 0
        self.peak_resident = 0
        self.evictions = 0
        self.check = check
        self.lru: OrderedDict[Evictable, None] = OrderedDict()

    @property
    def free(self) -> int:
        return self.capacity - self.used - self.cached

    def available(self) -> int:
        """Bytes an allocation can get: free plus everything evictable."""
        return self.capacity - self.used

    def take(self, nbytes: int, costs: CostTable) -> None:
        """Reference ``nbytes`` new bytes, evicting LRU entries as needed (caller checked availability)."""
        short = nbytes - (self.capacity - self.used - self.cached)
        if short > 0:
            self.evict(short, costs)
        self.used = used = self.used + nbytes
        if used > self.peak_used:  # noqa: PLR1730 - hot path: a compare, not a call
            self.peak_used = used
        resident = used + self.cached
        if resident > self.peak_resident:  # noqa: PLR1730
            self.peak_resident = resident
        if self.check:
            assert resident <= self.capacity, f"pool over capacity: {resident} > {self.capacity}"
            assert self.used >= 0 and self.cached >= 0

    def release(self, nbytes: int) -> None:
        """Drop ``nbytes`` referenced bytes outright (a finished session's private blocks)."""
        self.used -= nbytes

    def to_cache(self, entry: Evictable, nbytes: int) -> None:
        """``nbytes`` referenced bytes become unreferenced but valid: the most recent LRU entry."""
        self.used -= nbytes
        self.cached += nbytes
        entry.cached = nbytes
        self.lru[entry] = None
        self.lru.move_to_end(entry)

    def from_cache(self, entry: Evictable) -> int:
        """Re-reference an entry's cached bytes (a prefix-cache hit); returns them."""
        nbytes = entry.cached
        if entry in self.lru:
            del self.lru[entry]
        self.cached -= nbytes
        self.used += nbytes
        entry.cached = 0
        return nbytes

    def drop(self, entry: Evictable) -> None:
        """Forget an entry's cached bytes (its chain is broken or its session ended)."""
        if entry in self.lru:
            del self.lru[entry]
        self.cached -= entry.cached
        entry.cached = 0

    def evict(self, want: int, costs: CostTable) -> None:
        """Evict least-recently-freed entries until ``want`` bytes are free."""
        while want > 0 and self.lru:
            entry = next(iter(self.lru))
            freed = entry.evict(want, costs)
            self.cached -= freed
            want -= freed
            self.evictions += 1
            if entry.cached == 0:
                del self.lru[entry]
        if self.check:
            assert want <= 0, "evicted everything and still short: the caller must check available()"
