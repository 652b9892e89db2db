"""What a session's cache costs: the plan's per-sequence bytes, in integers or memoized for the hot path.

Memory of a session at context ``c`` is the layout's ``sequence_bytes(c)`` per GPU (block rounding,
sliding windows and fixed recurrent state included): the same rule the static plan reserves at the
cap. A shared prefix of ``P`` tokens is held once per replica: only whole blocks are shared (vLLM
automatic prefix caching hashes full blocks, kv_cache_utils.py hash_block_tokens; SGLang's radix
cache shares whole pages), and only layers whose cache keeps growing share it (plan/sharing.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kvbudget.engines.base import cdiv


@dataclass
class CostTable:
    """``bytes(c)``: bytes one session of ``c`` tokens holds (per GPU).

    A block-linear cache (``linear``, checked by the replica) is computed in integers; any other layout is
    memoized per token count, at most one entry per distinct context, so the memo is bounded by the cap.
    ``per_token`` and ``block`` (the growing bytes per token, the block size) only speed up
    ``tokens_within``; they do not change its answer.
    """

    sequence_bytes: Callable[[int], int]
    per_token: int = 0
    block: int = 1
    memo: dict[int, int] = field(default_factory=dict)
    cap: int = 0  # the largest context a session reaches (bounds the growth memo)
    steps: dict[int, int] = field(default_factory=dict)
    # (block, block_bytes, state_bytes) once ``sequence_bytes`` is checked block-linear (ledger.block_linear):
    # then bytes and growth are integer arithmetic, the same numbers without calling the layout or reading a memo
    linear: tuple[int, int, int] | None = None

    @classmethod
    def for_memory(cls, memory: MemoryModel) -> CostTable:
        """The table of ``memory``'s per-sequence bytes. Its search hint is the per-token bytes the
        prefix rule uses, or when the prefix is not shared (0) the slope over the second block."""
        b = memory.block_size
        table = cls(memory.sequence_bytes, memory.prefix_bytes_per_token, b, cap=memory.cap_tokens)
        if not table.per_token:
            table.per_token = max(0, table.bytes(2 * b) - table.bytes(b)) // b
        return table

    def bytes(self, tokens: int) -> int:
        linear = self.linear
        if linear is not None and tokens > 0:
            # integers, not the memo: a lookup among tens of thousands of token counts misses the CPU's caches and
            # took several times as long (docs/simulate.md, "Determinism, speed and memory")
            block, block_bytes, state = linear
            return -(-tokens // block) * block_bytes + state
        value = self.memo.get(tokens)
        if value is None:
            value = self.sequence_bytes(tokens) if tokens > 0 else 0
            self.memo[tokens] = value
        return value

    def next_growth(self, tokens: int) -> int:
        """The smallest token count above ``tokens`` that takes more bytes (the first token of the next
        block; a sliding window or a fixed state may stop growth: then past the cap). Memoized unless linear."""
        linear = self.linear
        if linear is not None and tokens > 0:  # the block's last token (or the cap), then one more
            last = -(-tokens // linear[0]) * linear[0]
            top = self.cap if self.cap > tokens else tokens + 1
            return (last if last < top else top) + 1
        value = self.steps.get(tokens)
        if value is None:
            value = self.tokens_within(self.bytes(tokens), tokens, max(self.cap, tokens + 1)) + 1
            self.steps[tokens] = value
        return value

    def tokens_within(self, budget: int, low: int, high: int) -> int:
        """The largest ``t`` in ``[low, high]`` with ``bytes(t) <= budget`` (``low`` if none): bytes
        never fall as tokens grow, so a linear guess from the per-token bytes, then bisection."""
        if self.linear is not None:  # ceil(t / block) x block_bytes + state <= budget, solved in integers
            block, block_bytes, state = self.linear
            top = (budget - state) // block_bytes * block
            return high if top >= high else (top if top > low else low)
        over = self.bytes(high) - budget
        if over <= 0:
            return high
        if self.per_token:
            b = self.block
            guess = max(low, min(high, (cdiv(high, b) * b - cdiv(over, self.per_token)) // b * b))
            if self.bytes(guess) <= budget:
                if self.bytes(guess + 1) > budget:
                    return guess
                low = guess
            else:
                high = guess - 1
        while low < high:
            mid = (low + high + 1) // 2
            if self.bytes(mid) <= budget:
                low = mid
            else:
                high = mid - 1
        return low


@dataclass(frozen=True)
class MemoryModel:
    """One replica's KV memory as the simulator sees it (bytes per GPU).

    ``shared_prefix(p)`` is the part of a ``p``-token prefix that is shared (block-aligned per the
    engine); each shared token saves ``prefix_bytes_per_token`` per extra session.
    """

    pool_bytes: int
    cap_tokens: int
    sequence_bytes: Callable[[int], int]
    block_size: int = 1
    prefix_bytes_per_token: int = 0
    shared_prefix: Callable[[int], int] = field(default=lambda p: 0)
    label: str = ""

    @staticmethod
    def linear(
        pool_bytes: int,
        bytes_per_token: int,
        cap_tokens: int,
        block_size: int = 1,
        state_bytes: int = 0,
        share_prefix: bool = True,
    ) -> MemoryModel:
        """A plain paged cache: whole blocks of ``bytes_per_token`` per token, plus fixed state."""
        per_block = block_size * bytes_per_token

        def sequence_bytes(tokens: int) -> int:
            return cdiv(tokens, block_size) * per_block + state_bytes

        def shared(p: int) -> int:
            return p // block_size * block_size if share_prefix else 0

        return MemoryModel(
            pool_bytes=pool_bytes,
            cap_tokens=cap_tokens,
            sequence_bytes=sequence_bytes,
            block_size=block_size,
            prefix_bytes_per_token=bytes_per_token if share_prefix else 0,
            shared_prefix=shared,
            label=f"linear {bytes_per_token:,} B/token, {block_size}-token blocks",
        )
