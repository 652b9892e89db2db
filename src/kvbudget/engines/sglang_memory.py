"""SGLang's memory rules: mem_fraction_static, derived from the GPU size when unset, and the chunked prefill.

``mem_fraction_static`` is a share of the memory free before the weights load; KV = mfs x free_before_load
- weights (kv_cache_configurator.py _profile_available_bytes). When unset, SGLang 0.5.23 derives it
(arg_groups/memory_hook.py): reserved MiB = 512 + max(chunked_prefill, 2048) x 1.5 + tp x pp / 8 x 1024
+ decode graph max_bs x 2 + prefill graphs, at least 10,240 on GPUs over 60 GiB;
mfs = round((total - reserved) / total, 3).
"""

from __future__ import annotations

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


def mem_fraction_static(total_bytes: int, tp: int, pp: int, *, mla: bool = False) -> tuple[float, str]:
    """SGLang 0.5.23's default mem_fraction_static for a GPU of ``total_bytes`` (checked against SGLang's own
    ServerArgs resolution in tests/oracle/test_sglang_oracle.py). VLM reductions are not modelled."""
    total_mib = total_bytes / MiB
    chunked, graph_bs = graph_defaults(total_mib, tp)
    # memory_hook.py: prefill graphs up to chunked_prefill_size tokens, MLA capped at 8,192
    prefill = 1.5 * 1024 if mla else _prefill_graph_sizes(chunked) * 8
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


def usable_share(total_bytes: int, utilization: float | None, tp: int, pp: int, mla: bool) -> Share:
    if utilization is not None:
        fraction, basis = utilization, f"mem_fraction_static {utilization} (given)"
    else:
        fraction, basis = mem_fraction_static(total_bytes, tp, pp, mla=mla)
    # SGLang _profile_available_bytes: KV = mfs x free_before_load - weights (kv_cache_configurator.py);
    # the free memory before loading is taken as the whole card (the CUDA context is in the overhead).
    return Share(int(total_bytes * fraction), basis + " x memory free before loading", fraction)


def chunked_prefill(total_bytes: int) -> tuple[int, str]:
    chunked, _ = graph_defaults(total_bytes / MiB, 1)
    return chunked, "SGLang chunked_prefill_size default for this GPU size"
