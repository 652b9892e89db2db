"""A live session inside the simulator: where it is, what it holds, what its current step needs.

Only live sessions exist; a finished one is dropped, so memory is bounded by concurrency, not by
history. Token counts include the shared prefix; byte counts (``held``, ``cached``, ``swapped``)
are the session's private bytes (its prefix is counted once, in the replica's ``SharedPrefix``).
"""

from __future__ import annotations

from collections.abc import Iterator

from kvbudget.simulate.costs import CostTable
from kvbudget.simulate.pool import SharedPrefix
from kvbudget.workload.record import Row

WAITING, RUNNING, PAUSED, SWAP_IN, DONE = range(5)


class Session:
    __slots__ = (
        "admitted",
        "append",
        "arrival",
        "cached",
        "compact_to",
        "context",
        "dver",
        "gnext",
        "gtop",
        "held",
        "hits",
        "holder",
        "kv",
        "order",
        "out0",
        "output",
        "pause",
        "pbytes",
        "prefix",
        "prompt",
        "ptokens",
        "ready_at",
        "replica",
        "resident",
        "rheld",
        "rm",
        "rn",
        "rorder",
        "rphase",
        "rtok",
        "sid",
        "state",
        "steps",
        "swapped",
        "t_first",
        "vfinish",
    )

    def __init__(self, sid: int, arrival: float, steps: Iterator[Row], first: Row) -> None:
        self.sid = sid
        self.arrival = arrival
        self.steps = steps
        self.replica = 0
        self.prefix: SharedPrefix | None = None
        self.ptokens = 0  # shared (block-aligned) prefix tokens
        self.pbytes = 0  # bytes of those tokens, held once by the replica
        self.context = 0  # tokens of the conversation so far (computed, whether resident or not)
        self.resident = 0  # tokens still resident in the evictable cache (prefix included)
        self.held = 0  # private bytes referenced
        self.cached = 0  # private bytes unreferenced but valid (evictable)
        self.swapped = 0  # private bytes on the host tier
        self.append, self.output, self.pause, self.compact_to = first
        self.prompt = 0
        self.hits = 0  # resident tokens found at admission (kept across a swap-in)
        self.kv = 0  # bytes this session adds to each decode iteration's reads
        self.state = WAITING
        self.admitted = False
        self.holder = False
        self.order = 0
        self.vfinish = 0.0
        self.dver = 0
        self.gnext = 0  # running: the token count of its next block boundary in this step (0: none left)
        self.gtop = 0  # the tokens whose bytes it takes there
        self.ready_at = arrival
        # in a batch's ledger (ledger.py): the run's boundaries (0: not in it), its anchor's period and
        # phase, its order of entry, the bytes held before the run and the run's first boundary token
        self.rn = 0
        self.rm = 0
        self.rphase = 0.0
        self.rorder = 0
        self.rheld = 0
        self.rtok = 0
        self.t_first = -1.0  # when the current step's first token came (-1: not yet; the TTFT is pending)
        self.out0 = 0  # the current step's output tokens when it first ran (its inter-token latency's divisor)

    def private(self, costs: CostTable, tokens: int) -> int:
        """Private bytes at ``tokens`` tokens (the shared prefix's bytes are the replica's)."""
        return costs.bytes(tokens) - self.pbytes

    def evict(self, want: int, costs: CostTable) -> int:
        """Evict the cached tail first (vLLM frees a request's blocks in reverse order)."""
        if want >= self.cached or self.state == DONE:  # a finished session's blocks are never hit again
            freed, self.cached, self.resident = self.cached, 0, self.ptokens
            return freed
        keep = costs.tokens_within(self.cached - want + self.pbytes, self.ptokens, self.resident)
        kept = costs.bytes(keep) - self.pbytes if keep > self.ptokens else 0
        freed = self.cached - kept
        self.cached, self.resident = kept, keep if kept else self.ptokens
        return freed
