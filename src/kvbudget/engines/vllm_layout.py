"""vLLM's per-GPU bytes for S sequences of N tokens: one KV-cache spec per layer kind, grouped into the block
pool (vllm_pool), each sized for the admission worst case (see vllm.py for the rules)."""

from __future__ import annotations

from dataclasses import replace

from kvbudget.engines import vllm_batches
from kvbudget.engines.base import NO_SLOTS, EngineOptions, Group, Layout, Slots, version_tuple
from kvbudget.engines.common import (
    attention_slot,
    fp8_indexer_record,
    group_primitives,
    heads_on_rank,
    kernel_minus_one_state,
    latent_slot,
    shared_kv_group,
)
from kvbudget.engines.vllm_config import (
    DEFAULT_GPU_CAPABILITY,
    DEFAULT_VERSION,
    FA4_HD256_BLOCK_SIZE,
    NAME,
    NVFP4_SINCE,
    V1_SINCE,
    accepted_dtypes,
    base_block,
    default_prefix_caching,
    fa4_hd256,
    state_pages,
)
from kvbudget.engines.vllm_memory import chunked_hybrid_off_by_default
from kvbudget.engines.vllm_pool import (
    ATTENTION,
    KERNEL_BLOCK_ALIGNMENT,
    Bucket,
    MambaCacheMode,
    VllmPool,
    align_mamba,
    disable_hybrid,
    group_buckets,
)
from kvbudget.errors import EngineRefusalError
from kvbudget.model.spec import (
    ChunkedLocal,
    CrossAttention,
    FullAttention,
    IndexerKeys,
    LatentAttention,
    ModelSpec,
    Primitive,
    Recurrent,
    SharedKV,
    SlidingWindow,
)
from kvbudget.precision import CacheDType


def _check_dtypes(k: CacheDType, v: CacheDType, version: str, latent: bool) -> None:
    if k != v:
        # vLLM CacheConfig.cache_dtype: one --kv-cache-dtype for K and V (vllm/config/cache.py)
        raise EngineRefusalError(
            f"vllm: K ({k.name}) and V ({v.name}) must share one --kv-cache-dtype; vLLM has no separate K/V types"
        )
    accepted = accepted_dtypes(version)
    if k.name not in accepted:
        when = f" (nvfp4 needs vLLM >= {NVFP4_SINCE[0]}.{NVFP4_SINCE[1]})" if k.name == "nvfp4" else ""
        raise EngineRefusalError(
            f"vllm {version}: --kv-cache-dtype {k.name} is not a vLLM cache dtype{when}; "
            f"accepted: {', '.join(accepted)}"
        )
    if latent and (k.name == "nvfp4" or k.row_extra_bytes):
        # vLLM MLA backends (FlashMLA, CUTLASS, Triton MLA) take bf16/fp16 or fp8 only (v1/attention/backends/mla)
        raise EngineRefusalError(
            f"vllm: no MLA attention backend supports --kv-cache-dtype {k.name}; use auto, fp8 or fp8_e4m3 "
            "(or mla_storage='expanded' to model VLLM_MLA_DISABLE=1)"
        )


def _buckets(
    spec: ModelSpec, k: CacheDType, tp: int, options: EngineOptions, warnings: list[str]
) -> tuple[list[Bucket], list[Group]]:
    """One bucket per distinct vLLM spec (block size still the base one), plus groups of shared-KV layers."""
    buckets: dict[tuple[object, ...], Bucket] = {}
    shared: list[Group] = []
    for state, indices in group_primitives(spec):
        if isinstance(state, SharedKV):
            # vLLM kv_sharing_target_layer_name: the layer gets no KVCacheSpec (kv_cache_interface.py)
            shared.append(shared_kv_group(state, indices, "reuses another layer (no KV spec in vLLM)"))
            continue
        bucket = _bucket(spec, state, indices, k, tp, options, warnings)
        key = (*bucket.spec_key, bucket.label)
        old = buckets.get(key)
        buckets[key] = bucket if old is None else replace(old, layer_indices=tuple(sorted(old.layer_indices + indices)))
    return list(buckets.values()), shared


