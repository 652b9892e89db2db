"""How much of a GPU each engine lets the KV cache have, before and after weights and overhead.

* vLLM: ``gpu_memory_utilization`` is a fraction of TOTAL device memory for the whole instance
  (weights, activations, KV); default 0.92 in the newest CacheConfig, 0.9 before (vllm/config/cache.py).
* SGLang: ``mem_fraction_static`` of the free memory before weights load; when unset it is derived
  from the GPU size (0.5.23 arg_groups/memory_hook.py): reserved MiB = 512 + max(chunked_prefill,
  2048) x 1.5 + tp x pp / 8 x 1024 + decode graph max_bs x 2 + prefill graphs, at least 10,240 on
  GPUs over 60 GiB; mfs = round((total - reserved) / total, 3).
* llama.cpp: no fraction; the KV size follows ``-c``/``-np``. Its auto-fit keeps a 1,024 MiB margin
  per device (llama_params_fit, PR #16653), which the plan keeps too.
* transformers and ideal: the whole card (the seeds' simple budget: memory - weights - overhead).

Runtime overhead (activations at max batched tokens, non-torch memory, CUDA graphs) cannot be known
exactly offline; it is a labelled heuristic with a low-high range unless the user passes a measured
``--overhead``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kvbudget.engines import EngineRef, version_tuple
from kvbudget.model.spec import ModelSpec

Provenance = Literal["exact", "measured", "heuristic", "given"]
MiB = 2**20
GiB = 2**30

VLLM_UTIL_NEW = 0.92  # vLLM newest CacheConfig / CLI help "default value of 0.92" (vllm/config/cache.py @002f10e0)
VLLM_UTIL_OLD = 0.9  # vLLM CacheConfig before (vllm/config/cache.py @c1d86421)
VLLM_UTIL_SINCE = (0, 26)  # first version kvbudget treats as 0.92; the exact release is not pinned (docs/plan.md)
LLAMACPP_FIT_MARGIN = 1024 * MiB  # llama.cpp llama_params_fit default per-device margin (PR #16653)


@dataclass(frozen=True)
class Share:
    """The part of one GPU an engine lets this instance use, and why."""

    usable_bytes: int
    basis: str
    fraction: float | None = None


def default_utilization(engine: EngineRef) -> float:
    return VLLM_UTIL_NEW if version_tuple(engine.version) >= VLLM_UTIL_SINCE else VLLM_UTIL_OLD


def _sglang_graph_defaults(total_mib: float, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, decode cuda-graph max batch) SGLang 0.5.23 derives from the GPU memory
    (arg_groups/memory_hook.py handle_gpu_memory_settings)."""
    if total_mib < 20 * 1024:
        return 2048, 8
    if total_mib < 35 * 1024:
        return 4096, 48 if tp < 4 else 160
    if total_mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if total_mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def _sglang_prefill_graph_sizes(max_bs: int) -> int:
    """How many prefill CUDA graphs SGLang captures up to ``max_bs`` tokens
    (arg_groups/cuda_graph_hook.py generate_prefill_cuda_graph_batch_sizes)."""
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
        *range(4608, max_bs + 1, 512),
    ]
    return sum(1 for size in sizes if size <= max_bs)


def sglang_mem_fraction_static(total_bytes: int, tp: int, pp: int, *, mla: bool = False) -> tuple[float, str]:
    """SGLang 0.5.23's default mem_fraction_static for a GPU of ``total_bytes`` (checked against SGLang's own
    ServerArgs resolution in tests/oracle/test_sglang_oracle.py).

    reserved MiB = 512 + max(chunked_prefill, 2048) x 1.5 + tp x pp / 8 x 1024 + decode graph max_bs x 2
    + prefill graphs (MLA: 1,536; else 8 per captured size), at least 10,240 on GPUs over 60 GiB;
    mfs = round((total - reserved) / total, 3) (arg_groups/memory_hook.py). VLM reductions are not modelled.
    """
    total_mib = total_bytes / MiB
    chunked, graph_bs = _sglang_graph_defaults(total_mib, tp)
    # memory_hook.py: prefill graphs up to chunked_prefill_size tokens, MLA capped at 8,192
    prefill = 1.5 * 1024 if mla else _sglang_prefill_graph_sizes(min(8192, chunked) if mla else chunked) * 8
    reserved = 512 + max(chunked, 2048) * 1.5 + tp * pp / 8 * 1024 + graph_bs * 2 + prefill
    if total_mib > 60 * 1024:
        reserved = max(reserved, 10240)
    fraction = round((total_mib - reserved) / total_mib, 3)
    basis = (
        f"mem_fraction_static {fraction} derived by SGLang: reserve {reserved:,.0f} MiB "
        f"(chunked prefill {chunked}, cuda-graph bs {graph_bs}, prefill graphs {prefill:,.0f} MiB) of "
        f"{total_mib:,.0f} MiB"
    )
    return fraction, basis


