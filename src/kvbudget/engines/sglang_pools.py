"""SGLang's pools for a byte budget (``rest_memory``): the Mamba state carve-out, the full and sliding token
pools, the running-request cap, and the sessions they serve (see sglang.py)."""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.engines.base import EngineOptions, Layout, pad
from kvbudget.engines.sglang_config import (
    DEFAULT_PAGE_SIZE,
    MAMBA_FULL_MEMORY_RATIO,
    RUNNING_REQUESTS_MAX,
    RUNNING_REQUESTS_MIN,
    SWA_FULL_TOKENS_RATIO,
    dp_attention,
    mamba_slots_per_request,
    swa_architecture,
)
from kvbudget.engines.sglang_layout import layout
from kvbudget.errors import EngineRefusalError, InputError
from kvbudget.model.spec import (
    ChunkedLocal,
    ModelSpec,
    SlidingWindow,
)
from kvbudget.precision import CacheDType


def pool_cells(layout: Layout) -> tuple[int, int]:
    """(bytes of one token in the full pool, bytes of one token in the SWA pool), summed over their layers."""
    full = sum(g.allocated_layers * g.slot_bytes for g in layout.groups if g.slot_bytes and g.grows)
    swa = sum(g.allocated_layers * g.slot_bytes for g in layout.groups if g.slot_bytes and not g.grows)
    return full, swa