def _bucket(
    spec: ModelSpec,
    state: Primitive,
    indices: tuple[int, ...],
    k: CacheDType,
    tp: int,
    options: EngineOptions,
    warnings: list[str],
) -> Bucket:
    if isinstance(state, FullAttention | SlidingWindow | ChunkedLocal | CrossAttention):
        # vLLM ModelConfig.get_num_kv_heads: max(1, H // tp), replicated past H (vllm/config/model.py)
        heads = heads_on_rank(state.kv_heads, tp, NAME, warnings)
        slot, text = attention_slot(heads, state.k_dim, state.v_dim, k, k)
        if isinstance(state, SlidingWindow):
            return Bucket(
                "sliding_window", f"sliding window {state.window:,}", indices, slot, text, 0, window=state.window
            )
        if isinstance(state, ChunkedLocal):
            return Bucket("chunked_local", f"chunked local {state.chunk:,}", indices, slot, text, 0, window=state.chunk)
        if isinstance(state, CrossAttention):
            return Bucket(
                "cross_attention",
                f"cross attention ({options.image_tokens:,} image tokens)",
                indices,
                slot,
                text,
                0,
                fixed_tokens=options.image_tokens,
            )
        return Bucket("full_attention", "full attention", indices, slot, text, 0)
    if isinstance(state, LatentAttention):
        if options.mla_storage == "expanded":
            # vLLM VLLM_MLA_DISABLE: head size qk_nope + qk_rope for K and V (V padded to it), per-head
            # (ModelArchConfigConvertorBase.get_head_size; deepseek_v2.py pads v to qk_head_dim)
            heads = heads_on_rank(state.num_heads, tp, NAME, warnings)
            dim = state.qk_nope_dim + state.rope_dim
            slot, text = attention_slot(heads, dim, dim, k, k)
            return Bucket(
                "full_attention",
                "latent attention expanded (VLLM_MLA_DISABLE)",
                indices,
                slot,
                text + f"; V padded from {state.v_head_dim} to {dim}",
                0,
            )
        if options.mla_storage == "latent+v":
            raise EngineRefusalError(
                "vllm: MLA caches the latent only (or, with VLLM_MLA_DISABLE, expanded "
                "per-head K/V); mla_storage 'latent+v' is a llama.cpp layout"
            )
        if tp > 1:
            warnings.append(f"latent attention: the latent is replicated on all {tp} GPUs, not split")
        # vLLM MLAAttentionSpec: 1 kv head x (kv_lora_rank + rope), no factor 2 (kv_cache_interface.py)
        slot, text = latent_slot(state, k)
        return Bucket("latent_attention", "latent attention (MLA)", indices, slot, text, 0)
    if isinstance(state, IndexerKeys):
        return _indexer_bucket(spec, state, indices, k)
    if not isinstance(state, Recurrent):
        raise TypeError(f"unexpected primitive {state!r}")
    # vLLM MambaStateShapeCalculator keeps conv_kernel-1 columns; conv in mamba_cache_dtype (auto = model
    # dtype), SSM in mamba_ssm_cache_dtype (config pin, else the conv dtype) (mamba_utils.py)
    size, text = kernel_minus_one_state(state, tp=tp, engine=NAME, conv_default=spec.dtype, ssm_default=spec.dtype)
    return Bucket("recurrent", f"{state.variant} state", indices, 0, "", 0, size, text)


def _indexer_bucket(spec: ModelSpec, state: IndexerKeys, indices: tuple[int, ...], k: CacheDType) -> Bucket:
    """vLLM DeepseekV32IndexerCache (model_executor/models/deepseek_v2.py @ 002d6073): an MLAAttentionSpec of one
    head of index_head_dim + index_head_dim // 128 * 4 uint8 (fp8 keys + one fp32 scale per 128), whatever
    --kv-cache-dtype says; being MLA-typed it joins the latent layers' KV-cache group."""
    if k.name not in ("bf16", "fp16", "fp32"):
        # vLLM DeepseekV32ForCausalLM.verify_and_update_config (model_executor/models/config.py) turns an fp8
        # cache into the 656-byte fp8_ds_mla record; other sparse-MLA architectures get no such hook.
        raise EngineRefusalError(
            f"vllm: --kv-cache-dtype {k.name} on a sparse-attention (DSA) model is stored in vLLM's fp8_ds_mla "
            "record (DeepSeek-V3.2) or a backend-specific layout, which kvbudget does not model; use bf16"
        )
    size, text = fp8_indexer_record(
        NAME, spec, state, indices, "whether vLLM still allocates their indexer cache is not known"
    )
    return Bucket("latent_attention", "indexer keys (fp8 + scales)", indices, size, text, 0)


