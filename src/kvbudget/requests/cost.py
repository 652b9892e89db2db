"""The cost questions: ``kvbudget cost`` (one model, one context), ``table`` (contexts x sequences) and
``models`` (the catalog at one context), and the model-and-engine fields every capacity question shares."""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.requests.base import Request, option, required

MLA_STORAGE = ("latent", "latent+v", "expanded")
UNITS = ("iec", "si")
ON_OFF = ("on", "off")
TRTLLM_ATTN_BACKENDS = ("trtllm", "flashinfer")  # llm_args.py attn_backend: TRTLLM (default), FLASHINFER


@dataclass(frozen=True, kw_only=True)
class EngineSettings(Request):
    """The engine settings that change the cache layout (each engine reads those it has), and K and V cache dtypes
    set apart (they override ``kv_dtype``)."""

    k_dtype: str | None = option(None, "kv_dtype")
    v_dtype: str | None = option(None, "kv_dtype")
    block_size: int | None = option(None, "count")
    max_num_batched_tokens: int | None = option(None, "tokens")
    no_prefix_caching: bool = option(False, "switch")
    image_tokens: int = option(6404, "count")  # Llama 3.2 Vision: one image, 4 tiles x 1601 patches
    mla_storage: str | None = option(None, "text", choices=MLA_STORAGE)
    swa_full: bool = option(False, "switch")
    chunked_hybrid: bool = option(False, "switch")  # vLLM VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1
    enforce_eager: bool = option(False, "switch")  # no CUDA graphs: vLLM --enforce-eager, SGLang --disable-cuda-graph
    # vLLM VLLM_USE_FLASHINFER_SAMPLER=1/0 with flashinfer-python installed; unset: the release's default sampler
    flashinfer_sampler: str | None = option(None, "text", choices=ON_OFF)
    attn_backend: str | None = option(None, "text", choices=TRTLLM_ATTN_BACKENDS)  # TensorRT-LLM attn_backend
    ubatch: int | None = option(None, "count")
    no_flash_attn: bool = option(False, "switch")
    kv_unified: bool = option(False, "switch")
    max_batch_size: int | None = option(None, "count")
    max_running_requests: int | None = option(None, "count")
    max_num_seqs: int | None = option(None, "running")
    dp_attention: int | None = option(None, "gpus")
    n_gpu_layers: int | None = option(None, "layers")
    tensor_split: tuple[float, ...] | None = option(None, "split")


@dataclass(frozen=True, kw_only=True)
class EngineChoice(EngineSettings):
    """The engine, its cache dtype and tensor parallelism.

    ``engine``: ``ideal``, ``vllm``, ``sglang``, ``trtllm``, ``llamacpp``, ``ollama`` or ``transformers``, optionally
    versioned (``vllm@0.25``, ``transformers<5``); ``kv_dtype``: ``auto`` (the model's dtype), ``fp8``, ``q8_0``,
    or ``K/V`` apart (``q8_0/q4_0``). Sizes in tokens take ``32k``; bytes are per GPU.
    """

    engine: str = option("ideal", "engine")
    kv_dtype: str = option("auto", "kv_dtype")
    tp: int = option(1, "gpus")


@dataclass(frozen=True, kw_only=True)
class CostRequest(EngineChoice):
    """Bytes of the KV cache of ``model`` per token, per sequence of ``tokens`` and for ``sequences`` of them."""

    command = "cost"
    model: str = required("model", name="model")
    tokens: int = option(32768, "tokens")
    sequences: int = option(1, "sessions")


@dataclass(frozen=True, kw_only=True)
class TableRequest(EngineChoice):
    """KV bytes of ``model`` for every context in ``tokens`` and every count in ``sequences``."""

    command = "table"
    model: str = required("model", name="model")
    tokens: tuple[int, ...] = option((8192, 32768, 131072), "tokens", many=True)
    sequences: tuple[int, ...] = option((1, 8), "sessions", many=True)


@dataclass(frozen=True, kw_only=True)
class ModelsRequest(Request):
    """Every built-in catalog model's per-token cost on ``engine`` with ``kv_dtype``, one sequence at ``tokens``."""

    command = "models"
    engine: str = option("ideal", "engine")
    kv_dtype: str = option("auto", "kv_dtype")
    tokens: int = option(32768, "tokens")


@dataclass(frozen=True, kw_only=True)
class GpusRequest(Request):
    """The GPU catalog: memory as the driver reports it, bandwidth, and the links (``kvbudget gpus``)."""

    command = "gpus"
