"""vLLM (V1 engine): KV cache in blocks of ``block_size`` tokens per layer, sized for the admission worst case.

Per sequence of N tokens (N in the role of ``max_model_len``) each layer holds what vLLM's
``KVCacheSpec.max_memory_usage_bytes`` reserves, the figure "Maximum concurrency" divides by:

* full attention and MLA: ``cdiv(N, B)`` blocks; MLA caches the latent only, replicated on every rank;
* sliding window W: ``cdiv(min(W - 1 + R, N), B) + 1`` blocks, R = max_num_batched_tokens (<= 0.25) or
  max_in_flight_tokens = concurrent batches x max_num_batched_tokens (>= 0.26; 2, or pp + 1: vllm_batches);
* chunked local attention: ``cdiv(min(chunk + R, N), B)`` blocks; cross attention ``cdiv(image_tokens, B)``;
* Mamba / gated-delta-net state, padded to the attention page: one page per sequence with prefix caching
  off (mamba_cache_mode "none"); with prefix caching on, vLLM's default for hybrids (mode "align"),
  2 pages plus a prefill checkpoint page for Mamba2 (>= 0.32) and Gated DeltaNet on FlashInfer (>= 0.33).

The MLA block size follows the attention backend vLLM picks for the GPU and cache dtype (0.26+):
FLASH_ATTN_MLA (multiples of 16) on Hopper with a 16-bit cache, FlashMLA (64) on Hopper with fp8,
FlashInfer-MLA (32) on Blackwell, Triton MLA (16) on Ampere, Ada and consumer Blackwell.

Hybrid models are cut into KV-cache groups of equal size (padding layers included); see ``vllm_pool``.
S sequences cost S times one sequence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar

from kvbudget.engines import vllm_batches, vllm_memory
from kvbudget.engines.base import NO_SLOTS, EngineOptions, Group, Layout, Slots, version_tuple
from kvbudget.engines.capability import compute_capability
from kvbudget.engines.common import (
    attention_slot,
    fp8_indexer_record,
    group_primitives,
    kernel_minus_one_state,
    kv_heads_per_rank,
    latent_slot,
    shared_kv_group,
)
from kvbudget.engines.contract import EngineRules, yarn_override
from kvbudget.engines.nccl_memory import nvls_bytes
from kvbudget.engines.overhead import Overhead, Site, activation_overhead, plus
from kvbudget.engines.records import (
    Deployment,
    LoggedMemory,
    Measured,
    MemoryShape,
    ServeSettings,
    Share,
    StartUp,
    log_line,
    logged_sum,
)
from kvbudget.engines.vllm_pool import (
    ATTENTION,
    KERNEL_BLOCK_ALIGNMENT,
    Bucket,
    MambaCacheMode,
    VllmPool,
    align_mamba,
    check_admission,
    disable_hybrid,
    estimate_max_model_len,
    group_buckets,
    kv_cache_size_tokens,
    max_concurrency,
    num_blocks,
    report_lines,
)
from kvbudget.engines.vllm_profile import profiled_overhead, sampler_path, v0_profiled_overhead
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
from kvbudget.precision import CacheDType, parse_cache_dtype

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvbudget.engines.metrics import EngineMetrics
    from kvbudget.engines.records import PoolShape
    from kvbudget.measure.logs.record import EngineLog

__all__ = [
    "DEFAULT_VERSION",
    "NAME",
    "VllmPool",
    "accepted_dtypes",
    "check_admission",
    "estimate_max_model_len",
    "kv_cache_size_tokens",
    "layout",
    "max_concurrency",
    "num_blocks",
    "pool",
    "report_lines",
]

NAME = "vllm"
DEFAULT_VERSION = "0.33.0"  # checked against vLLM 0.33.0's own code in the test suite (tests/oracle)

DEFAULT_BLOCK_SIZE = 16  # vLLM CacheConfig.DEFAULT_BLOCK_SIZE (vllm/config/cache.py)
FLASHMLA_BLOCK_SIZE = 64  # vLLM FlashMLABackend.get_supported_kernel_block_sizes: [64] (v1/attention/backends/mla)
FLASHINFER_MLA_BLOCK_SIZE = 32  # vLLM FlashInferMLABackend: [32, 64], the smallest preferred (backends/mla)
DEFAULT_GPU_CAPABILITY = 90  # the GPU assumed when none is named: Hopper (H100/H200), compute capability 9.0
# vLLM 0.26+ CudaPlatform._get_backend_priorities (platforms/cuda.py): MLA backend by GPU and cache dtype;
# before, kvbudget keeps FlashMLA's 64 (the rule of the older sources read)
MLA_BACKEND_SINCE = (0, 26)
# vLLM 0.26+ ModelConfig.is_prefix_caching_supported: generative decoder and hybrid models on, attention-free
# and encoder-decoder off (config/model.py); MambaModelConfig then sets mamba_cache_mode "align" (models/config.py)
PREFIX_CACHING_DEFAULT_SINCE = (0, 26)
MAMBA2_CHECKPOINT_SINCE = (0, 32)  # vLLM 0.32 MambaMixer2.get_kv_cache_spec: num_prefill_checkpoint_blocks=1
GDN_CHECKPOINT_SINCE = (0, 33)  # vLLM 0.33 QwenGatedDeltaNetAttention: FlashInfer prefill exports checkpoints
GDN_CHECKPOINT_ALIGNMENT = 64  # vLLM 0.33 FLASHINFER_GDN_CHECKPOINT_ALIGNMENT (v1/attention/backends/gdn_attn.py)
V1_SINCE = (0, 8)  # vLLM 0.8.0 made the V1 engine the default (VLLM_USE_V1); V0 sized hybrids differently
# nvfp4 appears in the newest CacheDType list (vllm/config/cache.py @ 002f10e0, ~0.27) and not in the
# v0.11-era list; 0.27 is the threshold chosen here (the exact first release was not pinned down).
NVFP4_SINCE = (0, 27)
# vLLM --kv-cache-dtype values we can size ('auto' resolves to the model dtype before we see it).
CACHE_DTYPES = ("bf16", "fp16", "fp32", "fp8", "fp8_e4m3", "fp8_e5m2", "int8_per_token_head", "fp8_per_token_head")


def accepted_dtypes(version: str = DEFAULT_VERSION) -> tuple[str, ...]:
    """Cache dtypes this vLLM version accepts (one --kv-cache-dtype for K and V)."""
    # vLLM CacheDType literal (vllm/config/cache.py): nvfp4 only in the newest releases
    extra = ("nvfp4",) if version_tuple(version)[:2] >= NVFP4_SINCE else ()
    return CACHE_DTYPES + extra


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
        heads, warning = kv_heads_per_rank(state.kv_heads, tp, NAME)
        if warning:
            warnings.append(warning)
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
            heads, warning = kv_heads_per_rank(state.num_heads, tp, NAME)
            if warning:
                warnings.append(warning)
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


def mla_backend(capability: int, k: CacheDType, version: str) -> tuple[str, int]:
    """The MLA attention backend vLLM picks on a GPU of this compute capability (x10), and its block size."""
    if version_tuple(version)[:2] < MLA_BACKEND_SINCE:
        # older vLLM CudaPlatform.check_and_update_config: FlashMLA forces block size 64 (platforms/cuda.py)
        return "FLASHMLA", FLASHMLA_BLOCK_SIZE
    major = capability // 10
    sixteen_bit = k.name in ("bf16", "fp16")
    # vLLM 0.33 _get_backend_priorities + each backend's supports_compute_capability / supported_kv_cache_dtypes
    if major == 9:
        # Hopper: FLASH_ATTN_MLA first (16-bit caches only, MultipleOf(16)), then FlashMLA ([64], fp8 too)
        return ("FLASH_ATTN_MLA", DEFAULT_BLOCK_SIZE) if sixteen_bit else ("FLASHMLA", FLASHMLA_BLOCK_SIZE)
    if major == 10:
        # Blackwell datacenter: FLASHINFER_MLA first ([32, 64]; the default 16 unsupported, so 32)
        return "FLASHINFER_MLA", FLASHINFER_MLA_BLOCK_SIZE
    # Ampere, Ada (8.x) and consumer Blackwell (12.x): TRITON_MLA, MultipleOf(16)
    return "TRITON_MLA", DEFAULT_BLOCK_SIZE


def _base_block(buckets: list[Bucket], options: EngineOptions, k: CacheDType, version: str) -> tuple[int, str, str]:
    """(block size, why, MLA backend or "")."""
    latent = any(b.kind == "latent_attention" for b in buckets)
    backend = mla_backend(options.gpu_capability or DEFAULT_GPU_CAPABILITY, k, version) if latent else None
    if options.block_size:
        return (
            options.block_size,
            f"block size {options.block_size} tokens (--block-size)",
            backend[0] if backend else "",
        )
    if backend is not None:
        name, block = backend
        sm = options.gpu_capability or DEFAULT_GPU_CAPABILITY
        return block, f"block size {block} tokens (MLA backend {name} on compute capability {sm / 10:.1f})", name
    return DEFAULT_BLOCK_SIZE, f"block size {DEFAULT_BLOCK_SIZE} tokens (CacheConfig.DEFAULT_BLOCK_SIZE)", ""


def default_prefix_caching(spec: ModelSpec, version: str) -> bool:
    """vLLM's --enable-prefix-caching default for this model."""
    kinds = {state.kind for _, state in spec.primitives()}
    if version_tuple(version)[:2] < PREFIX_CACHING_DEFAULT_SINCE:
        # older releases are sized here as before: hybrids without prefix caching (mode "none")
        return "recurrent" not in kinds
    # vLLM ModelConfig.is_prefix_caching_supported: attention-free and encoder-decoder models off (config/model.py)
    attention = kinds & {"full_attention", "latent_attention", "sliding_window", "chunked_local", "shared_kv"}
    return bool(attention) and "cross_attention" not in kinds