def engine_share(
    engine: EngineRef, total_bytes: int, *, utilization: float | None, tp: int, pp: int, mla: bool = False
) -> Share:
    """The bytes of one GPU the engine's own memory rule leaves for this instance."""
    if engine.name == "vllm":
        util = utilization if utilization is not None else default_utilization(engine)
        # vLLM Worker.determine_available_memory: requested = total x gpu_memory_utilization (gpu_worker.py)
        how = "given" if utilization is not None else f"default for vLLM {engine.version}"
        return Share(int(total_bytes * util), f"gpu_memory_utilization {util} ({how}) x total memory", util)
    if engine.name == "sglang":
        if utilization is not None:
            fraction, basis = utilization, f"mem_fraction_static {utilization} (given)"
        else:
            fraction, basis = sglang_mem_fraction_static(total_bytes, tp, pp, mla=mla)
        # SGLang _profile_available_bytes: KV = mfs x free_before_load - weights (kv_cache_configurator.py);
        # the free memory before loading is taken as the whole card (the CUDA context is in the overhead).
        return Share(int(total_bytes * fraction), basis + " x memory free before loading", fraction)
    if engine.name == "llamacpp":
        return Share(total_bytes - LLAMACPP_FIT_MARGIN, "total - 1,024 MiB fit margin (llama_params_fit)")
    return Share(total_bytes, "the whole card (no engine fraction)")


@dataclass(frozen=True)
class Overhead:
    """Runtime memory besides weights and KV, per GPU."""

    bytes: int
    low: int
    high: int
    provenance: Provenance
    basis: str


def _int(cfg: dict[str, object], key: str, default: int) -> int:
    value = cfg.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


VLLM_BATCH_160GIB_SINCE = (0, 28)  # vLLM 0.28 EngineArgs.get_batch_defaults: a >= 160 GiB tier (16,384)


def default_batched_tokens(engine: EngineRef, total_bytes: int, gpu_label: str, n_ubatch: int) -> tuple[int, str]:
    """Tokens of the engine's profiling / prefill batch when the user sets none, and why.

    vLLM API server (EngineArgs.get_batch_defaults): 16,384 on GPUs with >= 160 GiB (0.28+), 8,192 on
    GPUs with >= 70 GiB that are not A100 (nor GB10), else 2,048. SGLang: chunked_prefill_size by GPU
    memory (server_args.py). llama.cpp: -ub.
    """
    if engine.name == "vllm":
        label = gpu_label.lower()
        if total_bytes >= 160 * GiB and version_tuple(engine.version)[:2] >= VLLM_BATCH_160GIB_SINCE:
            # vLLM >= 0.28 get_batch_defaults: "GPUs like B200/B300 with >= 160GB" (engine/arg_utils.py)
            return 16384, "vLLM API-server default on >=160 GiB GPUs"
        big = total_bytes >= 70 * GiB and "a100" not in label and "gb10" not in label
        return (
            (8192, "vLLM API-server default on >=70 GiB non-A100 GPUs")
            if big
            else (2048, "vLLM API-server default below 70 GiB or on A100")
        )
    if engine.name == "sglang":
        chunked, _ = _sglang_graph_defaults(total_bytes / MiB, 1)
        return chunked, "SGLang chunked_prefill_size default for this GPU size"
    if engine.name == "llamacpp":
        return n_ubatch, "llama.cpp -ub (n_ubatch)"
    return 8192, "8,192 tokens (no engine default)"


# Measured ranges (tests/data/logs/vllm_profiles.csv and SOURCES.md, vLLM logs of issues #10517, #12126,
# #13061, #14452, #15815, #52872): non-torch memory 0.16-0.35 GiB on one GPU (up to 0.4 with NCCL);
# CUDA graphs 0.1-0.9 GiB where V1 >= 0.21 subtracts them; activation peak 1.0-1.35 x the hidden and MLP
# activations of the profiled batch (Llama-3.1-8B at 20,000 and 29,000 tokens: 1.23x and 1.24x).
NON_TORCH = (int(0.15 * GiB), int(0.4 * GiB))
GRAPHS = (int(0.1 * GiB), int(0.9 * GiB))
ACT_FACTOR = (1.0, 1.35)
VLLM_GRAPHS_SINCE = (0, 21)  # vLLM gpu_worker subtracts the CUDA graph estimate from 0.21 (envs.py default on)


