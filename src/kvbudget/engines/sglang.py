"""SGLang: a token pool of ``page_size``-token pages; each cached token takes one slot in every layer.

* cell (bytes of one token over the layers of the full pool) = sum over full-attention layers of
  ``n_kv_per_rank x (Dk + Dv) x dsize``, KV heads replicated past tp as in vLLM; MLA caches the
  ``kv_lora_rank + rope`` latent once per token, replicated on every rank;
* full layers hold ``pad(N, page)`` slots per sequence;
* hybrid sliding-window models (full + sliding layers): the sliding layers live in a separate SWA pool
  sized ``swa_full_tokens_ratio`` (0.8) x the full pool; one sequence keeps ``min(N, W + page)`` there;
* Mamba / gated-delta-net state: conv (d_conv - 1 columns, bf16) + SSM state in **float32** by default.

S sequences cost S times one sequence. Pool-level sizes come from ``pools`` at the bottom, for a
given byte budget (SGLang's ``rest_memory``), as SGLang 0.5.23 sizes them (checked against its own
code in tests/oracle/test_sglang_oracle.py): the Mamba state cache first takes
``mamba_full_memory_ratio / (1 + ratio)`` (0.9/1.9) of the budget, the token pool the rest; hybrid
sliding-window models get a full pool and a sliding pool of fixed sizes, and a session needs its
whole context in the full pool; running requests are capped by ``tokens / context x 512`` within
[2,048, 4,096] (or by ``--max-running-requests`` // DP size), by half the tokens, and for Mamba models by
the state slots (5 per request with the radix cache's extra buffer, 3 without, 1 with the radix cache off).
With DP attention (``--enable-dp-attention --dp N``) each attention rank splits the KV heads over tp / N
GPUs and keeps its own pools for its own requests; tests/oracle/test_sglang_matrix.py checks all of this at
TP 1-8 on five GPU generations.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kvbudget.engines import sglang_memory
from kvbudget.engines.base import EngineOptions, Group, Layout, Slots, pad
from kvbudget.engines.common import (
    attention_slot,
    fixed_state_group,
    fp8_indexer_record,
    group_primitives,
    kernel_minus_one_state,
    kv_heads_per_rank,
    latent_slot,
    shared_kv_group,
)
from kvbudget.engines.contract import EngineRules, yarn_override
from kvbudget.engines.overhead import Overhead, Site
from kvbudget.engines.records import (
    Deployment,
    LoggedMemory,
    Measured,
    MemoryShape,
    ServeSettings,
    Share,
    StartUp,
    log_line,
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
from kvbudget.precision import CacheDType, parse_cache_dtype

if TYPE_CHECKING:
    from kvbudget.engines.metrics import EngineMetrics
    from kvbudget.measure.logs.record import EngineLog

NAME = "sglang"
DEFAULT_VERSION = "0.5.23"  # checked against SGLang 0.5.23's own sizing code in the test suite (tests/oracle)

DEFAULT_PAGE_SIZE = 1  # SGLang ServerArgs.page_size default (srt/server_args.py)
SWA_FULL_TOKENS_RATIO = 0.8  # SGLang ServerArgs.swa_full_tokens_ratio default (srt/server_args.py)
MAMBA_SSM_DTYPE = "float32"  # SGLang mamba2_state_dtype: SSM default float32 (srt/configs/mamba_utils.py)
MAMBA_CONV_DTYPE = "bf16"  # SGLang SGLANG_MAMBA_CONV_DTYPE default bfloat16 (srt/configs/mamba_utils.py)
# SGLang --kv-cache-dtype choices auto|bf16|bfloat16|fp8_e4m3|fp8_e5m2|fp4_e2m1 (srt/server_args.py);
# auto resolves to the model dtype (bf16, fp16 or fp32) before we see it. fp4_e2m1 is not modelled.
CACHE_DTYPES = ("bf16", "fp16", "fp32", "fp8_e4m3", "fp8_e5m2")
DSA_PAGE_SIZE = 64  # SGLang _handle_deepseek_family: "Setting page size to 64 for DeepSeek DSA" on CUDA
# SGLang 0.5.23 is_hybrid_swa_model allow-list (srt/configs/model_config.py: hybrid_swa_archs, SWA_SINK_ARCHS,
# MIMO_V2_MODEL_ARCHS); a config may also opt in with is_hybrid_swa
SWA_ARCHITECTURES = frozenset(
    {
        "BeamForCausalLM",
        "Llama4ForConditionalGeneration",
        "DeepseekV4ForCausalLM",
        "DeepseekV4ForCausalLMNextN",
        "DeepseekV4ForCausalLMDSpark",
        "GptOssForCausalLM",
        "GraniteSWAForCausalLM",
        "GraniteMoeSWAForCausalLM",
        "IQuestQ1ForCausalLM",
        "IQuestQ1MTP",
        "MiMoV2ForCausalLM",
        "MiMoV2FlashForCausalLM",
        "MiMoV2MTP",
        "Step3p5ForCausalLM",
        "Step3p5MTP",
        "Step3p7ForConditionalGeneration",
        "Gemma4ForCausalLM",
        "Gemma4ForConditionalGeneration",
        "EmbeddingGemma2Model",
        "Gemma4UnifiedForConditionalGeneration",
        "DiffusionGemmaForBlockDiffusion",
        "LagunaForCausalLM",
        "MellumForCausalLM",
        "MuseGlimmerForCausalLM",
        "MuseGlimmerForConditionalGeneration",
        "InklingForConditionalGeneration",
        "InklingForConditionalGenerationMTP",
        "UnlimitedOCRForCausalLM",
    }
)
# Configs without an architectures list (GGUF-derived specs): the same families by model_type
SWA_MODEL_TYPES = ("llama4", "gpt_oss", "mimo_v2", "step3p5", "step3p7", "gemma4", "laguna", "mellum")
MAMBA_FULL_MEMORY_RATIO = 0.9  # SGLang ServerArgs.mamba_full_memory_ratio fallback (arg_groups/fields/schedule.py)
MAMBA_SLOTS_PER_REQUEST = 3  # SGLang MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO (mem_cache/kv_cache_configurator.py)
MAMBA_EXTRA_BUFFER_SLOTS = 2  # SGLang get_mamba_tracking_slots(extra_buffer=True, overlap=True) (allocation_sizing.py)
# SGLang 0.5.23 _MAMBA_EXTRA_BUFFER_ARCHS (arg_groups/overrides.py): the radix cache keeps 2 extra state slots
MAMBA_EXTRA_BUFFER_ARCHITECTURES = frozenset(
    {
        "KimiLinearForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3_5MoeForCausalLM",
        "Qwen3_5ForCausalLM",
        "Qwen3NextForCausalLM",
        "Qwen4ExpForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration",
        "MiniCPMV4_6ForConditionalGeneration",
        "MiniCPMV4_7ForConditionalGeneration",
        "BailingMoeV2_5ForCausalLM",
        "BailingMoeV3ForCausalLM",
        "BailingMoeV3VLForConditionalGeneration",
        "FalconH1ForCausalLM",
        "GraniteMoeHybridForCausalLM",
        "Glm5NextForConditionalGeneration",
        "NemotronHForCausalLM",
    }
)
RUNNING_REQUESTS_MIN, RUNNING_REQUESTS_MAX = 2048, 4096  # SGLang resolve_max_num_reqs clamp (kv_cache_configurator.py)


BLACKWELL_PAGE_SIZE = 64  # SGLang 0.5.23 on SM100: trtllm_mha / trtllm_mla, page_size forced to 64


def dp_attention(options: EngineOptions) -> int:
    """The attention data-parallel size (``--enable-dp-attention --dp N``); 1 when off."""
    return options.dp_attention or 1


def attention_tp(tp: int, options: EngineOptions) -> int:
    """The ranks one attention layer's heads are split over: tp / dp with DP attention (SGLang 0.5.23
    arg_groups/parallel_hook.py asserts tp % dp == 0; attn_tp_size = tp / attn_dp_size, runtime_context.py)."""
    dp = dp_attention(options)
    if dp < 1 or tp % dp:
        raise InputError(f"--dp-attention {dp}: SGLang needs it to divide --tp {tp}; use a divisor of {tp}")
    return tp // dp


# SGLang 0.5.23 on SM100 runs these hybrids on triton (page 1) unless their override picks trtllm_mha:
# Falcon-H1 / Jet-Nemotron always (arg_groups/model_overrides/falcon_h1.py)
SM100_TRITON_ARCHITECTURES = frozenset(
    {"FalconH1ForCausalLM", "JetNemotronForCausalLM", "JetVLMForConditionalGeneration"}
)
# the Qwen3.5 / Qwen3-Next hybrids: trtllm_mha (page 64) only with the Mamba extra buffer, the radix cache off or
# speculative decoding; by default (radix on, no extra buffer resolved yet) triton, page 1
# (arg_groups/model_overrides/qwen3_5.py _qwen3_5_hybrid_overrides)
SM100_QWEN35_HYBRID_ARCHITECTURES = frozenset(
    {
        "Qwen3NextForCausalLM",
        "Qwen3_5MoeForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration",
        "InternS2MobiusForConditionalGeneration",
        "Qwen3_5ForConditionalGeneration",
    }
)


def default_page_size(options: EngineOptions, spec: ModelSpec | None = None) -> int:
    """SGLang's page size when --page-size is not given, by the attention backend it picks for the GPU and model."""
    capability = options.gpu_capability or 90
    if capability // 10 == 10:
        names = set(_architectures(spec)) if spec is not None else set()
        if names & SM100_TRITON_ARCHITECTURES:
            return DEFAULT_PAGE_SIZE
        if names & SM100_QWEN35_HYBRID_ARCHITECTURES and options.prefix_caching is not False:
            return DEFAULT_PAGE_SIZE
        # SGLang 0.5.23 on SM100 picks trtllm_mha (MHA) or trtllm_mla (MLA), which need pages of 16-128 / 32-64:
        # _mla_backend_page_constraints sets 64 (arg_groups/overrides.py, model_override_base.py)
        return BLACKWELL_PAGE_SIZE
    # Hopper fa3, Ampere/Ada flashinfer or triton: ServerArgs.page_size default 1
    return DEFAULT_PAGE_SIZE


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