# vLLM 0.33 FlashAttention on Blackwell (10.x, 11.x) runs head-256 attention on FA4's hd256 kernel, whose pages are
# 128 tokens: get_supported_kernel_block_sizes -> [128], get_preferred_block_size -> max(default, 128)
# (v1/attention/backends/flash_attn.py, fa_utils.py FA4_HD256_PAGE_SIZE, uses_fa4_hd256_kernel)
FA4_HD256_BLOCK_SIZE = 128


def fa4_hd256(spec: ModelSpec, capability: int, k: CacheDType | None = None, block_size: int | None = None) -> bool:
    """Whether vLLM's FlashAttention backend runs this model's attention on FA4's head-256 kernel (128-token
    blocks): a Blackwell GPU and attention heads of 256 for K and V, unless fa_utils.py
    _fa4_hd256_fallback_reason falls back (logit soft capping, a quantized cache, a --block-size that is
    not a multiple of 128; sinks and R-SWA are not on head-256 models of the catalog)."""
    dims = {
        (s.k_dim, s.v_dim) for _, s in spec.primitives() if isinstance(s, FullAttention | SlidingWindow | ChunkedLocal)
    }
    if capability // 10 not in (10, 11) or dims != {(256, 256)}:
        return False
    # transformers' Gemma2Config defaults attn_logit_softcapping to 50.0 when a config omits it
    softcap = spec.config.get("attn_logit_softcapping", 50.0 if spec.model_type == "gemma2" else None)
    if softcap or (k is not None and k.name.startswith("fp8")):
        return False
    return not block_size or block_size % FA4_HD256_BLOCK_SIZE == 0


