"""SGLang: a token pool of ``page_size``-token pages; each cached token takes one slot in every layer.

* cell (bytes of one token over the layers of the full pool) = sum over full-attention layers of
  ``n_kv_per_rank x (Dk + Dv) x dsize``, KV heads replicated past tp as in vLLM; MLA caches the
  ``kv_lora_rank + rope`` latent once per token, replicated on every rank;
* full layers hold ``pad(N, page)`` slots per sequence;
* hybrid sliding-window models (full + sliding layers): the sliding layers live in a separate SWA pool
  sized ``swa_full_tokens_ratio`` (0.8) x the full pool; one sequence keeps ``min(N, W + page)`` there;
* Mamba / gated-delta-net state: conv (d_conv - 1 columns, bf16) + SSM state in **float32** by default.

S sequences cost S times one sequence. Pool-level sizes (``max_total_num_tokens``, the SWA split) come
from the helpers at the bottom, for a given byte budget.
"""

from __future__ import annotations

from kvbudget.engines.base import EngineOptions, Group, Layout, Slots, pad
from kvbudget.engines.common import (
    attention_slot,
    fixed_state_group,
    group_primitives,
    kernel_minus_one_state,
    kv_heads_per_rank,
    latent_slot,
    shared_kv_group,
)
from kvbudget.errors import EngineRefusalError, InputError
from kvbudget.model.spec import (
    ChunkedLocal,
    CrossAttention,
    FullAttention,
    IndexerKeys,
    LatentAttention,
    ModelSpec,
    Recurrent,
    SharedKV,
    SlidingWindow,
)
from kvbudget.precision import CacheDType

NAME = "sglang"
DEFAULT_VERSION = "0.5.16"

DEFAULT_PAGE_SIZE = 1  # SGLang ServerArgs.page_size default (srt/server_args.py)
SWA_FULL_TOKENS_RATIO = 0.8  # SGLang ServerArgs.swa_full_tokens_ratio default (srt/server_args.py)
MAMBA_SSM_DTYPE = "float32"  # SGLang mamba2_state_dtype: SSM default float32 (srt/configs/mamba_utils.py)
MAMBA_CONV_DTYPE = "bf16"  # SGLang SGLANG_MAMBA_CONV_DTYPE default bfloat16 (srt/configs/mamba_utils.py)
# SGLang --kv-cache-dtype choices auto|bf16|bfloat16|fp8_e4m3|fp8_e5m2|fp4_e2m1 (srt/server_args.py);
# auto resolves to the model dtype (bf16, fp16 or fp32) before we see it. fp4_e2m1 is not modelled.
CACHE_DTYPES = ("bf16", "fp16", "fp32", "fp8_e4m3", "fp8_e5m2")
DSA_PAGE_SIZE = 64  # SGLang _handle_deepseek_family: "Setting page size to 64 for DeepSeek DSA" on CUDA
NSA_QUANT_BLOCK = 128  # SGLang NSATokenToKVPool.quant_block_size (srt/mem_cache/memory_pool.py)
# SGLang is_hybrid_swa_model allow-list (srt/configs/model_config.py), as model_type / architecture fragments
SWA_ARCHITECTURES = ("llama4", "gpt_oss", "gptoss", "mimo_v2", "mimov2", "step3p5", "gemma4")


def _check_dtypes(k: CacheDType, v: CacheDType) -> None:
    if k != v:
        # SGLang ServerArgs.kv_cache_dtype: one dtype for K and V (srt/server_args.py)
        raise EngineRefusalError(
            f"sglang: K ({k.name}) and V ({v.name}) must share one --kv-cache-dtype; SGLang has no separate K/V types"
        )
    if k.name not in CACHE_DTYPES:
        hint = "; write fp8_e4m3 or fp8_e5m2 (SGLang has no plain 'fp8')" if k.name == "fp8" else ""
        raise EngineRefusalError(
            f"sglang: --kv-cache-dtype {k.name} is not an SGLang cache dtype{hint}; accepted: {', '.join(CACHE_DTYPES)}"
        )


def _full_slots(page: int, image_tokens: int) -> Slots:
    if image_tokens:
        # SGLang encoder-decoder: encoder tokens are written at encoder_out_cache_loc in the same
        # token_to_kv_pool, so every layer holds text + image slots (layers/attention/*_backend.py)
        return Slots(
            f"(pad(N, {page}) + {image_tokens:,} image tokens) x S  (one token pool: image tokens take a slot in "
            "every layer)",
            lambda n, s: (pad(n, page) + image_tokens) * s,
        )
    # SGLang TokenToKVPoolAllocator / PagedTokenToKVPoolAllocator: whole pages (mem_cache/allocator.py)
    return Slots(f"pad(N, {page}) x S  (whole {page}-token pages)", lambda n, s: pad(n, page) * s)