def _architectures(spec: ModelSpec) -> list[str]:
    architectures = spec.config.get("architectures")
    return [str(a) for a in architectures] if isinstance(architectures, list) else []


def _swa_architecture(spec: ModelSpec) -> bool:
    # SGLang 0.5.23 is_hybrid_swa_model: an architecture allow-list, or the config's is_hybrid_swa
    # (srt/configs/model_config.py)
    names = _architectures(spec)
    if names:
        return any(name in SWA_ARCHITECTURES for name in names) or spec.config.get("is_hybrid_swa") is True
    return any(key in spec.model_type.lower() for key in SWA_MODEL_TYPES)


def layout(
    spec: ModelSpec, k: CacheDType, v: CacheDType, tp: int, options: EngineOptions, version: str = DEFAULT_VERSION
) -> Layout:
    """SGLang's per-GPU bytes for S sequences of N tokens."""
    _check_dtypes(k, v)
    kinds = {state.kind for _, state in spec.primitives()}
    page = options.block_size or (DSA_PAGE_SIZE if "indexer" in kinds else default_page_size(options, spec))
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
            heads, warning = kv_heads_per_rank(state.kv_heads, attn_tp, NAME)
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


def mamba_slots_per_request(spec: ModelSpec, options: EngineOptions | None = None) -> int:
    """State slots SGLang keeps per running request of a Mamba hybrid (``_calculate_mamba_ratio``)."""
    if options is not None and options.prefix_caching is False:
        # --disable-radix-cache: one slot per request (kv_cache_configurator.py)
        return 1
    # radix cache on, overlap schedule on: the "extra_buffer" strategy where the architecture supports it
    # (arg_groups/overrides.py _mamba_radix_cache_resolution), else "no_buffer" (3 slots, overlap off)
    extra = any(name in MAMBA_EXTRA_BUFFER_ARCHITECTURES for name in _architectures(spec))
    return MAMBA_SLOTS_PER_REQUEST + (MAMBA_EXTRA_BUFFER_SLOTS if extra else 0)


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
    windowed = bool(swa) and bool(full) and _swa_architecture(spec)
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


