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

Decode memory grows as it is generated: a session's heap entry is keyed on its *next event* on the
virtual clock, the iteration that needs a new block (``s.gnext``, the token count whose bytes exceed
what it holds; it then takes the bytes of ``s.gtop`` tokens, the block's end or at least
``GROWTH_TOKENS`` on) or, when no boundary is left in the step, its completion. Decode iteration ``k`` of a
step with prompt ``P`` writes the KV of token ``P + k`` (vLLM V1 ``allocate_slots`` reserves the slots
of the tokens an iteration computes before it runs, vllm/v1/core/sched/scheduler.py), so the block for
token ``g`` is taken at virtual time ``v_join + (g - P) - 1``. Between boundaries nothing happens: a
step costs one heap operation per block it fills, never one per token.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from heapq import heapify, heappop, heappush

from kvbudget.simulate.ledger import GROWTH_TOKENS, Ledger
from kvbudget.simulate.policies import TimeModel
from kvbudget.simulate.session import Session

# Runs shorter than this many regular boundaries stay heap events (entering the ledger costs about two).
MIN_RUN = 2

INF = math.inf
# The virtual clock is shifted back to 0 once it passes this many tokens (``_rebase``): a float sum
# near 2^16 keeps ~1e-11 of a token per addition, while one left to grow over a long run (10^7
# tokens) drifts by microtokens and more, enough to tip a preempted step's remaining-token count.
REBASE_TOKENS = 65536.0
# A preempted session within this share of a token of its next token boundary has reached it.
TOKEN_TOLERANCE = 1e-6


