"""One serving replica: waiting queue, admission, on-demand growth, preemption, pauses, the cap.

The rules, each after the engine behaviour it follows (docs/simulate.md):

* A step that needs admission (a new session; under ``--pause evictable`` every step, since each
  agent call is a new request; a preempted session) joins the **waiting queue**, served FCFS with
  head-of-line blocking: vLLM's scheduler stops at the first waiting request it cannot allocate
  (vllm/v1/core/sched/scheduler.py, ``if new_blocks is None: break``). Admission takes the prompt's
  blocks from free plus evictable (cached) blocks and never preempts.
* ``paged``: a running session takes its next block when its decode crosses a block boundary; when the pool
  is short, the newest holder (vLLM) or the running session with the fewest tokens decoded (SGLang) is
  preempted, by ``recompute`` or ``swap`` (preemption.py, with the engine code each rule follows).
* ``watermark``: paged, and admission also leaves ``watermark x pool`` free (vLLM V0
  ``BlockSpaceManager.can_allocate``: ``free - required >= watermark_blocks``).
* ``reserve``: admission reserves the session's bytes at the cap for its whole life and never
  preempts (the static plan; llama.cpp slots, TensorRT-LLM's GUARANTEED_NO_EVICT).
* The running limit (``SimConfig.running_limit``, the engine's own: ``Plan.running_limit``): while a replica runs
  that many requests (in the batch, or swapping in), the waiting queue takes none, head-of-line as for memory:
  vLLM 0.33.0 vllm/v1/core/sched/scheduler.py ``schedule()`` breaks its waiting loop when ``len(self.running) ==
  self.max_num_running_reqs`` (max_num_seqs); SGLang 0.5.23 managers/scheduler.py ``get_new_batch_prefill``
  returns no prefill batch while ``running_bs >= self.max_running_requests``. A session between steps is not
  running (its request is over; under ``hold`` it keeps its blocks, not a slot), so its next step takes a slot
  again. A holder's step at the limit waits for a slot only (``slot_wait``, FCFS, ahead of the memory queue, as
  a holder never queues for memory): queued behind a session that waits for the very blocks it holds, neither
  would ever run. The wait counts in that step's TTFT; a slot freed by a completion drains the queues.
* Pauses: ``hold`` keeps a session's blocks referenced through the tool call; ``evictable`` frees
  them into the prefix cache (stock vLLM/SGLang between requests), evicted LRU when space is needed,
  and the next step re-prefills what was evicted.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from heapq import heappush

from kvbudget.simulate.batch import DecodeBatch
from kvbudget.simulate.costs import CostTable, MemoryModel
from kvbudget.simulate.events import PAUSE_END, SWAP_DONE, EventQueue
from kvbudget.simulate.ledger import Ledger, block_linear
from kvbudget.simulate.metrics import Counters
from kvbudget.simulate.policies import MemoryPolicy, TimeModel
from kvbudget.simulate.pool import Pool, SharedPrefix
from kvbudget.simulate.preemption import Preemption
from kvbudget.simulate.session import DONE, PAUSED, RUNNING, SWAP_IN, WAITING, Session


class Replica(Preemption):
    def __init__(
        self,
        index: int,
        memory: MemoryModel,
        policy: MemoryPolicy,
        time: TimeModel,
        costs: CostTable,
        stats: Counters,
        events: EventQueue,
        host_bytes: int | None = None,
        check: bool = False,
        running_limit: int | None = None,
    ) -> None:
        self.index = index
        self.memory = memory
        self.policy = policy
        self.time = time
        self.costs = costs
        self.stats = stats
        self.events = events.heap  # the run's one event heap, pushed to directly on the hot path
        self.seq = events.seq
        self.pool = Pool(memory.pool_bytes, check)
        growth = None if policy.policy == "reserve" else costs.next_growth
        linear = None if growth is None else block_linear(costs.bytes, memory.block_size, memory.cap_tokens)
        ledger = None if linear is None else Ledger(memory.block_size, *linear, self.pool, costs)
        if linear is not None:
            costs.linear = (memory.block_size, *linear)
        self.batch = DecodeBatch(time, growth, ledger)
        self.waiting = deque()
        self.slot_wait = deque()  # holders' steps waiting for a running slot (module doc)
        self.holders = OrderedDict()  # admission order: last = newest
        self.prefixes: dict[int, SharedPrefix] = {}
        self.reserve = policy.policy == "reserve"
        self.refuse = policy.admission == "refuse"  # a new session that cannot start at once is refused
        self.evictable = policy.pause == "evictable" and not self.reserve
        self.watermark = int(policy.watermark * memory.pool_bytes) if policy.policy == "watermark" else 0
        self.limit = policy.cap.limit(memory.cap_tokens)
        self.fewest_decoded = policy.victim == "fewest-decoded"
        # private + prefix bytes = bytes(tokens): the largest context one session can ever hold here
        room = memory.pool_bytes - self.watermark
        self.fit_tokens = costs.tokens_within(room, 0, memory.cap_tokens) if costs.bytes(1) <= room else 0
        self.host_free = host_bytes if host_bytes is not None else 1 << 62
        self.live = 0
        self.paused = 0
        self.orders = 0
        self.check = check
        self.group: list[Session] = []  # the last batch of prompts (TimeModel.group_prompts, _first_token)
        self.group_ready: list[float] = []
        self.group_start = -1.0
        self.group_t = 0.0
        self.blocked: Session | None = None  # the last session refused admission without a prefix to take (_admit)
        self.blocked_above = 0  # the pool.used above which it cannot fit (its need and the watermark are fixed)
        # The batch's room under the running limit (module doc; none: never reached): the limit less the sessions
        # admitted and swapping in, which hold a slot before they join the batch. Full when batch.running >= slots.
        self.slots = running_limit or 1 << 62
        self.slot_blocked = False  # the last drain stopped at the running limit: a freed slot drains again
        self.limit_t = -1.0  # when the running limit last held the queue (a step ready by then waited on it)

    # -- arrivals and steps -------------------------------------------------------------------

    def arrive(self, s: Session, prefix_tokens: int, now: float) -> None:
        self.live += 1
        s.replica = self.index
        s.append += prefix_tokens  # the first prompt starts with the shared prefix
        shared = self.memory.shared_prefix(prefix_tokens) if prefix_tokens else 0
        if shared > 0:
            entry = self.prefixes.get(shared)
            if entry is None:
                entry = self.prefixes[shared] = SharedPrefix(shared, shared * self.memory.prefix_bytes_per_token)
            s.prefix, s.ptokens, s.pbytes = entry, shared, entry.bytes
            s.resident = shared
        self.step_ready(s, now)

    def step_ready(self, s: Session, now: float) -> None:
        """A step is ready (arrival, or the end of a pause): run it, grow into it, or queue it."""
        batch = self.batch
        batch.catch_up(now)  # the blocks the batch took by now, before this step reads the pool
        s.ready_at = now
        s.t_first = -1.0
        if s.compact_to is not None and s.compact_to < s.context:
            self._compact(s, max(s.ptokens, s.compact_to), 0)  # the client compacted (trace replay)
            s.compact_to = None
        if s.context + s.append + s.output > self.limit and not self._cap(s, now):
            self.drain(now)
            return
        if s.holder:
            context = s.context
            prompt = context + s.append
            reserve = self.reserve
            if not reserve and prompt + s.output > self.fit_tokens:  # it can never fit (below)
                self._too_big(s, now)
                return
            if batch.running >= self.slots or self.slot_wait:  # no slot: it waits (drain)
                s.state = WAITING
                self.slot_wait.append(s)
                self.slot_blocked = True
                self.limit_t = now
                return
            if reserve or self._grow(s, prompt, now):
                # _start(s, now, context, 0), inlined: a holder's every later step
                s.prompt = prompt
                st = self.stats
                st.steps += 1
                st.prompt_tokens += prompt
                st.hit_tokens += context
                st.prefill_tokens += prompt - context
                s.state = RUNNING
                end = prompt + s.output
                before = batch.busy_until
                batch.join(s, now, prompt - context, self.costs.bytes(end))
                if s.t_first < 0:
                    self._first_token(s, now, before if prompt > context else None)
            else:  # preempted itself: wait at the front, as vLLM re-queues a preempted request
                s.state = WAITING
                self.waiting.appendleft(s)
                self.drain(now)  # it cannot re-enter at once (same shortfall), so no loop
            return
        # a step whose whole context (a reservation: the cap) cannot fit in an empty pool ends its session
        if (self.memory.cap_tokens if self.reserve else s.context + s.append + s.output) > self.fit_tokens:
            self._too_big(s, now)
            return
        s.state = WAITING
        if not s.admitted and self.refuse:
            if self.waiting or batch.running >= self.slots or not self._admit(s, now):
                self._refuse(s)
            return
        self.waiting.append(s)
        self.drain(now)

    def swap_done(self, s: Session, now: float) -> None:
        self.batch.catch_up(now)
        self.slots += 1  # its running slot passes to the batch it joins
        self._start(s, now, s.hits, max(0, s.context - s.hits))  # its join finds the short boundary again

    def decode_done(self, now: float) -> None:
        """The next decode event of this replica's batch (at ``batch.next_t``): the first block boundary
        the pool cannot give (batch.py's ledger), a boundary taken alone, the end of a ledger run, or a
        step's completion."""
        batch = self.batch
        s = batch.pop(now)
        if batch.short_q >= 0:
            self._short(s, batch.short_q, now)
            return
        if s.rn:  # the end of its ledger run: its blocks are charged; on to its next boundary or completion
            last = s.gnext
            missing = batch.exit(s, now)
            if last:
                if missing and not self._grow(s, s.gtop, now):
                    return  # the pool fell short on the run's last boundaries and it was the newest
                s.resident = last
                batch.regrow(s, now)
                return
        if s.gnext:
            if self._grow(s, s.gtop, now):
                s.resident = s.gnext  # the tokens written by now (the bytes may reach further)
                batch.regrow(s, now)
            # else it was the victim itself: it left the batch and waits at the front. No drain here:
            # its blocks went to the cache and would re-admit it at once; vLLM V1 schedules waiting
            # requests only in a step without preemptions (scheduler.py, ``if not preempted_reqs``).
            return
        batch.finish(s, now)
        s.context = context = s.prompt + s.output
        st = self.stats
        st.decode_tokens += s.output
        if s.out0 > 1:  # the step's tokens after its first, over the time they took
            st.itl.add(max(0.0, now - s.t_first) / (s.out0 - 1))
        nxt = next(s.steps, None)
        if nxt is None:
            self.stats.finished += 1
            self._finish(s, now)
            self.drain(now)
            return
        pause = s.pause
        s.append, s.output, s.pause, s.compact_to = nxt
        s.state = PAUSED
        self.paused += 1
        # The blocks the decode filled (paged; a reservation already covers them). If they do not
        # fit, newer holders or the session itself are preempted, as in vLLM's running loop.
        if s.holder and not self.reserve:
            grown = self._grow(s, context, now)
            if grown and self.evictable:
                self._unhold(s)
            if not grown or self.evictable:
                self.drain(now)  # blocks were freed into the cache: the waiting head may fit now
            elif self.slot_blocked:
                self.drain(now)  # its running slot is free: the head the running limit held may start
        elif self.slot_blocked:
            self.drain(now)
        # the request's own overhead (TimeModel.first_token_s) comes before the server takes the step, after the pause
        heappush(self.events, (now + pause + self.time.first_token_s, next(self.seq), PAUSE_END, s, 0))

    # -- admission --------------------------------------------------------------------------

    def drain(self, now: float) -> None:
        """Admit from the head of the waiting queue while the head fits and a running slot is free (FCFS,
        head-of-line blocking; module doc)."""
        waiting = self.waiting
        batch = self.batch
        slot_wait = self.slot_wait
        while slot_wait:  # holders' steps first: they wait for a slot only
            if batch.running >= self.slots:
                self.slot_blocked = True
                self.limit_t = now
                return
            if not self._resume(slot_wait.popleft(), now):
                break  # it preempted itself (_preempt put it at the front of the waiting queue)
        while waiting:
            if batch.running >= self.slots:
                self.slot_blocked = True
                self.limit_t = now
                return
            if not self._admit(waiting[0], now):
                break
            waiting.popleft()
        self.slot_blocked = False

    def _resume(self, s: Session, now: float) -> bool:
        """A holder's step that waited for a running slot grows into its blocks and starts (step_ready's holder
        path); False if it was preempted itself."""
        if not (self.reserve or self._grow(s, s.context + s.append, now)):
            return False
        self.stats.step_wait.add(now - s.ready_at)
        self._start(s, now, s.context, 0)
        return True

    def _admit(self, s: Session, now: float) -> bool:
        """Admit ``s`` if its prompt fits in free + evictable memory (less the watermark)."""
        pool, costs, entry = self.pool, self.costs, s.prefix
        # Without a prefix to take (none, or one already referenced) the test below is need > capacity - used -
        # watermark, and a waiting session's need is fixed: the head that failed fits only once ``used`` falls to
        # capacity - watermark - need, so until then the answer is known without computing the need again.
        plain = entry is None or entry.refs > 0
        if plain and s is self.blocked and pool.used > self.blocked_above:
            return False
        prefix_ok = entry is None or entry.refs > 0 or entry.resident
        if s.cached and not prefix_ok:
            pool.drop(s)  # vLLM block hashes chain over the prefix: without it the tail is unreachable
            s.resident = s.ptokens
        prompt = s.context + s.append
        need = s.private(costs, self.memory.cap_tokens if self.reserve else prompt)
        reuse = own = s.cached  # re-referenced in place, not evicted
        prefix_new = 0
        if entry is not None and entry.refs == 0:
            own += entry.cached
            prefix_new = 0 if entry.resident else entry.bytes
        if need - reuse + prefix_new > pool.capacity - pool.used - own - self.watermark:
            if plain:
                self.blocked, self.blocked_above = s, pool.capacity - self.watermark - need
            else:
                self.blocked = None
            return False
        self.blocked = None
        hits = lost = 0
        if entry is not None:
            if entry.refs == 0:
                if entry.resident:
                    pool.from_cache(entry)
                else:
                    pool.take(entry.bytes, costs)
                    if entry.ever and s.context == 0:
                        lost = entry.tokens  # the shared prefix was evicted and is computed again
                    entry.resident = entry.ever = True
            entry.refs += 1
            hits = entry.tokens if prefix_ok else 0
        if reuse:
            pool.from_cache(s)
            hits = s.resident
        elif s.swapped:
            hits = s.resident - (0 if prefix_ok else s.ptokens)
        pool.take(need - reuse, costs)
        s.held = need
        s.resident = prompt
        self._hold(s)
        st = self.stats
        if not s.admitted:
            s.admitted = True
            st.queue_delay.add(now - s.arrival)
            st.concurrency.change(now, 1)
        else:
            st.step_wait.add(now - s.ready_at)
        lost += max(0, s.context - hits)
        if s.swapped:
            # The transfer out (at preemption) and back in both cost link time, paid on resumption.
            delay = 2 * s.swapped / self.time.swap_bytes_per_s
            self.host_free += s.swapped
            s.swapped = 0
            s.state = SWAP_IN
            self.slots -= 1
            s.hits = hits
            heappush(self.events, (now + delay, next(self.seq), SWAP_DONE, s, s.dver))
            return True
        self._start(s, now, hits, lost)
        return True

    def _too_big(self, s: Session, now: float) -> None:
        self.stats.too_big += 1
        self._finish(s, now)
        self.drain(now)

    def _refuse(self, s: Session) -> None:
        self.stats.refused += 1
        self.live -= 1
        s.state = DONE

    def _hold(self, s: Session) -> None:
        self.orders += 1
        s.order = self.orders
        s.holder = True
        self.holders[s] = None

    # -- running ------------------------------------------------------------------------------

    def _start(self, s: Session, now: float, hits: int, lost: int) -> None:
        """Prefill what is not resident, then decode this step's output."""
        prompt = s.context + s.append
        st = self.stats
        st.steps += 1
        st.prompt_tokens += prompt
        st.hit_tokens += hits
        st.prefill_tokens += prompt - hits
        st.recomputed_tokens += lost
        s.prompt = prompt
        s.state = RUNNING
        before = self.batch.busy_until
        self.batch.join(s, now, prompt - hits, self.costs.bytes(prompt + s.output))
        if s.t_first < 0:
            self._first_token(s, now, before if prompt > hits else None)

    def _first_token(self, s: Session, now: float, before: float | None = None) -> None:
        """The step's first run: its first token's time (prefill backlog + one iteration) and its TTFT.

        With ``TimeModel.group_prompts`` a prompt (``before``: the prefill backlog's end before it joined) is
        prefilled in one batch with the prompts waiting beside it, and all of them get their first token when that
        batch ends: the prompts that arrive while a batch runs form the next one (llama.cpp
        tools/server/server-context.cpp ``update_slots`` puts every pending prompt in the next batch, up to
        n_batch). Their TTFTs are counted when their batch can take no more prompts (``close_group``)."""
        s.t_first = t = self.batch.first_token(now)
        s.out0 = s.output
        if self.limit_t >= s.ready_at and now > s.ready_at:  # it waited, and the running limit held its queue
            self.stats.limit_wait.add(now - s.ready_at)
        if before is None or not self.time.group_prompts:
            self.stats.ttft.add(t + self.time.first_token_s - s.ready_at)
            return
        if before > now and self.group_start >= now:  # the last batch has not started: this prompt joins it
            for member in self.group:
                member.t_first = t
        else:  # no backlog (a batch of its own, now) or the last batch is running (the next, at its end)
            self.close_group()
            self.group_start = self.batch.batch_start  # its prefill's start: after the backlog, or the iteration
        self.group.append(s)
        self.group_ready.append(s.ready_at)
        self.group_t = t

    def close_group(self) -> None:
        """Count the TTFTs of the last batch of prompts (``_first_token``); at the end of the run too."""
        for ready in self.group_ready:
            self.stats.ttft.add(self.group_t + self.time.first_token_s - ready)
        self.group.clear()
        self.group_ready.clear()

    def _finish(self, s: Session, now: float) -> None:
        st = self.stats
        self.live -= 1
        if s.admitted:
            st.concurrency.change(now, -1)
        if s.holder:
            if self.reserve:
                self.pool.release(s.held)
                s.held = 0
                self._unref(s)
            else:  # vLLM frees a finished request's blocks into the cache (LRU), hashes kept
                self._unhold(s)
        elif s.cached:
            self.pool.drop(s)
        if s.swapped:
            self.host_free += s.swapped
            s.swapped = 0
        s.state = DONE

    def _cap(self, s: Session, now: float) -> bool:
        """Apply the cap policy to a step that would pass the cap; False when the session ended."""
        cap = self.policy.cap
        if cap.mode != "refuse":
            target = max(s.ptokens, min(cap.target(self.memory.cap_tokens), s.context))
            if target + s.append + s.output + cap.summary_tokens <= self.limit:
                self._compact(s, target, cap.summary_tokens)
                return True
        self.stats.cap_refused += 1
        self._finish(s, now)
        return False

    def _compact(self, s: Session, target: int, summary_tokens: int) -> None:
        """Cut the context to ``target`` tokens: what follows the prefix is new text, so its cache is
        rebuilt (prefilled as appended tokens); a summary adds its own generated tokens."""
        self.stats.compactions += 1
        if s.holder and not self.reserve:
            keep = s.private(self.costs, s.ptokens)
            self.pool.release(s.held - keep)
            s.held = keep
        elif s.cached:
            self.pool.drop(s)
        if s.swapped:
            self.host_free += s.swapped
            s.swapped = 0
        s.append += target - s.ptokens
        s.output += summary_tokens
        s.context = s.resident = s.ptokens