# Compute capability (x10) by GPU name, for the vLLM attention backend a plan's GPU gets (engines/vllm.py):
# the NVIDIA data sheets' figures for the GPUs of kvbudget's catalog.
_CAPABILITY = (
    ("gb10", 121),
    ("spark", 121),
    ("h100", 90),
    ("h200", 90),
    ("h800", 90),
    ("h20", 90),
    ("gb300", 103),
    ("b300", 103),
    ("gb200", 100),
    ("b200", 100),
    ("rtx 5090", 120),
    ("rtx pro 6000", 120),
    ("a100", 80),
    ("a800", 80),
    ("a10", 86),
    ("rtx 3090", 86),
    ("l40", 89),
    ("l4", 89),
    ("rtx 4090", 89),
    ("rtx 6000 ada", 89),
    ("t4", 75),
)


def compute_capability(gpu_label: str) -> int | None:
    """The compute capability (x10) of a named NVIDIA GPU; None for other vendors or a bare --gpu-memory."""
    label = gpu_label.lower()
    if "nvidia" not in label:
        return None
    for fragment, capability in _CAPABILITY:
        if fragment in label:
            return capability
    return None


def heuristic_overhead(
    spec: ModelSpec, engine: EngineRef, *, tp: int, max_batched_tokens: int, batched_basis: str = ""
) -> Overhead:
    """A labelled low-high estimate of activations + non-torch memory + CUDA graphs, per GPU.

    Activations of the profiled batch: T x (4 x hidden + 2 x intermediate / tp) x 2 B, times 1.0-1.35
    (the measured range), plus the sampler's fp32 logits for 256 sequences x vocab; non-torch memory
    0.15-0.4 GiB; CUDA graphs 0.1-0.9 GiB where the engine subtracts them before sizing the cache
    (vLLM >= 0.21). llama.cpp keeps a compute buffer for one ubatch and no CUDA-graph reserve. The
    plan reserves the high end; docs/measure.md gives this model's error against real logs.
    """
    cfg = spec.config
    hidden = _int(cfg, "hidden_size", 4096)
    inter = _int(cfg, "intermediate_size", 4 * hidden)
    vocab = _int(cfg, "vocab_size", 128_000)
    act = max_batched_tokens * (4 * hidden + 2 * inter // tp) * 2
    if engine.name == "llamacpp":
        logits = max_batched_tokens * vocab * 4  # the output buffer for one ubatch of logits
        low, high = act + logits, int(ACT_FACTOR[1] * act) + logits + NON_TORCH[0]
        basis = (
            f"heuristic: compute buffer for one ubatch of {max_batched_tokens:,} tokens (hidden {hidden}, "
            f"intermediate {inter}) and its logits; measure it (calibrate, plan --from-log) or pass --overhead"
        )
        return Overhead(high, low, high, "heuristic", basis)
    logits = 256 * vocab * 4 // tp
    subtracts = engine.name == "sglang" or (
        engine.name == "vllm" and version_tuple(engine.version) >= VLLM_GRAPHS_SINCE
    )
    graphs = GRAPHS if subtracts else (0, 0)
    low = int(ACT_FACTOR[0] * act) + logits + NON_TORCH[0] + graphs[0]
    high = int(ACT_FACTOR[1] * act) + logits + NON_TORCH[1] + graphs[1]
    basis = (
        f"heuristic from measured vLLM logs: activations at {max_batched_tokens:,} batched tokens"
        + (f" ({batched_basis})" if batched_basis else "")
        + f" x 1.0-1.35 (hidden {hidden}, intermediate {inter}), sampler logits, non-torch 0.15-0.4 GiB"
        + (", CUDA graphs 0.1-0.9 GiB" if graphs[1] else "")
        + "; measure it (calibrate, plan --from-log) or pass --overhead"
    )
    return Overhead(high, low, high, "heuristic", basis)


def measured_overhead(value: int, basis: str | None = None) -> Overhead:
    return Overhead(value, value, value, "measured", basis or "given with --overhead (measured)")
