"""What vLLM resolves from its version, the GPU and the model before sizing anything: its defaults, the cache
dtypes it accepts, the MLA attention backend and block size, the prefix-caching default, and the pages a Mamba
state takes (see vllm.py for the rules)."""

from __future__ import annotations

from kvbudget.engines.base import EngineOptions, version_tuple
from kvbudget.engines.vllm_pool import Bucket, MambaCacheMode
from kvbudget.model.spec import ChunkedLocal, FullAttention, ModelSpec, Recurrent, SlidingWindow
from kvbudget.precision import CacheDType

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


def base_block(buckets: list[Bucket], options: EngineOptions, k: CacheDType, version: str) -> tuple[int, str, str]:
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


def state_pages(spec: ModelSpec, mode: MambaCacheMode, options: EngineOptions, version: str) -> tuple[int, int, str]:
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