def _gdn_flashinfer(spec: ModelSpec, capability: int) -> bool:
    """vLLM 0.33 _resolve_gdn_prefill_backend "auto": FlashInfer on Hopper, or Blackwell (10.x, 12.x) with
    head_k_dim 128 and CUDA 13 (the wheels' runtime) (model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py)."""
    major = capability // 10
    heads = {s.head_k_dim for _, s in spec.primitives() if isinstance(s, Recurrent) and s.variant == "gated_delta_net"}
    return major == 9 or (major in (10, 12) and heads == {128})


def _state_pages(spec: ModelSpec, mode: MambaCacheMode, options: EngineOptions, version: str) -> tuple[int, int, str]:
    """(pages one request holds per Mamba layer, prefill checkpoint alignment, why)."""
    if mode == "none":
        return 1, 1, "1 page per sequence (mamba_cache_mode none, prefix caching off)"
    variants = {s.variant for _, s in spec.primitives() if isinstance(s, Recurrent)}
    capability = options.gpu_capability or DEFAULT_GPU_CAPABILITY
    at = version_tuple(version)[:2]
    checkpoint, alignment, why = 0, 1, ""
    if variants == {"mamba2"} and at >= MAMBA2_CHECKPOINT_SINCE:
        # vLLM >= 0.32 MambaMixer2.get_kv_cache_spec: num_prefill_checkpoint_blocks=1, alignment 1
        checkpoint, why = 1, " + 1 prefill checkpoint page (Mamba2, vLLM >= 0.32)"
    elif variants == {"gated_delta_net"} and at >= GDN_CHECKPOINT_SINCE and _gdn_flashinfer(spec, capability):
        # vLLM >= 0.33 QwenGatedDeltaNetAttention: FlashInfer prefill exports 64-aligned checkpoints
        checkpoint, alignment = 1, GDN_CHECKPOINT_ALIGNMENT
        why = (
            f" + 1 prefill checkpoint page (Gated DeltaNet on FlashInfer, blocks aligned to {alignment}, vLLM >= 0.33)"
        )
    # vLLM MambaSpec.max_memory_usage_bytes, mode "align": page x (2 + speculative + checkpoint) (kv_cache_interface.py)
    pages = 2 + checkpoint
    return pages, alignment, f"{pages} pages per sequence (mamba_cache_mode align with prefix caching: 2{why})"


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
    pages, alignment, pages_note = _state_pages(spec, mode, options, version)
    base, block_note, backend = _base_block(buckets, options, k, version)
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
            "vLLM releases where VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE defaults to 0 turn the "
            "hybrid manager off for chunked attention: model that with disable_hybrid_kv_cache_manager"
        )
    if "cross_attention" in kinds:
        notes.append("cross attention: image_tokens plays max_num_encoder_input_tokens")
    return Layout(
        NAME, version, k, v, tp, tuple(groups), result.block_size, tuple(notes), tuple(dict.fromkeys(warnings))
    )