def max_total_num_tokens(available_bytes: int, layout: Layout, ratio: float = SWA_FULL_TOKENS_RATIO) -> int:
    """SGLang's ``max_total_num_tokens`` (the '#tokens' it logs) for ``available_bytes`` of KV budget on one GPU.

    Plain pools: (available // cell) // page * page. Hybrid SWA: the full-pool tokens of ``swa_pool_split``.
    For Mamba hybrids pass the budget left after the Mamba cache.
    """
    full, swa = pool_cells(layout)
    page = layout.block_size or DEFAULT_PAGE_SIZE
    if not full and not swa:
        raise InputError(f"sglang: {layout.engine} layout has no attention KV cell; SGLang sizes it from context_len")
    if not swa:
        # SGLang DefaultPoolConfigurator.calculate_pool_sizes: (available // cell) // page * page (pool_configurator.py)
        return available_bytes // full // page * page
    if not full:
        # SGLang HybridSWAPoolConfigurator, all-SWA: cell = S x n_swa, no ratio (pool_configurator.py)
        return available_bytes // swa // page * page
    # SGLang HybridSWAPoolConfigurator: cell = F x n_full + ratio x S x n_swa (a float) (pool_configurator.py)
    cell = full + ratio * swa
    return int(available_bytes // cell) // page * page


def swa_pool_split(
    available_bytes: int,
    spec: ModelSpec,
    k: CacheDType,
    v: CacheDType,
    tp: int = 1,
    options: EngineOptions | None = None,
    ratio: float = SWA_FULL_TOKENS_RATIO,
) -> tuple[int, int]:
    """(full_tokens, swa_tokens) SGLang's HybridSWAPoolConfigurator makes of ``available_bytes`` on one GPU.

    full_tokens = align(available // (F x n_full + ratio x S x n_swa)); swa_tokens = align(int(full x ratio)),
    align = round down to a page. Refused, as SGLang does, when window + page >= swa_tokens.
    """
    if not swa_architecture(spec):
        raise EngineRefusalError(
            f"sglang: {spec.name} gets no SWA pool (is_hybrid_swa_model is False for {spec.model_type}); "
            "its sliding layers share the one full pool: use max_total_num_tokens"
        )
    built = layout(spec, k, v, tp, options or EngineOptions())
    page = built.block_size or DEFAULT_PAGE_SIZE
    windows = [
        s.window if isinstance(s, SlidingWindow) else s.chunk
        for _, s in spec.primitives()
        if isinstance(s, SlidingWindow | ChunkedLocal)
    ]
    full_tokens = max_total_num_tokens(available_bytes, built, ratio)
    if not pool_cells(built)[1]:
        return full_tokens, 0
    if not pool_cells(built)[0]:
        return 0, full_tokens
    # SGLang HybridSWAPoolConfigurator._solve_pool_sizes: swa = align(int(full * ratio)) (pool_configurator.py)
    swa_tokens = int(full_tokens * ratio) // page * page
    window = max(windows)
    if window + page >= swa_tokens:
        raise EngineRefusalError(
            f"sglang: SWA pool ({swa_tokens} tokens) cannot hold even one request: the prefill admission floor is "
            f"sliding_window_size ({window}) + page_size ({page}); raise the KV budget or --swa-full-tokens-ratio"
        )
    return full_tokens, swa_tokens


def mamba_cache_per_req(built: Layout) -> int:
    """``mamba2_cache_params.mamba_cache_per_req``: conv + SSM state bytes over all Mamba layers, one request."""
    return sum(g.fixed_bytes(1) for g in built.groups if g.kind == "recurrent")


def mamba_carve_out(rest_bytes: int, per_req: int, ratio: float = MAMBA_FULL_MEMORY_RATIO) -> tuple[int, int]:
    """(max_mamba_cache_size, bytes left for the token pool) from SGLang's ``rest_memory`` in bytes.

    SGLang 0.5.23 KVCacheConfigurator._handle_max_mamba_cache, no speculative decoding: the Mamba budget is
    rest x ratio / (1 + ratio), K = (budget - per_req) // per_req slots, (K + 1) x per_req charged (a padding
    slot); arithmetic in GiB floats as SGLang does it, the result truncated to bytes.
    """
    rest_gib = rest_bytes / 2**30
    budget_bytes = rest_gib * ratio / (1 + ratio) * 2**30
    slots = int((budget_bytes - per_req) // per_req)
    left_gib = rest_gib - (slots + 1) * per_req / 2**30
    return slots, int(left_gib * 2**30)


def max_running_requests(
    tokens: int,
    context_len: int,
    mamba_slots: int | None = None,
    slots_per_req: int = 1,
    requested: int | None = None,
    dp: int = 1,
) -> int:
    """SGLang's ``max_running_requests`` per DP worker (KVCacheConfigurator.resolve_max_num_reqs): the one set
    (``requested``, split over the DP ranks: max(1, requested // dp)), else ``tokens / context_len x 512``
    clamped to [2,048, 4,096]; at most half the tokens. ``context_len`` is the model config's context length,
    which ``--context-length`` sets (kvbudget's serve command always passes it)."""
    if requested is not None:
        cap = min(max(1, requested // dp), tokens // 2)
    else:
        estimated = max(min(int(tokens / context_len * 512), RUNNING_REQUESTS_MAX), RUNNING_REQUESTS_MIN)
        cap = min(estimated, tokens // 2)
    if mamba_slots is not None:
        # a Mamba hybrid: at most max_mamba_cache_size // state slots per request
        cap = min(cap, mamba_slots // slots_per_req)
    return cap


@dataclass(frozen=True)
class SglangPools:
    """What SGLang makes of a KV budget on one GPU, and the sessions at a context length it serves."""

    max_total_num_tokens: int
    full_tokens: int  # hybrid SWA: the full pool (= max_total_num_tokens); else max_total_num_tokens
    swa_tokens: int  # hybrid SWA: the sliding pool; else 0
    max_mamba_cache_size: int | None  # Mamba hybrids: state slots
    mamba_cache_per_req: int
    max_running_requests: int
    sessions: int  # sessions of ``context`` tokens: by the pool each needs, and the running-request cap

    def log_lines(self) -> tuple[str, ...]:
        """SGLang's own start-up lines for these figures (scheduler and memory-pool logs)."""
        lines = []
        if self.max_mamba_cache_size is not None:
            lines.append(f"Mamba Cache is allocated. max_mamba_cache_size: {self.max_mamba_cache_size}")
        if self.swa_tokens:
            lines.append(
                "Use sliding window memory pool. "
                f"full_layer_tokens={self.full_tokens}, swa_layer_tokens={self.swa_tokens}"
            )
        lines.append(
            f"max_total_num_tokens={self.max_total_num_tokens}, max_running_requests={self.max_running_requests}"
        )
        return tuple(lines)


def pools(
    rest_bytes: int,
    spec: ModelSpec,
    built: Layout,
    context: int,
    options: EngineOptions | None = None,
    ratio: float = SWA_FULL_TOKENS_RATIO,
) -> SglangPools:
    """SGLang 0.5.23's pools for ``rest_bytes`` of budget (``rest_memory``: the static share of the memory free
    before loading, less the weights), one GPU, no speculative decoding (``_resolve_memory_pool_config``)."""
    page = built.block_size or DEFAULT_PAGE_SIZE
    per_req = mamba_cache_per_req(built)
    slots: int | None = None
    available = rest_bytes
    opts = options or EngineOptions()
    dp = dp_attention(opts)
    if per_req and opts.prefix_caching is False and opts.max_running_requests is not None:
        # _handle_max_mamba_cache: radix cache off and --max-running-requests set: one state slot per running
        # request of this DP rank, max(1, requested // dp), the rest of the budget to the token pool
        slots = max(1, opts.max_running_requests // dp)
        available = int((rest_bytes / 2**30 - (slots + 1) * per_req / 2**30) * 2**30)
    elif per_req:
        slots, available = mamba_carve_out(rest_bytes, per_req)
        if slots <= 0:
            raise EngineRefusalError(
                f"sglang: Not enough GPU memory for hybrid (mamba/linear-attention) state cache: "
                f"max_mamba_cache_size={slots} ({per_req:,} B per request)"
            )
    full, swa = pool_cells(built)
    if not full and not swa:
        raise EngineRefusalError(f"sglang: {spec.name} has no attention layer: SGLang sizes no token pool for it")
    windowed = bool(swa) and bool(full) and swa_architecture(spec)
    if windowed:
        full_tokens, swa_tokens = swa_pool_split(
            available, spec, built.k_dtype, built.v_dtype, built.tp, options, ratio
        )
        tokens = full_tokens
    else:
        tokens = max_total_num_tokens(available, built, ratio)
        full_tokens, swa_tokens = tokens, 0
    if tokens <= 0:
        # SGLang MemoryPoolConfig.__post_init__ (model_executor/pool_configurator.py)
        raise EngineRefusalError("sglang: Not enough memory. Please try to increase --mem-fraction-static.")
    slots_per_req = mamba_slots_per_request(spec, options)
    running = max_running_requests(tokens, context, slots, slots_per_req, opts.max_running_requests, dp)
    if slots is not None and running <= 0:
        raise EngineRefusalError(
            f"sglang: Hybrid (mamba/linear-attention) state cache is too small to serve any requests: "
            f"max_mamba_cache_size={slots}, {slots_per_req} state slots per request"
        )
    need = pad(context, page)
    # a session needs its whole context in the full pool; a sliding pool holds its window + a page
    sessions = full_tokens // need
    if windowed:
        window = max(
            s.window if isinstance(s, SlidingWindow) else s.chunk
            for _, s in spec.primitives()
            if isinstance(s, SlidingWindow | ChunkedLocal)
        )
        sessions = min(sessions, swa_tokens // min(need, window + page))
    return SglangPools(tokens, full_tokens, swa_tokens, slots, per_req, running, min(sessions, running))