def _swa_slots(window: int, page: int, what: str) -> Slots:
    # SGLang SWA pool: a request keeps its window plus one page once older tokens are evicted
    # (mem_cache/swa_memory_pool.py; admission floor sliding_window + page_size in pool_configurator.py)
    cap = window + page
    return Slots(
        f"min(pad(N, {page}), {cap:,}) x S  ({what} {window:,} + one {page}-token page, in the SWA pool)",
        lambda n, s: min(pad(n, page), cap) * s,
    )


def _swa_architecture(spec: ModelSpec) -> bool:
    # SGLang is_hybrid_swa_model: an architecture allow-list (srt/configs/model_config.py)
    architectures = spec.config.get("architectures")
    names = [str(a) for a in architectures] if isinstance(architectures, list) else []
    text = " ".join(names).lower() + " " + spec.model_type.lower()
    return any(key in text for key in SWA_ARCHITECTURES)


def layout(
    spec: ModelSpec, k: CacheDType, v: CacheDType, tp: int, options: EngineOptions, version: str = DEFAULT_VERSION
) -> Layout:
    """SGLang's per-GPU bytes for S sequences of N tokens."""
    _check_dtypes(k, v)
    kinds = {state.kind for _, state in spec.primitives()}
    page = options.block_size or (DSA_PAGE_SIZE if "indexer" in kinds else DEFAULT_PAGE_SIZE)
    windowed = bool(kinds & {"sliding_window", "chunked_local"})
    swa_pool = windowed and _swa_architecture(spec)
    image = options.image_tokens if "cross_attention" in kinds else 0
    groups: list[Group] = []
    warnings: list[str] = []
    notes = [
        f"page size {page} token{'s' if page > 1 else ''} (ServerArgs.page_size"
        f"{'' if options.block_size else ' default'}; some attention backends, e.g. flashmla, need larger pages)",
        "SGLang allocates size + page_size slots per layer (the first page is a dummy): one extra page per "
        "layer for the whole pool, not per sequence",
    ]
    for state, indices in group_primitives(spec):
        n = len(indices)
        if isinstance(state, FullAttention | SlidingWindow | ChunkedLocal | CrossAttention):
            # SGLang ModelConfig.get_num_kv_heads: max(1, H // tp), replicated past H (srt/configs/model_config.py)
            heads, warning = kv_heads_per_rank(state.kv_heads, tp, NAME)
            if warning:
                warnings.append(warning)
            # SGLang DefaultPoolConfigurator._compute_cell_size: n_kv x (head_dim + v_head_dim) x dsize per layer
            slot, text = attention_slot(heads, state.k_dim, state.v_dim, k, v)
            if isinstance(state, SlidingWindow | ChunkedLocal) and not swa_pool:
                # SGLang is_hybrid_swa_model is False: the window only masks attention; every token is cached
                # in the one full pool (srt/configs/model_config.py, mem_cache/memory_pool.py)
                size = state.window if isinstance(state, SlidingWindow) else state.chunk
                groups.append(
                    Group(
                        state.kind,
                        f"{state.kind.replace('_', ' ')} {size:,}, cached in full",
                        n,
                        slot,
                        text,
                        Slots(
                            f"pad(N, {page}) x S  (no SWA pool for this architecture)", lambda x, s: pad(x, page) * s
                        ),
                        True,
                        layer_indices=indices,
                    )
                )
            elif isinstance(state, SlidingWindow | ChunkedLocal):
                window, what = (
                    (state.window, "window") if isinstance(state, SlidingWindow) else (state.chunk, "chunk as window")
                )
                label = (
                    f"sliding window {window:,}" if isinstance(state, SlidingWindow) else f"chunked local {window:,}"
                )
                groups.append(
                    Group(
                        state.kind, label, n, slot, text, _swa_slots(window, page, what), False, layer_indices=indices
                    )
                )
            elif isinstance(state, CrossAttention):
                groups.append(
                    Group(
                        "cross_attention",
                        f"cross attention ({image:,} image tokens)",
                        n,
                        slot,
                        text,
                        _full_slots(page, image),
                        True,
                        layer_indices=indices,
                    )
                )
            else:
                groups.append(
                    Group(
                        "full_attention",
                        "full attention",
                        n,
                        slot,
                        text,
                        _full_slots(page, image),
                        True,
                        layer_indices=indices,
                    )
                )
        elif isinstance(state, LatentAttention):
            if options.mla_storage in ("expanded", "latent+v"):
                raise EngineRefusalError(
                    f"sglang: the MLA backend caches the latent only; mla_storage "
                    f"{options.mla_storage!r} is not an SGLang layout"
                )
            if tp > 1:
                warnings.append(f"latent attention: the latent is replicated on all {tp} GPUs, not split")
            # SGLang calculate_mla_kv_cache_dim: kv_lora_rank + qk_rope_head_dim, no TP split (kv_cache_configurator.py)
            slot, text = latent_slot(state, k)
            groups.append(
                Group(
                    "latent_attention",
                    "latent attention (MLA)",
                    n,
                    slot,
                    text,
                    _full_slots(page, image),
                    True,
                    layer_indices=indices,
                )
            )
        elif isinstance(state, IndexerKeys):
            groups.append(_indexer_group(spec, state, indices, k, page, image))
        elif isinstance(state, Recurrent):
            if state.variant == "short_conv":
                raise EngineRefusalError(
                    "sglang: LFM2's short-convolution state lives in SGLang's MambaPool with a shape and dtype "
                    "kvbudget has not verified in SGLang's source; use --engine vllm, llamacpp or transformers"
                )
            # SGLang Mamba2StateShape: conv (conv_dim/tp, conv_kernel-1); SSM float32 unless the config pins it
            # (srt/configs/mamba_utils.py: mamba2_state_dtype, mamba_ssm_dtype)
            size, text = kernel_minus_one_state(
                state, tp=tp, engine=NAME, conv_default=MAMBA_CONV_DTYPE, ssm_default=MAMBA_SSM_DTYPE
            )
            groups.append(fixed_state_group("recurrent", f"{state.variant} state", indices, size, text))
        elif isinstance(state, SharedKV):
            groups.append(shared_kv_group(state, indices))
    if swa_pool:
        notes.append(
            f"hybrid SWA: SGLang splits the budget into a full pool and a SWA pool with "
            f"swa_full_tokens_ratio {SWA_FULL_TOKENS_RATIO} (swa tokens = {SWA_FULL_TOKENS_RATIO} x full "
            "tokens; all-SWA models get one SWA pool); per sequence the sliding layers keep min(N, window + page) "
            "slots; pool sizes for a budget: swa_pool_split"
        )
    elif windowed:
        notes.append(
            "SGLang turns its SWA pool on only for Llama-4, gpt-oss, MiMo-V2, Step-3.5 and Gemma-4 "
            "(is_hybrid_swa_model, srt/configs/model_config.py); for this architecture it caches the "
            "sliding layers for every token, like full layers"
        )
    if "recurrent" in kinds:
        notes.append(
            f"Mamba state: conv in {MAMBA_CONV_DTYPE}, SSM in {MAMBA_SSM_DTYPE} unless the config pins it; "
            "SGLang gives the Mamba cache mamba_full_memory_ratio 0.9 (0.9/1.9 of the budget) and keeps about "
            "3 state slots per running request (ping-pong buffers); here one state per sequence"
        )
    if image:
        notes.append(
            "cross attention: SGLang keeps one token pool, so image tokens take a slot in every layer "
            "(self- and cross-attention) and text tokens do too"
        )
    return Layout(NAME, version, k, v, tp, tuple(groups), page, tuple(notes), tuple(dict.fromkeys(warnings)))


