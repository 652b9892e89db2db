"""SGLang's per-GPU bytes for S sequences of N tokens: one slot per cached token in every layer of its pool,
whole pages (see sglang.py for the rules and their sources)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbudget.engines.base import EngineOptions, Group, Layout, Slots, pad
from kvbudget.engines.common import (
    attention_slot,
    fixed_state_group,
    fp8_indexer_record,
    group_primitives,
    heads_on_rank,
    kernel_minus_one_state,
    latent_slot,
    shared_kv_group,
)
from kvbudget.engines.sglang_config import (
    CACHE_DTYPES,
    DEFAULT_VERSION,
    DSA_PAGE_SIZE,
    MAMBA_CONV_DTYPE,
    MAMBA_SSM_DTYPE,
    NAME,
    SWA_FULL_TOKENS_RATIO,
    attention_tp,
    default_page_size,
    dp_attention,
    mamba_slots_per_request,
    swa_architecture,
)
from kvbudget.errors import EngineRefusalError
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

if TYPE_CHECKING:
    from kvbudget.model.spec import CacheKind


def _check_dtypes(k: CacheDType, v: CacheDType) -> None:
    if k != v:
        # SGLang ServerArgs.kv_cache_dtype: one dtype for K and V (srt/server_args.py)
        raise EngineRefusalError(
            f"sglang: K ({k.name}) and V ({v.name}) must share one --kv-cache-dtype; SGLang has no separate K/V types"
        )
    if k.name not in CACHE_DTYPES and k.name != "fp8":  # plain fp8 is e4m3: SGLang spells it fp8_e4m3
        hint = ""
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


def _pool_group(
    kind: CacheKind, label: str, indices: tuple[int, ...], slot: int, text: str, page: int, image: int
) -> Group:
    """Layers whose every cached token takes a slot in SGLang's one full token pool (image tokens too)."""
    return Group(kind, label, len(indices), slot, text, _full_slots(page, image), True, layer_indices=indices)


def layout(
    spec: ModelSpec, k: CacheDType, v: CacheDType, tp: int, options: EngineOptions, version: str = DEFAULT_VERSION
) -> Layout:
    """SGLang's per-GPU bytes for S sequences of N tokens."""
    _check_dtypes(k, v)
    kinds = {state.kind for _, state in spec.primitives()}
    page = options.block_size or (DSA_PAGE_SIZE if "indexer" in kinds else default_page_size(options, spec))
    windowed = bool(kinds & {"sliding_window", "chunked_local"})
    swa_pool = windowed and swa_architecture(spec)
    image = options.image_tokens if "cross_attention" in kinds else 0
    groups: list[Group] = []
    warnings: list[str] = []
    notes = [
        f"page size {page} token{'s' if page > 1 else ''} (ServerArgs.page_size"
        f"{'' if options.block_size else ' default'}; some attention backends, e.g. flashmla, need larger pages)",
        "SGLang allocates size + page_size slots per layer (the first page is a dummy): one extra page per "
        "layer for the whole pool, not per sequence",
    ]
    attn_tp = attention_tp(tp, options)
    if attn_tp < tp:
        notes.append(
            f"DP attention: {dp_attention(options)} attention ranks of {attn_tp} GPU(s) each; every rank keeps its "
            "own token pool for its own requests (sessions x DP size)"
        )
    for state, indices in group_primitives(spec):
        n = len(indices)
        if isinstance(state, FullAttention | SlidingWindow | ChunkedLocal | CrossAttention):
            # SGLang ModelConfig.get_num_kv_heads(attn_tp_size): max(1, H // attn_tp), replicated past H
            # (srt/configs/model_config.py; pool_configurator.py reads get_parallel().attn_tp_size)
            heads = heads_on_rank(state.kv_heads, attn_tp, NAME, warnings)
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
                    _pool_group(
                        "cross_attention", f"cross attention ({image:,} image tokens)", indices, slot, text, page, image
                    )
                )
            else:
                groups.append(_pool_group("full_attention", "full attention", indices, slot, text, page, image))
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
            groups.append(_pool_group("latent_attention", "latent attention (MLA)", indices, slot, text, page, image))
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
            "SGLang turns its SWA pool on only for the architectures of is_hybrid_swa_model (Llama-4, gpt-oss, "
            "Granite-SWA, MiMo-V2, Step-3.5/3.7, Gemma-4, DeepSeek-V4, Laguna, Mellum, ...; "
            "srt/configs/model_config.py); for this architecture it caches the sliding layers for every "
            "token, like full layers"
        )
    if "recurrent" in kinds:
        notes.append(
            f"Mamba state: conv in {MAMBA_CONV_DTYPE}, SSM in {MAMBA_SSM_DTYPE} unless the config pins it; "
            "SGLang first gives the Mamba cache mamba_full_memory_ratio 0.9/1.9 of the budget and caps running "
            f"requests at the state slots / {mamba_slots_per_request(spec, options)} (sglang.pools); here one "
            "state per sequence"
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
    slot, text = fp8_indexer_record(NAME, spec, state, indices, "how SGLang sizes their indexer buffer is not known")
    return _pool_group("indexer", "indexer keys (fp8 + scales)", indices, slot, text, page, image)
