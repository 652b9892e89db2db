"""The running batch of one replica: prefill backlog and continuous-batching decode, in fluid form.

Decode is continuous batching (vLLM, SGLang): every iteration emits one token for each running
session, so all running sessions advance at the same rate. The batch keeps a *virtual token clock*
``V`` (tokens each running session has decoded since time 0) that advances at ``1 / iteration_s``;
a session joining with ``m`` tokens to generate finishes when ``V`` reaches ``V_join + m``. A heap
on that virtual finish never needs re-keying when the batch changes: only the iteration time does,
so a step costs two heap operations, not one event per token.

Prefill runs first (vLLM V0 / SGLang default: a waiting prefill is scheduled before decode
iterations): prefills queue back to back and the decode clock stands still while the backlog
lasts (``busy_until``). The GPU is one resource: total time = prefill time + decode iterations.
A session joins the batch at admission; since the clock is frozen until its own prefill is done,
it cannot decode before it.
"""

from __future__ import annotations

import itertools
import math
from heapq import heapify, heappop, heappush

from kvbudget.simulate.policies import TimeModel
from kvbudget.simulate.session import Session

INF = math.inf
# The virtual clock is shifted back to 0 once it passes this many tokens (``_rebase``): a float sum
# near 2^16 keeps ~1e-11 of a token per addition, while one left to grow over a long run (10^7
# tokens) drifts by microtokens and more, enough to tip a preempted step's remaining-token count.
REBASE_TOKENS = 65536.0
# A preempted session within this share of a token of its next token boundary has reached it.
TOKEN_TOLERANCE = 1e-6


class DecodeBatch:
    __slots__ = (
        "busy_until",
        "fixed_iteration",
        "heap",
        "kv_read",
        "next_t",
        "prefill_rate",
        "running",
        "seq",
        "t_iter",
        "t_last",
        "time",
        "v",
    )

    def __init__(self, time: TimeModel) -> None:
        self.time = time
        self.v = 0.0
        self.t_last = 0.0
        self.busy_until = 0.0
        self.kv_read = 0
        self.running = 0
        self.heap: list[tuple[float, int, int, Session]] = []
        self.seq = itertools.count()
        self.prefill_rate = time.prefill_tokens_per_s
        rate = time.decode_tokens_per_s
        self.fixed_iteration = 1.0 / rate if rate else 0.0
        self.t_iter = self._iteration()
        self.next_t = INF

    def _iteration(self) -> float:
        if self.fixed_iteration:
            return self.fixed_iteration
        return (self.time.weights_bytes + self.kv_read) / self.time.bandwidth_bytes_per_s

    def advance(self, now: float) -> None:
        """Move the virtual clock to ``now`` (decode stands still during the prefill backlog)."""
        if self.running:
            start = self.t_last if self.t_last > self.busy_until else self.busy_until
            if now > start:
                self.v += (now - start) / self.t_iter
        self.t_last = now

    def join(self, s: Session, now: float, prefill_tokens: int, kv_bytes: int) -> None:
        """Admit ``s`` to the batch: queue its prefill, then decode ``s.output`` tokens."""
        busy = self.busy_until
        if self.running:  # advance(now), inlined: this runs once per step
            start = self.t_last if self.t_last > busy else busy
            if now > start:
                self.v += (now - start) / self.t_iter
        self.t_last = now
        if prefill_tokens and self.prefill_rate:
            busy = self.busy_until = (busy if busy > now else now) + prefill_tokens / self.prefill_rate
        s.kv = kv_bytes
        self.kv_read += kv_bytes
        self.running += 1
        s.vfinish = vfinish = self.v + s.output
        heap = self.heap
        heappush(heap, (vfinish, next(self.seq), s.dver, s))
        if not self.fixed_iteration:
            self.t_iter = (self.time.weights_bytes + self.kv_read) / self.time.bandwidth_bytes_per_s
        top = heap[0]
        if top[2] == top[3].dver:  # refresh(), inlined for the common case
            start = now if now > busy else busy
            ahead = top[0] - self.v
            self.next_t = start + (ahead * self.t_iter if ahead > 0 else 0.0)
        else:
            self.refresh()

    def leave(self, s: Session, now: float) -> int:
        """Take ``s`` out mid-step (preemption); return the output tokens it still has to generate."""
        self.advance(now)
        remaining = max(0, min(s.output, math.ceil(s.vfinish - self.v - TOKEN_TOLERANCE)))
        s.dver += 1  # its heap entry is now stale
        self._drop(s)
        return remaining

    def _drop(self, s: Session) -> None:
        self.kv_read -= s.kv
        self.running -= 1
        s.kv = 0
        if not self.fixed_iteration:
            self.t_iter = self._iteration()
        self.refresh()

    def pop_done(self, now: float) -> Session:
        """The session whose decode completes at ``now`` (== ``next_t``)."""
        busy = self.busy_until
        start = self.t_last if self.t_last > busy else busy
        v = self.v
        if now > start:  # advance(now), inlined: this runs once per step
            v += (now - start) / self.t_iter
        self.t_last = now
        heap = self.heap
        vfinish, _, _, s = heappop(heap)
        if v < vfinish:  # noqa: PLR1730 - snap: float drift must not delay the completion
            v = vfinish
        self.v = v
        if v > REBASE_TOKENS:
            v = self._rebase()
            heap = self.heap
        self.kv_read -= s.kv
        self.running -= 1
        s.kv = 0
        if not self.fixed_iteration:
            self.t_iter = (self.time.weights_bytes + self.kv_read) / self.time.bandwidth_bytes_per_s
        while heap and heap[0][2] != heap[0][3].dver:  # refresh(), inlined (t_last is now)
            heappop(heap)
        if heap:
            ahead = heap[0][0] - v
            self.next_t = (now if now > busy else busy) + (ahead * self.t_iter if ahead > 0 else 0.0)
        else:
            self.next_t = INF
        return s

    def _rebase(self) -> float:
        """Shift the virtual clock and every live finish back by ``v`` (stale entries dropped): the
        same order and gaps, small numbers. Returns the new ``v`` (0)."""
        v = self.v
        live = []
        for vfinish, seq, dver, s in self.heap:
            if dver == s.dver:
                s.vfinish = vfinish - v
                live.append((s.vfinish, seq, dver, s))
        heapify(live)
        self.heap = live
        self.v = 0.0
        return 0.0

    def refresh(self) -> None:
        """Recompute ``next_t``, the real time of the next decode completion."""
        heap = self.heap
        while heap and heap[0][2] != heap[0][3].dver:
            heappop(heap)
        if not heap:
            self.next_t = INF
            return
        start = self.t_last if self.t_last > self.busy_until else self.busy_until
        ahead = heap[0][0] - self.v
        self.next_t = start + (ahead * self.t_iter if ahead > 0 else 0.0)