def _plan(
    spec: ModelSpec, k: CacheDType, v: CacheDType, tp: int, options: EngineOptions, version: str
) -> tuple[VllmPool, list[Group], list[str], list[str]]:
    warnings: list[str] = []
    notes: list[str] = []
    has_latent = any(isinstance(s, LatentAttention) for _, s in spec.primitives())
    _check_dtypes(k, v, version, has_latent and options.mla_storage != "expanded")
    buckets, shared = _buckets(spec, k, tp, options, warnings)
    if not buckets:
        raise EngineRefusalError(f"vllm: {spec.name} has no layer with a KV cache or recurrent state")
    prefix = default_prefix_caching(spec, version) if options.prefix_caching is None else options.prefix_caching
    has_state = any(b.kind == "recurrent" for b in buckets)
    # vLLM MambaModelConfig.verify_and_update_config: prefix caching on -> "align", off -> "none" (models/config.py)
    mode: MambaCacheMode = "align" if prefix and has_state else "none"
    pages, alignment, pages_note = state_pages(spec, mode, options, version)
    base, block_note, backend = base_block(buckets, options, k, version)
    kernel = KERNEL_BLOCK_ALIGNMENT
    if not has_latent and fa4_hd256(spec, options.gpu_capability or DEFAULT_GPU_CAPABILITY, k, options.block_size):
        kernel = FA4_HD256_BLOCK_SIZE
        if not options.block_size and base < kernel:
            base = kernel
            block_note = f"block size {kernel} tokens (FlashAttention 4's head-256 kernel on Blackwell)"
    block, padded = align_mamba(buckets, base, notes, alignment, kernel)
    if block != base:
        block_note = f"block size {block} tokens (raised from {base} so one attention page holds a Mamba state)"
    buckets = [
        replace(
            b,
            block_size=block,
            page_padded=padded if b.kind == "recurrent" else 0,
            state_pages=pages if b.kind == "recurrent" else 1,
        )
        for b in buckets
    ]
    if options.disable_hybrid_kv_cache_manager:
        buckets = disable_hybrid(buckets)
    elif (
        options.chunked_hybrid is None
        and chunked_hybrid_off_by_default(version)
        and any(b.kind == "chunked_local" for b in buckets)
    ):
        # vLLM 0.10.1-0.13 VllmConfig (a model with an attention_chunk_size): "There is a latency regression when
        # using chunked local attention with the hybrid KV cache manager. Disabling it, by default."; then
        # kv_cache_utils.py unify_hybrid_kv_cache_specs caches every chunked (and sliding) layer as full attention
        buckets = disable_hybrid(buckets)
        if not any(b.kind == "chunked_local" for b in buckets):
            notes.append(
                f"vLLM {version} turns the hybrid KV cache manager off for chunked local attention unless "
                "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1 (--chunked-hybrid): every chunked layer is "
                "cached as full attention; its start-up check still sizes one request with the chunked layers"
            )
    pool_mode, grouped, page, per_block, pool_notes = group_buckets(buckets)
    batched, in_flight, _text = vllm_batches.in_flight(options, version)
    has_attention = any(b.kind in ATTENTION for b in grouped)
    result = VllmPool(
        version,
        pool_mode,
        grouped,
        page,
        per_block,
        batched,
        in_flight,
        block if has_attention else None,
        prefix,
        mode,
        backend,
    )
    notes[:0] = [block_note] if has_attention else []
    notes.extend(pool_notes)
    notes.append(
        f"prefix caching {'on' if prefix else 'off'} ("
        + ("set" if options.prefix_caching is not None else f"vLLM {version}'s default for this model")
        + ("; --no-prefix-caching turns it off" if prefix else "")
        + ")"
    )
    if has_state:
        notes.append(f"Mamba state: {pages_note}")
    return result, shared, notes, warnings


def pool(
    spec: ModelSpec,
    k: CacheDType,
    v: CacheDType,
    tp: int = 1,
    options: EngineOptions | None = None,
    version: str = DEFAULT_VERSION,
) -> VllmPool:
    """The block pool vLLM builds for this model on one GPU (for num_blocks, max_concurrency, log lines)."""
    return _plan(spec, k, v, tp, options or EngineOptions(), version)[0]


def _slots(b: Bucket, r: int, r_text: str) -> Slots:
    bs = b.block_size

    def fn(tokens: int, sequences: int) -> int:
        return b.blocks(tokens, r) * bs * sequences

    if b.kind == "sliding_window":
        text = (
            f"(cdiv(min({b.window - 1:,} + {r:,}, N), {bs}) + 1) x {bs} x S  (window {b.window:,} - 1 + "
            f"{r_text}, in {bs}-token blocks, +1 block for a window starting mid-block)"
        )
    elif b.kind == "chunked_local":
        text = (
            f"cdiv(min({b.window:,} + {r:,}, N), {bs}) x {bs} x S  (one {b.window:,}-token chunk + "
            f"{r_text}, in {bs}-token blocks)"
        )
    else:
        text = f"cdiv(N, {bs}) x {bs} x S  (whole {bs}-token blocks)"
    return Slots(text, fn)