def _indexer_group(
    spec: ModelSpec, state: IndexerKeys, indices: tuple[int, ...], k: CacheDType, page: int, image: int
) -> Group:
    # SGLang NSATokenToKVPool (srt/mem_cache/memory_pool.py): index_k_with_scale_buffer of uint8, index_head_dim
    # fp8 keys + index_head_dim // 128 fp32 scales per token per layer, whatever --kv-cache-dtype says.
    if k.name not in ("bf16", "fp16", "fp32"):
        raise EngineRefusalError(
            f"sglang: --kv-cache-dtype {k.name} on a sparse-attention (DSA) model changes the MLA record with the "
            "NSA backend (kv_cache_dim), which kvbudget does not model; use bf16"
        )
    latent = sum(1 for _, s in spec.primitives() if isinstance(s, LatentAttention))
    if len(indices) != latent:
        raise EngineRefusalError(
            f"sglang: {latent - len(indices)} of {latent} sparse-attention layers reuse another layer's top-k "
            "(indexer_types 'shared'); how SGLang sizes their indexer buffer is not known"
        )
    slot = state.head_dim + state.head_dim // NSA_QUANT_BLOCK * 4
    text = f"1 indexer key x ({state.head_dim} fp8 B + {state.head_dim // NSA_QUANT_BLOCK} fp32 scales)"
    return Group(
        "indexer",
        "indexer keys (fp8 + scales)",
        len(indices),
        slot,
        text,
        _full_slots(page, image),
        True,
        layer_indices=indices,
    )


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
    if not _swa_architecture(spec):
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
