"""The running batch's block boundaries in aggregate: only the boundary where the pool runs short is an event.

Every running session of a decode batch advances one token per iteration, on the batch's virtual token
clock ``V`` (batch.py). With a block-linear cache (``bytes(t) = ceil(t / block) x block_bytes + state``:
plain paged attention, vLLM's and SGLang's layouts without a sliding window) a session takes the same
``nb`` bytes every ``D`` tokens (``D`` = the block, or ``GROWTH_TOKENS`` for smaller pages), so its
boundaries fall at ``a + D, a + 2D, ...`` on ``V`` for an anchor ``a``. Write ``a = D m + phi`` (``0 <= phi
< D``); at ``V = D q + r`` it has crossed ``q - m - [phi > r]`` of them, and the whole batch

    T(q, r) = N q - sum(m) - #{sessions with phi > r}

— one bisection in the phases kept sorted. Boundaries are ordered by (``V``, the session's order of entry),
as the per-boundary heap ordered them (a session's next boundary was pushed when its previous one was
taken, so equal keys came in order of entry). The ``cursor`` is the last boundary charged to the pool;
the blocks the batch needs up to any ``V`` are ``nb x (T(V) - T(cursor))``, and the first boundary that
does not fit is the ``(T(cursor) + free // nb + 1)``-th, found by inverting ``T`` in O(log N):
``q = ceil((sum(m) + k) / N)``, then the phase at rank ``k + sum(m) - N q + N - 1``. Boundaries before it
are charged in bulk when an event needs the pool (pool.take: the LRU eviction of many takes in a row is
the eviction of their sum); that one boundary is an event, where the engine's preemption rule runs as
it did for every boundary (scheduler.py ``_grow``).

A session is in the ledger for the *run* of its step's regular boundaries (each exactly ``nb`` bytes,
``D`` tokens apart); an irregular first or last boundary (a partial 16-token chunk of 1-token pages) and
its completion stay heap events (batch.py). Positions are exact integer/phase pairs, never a float ``V``
recomputed, so a boundary is charged once.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable

from kvbudget.simulate.costs import CostTable
from kvbudget.simulate.pool import Pool
from kvbudget.simulate.session import Session

INF = float("inf")
GROWTH_TOKENS = 16  # the growth chunk of small pages (batch.py imports it from here)
# Sample points of the block-linearity check past the first blocks: enough to find a window's edge.
CHECK_POINTS = 509


def block_linear(bytes_of: Callable[[int], int], block: int, cap: int) -> tuple[int, int] | None:
    """``(block_bytes, state_bytes)`` when ``bytes(t) = ceil(t / block) x block_bytes + state_bytes`` and the
    period ``D`` (``Ledger.period``) exists, else None (checked on the cost function: the first three blocks
    token by token, then ``CHECK_POINTS`` spread to the cap)."""
    if block < 1 or cap < 3 * block:
        return None
    if block % GROWTH_TOKENS and GROWTH_TOKENS % block:
        return None
    per_block = bytes_of(2 * block) - bytes_of(block)
    state = bytes_of(block) - per_block
    if per_block <= 0 or state < 0:
        return None
    step = max(1, cap // CHECK_POINTS)
    points = [*range(1, 3 * block + 1), *range(3 * block + 1, cap + 1, step), cap]
    if any(bytes_of(t) != -(-t // block) * per_block + state for t in points):
        return None
    return per_block, state


class Ledger:
    """The regular block boundaries of one batch's running sessions, charged to ``pool`` in bulk."""

    __slots__ = (
        *("block", "block_bytes", "cord", "costs", "cphi", "cq", "d", "done", "keys", "members", "nb", "orders"),
        *("period", "pool", "seen", "sm", "state"),
    )

    def __init__(self, block: int, block_bytes: int, state: int, pool: Pool, costs: CostTable) -> None:
        """A ledger for a cache of ``block_bytes`` per ``block`` tokens plus ``state`` bytes a session."""
        self.block, self.block_bytes, self.state = block, block_bytes, state
        self.period = period = block if block % GROWTH_TOKENS == 0 else GROWTH_TOKENS
        self.costs = costs
        self.d = float(period)
        self.nb = period // block * block_bytes
        self.pool = pool
        self.keys: list[tuple[float, int]] = []  # (phase, order of entry), sorted
        self.members: list[Session] = []  # aligned with keys
        self.sm = 0  # sum of the anchors' periods m
        self.orders = 0
        # the cursor: the last boundary charged, as (period q, phase, order); order INF: all at that phase
        self.cq = 0
        self.cphi = 0.0
        self.cord: float = INF
        self.done = 0  # boundaries at or before the cursor (count() there), kept as they change
        self.seen = -1  # pool.used for which the short boundary last found holds (charge_to keeps it in step)

    # -- counting ------------------------------------------------------------------------------

    def count(self, q: int, phi: float, order: float) -> int:
        """Boundaries at or before position ``(q, phi, order)``."""
        keys = self.keys
        return len(keys) * q - self.sm - len(keys) + bisect_right(keys, (phi, order))

    def charged(self, s: Session) -> int:
        """Boundaries of ``s``'s run charged so far."""
        late = s.rphase > self.cphi or (s.rphase == self.cphi and s.rorder > self.cord)
        return self.cq - s.rm - (1 if late else 0)

    def fits(self) -> int:
        """How many more boundaries the pool can give without preempting (evictable blocks included)."""
        return (self.pool.capacity - self.pool.used) // self.nb

    def at(self, k: int) -> tuple[int, int]:
        """The ``k``-th boundary (1-based, over the run of every present member): its period and rank."""
        n = len(self.keys)
        q = -(-(self.sm + k) // n)
        return q, k + self.sm - n * q + n - 1

    def short(self) -> tuple[float, int, int]:
        """The first boundary that does not fit: its ``V``, period and rank (ledger not empty)."""
        pool = self.pool
        self.seen = used = pool.used
        k = self.done + (pool.capacity - used) // self.nb + 1
        n = len(self.keys)
        q = -(-(self.sm + k) // n)  # at(k), inlined
        p = k + self.sm - n * q + n - 1
        return self.d * q + self.keys[p][0], q, p

    def exit_key(self, s: Session) -> float:
        """``V`` of the last boundary of ``s``'s run (the same float formula as ``short``)."""
        return self.d * (s.rm + s.rn) + s.rphase

    # -- charging ------------------------------------------------------------------------------

    def charge_to(self, q: int, phi: float, order: float) -> None:
        """Charge every boundary up to position ``(q, phi, order)``, or up to the last that fits."""
        keys = self.keys
        if not keys or (q, phi, order) <= (self.cq, self.cphi, self.cord):
            return
        done = self.done
        want = len(keys) * (q - 1) - self.sm + bisect_right(keys, (phi, order)) - done  # count(), inlined
        if want <= 0:
            self.cq, self.cphi, self.cord = q, phi, order
            return
        room = (self.pool.capacity - self.pool.used) // self.nb  # fits(), inlined: once per charge
        if want > room:
            want = room
            if want == 0:
                return
            q, p = self.at(done + want)
            phi, order = self.keys[p]
        pool = self.pool
        synced = self.seen == pool.used
        pool.take(want * self.nb, self.costs)
        if synced:  # charging moves ``used`` and ``done`` together: the short boundary stays where ``short`` found it
            self.seen = pool.used
        self.done = done + want
        self.cq, self.cphi, self.cord = q, phi, order

    def charge_before(self, q: int, p: int) -> None:
        """Charge every boundary before the one at period ``q``, rank ``p`` (they fit: it is the short one)."""
        if p > 0:
            phi, order = self.keys[p - 1]
            self.charge_to(q, phi, order)
        else:
            phi, order = self.keys[-1]
            self.charge_to(q - 1, phi, order)

    def took(self, s: Session, q: int) -> None:
        """``s`` took its boundary at period ``q`` individually (scheduler ``_grow``): the cursor passes it."""
        self.cq, self.cphi, self.cord = q, s.rphase, s.rorder
        self.done += 1

    def pending(self, q: int, r: float) -> int:
        """Bytes the batch would have charged by ``V = D q + r`` (a sample between events), at most what fits."""
        if not self.keys or (q, r) <= (self.cq, self.cphi):
            return 0
        return max(0, min(self.count(q, r, INF) - self.done, self.fits())) * self.nb

    # -- membership ----------------------------------------------------------------------------

    def enter(self, s: Session, anchor: float, runs: int, first: int) -> bool:
        """Put ``s`` in the ledger for ``runs`` regular boundaries from token ``first``, the first at
        ``V = anchor + D``; False (nothing changed) unless the cursor lies between the anchor and that
        boundary (it always does when the batch was charged up to now, as every event does first)."""
        d = self.d
        m = int(anchor // d)
        phi = anchor - m * d
        if phi >= d:  # float rounding at a period's edge
            m, phi = m + 1, 0.0
        elif phi < 0.0:
            phi = 0.0
        self.orders += 1
        order = self.orders
        if not self.keys:  # nothing to charge between: the cursor moves to the anchor
            self.cq, self.cphi, self.cord = m, phi, order
            self.done = 0
        elif not (m, phi, order) <= (self.cq, self.cphi, self.cord) < (m + 1, phi, order):
            return False  # the cursor must lie between the anchor and the first boundary
        i = bisect_left(self.keys, (phi, order))
        self.keys.insert(i, (phi, order))
        self.members.insert(i, s)
        self.sm += m
        s.rm, s.rphase, s.rorder, s.rn = m, phi, order, runs
        s.rheld, s.rtok = s.held, first
        return True

    def leave(self, s: Session) -> int:
        """Take ``s`` out; its ``held`` and ``resident`` become what it took. Returns the boundaries taken."""
        c = self.charged(s)
        self.done -= c
        assert c <= s.rn, "a boundary past the run was charged"
        i = bisect_left(self.keys, (s.rphase, s.rorder))
        del self.keys[i]
        del self.members[i]
        self.sm -= s.rm
        if c > 0:
            s.held = s.rheld + c * self.nb
            s.resident = s.rtok + (c - 1) * self.period
        else:
            s.held = s.rheld
        s.rn = 0
        return c

    def shift(self, periods: int) -> None:
        """Move every position back by ``periods`` periods (the batch's clock rebase)."""
        for s in self.members:
            s.rm -= periods
        self.sm -= periods * len(self.members)
        self.cq -= periods
