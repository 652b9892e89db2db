"""Sessions at a context cap, the largest cap for N sessions, and the token budget, from a KV pool.

Capacity is reserved for the worst case, as the engine itself reserves it: every session may reach
the cap, so a session costs the engine's bytes for one sequence of ``cap`` tokens (vLLM's
"Maximum concurrency for X tokens per request"). For block engines this search gives exactly
vLLM's ``num_blocks // blocks_per_request``, because nested floor divisions compose.

With pipeline parallelism each GPU holds one stage's layers; the stage that fills first decides.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvbudget.engines import EngineRef, build_layout
from kvbudget.engines.base import EngineOptions, Layout
from kvbudget.errors import EngineRefusalError
from kvbudget.model.spec import ModelSpec
from kvbudget.precision import CacheDType

MAX_SEARCH_TOKENS = 1 << 26  # 64M tokens: beyond every advertised window

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from collections.abc import Callable


def largest(lo: int, hi: int, ok: Callable[[int], bool]) -> int:
    """The largest x in [lo, hi] with ``ok(x)``, for an ``ok`` true up to some x and false after (bisection);
    ``lo`` when none above it is (``lo`` itself is not asked)."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def stage_specs(spec: ModelSpec, pp: int) -> list[ModelSpec]:
    """Split the layers into ``pp`` contiguous stages, as even as possible (extra layers go first)."""
    n = len(spec.layers)
    base, extra = divmod(n, pp)
    stages, start = [], 0
    for stage in range(pp):
        size = base + (1 if stage < extra else 0)
        stages.append(replace(spec, layers=spec.layers[start : start + size]))
        start += size
    return stages


@dataclass(frozen=True)
class StagedLayout:
    """One layout per pipeline stage (a single stage without pipeline parallelism), or per GPU of a llama.cpp layer
    split. ``reserved[i]``: how many bytes less of KV pool GPU ``i`` has than the first (its weights and compute
    buffer less the first GPU's; negative when it holds less), so one pool figure holds every GPU to its own."""

    stages: tuple[Layout, ...]
    reserved: tuple[int, ...] = ()
    host: Layout | None = None  # llama.cpp's layers on the CPU: no bound the plan knows, but the engine's refusals

    @property
    def first(self) -> Layout:
        return self.stages[0]

    def _reserved(self) -> tuple[int, ...]:
        return self.reserved or (0,) * len(self.stages)

    def total_bytes(self, tokens: int, sequences: int) -> int:
        """Bytes on the fullest GPU for ``sequences`` sequences of ``tokens`` tokens, measured against the first
        GPU's pool (each GPU's ``reserved`` added); the host's layers only for what the engine refuses."""
        if self.host is not None:
            self.host.total_bytes(tokens, sequences)  # llama.cpp's 256 slots hold whatever device the layers are on
        return max(
            layout.total_bytes(tokens, sequences) + r for layout, r in zip(self.stages, self._reserved(), strict=True)
        )

    def sequence_bytes(self, tokens: int) -> int:
        """Bytes of one sequence on the GPU that holds the most of it."""
        return max(layout.total_bytes(tokens, 1) for layout in self.stages)

    def most_sessions(self, pool_bytes: int, cap: int) -> int:
        """An upper bound on the sessions of ``cap`` tokens that fit (the bisection's top)."""
        bounds = [
            (pool_bytes - r) // one
            for layout, r in zip(self.stages, self._reserved(), strict=True)
            if (one := layout.total_bytes(cap, 1)) > 0
        ]
        return (min(bounds) if bounds else pool_bytes) + 2

    @property
    def kv_bytes_per_token(self) -> int:
        return max(layout.kv_bytes_per_token for layout in self.stages)


def staged_layout(
    spec: ModelSpec, engine: EngineRef, k: CacheDType, v: CacheDType, tp: int, pp: int, options: EngineOptions
) -> StagedLayout:
    staged = replace(options, pipeline_parallel=pp)  # vLLM's batches in flight follow the pipeline depth
    return StagedLayout(tuple(build_layout(s, engine, k, v, tp, staged) for s in stage_specs(spec, pp)))


def fits(layout: StagedLayout, pool_bytes: int, tokens: int, sequences: int) -> bool:
    """Whether S sequences of N tokens fit; a count the engine refuses (llama.cpp's 256 slots) does not."""
    try:
        return layout.total_bytes(tokens, sequences) <= pool_bytes
    except EngineRefusalError:
        return False


def sessions_at(layout: StagedLayout, pool_bytes: int, cap: int) -> int:
    """The most sessions of ``cap`` tokens whose worst case fits in ``pool_bytes`` on every GPU."""
    if pool_bytes <= 0 or not fits(layout, pool_bytes, cap, 1):
        return 0
    # the largest S with total_bytes(cap, S) <= pool
    return largest(1, layout.most_sessions(pool_bytes, cap), lambda sessions: fits(layout, pool_bytes, cap, sessions))


def max_context_for(layout: StagedLayout, pool_bytes: int, sessions: int, limit: int | None = None) -> int:
    """The largest cap at which ``sessions`` sessions fit (0 if not even one token does)."""
    top = limit or MAX_SEARCH_TOKENS
    if not fits(layout, pool_bytes, 1, sessions):
        return 0
    if fits(layout, pool_bytes, top, sessions):
        return top
    return largest(1, top, lambda tokens: fits(layout, pool_bytes, tokens, sessions))