def _group(b: Bucket, r: int, r_text: str) -> Group:
    alloc = b.alloc_layers if b.alloc_layers != b.layers else 0
    if b.kind == "recurrent":
        pages = b.state_pages
        text = (
            b.state_formula
            + (f"; page padded to {b.page_padded:,} B (the attention page)" if b.page_padded else "")
            + (
                f"; {pages} pages per sequence (mamba_cache_mode align, prefix caching on)"
                if pages > 1
                else "; 1 page per sequence (mamba_cache_mode none)"
            )
        )
        return Group(
            "recurrent", b.label, b.layers, 0, "", NO_SLOTS, False, b.page_bytes * pages, text, alloc, b.layer_indices
        )
    if b.kind == "cross_attention":
        tokens = b.blocks(0, r) * b.block_size
        text = (
            f"cdiv({b.fixed_tokens:,} image tokens, {b.block_size}) x {b.block_size} = {tokens:,} slots "
            f"x {b.slot_bytes:,} B ({b.slot_formula})"
        )
        return Group(
            "cross_attention",
            b.label,
            b.layers,
            0,
            "",
            NO_SLOTS,
            False,
            b.slot_bytes * tokens,
            text,
            alloc,
            b.layer_indices,
        )
    grows = b.kind in ("full_attention", "latent_attention")
    return Group(
        b.kind,
        b.label,
        b.layers,
        b.slot_bytes,
        b.slot_formula,
        _slots(b, r, r_text),
        grows,
        alloc_layers=alloc,
        layer_indices=b.layer_indices,
    )


def layout(
    spec: ModelSpec, k: CacheDType, v: CacheDType, tp: int, options: EngineOptions, version: str = DEFAULT_VERSION
) -> Layout:
    """vLLM's per-GPU bytes for S sequences of N tokens, as the admission worst case (max_memory_usage_bytes)."""
    result, shared, notes, warnings = _plan(spec, k, v, tp, options, version)
    _, r, r_text = vllm_batches.in_flight(options, version)
    if version_tuple(version)[:2] < V1_SINCE:
        kinds_v0 = {b.kind for b in result.buckets} | ({"shared"} if shared else set())
        if kinds_v0 != {"full_attention"}:
            raise EngineRefusalError(
                f"vllm@{version} runs the V0 engine, which sized {', '.join(sorted(kinds_v0 - {'full_attention'}))} "
                "layers by rules kvbudget does not implement (it implements V1, vLLM 0.8+); read that server's own "
                "figures with `kvbudget calibrate LOG`"
            )
        warnings.append(
            f"vllm@{version} runs the V0 engine; for a model with only full attention V0's block arithmetic "
            "equals V1's, which kvbudget applies"
        )
    groups = [_group(b, r, r_text) for b in result.buckets]
    groups.extend(shared)
    groups.sort(key=lambda g: g.layer_indices[:1])
    kinds = {b.kind for b in result.buckets}
    notes.append(
        "per-sequence bytes are vLLM's admission worst case (KVCacheSpec.max_memory_usage_bytes, what "
        "'Maximum concurrency' divides by) with N as max_model_len; S sequences cost S times that"
    )
    if kinds & {"sliding_window", "chunked_local"}:
        where = "as set" if options.max_num_batched_tokens else "the API server default on >=70 GiB non-A100 GPUs"
        notes.append(
            f"max_num_batched_tokens {result.max_num_batched_tokens:,} ({where}); window and chunk layers "
            f"reserve {r_text} tokens beyond the window or chunk"
        )
    if "chunked_local" in kinds:
        notes.append(
            "chunked local layers keep their chunk: the hybrid manager is on (the default from vLLM 0.14 and "
            "before 0.10.1; 0.10.1-0.13 with VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1, --chunked-hybrid)"
        )
    if "cross_attention" in kinds:
        notes.append("cross attention: image_tokens plays max_num_encoder_input_tokens")
    return Layout(
        NAME, version, k, v, tp, tuple(groups), result.block_size, tuple(notes), tuple(dict.fromkeys(warnings))
    )