# Cache dtype names of vLLM's --kv-cache-dtype, by kvbudget's name; anything else is "auto".
_SERVE_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2", "nvfp4", "int8_per_token_head", "fp8_per_token_head")


class Rules(EngineRules):
    """vLLM V1: a share of the total memory, blocks sized for the admission worst case, prefix caching by blocks."""

    name = NAME
    title = "vLLM"
    default_version = DEFAULT_VERSION
    order = 10
    below: ClassVar[Mapping[str, str]] = {"0.26": "0.25.0", "0.21": "0.20.0"}
    server = True
    divides_heads = True
    memory_fraction = "gpu_memory_utilization"
    cheaper_kv_dtypes = ("fp8",)
    logs_version = True
    quantizes_at_load = ("fp8",)  # --quantization fp8 on a 16-bit checkpoint
    # vLLM V1 core/sched: a finished request frees its blocks into the prefix cache (evictable, LRU); the session's
    # next step is a new request that hits them if nothing evicted them; preemption recomputes
    sim_pause = "evictable"
    sim_basis = (
        "vLLM frees a finished step's blocks into its prefix cache (evictable, LRU) and the next step reuses them "
        "if still cached; preemption recomputes"
    )
    concurrency_flag = "--max-num-seqs"

    def alert_metrics(self) -> EngineMetrics | None:
        from kvbudget.engines.metrics import VLLM

        return VLLM

    def layout(self, spec: ModelSpec, k: CacheDType, v: CacheDType, tp: int, options: EngineOptions) -> Layout:
        return layout(spec, k, v, tp, options, self.version)

    def usable_share(self, m: MemoryShape) -> Share:
        return vllm_memory.usable_share(m.total_bytes, m.utilization, self.version)

    def served_dtype(self, spec: ModelSpec, capability: int | None) -> tuple[str, str]:
        # vLLM 0.33 config/model.py _resolve_auto_dtype: a float32 checkpoint runs in the platform's first
        # supported dtype (bf16 from compute capability 8.0, else fp16); bf16 falls back to fp16 below 8.0
        name = parse_cache_dtype(spec.dtype, what="model dtype").name
        old_gpu = capability is not None and capability < 80
        if name == "fp32":
            dtype = "fp16" if old_gpu else "bf16"
            return dtype, f"vLLM runs this float32 checkpoint in {dtype} (dtype auto: the GPU's preferred dtype)"
        if name == "bf16" and old_gpu:
            return "fp16", "vLLM falls back from bf16 to fp16 on a GPU below compute capability 8.0"
        return spec.dtype, ""

    def batched_tokens(
        self, total_bytes: int, gpu_label: str, options: EngineOptions, context: int = 0
    ) -> tuple[int, str]:
        capability = compute_capability(gpu_label)
        return vllm_memory.batched_tokens(total_bytes, gpu_label, self.version, context, capability)

    def derived_options(self, options: EngineOptions, batched: int, capability: int | None) -> EngineOptions:
        # the batch that sliding windows reserve, and the GPU generation that picks the attention backend
        return replace(
            options,
            max_num_batched_tokens=options.max_num_batched_tokens or batched,
            gpu_capability=options.gpu_capability or capability,
        )

    def overhead(self, spec: ModelSpec, site: Site) -> Overhead:
        graphs = vllm_memory.subtracts_graphs(self.version)
        # NCCL's NVLS buffers at TP > 2 on NVSwitch boards are non-torch memory vLLM subtracts (nccl_memory.py)
        nvls, nvls_words = nvls_bytes(site.tp, site.interconnect, self.version)
        if vllm_memory.runs_v0(self.version, compute_capability(site.gpu_label)):
            v0 = v0_profiled_overhead(spec, tp=site.tp, batched=site.batched, batched_basis=site.batched_basis)
            return plus(v0, nvls, nvls_words)
        if not site.gpu_memory:
            return activation_overhead(
                spec, tp=site.tp, batched=site.batched, batched_basis=site.batched_basis, graphs=graphs
            )
        seqs, seqs_basis = vllm_memory.max_num_seqs(site.gpu_memory, site.gpu_label)
        profiled = profiled_overhead(
            spec,
            tp=site.tp,
            batched=site.batched,
            batched_basis=site.batched_basis,
            seqs=seqs,
            seqs_basis=seqs_basis,
            graphs=graphs,
            sampler=sampler_path(self.version),
        )
        if vllm_memory.whole_device_non_torch(self.version):
            profiled = replace(
                profiled,
                basis=f"{profiled.basis}; vLLM {self.version} counts as non-torch memory all the GPU holds outside its "
                "torch allocations (its CUDA context, other processes): on a shared GPU the pool is smaller by what "
                "else is on it (vllm_memory.WHOLE_DEVICE_NON_TORCH)",
            )
        return plus(profiled, nvls, nvls_words)

    def shared_prefix(self, prefix: int, block: int | None, unified: bool = False) -> tuple[int, str]:
        # vLLM automatic prefix caching hashes whole blocks only (vllm/v1/core/kv_cache_utils.py hash_block_tokens)
        b = block or DEFAULT_BLOCK_SIZE
        return prefix // b * b, f"vLLM prefix caching shares whole {b}-token blocks"

    def start_up(self, d: Deployment) -> StartUp:
        vpool = pool(d.spec, d.k, d.v, d.tp, d.options, self.version)
        try:
            check_admission(vpool, d.pool_bytes, d.context)
        except EngineRefusalError as refusal:
            # vLLM stops before the capacity line: the refusal (and its estimated length) is what it prints
            return StartUp((str(refusal),), 0, f"vLLM {self.version} refuses to start (admission check)", True)
        backend = (
            f"; MLA backend {vpool.attention_backend} assumed for compute capability "
            f"{(d.options.gpu_capability or DEFAULT_GPU_CAPABILITY) / 10:.1f}"
            if vpool.attention_backend
            else ""
        )
        return StartUp(
            report_lines(vpool, d.pool_bytes, d.context),
            kv_cache_size_tokens(vpool, d.pool_bytes, d.context),
            f'vLLM {self.version} "GPU KV cache size" ({num_blocks(vpool, d.pool_bytes):,} blocks of '
            f"{vpool.block_size or d.context:,} tokens{backend}; "
            f"prefix caching {'on' if vpool.prefix_caching else 'off'})",
        )

    def printed_capacity(
        self, shape: PoolShape, pool_bytes: int, token_budget: Callable[[], int], generation: str | None
    ) -> dict[str, int]:
        """vLLM get_num_blocks and _report_kv_cache_config (kv_cache_utils.py), before any admission check; V0
        (worker.py) states tokens only in its refusal: num_gpu_blocks x block_size."""
        vpool = pool(shape.spec, shape.k, shape.v, shape.tp, shape.options, self.version)
        blocks = num_blocks(vpool, pool_bytes)
        if generation == "V0":
            return {"kv_blocks": blocks, "kv_tokens": blocks * vpool.min_block_size}
        return {"kv_blocks": blocks, "kv_tokens": kv_cache_size_tokens(vpool, max(pool_bytes, 0), shape.context)}

    def logged_memory(self, log: EngineLog) -> LoggedMemory:
        """total_gpu_memory; overhead = activation peak + non-torch memory, + CUDA graphs where V1 >= 0.21
        subtracts them (gpu_worker.py)."""
        total = log.measured.get("total_gpu_memory_bytes")
        gpu = (
            Measured(int(total.value), f"measured: CUDA total as vLLM saw it, {log_line(log, total)}")
            if total
            else None
        )
        names: tuple[str, ...] = ("activation_peak_bytes", "non_torch_bytes")
        if log.generation == "V1" and vllm_memory.subtracts_graphs(self.version):
            names += ("cuda_graph_bytes",)
        # the pool: "Available KV cache memory" (V1 gpu_worker.py, per worker; the smallest governs) or V0's
        # kv_cache_size / available_kv_cache_memory / "reserved for KV Cache is" (worker.py)
        pool = log.measured.get("available_kv_bytes")
        if all(n in log.measured for n in names[:2]):
            return LoggedMemory(gpu, logged_sum(log, names), kv_pool=pool)
        return LoggedMemory(gpu, None, kv_pool=pool)

    def serve_command(self, s: ServeSettings) -> tuple[str, ...]:
        args = ["vllm", "serve", s.model, "--max-model-len", str(s.context)]
        if s.overhead_measured:
            # measured overhead: hand vLLM the KV size directly instead of a fraction (skips profiling)
            args += ["--kv-cache-memory-bytes", str(s.kv_pool_bytes)]
        elif s.fraction is not None:
            args += ["--gpu-memory-utilization", str(s.fraction)]
        args += ["--kv-cache-dtype", s.k.name if s.k.name in _SERVE_DTYPES else "auto"]
        # no --max-num-seqs: vLLM admits by free blocks, so sessions shorter than the cap run more than the
        # worst-case count; the plan's explanation says how to cap it (render/plan.py)
        if s.options.block_size:
            args += ["--block-size", str(s.options.block_size)]
        if s.options.max_num_batched_tokens:
            args += ["--max-num-batched-tokens", str(s.options.max_num_batched_tokens)]
        if s.options.prefix_caching is False:
            args.append("--no-enable-prefix-caching")
        elif s.prefix:
            args.append("--enable-prefix-caching")
        if s.tp > 1:
            args += ["--tensor-parallel-size", str(s.tp)]
        if s.pp > 1:
            args += ["--pipeline-parallel-size", str(s.pp)]
        if s.quantize == "fp8":  # vLLM quantizes a 16-bit checkpoint to fp8 at load (--quantization fp8)
            args += ["--quantization", "fp8"]
        if s.past_native:
            # vLLM refuses --max-model-len past the config's window unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1
            # (config/model.py); YaRN rope scaling over the trained window is what lets the model use it
            return ("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1", *args, "--hf-overrides", s.yarn_override)
        return tuple(args)

    def past_window(self, context: int, native: int) -> str:
        # vLLM 0.33 config/model.py: a max_model_len past the derived one is an error unless
        # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; rope scaling comes from the config, overridable by --hf-overrides
        return (
            f"vLLM {self.version} refuses --max-model-len {context} unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, and the "
            f"model needs rope scaling over its window: --hf-overrides '{yarn_override(context, native)}'"
        )