class DecodeBatch:
    __slots__ = (
        "anchor",
        "batch_start",
        "busy_until",
        "fixed_iteration",
        "growth",
        "heap",
        "kv_read",
        "ledger",
        "next_t",
        "peak",
        "prefill_busy",
        "prefill_rate",
        "prefill_s",
        "running",
        "seq",
        "settled",
        "short_q",
        "short_v",
        "step_s",
        "t_iter",
        "t_last",
        "time",
        "timed",
        "v",
    )

    def __init__(
        self, time: TimeModel, growth: Callable[[int], int] | None = None, ledger: Ledger | None = None
    ) -> None:
        self.time = time
        self.ledger = ledger  # regular block boundaries in aggregate (ledger.py); None: each is an event
        self.short_v = INF  # V of the first boundary the pool cannot give (the ledger's one event)
        self.short_q = -1  # the popped event: that boundary's period, or -1 for a heap event
        self.growth = growth  # tokens -> the next token count that takes more bytes (None: reserved, no growth)
        self.v = 0.0
        self.t_last = 0.0
        self.busy_until = 0.0
        self.anchor = 0.0  # the end of the last iteration known (a completion, a prefill batch's end): the phase
        self.batch_start = 0.0  # when the prefill of the last prompt that joined starts (after any wait)
        self.kv_read = 0
        self.running = 0
        self.peak = 0  # the most sessions ever in the batch at once (running requests)
        self.heap: list[tuple[float, int, int, Session]] = []
        self.seq = itertools.count()
        self.prefill_rate = time.prefill_tokens_per_s
        self.prefill_s = time.prefill_s  # seconds for (new, cached) tokens; None: prefill_rate
        self.step_s = time.step_s  # seconds of an iteration for (running, kv bytes); None: the memory roofline
        self.prefill_busy = 0.0  # seconds spent prefilling (the run's achieved prefill rate)
        rate = time.decode_tokens_per_s
        self.fixed_iteration = 1.0 / rate if rate else 0.0
        self.t_iter = self._iteration()
        self.next_t = INF
        # Whether ``t_iter`` and ``next_t`` are up to date. An event may join, finish and preempt several sessions;
        # each change only clears this, and ``settle`` recomputes both once when the event is over (``first_token``
        # needs ``t_iter`` at once). Nothing else reads them inside an event: every change advances the clock to
        # the event's time first, so a later advance in it moves nothing.
        self.settled = True
        # Whether ``t_iter`` is this batch's iteration (it depends only on ``running`` and ``kv_read``): a join, a
        # completion or a preemption clears it, a block boundary (``regrow``) does not, and ``first_token`` computing
        # it inside an event spares ``settle`` computing it again
        self.timed = True

    def _iteration(self) -> float:
        if self.fixed_iteration:
            return self.fixed_iteration
        if self.step_s is not None:
            return self.step_s(self.running, self.kv_read)
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
        if prefill_tokens and self.running and now >= busy and self.time.wait_iteration:
            # it waits for the iteration in progress (TimeModel.wait_iteration), which completes meanwhile; the
            # iterations run back to back from the last boundary known (a completion or a prefill batch's end)
            anchor = self.anchor if self.anchor > busy else busy
            if not self.timed:  # this event changed the batch: its iteration now
                self.t_iter = self._iteration()
                self.timed = True
            t_iter = self.t_iter
            boundary = anchor + math.ceil((now - anchor) / t_iter) * t_iter if now > anchor else now
            if boundary > now:
                self.v += (boundary - now) / t_iter
                busy = self.busy_until = self.anchor = boundary
        if prefill_tokens:
            self.batch_start = busy if busy > now else now
            hook = self.prefill_s
            if hook is not None:
                seconds = hook(prefill_tokens, s.prompt - prefill_tokens)
            else:
                seconds = prefill_tokens / self.prefill_rate if self.prefill_rate else 0.0
            if seconds:
                busy = self.busy_until = (busy if busy > now else now) + seconds
                self.prefill_busy += seconds
                self.anchor = busy  # the batch's end is an iteration's boundary
        s.kv = kv_bytes
        self.kv_read += kv_bytes
        self.running += 1
        self.timed = self.fixed_iteration > 0
        if self.running > self.peak:  # noqa: PLR1730 - hot path
            self.peak = self.running
        s.vfinish = vfinish = self.v + s.output
        key = vfinish
        growth = self.growth
        if growth is not None:
            prompt = s.prompt
            g = growth(prompt)
            end = prompt + s.output
            if g <= end:
                key = self._key(s, g, end, vfinish - s.output)
            else:
                s.gnext = 0
        heappush(self.heap, (key, next(self.seq), s.dver, s))
        self.settled = False

    def _key(self, s: Session, g: int, end: int, vstart: float) -> float:
        """Key ``s`` on its next event from its next boundary, token ``g`` (``g <= end``): the end of a run
        of regular boundaries in the ledger (``s.gnext`` its last boundary; 0 when the run ends the step and
        its completion ends the run), or that one boundary (``s.gnext``, ``s.gtop``)."""
        ledger = self.ledger
        if ledger is not None:
            period = ledger.period
            block = ledger.block
            # bytes(t) = ceil(t / block) x block_bytes + state (ledger.block_linear), in integers
            if g % period == 1 and -(-(g - 1) // block) * ledger.block_bytes + ledger.state - s.pbytes == s.held:
                last = g + (end - g - period + 1) // period * period  # the last whole period in the step
                if end >= last + 2 * period - block:
                    last += period  # a partial last period that still takes whole blocks (block >= period)
                if last >= g + (MIN_RUN - 1) * period and ledger.enter(
                    s, vstart + (g - s.prompt - 1) - period, (last - g) // period + 1, g
                ):
                    chunk = -(-last // GROWTH_TOKENS) * GROWTH_TOKENS
                    s.gtop = chunk if chunk < end else end
                    if last + period - 1 > end:  # no boundary after the run, and the next would fall past
                        s.gnext = 0  # the completion: its completion ends the run
                        return s.vfinish
                    s.gnext = last
                    return ledger.exit_key(s)
        chunk = -(-g // GROWTH_TOKENS) * GROWTH_TOKENS
        s.gnext, s.gtop = g, (chunk if chunk < end else end)
        return vstart + (g - s.prompt - 1)

    def catch_up(self, now: float) -> None:
        """Charge the boundaries the batch has crossed by ``now`` (as many as fit) before an event reads the pool."""
        ledger = self.ledger
        if ledger is not None and ledger.keys:
            v = self._v_before(now)
            if v >= 0.0:
                q, r = self._position(v)
                ledger.charge_to(q, r, INF)

    def pending_bytes(self, now: float) -> int:
        """Bytes of the boundaries crossed by ``now`` and not yet charged (a sample between events)."""
        ledger = self.ledger
        if ledger is None or not ledger.keys:
            return 0
        v = self._v_before(now)
        return ledger.pending(*self._position(v)) if v >= 0.0 else 0

    def _v_before(self, now: float) -> float:
        """``V`` at ``now``, for the boundaries whose time came strictly before ``now``; -1 when none can have
        (the clock has not moved since the last event: a boundary at ``V`` itself falls at that time, or at
        the end of the prefill backlog, as its heap event fell before the ledger)."""
        start = self.t_last if self.t_last > self.busy_until else self.busy_until
        return self.v + (now - start) / self.t_iter if now > start else -1.0

    def _position(self, v: float) -> tuple[int, float]:
        d = self.ledger.d  # type: ignore[union-attr]
        q = int(v // d)
        r = v - q * d
        return (q + 1, 0.0) if r >= d else (q, r if r > 0.0 else 0.0)

    def first_token(self, now: float) -> float:
        """When a session that joined at ``now`` gets its first token: its prefill (the backlog up to it) and one
        decode iteration of the batch it joined (the figure ``kvbudget speed`` gives as TTFT)."""
        if not self.timed:
            self.t_iter = self._iteration()
            self.timed = True
        busy = self.busy_until
        return (busy if busy > now else now) + self.t_iter

    def leave(self, s: Session, now: float) -> int:
        """Take ``s`` out mid-step (preemption); return the output tokens it still has to generate."""
        self.advance(now)
        remaining = max(0, min(s.output, math.ceil(s.vfinish - self.v - TOKEN_TOLERANCE)))
        s.dver += 1  # its heap entry is now stale
        if s.rn:
            self.ledger.leave(s)  # type: ignore[union-attr]
        self._drop(s)
        return remaining

    def _drop(self, s: Session) -> None:
        self.kv_read -= s.kv
        self.running -= 1
        s.kv = 0
        self.settled = False
        self.timed = self.fixed_iteration > 0

    def pop(self, now: float) -> Session:
        """The session whose next event falls at ``now`` (== ``next_t``): a heap event (a boundary taken
        alone, the end of a ledger run, or a completion; ``short_q`` -1: the caller then calls ``finish``,
        ``regrow`` or ``exit``), or the ledger's short boundary (``short_q`` its period; every boundary before
        it is charged, and the caller takes this one, preempting as the engine does)."""
        busy = self.busy_until
        start = self.t_last if self.t_last > busy else busy
        v = self.v
        if now > start:  # advance(now), inlined: this runs once per event
            v += (now - start) / self.t_iter
        self.t_last = now
        heap = self.heap
        key = heap[0][0] if heap else INF
        short = self.short_v < key  # at an equal V a heap event (a completion freeing blocks) goes first
        if short:
            key = self.short_v
        if v < key:  # noqa: PLR1730 - snap: float drift must not delay the event
            v = key
        self.v = v
        if v > REBASE_TOKENS:
            v = self._rebase()
            heap = self.heap
        if short:
            ledger = self.ledger
            assert ledger is not None
            _, q, p = ledger.short()
            ledger.charge_before(q, p)
            self.short_q = q
            return ledger.members[p]
        self.short_q = -1
        ledger = self.ledger
        if ledger is not None and ledger.keys:  # the boundaries crossed by now, before the event reads the pool
            d = ledger.d  # _position(v), inlined: once per event
            q = int(v // d)
            r = v - q * d
            if r >= d:
                ledger.charge_to(q + 1, 0.0, INF)
            else:
                ledger.charge_to(q, r if r > 0.0 else 0.0, INF)
        return heappop(heap)[3]

    def exit(self, s: Session, now: float) -> int:
        """``s`` (just popped) reached the last boundary of its ledger run: charge up to it and take it out
        of the ledger. Returns the boundaries of its run left to take (0 unless the pool fell short)."""
        ledger = self.ledger
        assert ledger is not None
        ledger.charge_to(s.rm + s.rn, s.rphase, s.rorder)
        runs = s.rn
        return runs - ledger.leave(s)

    def finish(self, s: Session, now: float) -> None:
        """``s`` (just popped) completed its step: it leaves the batch."""
        self.anchor = now  # its last token came at an iteration's end
        self._drop(s)

    def regrow(self, s: Session, now: float) -> None:
        """``s`` (just popped) took the block for ``s.gnext`` tokens: key it on its next event."""
        growth = self.growth
        assert growth is not None
        end = s.prompt + s.output
        g = growth(s.gtop)
        if g <= end:
            key = self._key(s, g, end, s.vfinish - s.output)
        else:
            s.gnext = 0
            key = s.vfinish
        heappush(self.heap, (key, next(self.seq), s.dver, s))
        self.settled = False

    def _rebase(self) -> float:
        """Shift the virtual clock, every live key and finish back by ``v`` (stale entries dropped):
        the same order and gaps, small numbers. Every running session has one live entry (the one
        being popped included: the rebase runs before the pop). With a ledger the shift is a whole
        number of its periods, so that every phase stays what it was. Returns the new ``v``."""
        v = self.v
        ledger = self.ledger
        if ledger is not None:
            periods = int(v // ledger.d)
            ledger.shift(periods)
            v = periods * ledger.d
        live = []
        for key, seq, dver, s in self.heap:
            if dver == s.dver:
                s.vfinish -= v
                live.append((ledger.exit_key(s) if s.rn and s.gnext else key - v, seq, dver, s))  # type: ignore[union-attr]
        heapify(live)
        self.heap = live
        self.v -= v
        if ledger is not None:
            self.short_v = ledger.short()[0] if ledger.keys else INF
        return self.v

    def settle(self) -> None:
        """An event is over: recompute ``t_iter`` and ``next_t`` if it changed the batch, or the pool under a ledger
        (the first boundary the pool cannot give moves with it)."""
        ledger = self.ledger
        if not self.settled:
            if not self.timed:
                self.t_iter = self._iteration()
                self.timed = True
            self.settled = True
            self.refresh()
        elif ledger is not None and ledger.keys and ledger.pool.used != ledger.seen:
            self.refresh()

    def refresh(self) -> None:
        """Recompute ``next_t``, the real time of the next decode event (``t_iter`` is up to date)."""
        heap = self.heap
        while heap and heap[0][2] != heap[0][3].dver:
            heappop(heap)
        key = heap[0][0] if heap else INF
        ledger = self.ledger
        if ledger is not None:
            self.short_v = ledger.short()[0] if ledger.keys else INF
            if self.short_v < key:  # noqa: PLR1730 - hot path: a compare, not a call
                key = self.short_v
        if key == INF:
            self.next_t = INF
            return
        start = self.t_last if self.t_last > self.busy_until else self.busy_until
        ahead = key - self.v
        self.next_t = start + (ahead * self.t_iter if ahead > 0 else 0.0)
