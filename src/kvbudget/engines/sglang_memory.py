"""SGLang's memory rules: mem_fraction_static, derived from the GPU size when unset, and the chunked prefill.

``mem_fraction_static`` is a share of the memory free before the weights load; KV = mfs x free_before_load
- weights (kv_cache_configurator.py _profile_available_bytes). When unset, SGLang 0.5.23 derives it
(arg_groups/memory_hook.py handle_gpu_memory_settings, reserve_for_graph_mb): reserved MiB = 512
+ max(chunked_prefill, 2048) x 1.5 + tp x pp / 8 x 1024 + decode graph max_bs x 2 (+ max_bs x dp x 3, and
x 1.5 more past 300, with DP attention) + prefill graphs (8 MiB a captured size, 1.5 GiB with MLA; none
with pipeline parallelism), at least 10,240 on GPUs over 60 GiB; mfs = round((total - reserved) / total, 3).
The order matters (arg_groups/pipeline.py): the graph settings resolve first (pp > 1 turns the prefill
graphs off), then the memory rule, then DP attention divides the chunked prefill by the DP size.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.engines.records import Share

MiB = 2**20


def graph_defaults(total_mib: float, tp: int) -> tuple[int, int]:
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


def _prefill_graph_sizes(max_bs: int) -> int:
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


@dataclass(frozen=True)
class MemorySettings:
    """The server arguments SGLang 0.5.23's memory rule reads besides the GPU: None means SGLang's default."""

    tp: int = 1
    pp: int = 1
    mla: bool = False
    chunked_prefill: int | None = None  # --chunked-prefill-size (before DP attention divides it)
    max_running_requests: int | None = None  # --max-running-requests (the whole server, all DP ranks)
    dp_attention: int = 1  # --enable-dp-attention --dp N: the attention data-parallel size


def mem_fraction_static(total_bytes: int, settings: MemorySettings) -> tuple[float, str]:
    """SGLang 0.5.23's default mem_fraction_static for a GPU of ``total_bytes`` (checked against SGLang's own
    ServerArgs resolution in tests/oracle/test_sglang_oracle.py). VLM reductions are not modelled."""
    s = settings
    # whole MiB: nvidia-smi's memory.total (nounits), or torch's total // 1024 // 1024 without nvidia-smi
    # (utils/common.py get_nvgpu_memory_capacity, _cuda_mem_fallback); an RTX 5090's 32,122.9 MiB is 32,122
    total_mib = total_bytes // MiB
    default_chunked, graph_bs = graph_defaults(total_mib, s.tp)
    chunked = s.chunked_prefill or default_chunked
    # memory_hook.py: a --max-running-requests below the default decode graph batch lowers it
    if s.max_running_requests is not None:
        graph_bs = min(graph_bs, s.max_running_requests)
    # cuda_graph_hook.py apply_cuda_graph_compatibility: pipeline parallelism turns the prefill graphs off
    # (before the memory rule runs); else graphs up to chunked_prefill_size tokens, MLA a flat 1.5 GiB
    prefill = 0.0 if s.pp > 1 else 1.5 * 1024 if s.mla else _prefill_graph_sizes(chunked) * 8.0
    dp = 0.0
    if s.dp_attention > 1:  # reserve_for_graph_mb: DP attention pads its graphs
        dp = graph_bs * s.dp_attention * 3 + (graph_bs * s.dp_attention * 1.5 if graph_bs > 300 else 0)
    reserved = 512 + max(chunked, 2048) * 1.5 + s.tp * s.pp / 8 * 1024 + graph_bs * 2 + dp + prefill
    if total_mib > 60 * 1024:
        reserved = max(reserved, 10240)
    fraction = round((total_mib - reserved) / total_mib, 3)
    graphs = f"prefill graphs {prefill:,.0f} MiB" if prefill else "no prefill graphs (pipeline parallel)"
    basis = (
        f"mem_fraction_static {fraction} derived by SGLang: reserve {reserved:,.0f} MiB "
        f"(chunked prefill {chunked}, cuda-graph bs {graph_bs}, {graphs}"
        + (f", DP attention x{s.dp_attention} {dp:,.0f} MiB" if dp else "")
        + f") of {total_mib:,.0f} MiB"
    )
    return fraction, basis


def usable_share(total_bytes: int, utilization: float | None, settings: MemorySettings) -> Share:
    if utilization is not None:
        fraction, basis = utilization, f"mem_fraction_static {utilization} (given)"
    else:
        fraction, basis = mem_fraction_static(total_bytes, settings)
    # SGLang _profile_available_bytes: KV = mfs x free_before_load - weights (kv_cache_configurator.py);
    # the free memory before loading is taken as the whole card (the CUDA context is in the overhead).
    return Share(int(total_bytes * fraction), basis + " x memory free before loading", fraction)


def chunked_prefill(total_bytes: int, dp_attention: int = 1) -> tuple[int, str]:
    """The chunked prefill a DP-attention rank runs: SGLang's default for the GPU size, divided by the DP size
    (arg_groups/parallel_hook.py handle_data_parallelism)."""
    chunked, _ = graph_defaults(total_bytes // MiB, 1)
    if dp_attention > 1:
        return chunked // dp_attention, (
            f"SGLang chunked_prefill_size default for this GPU size, {chunked} / DP attention {dp_attention}"
        )
    return chunked, "SGLang chunked_prefill_size default for this GPU size"