class Rules(EngineRules):
    """SGLang: a static share of the free memory, token pools (full, sliding, Mamba state), the radix cache."""

    name = NAME
    title = "SGLang"
    default_version = DEFAULT_VERSION
    order = 20
    server = True
    divides_heads = True
    memory_fraction = "mem_fraction_static"
    cheaper_kv_dtypes = ("fp8_e4m3",)
    logs_version = True
    quantizes_at_load = ("fp8",)  # --quantization fp8 on a 16-bit checkpoint
    # SGLang 0.5 mem_cache/radix_cache.py: a finished request's KV stays in the radix tree, evicted LRU when needed
    sim_pause = "evictable"
    # SGLang python/sglang/srt/managers/schedule_batch.py ScheduleBatch.retract_decode (0.3-0.5): the running
    # requests sorted by (len(output_ids), -len(origin_input_ids)), reverse, and popped from the end until the
    # next decode fits: the request with the fewest generated tokens goes first, the longest prompt among equals
    sim_victim = "fewest-decoded"
    sim_basis = (
        "SGLang keeps a finished step's KV in its radix cache (evictable, LRU) and the next step reuses it if still "
        "cached; retraction recomputes"
    )
    concurrency_flag = "--max-running-requests"

    def alert_metrics(self) -> EngineMetrics | None:
        from kvbudget.engines.metrics import SGLANG

        return SGLANG

    def layout(self, spec: ModelSpec, k: CacheDType, v: CacheDType, tp: int, options: EngineOptions) -> Layout:
        return layout(spec, k, v, tp, options, self.version)

    def usable_share(self, m: MemoryShape) -> Share:
        o = m.options
        settings = sglang_memory.MemorySettings(
            tp=m.tp,
            pp=m.pp,
            mla=m.mla,
            chunked_prefill=o.max_num_batched_tokens,
            max_running_requests=o.max_running_requests,
            dp_attention=dp_attention(o),
        )
        return sglang_memory.usable_share(m.total_bytes, m.utilization, settings, self.version, m.overhead)

    def batched_tokens(
        self, total_bytes: int, gpu_label: str, options: EngineOptions, context: int = 0
    ) -> tuple[int, str]:
        return sglang_memory.chunked_prefill(total_bytes, dp_attention(options))

    def served_dtype(self, spec: ModelSpec, capability: int | None) -> tuple[str, str]:
        # SGLang 0.5.23 srt/configs/model_config.py _get_and_verify_dtype: dtype auto runs a float32 checkpoint in
        # float16 ("the common practice"), Gemma in bfloat16
        if parse_cache_dtype(spec.dtype, what="model dtype").name != "fp32":
            return spec.dtype, ""
        dtype = "bf16" if spec.model_type.startswith("gemma") else "fp16"
        return dtype, f"SGLang runs this float32 checkpoint in {dtype} (dtype auto)"

    def derived_options(self, options: EngineOptions, batched: int, capability: int | None) -> EngineOptions:
        # the page size of the GPU's attention backend (64 on Blackwell)
        return replace(options, gpu_capability=options.gpu_capability or capability)

    def overhead(self, spec: ModelSpec, site: Site) -> Overhead:
        """The memory in use before the weights load (CUDA context, communicators): SGLang's activations and CUDA
        graphs live in the (1 - mem_fraction_static) it keeps back, not in the pool (sglang_memory.usable_share)."""
        figure, low, high, words = sglang_memory.pre_load(site.tp, site.interconnect)
        basis = (
            f"heuristic: memory in use before SGLang loads the weights (CUDA context, communicators), "
            f"{sglang_memory.PRE_LOAD[0] / 2**30:.2f}-{sglang_memory.PRE_LOAD[1] / 2**30:.2f} GiB in SGLang start-up "
            f"logs{words}; activations and CUDA graphs use the share mem_fraction_static keeps back; measure it "
            "(calibrate, plan --from-log) or pass --overhead"
        )
        return Overhead(figure, low, high, "heuristic", basis)

    def shared_prefix(self, prefix: int, block: int | None, unified: bool = False) -> tuple[int, str]:
        # SGLang RadixAttention matches prefixes page by page (mem_cache/radix_cache.py)
        b = block or DEFAULT_PAGE_SIZE
        return prefix // b * b, f"SGLang RadixAttention shares whole {b}-token pages"

    def sessions(self, d: Deployment, warnings: list[str]) -> int:
        """Its pools, not fungible bytes: the Mamba carve-out, the full pool of a sliding-window hybrid, the
        running-request cap (one pipeline stage only)."""
        dp = dp_attention(d.options)
        if d.pp > 1:
            return d.sessions * dp
        try:
            built = pools(d.pool_bytes, d.spec, d.layout, d.context, d.options)
        except EngineRefusalError as refusal:
            warnings.append(str(refusal))
            return 0
        if dp > 1:
            # DP attention: each of the dp attention ranks has its own token pool (per-rank heads at tp / dp) and
            # serves its own requests (scheduler per DP rank, SGLang 0.5.23 managers/data_parallel_controller.py)
            warnings.append(
                f"DP attention: {dp} attention ranks, each with its own pool of {built.max_total_num_tokens:,} tokens "
                f"and up to {built.max_running_requests:,} running requests"
            )
        if built.sessions < d.sessions:
            warnings.append(
                f"SGLang serves {built.sessions} sessions of {d.context:,} tokens, not the {d.sessions} the bytes "
                f"alone would hold: max_total_num_tokens {built.max_total_num_tokens:,}"
                + (f" (full pool; sliding pool {built.swa_tokens:,})" if built.swa_tokens else "")
                + (
                    f", {built.max_mamba_cache_size} Mamba state slots"
                    if built.max_mamba_cache_size is not None
                    else ""
                )
                + f", max_running_requests {built.max_running_requests:,}"
            )
        return built.sessions * dp

    def start_up(self, d: Deployment) -> StartUp:
        try:
            built = pools(d.pool_bytes, d.spec, d.layout, d.context, d.options)
        except EngineRefusalError as refusal:
            return StartUp((str(refusal),), 0, f"SGLang {self.version} refuses to start", True)
        return StartUp(built.log_lines(), built.max_total_num_tokens, "SGLang max_total_num_tokens")

    def logged_memory(self, log: EngineLog) -> LoggedMemory:
        """Memory free before loading ("Load weight begin. avail mem"): mem_fraction_static is a share of it.
        Its overhead is the share mem_fraction_static leaves, not a profiled figure."""
        free = log.measured.get("free_before_load_bytes")
        if free is None:
            return LoggedMemory()
        return LoggedMemory(Measured(int(free.value), f"measured: free before loading, {log_line(log, free)}"))

    def serve_command(self, s: ServeSettings) -> tuple[str, ...]:
        args = ["python", "-m", "sglang.launch_server", "--model-path", s.model, "--context-length", str(s.context)]
        if s.fraction is not None:
            args += ["--mem-fraction-static", str(s.fraction)]
        # SGLang --kv-cache-dtype has no plain fp8: kvbudget's fp8 (e4m3, as vLLM's) is its fp8_e4m3
        dtype = {"fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}.get(s.k.name, "auto")
        args += ["--kv-cache-dtype", dtype]
        if s.options.block_size:
            args += ["--page-size", str(s.options.block_size)]
        if s.options.max_num_batched_tokens:
            args += ["--chunked-prefill-size", str(s.options.max_num_batched_tokens)]
        if s.tp > 1:
            args += ["--tp", str(s.tp)]
        if s.options.dp_attention and s.options.dp_attention > 1:
            args += ["--enable-dp-attention", "--dp", str(s.options.dp_attention)]
        if s.options.max_running_requests is not None:
            args += ["--max-running-requests", str(s.options.max_running_requests)]
        if s.quantize == "fp8":  # SGLang quantizes a 16-bit checkpoint to fp8 at load (--quantization fp8)
            args += ["--quantization", "fp8"]
        if s.past_native:
            # SGLang refuses a --context-length past the config's unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1
            # (model_config.py); YaRN rope scaling over the trained window through --json-model-override-args
            env = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
            return (env, *args, "--json-model-override-args", s.yarn_override)
        return tuple(args)

    def past_window(self, context: int, native: int) -> str:
        # SGLang 0.5 model_config.py: a --context-length past the config's is refused unless
        # SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1; config overrides through --json-model-override-args
        return (
            f"SGLang {self.version} refuses --context-length {context} unless "
            "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1, and the model needs rope scaling over its window: "
            f"--json-model-override-args '{yarn_override(context, native)}'"
        )
