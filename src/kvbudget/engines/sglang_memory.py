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

from kvbudget.engines.base import version_tuple
from kvbudget.engines.records import Share
from kvbudget.engines.sglang_config import (
    MULTIMODAL_ARCHITECTURES,
    MULTIMODAL_OFF_BY_DEFAULT_SINCE,
    MULTIMODAL_PREFILL_GRAPH_ARCHITECTURES,
)

MiB = 2**20
GiB = 2**30
# The generations of the default, read in the released wheels' srt/server_args.py (ServerArgs.__post_init__ or
# _handle_gpu_memory_settings; from 0.5.19 arg_groups/memory_hook.py): 0.4.3.post2-0.4.5.post1 by TP only;
# 0.4.6.post5-0.4.7 by TP x PP up to 80 GiB cards, 0.88 above, raised past 96 GiB; 0.4.8-0.5.2 a reserve per GPU
# class; 0.5.3-0.5.9 the reserve of the chunked prefill and decode graphs; from 0.5.10 the prefill graphs too
# (every release 0.5.3-0.5.23 read)
BY_TP_UNTIL = (0, 4, 6)
LARGE_CARDS_UNTIL = (0, 4, 8)
BY_CLASS_UNTIL = (0, 5, 3)
PREFILL_GRAPHS_SINCE = (0, 5, 10)
# DP attention turns the prefill graphs off before the memory rule runs in 0.5.10-0.5.16: torch.compile piecewise
# graphs in 0.5.10-0.5.14 (0.5.10 _handle_piecewise_cuda_graph, 0.5.14 _disable_tc_piecewise_cudagraph_if_incompatible),
# "breakable" ones on CUDA from 0.5.15 (model_executor/cuda_graph_config.py default_prefill_backend), whose rule list
# (_disable_breakable_cudagraph_if_incompatible) names DP attention in 0.5.15-0.5.16 and no longer from 0.5.17
DP_KEEPS_PREFILL_GRAPHS_SINCE = (0, 5, 17)
# The one GPU class whose defaults moved across 0.5.x, 20-35 GiB (A10, RTX 4090/5090): (chunked prefill, decode
# graph max batch below TP 4, at TP >= 4) until each version: 2,048 and 16 (80) in 0.5.3-0.5.4, 2,048 and 24 (80)
# in 0.5.5-0.5.19, 4,096 and 48 (160) from 0.5.20 (server_args.py / memory_hook.py of each release)
MID_CARD_DEFAULTS = (((0, 5, 5), (2048, 16, 80)), ((0, 5, 20), (2048, 24, 80)))
# Memory in use before the weights load ("Load weight begin. avail mem" against CUDA's total): the CUDA context and
# the communicators' buffers, measured 0.39-0.63 GiB in the SGLang logs of tests/data/memory/real_logs.csv (H100
# at TP 1: 0.41 on 0.4.1, 0.63 on 0.4.4; four L4 at TP 4: 0.39); SGLang's share is of the memory left after it
PRE_LOAD = (int(0.39 * GiB), int(0.63 * GiB))
# At TP > 1 over NVLink, SGLang's distributed init (NCCL communicators and its custom all-reduce's IPC buffers) comes
# before loading: "Init torch distributed ends. mem usage=1.77-2.01 GB" on eight H200s at TP 8 (PR #11716, SGLang
# of October 2025; GB is 2^30 B). Four L4s at TP 4 over PCIe kept none (0.39 GiB before loading in all). On a link
# kvbudget does not know, the term may or may not be there: the error range reaches it, the figure does not.
TP_NVLINK = (int(1.77 * GiB), int(2.01 * GiB))


# A multimodal model keeps back more of the GPU for its encoder (read in each release's wheel): ModelRunner multiplies
# whatever mem_fraction_static it is given by 0.95 (0.2.15-0.4.4.post3 model_runner.py), by 0.90 (0.4.5-0.4.8
# model_runner.py); 0.4.9 server_args.py multiplies the derived default only, by 0.90; from 0.4.10
# adjust_mem_fraction_for_vlm (server_args.py; 0.5.23 arg_groups/memory_hook.py) scales the derived default only by
# 0.95 x clamp(1 - 0.1 x (L x H^2 / (24 x 1024^2) - 1), 0.8, 1.05), L and H the vision tower's num_hidden_layers and
# hidden_size (getattr defaults 24 and 1024), and leaves a model without a vision_config alone
VLM_X095_UNTIL = (0, 4, 5)
VLM_ANY_FRACTION_UNTIL = (0, 4, 9)
VLM_BY_TOWER_SINCE = (0, 4, 10)


def multimodal(architectures: tuple[str, ...], vision: tuple[int | None, int | None] | None, version: str) -> bool:
    """Whether SGLang ``version`` serves the model as multimodal by default (ModelConfig.is_multimodal): its first
    architecture in multimodal_model_archs and not in that release's mm_disabled_models (model_config.py)."""
    if not architectures or not any(name in MULTIMODAL_ARCHITECTURES for name in architectures):
        return False
    off_since = MULTIMODAL_OFF_BY_DEFAULT_SINCE.get(architectures[0])
    if off_since is not None and version_tuple(version) >= off_since:
        return False
    # 0.5.23: a MiMo-V2 checkpoint without its vision (and audio) config is a text model
    return not (architectures[0] == "MiMoV2ForCausalLM" and vision is None)


def eager_prefill(architectures: tuple[str, ...], vision: tuple[int | None, int | None] | None, version: str) -> bool:
    """Whether SGLang turns a multimodal model's prefill graphs off before its memory rule (0.5.10
    _handle_piecewise_cuda_graph, 0.5.23 _disable_breakable_cudagraph_if_incompatible), so reserves none for them."""
    if not multimodal(architectures, vision, version):
        return False
    return not any(name in MULTIMODAL_PREFILL_GRAPH_ARCHITECTURES for name in architectures)


def vlm_factor(vision: tuple[int | None, int | None] | None, version: str, given: bool) -> tuple[float, str]:
    """(factor, words) SGLang ``version`` multiplies a multimodal model's mem_fraction_static by; ``given``: the
    fraction was set (--mem-fraction-static), which 0.4.9 on leaves alone."""
    v = version_tuple(version)
    if v < VLM_ANY_FRACTION_UNTIL:
        factor = 0.95 if v < VLM_X095_UNTIL else 0.90
        return factor, f" x {factor} for a multimodal model (SGLang {version} ModelRunner)"
    if given:
        return 1.0, ""
    if v < VLM_BY_TOWER_SINCE:
        return 0.90, " x 0.9 for a multimodal model (SGLang 0.4.9 server_args)"
    if vision is None:
        return 1.0, ""
    layers, hidden = vision[0] or 24, vision[1] or 1024
    ratio = layers * hidden**2 / (24 * 1024**2)
    factor = 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))
    return factor, (
        f" x {factor:.4f} for a multimodal model (adjust_mem_fraction_for_vlm: 0.95 x the vision tower's "
        f"{layers} layers x {hidden}^2 against ViT-L's 24 x 1024^2)"
    )


def pre_load(tp: int, interconnect: str | None) -> tuple[int, int, int, str]:
    """(figure, low, high, words) of the memory in use before the weights load at ``tp`` GPUs over ``interconnect``."""
    low, high = PRE_LOAD
    if tp > 1 and interconnect and interconnect.startswith("nvlink"):
        words = f"; at TP {tp} over NVLink + 1.77-2.01 GiB of distributed init (NCCL, custom all-reduce)"
        return high + TP_NVLINK[1], low + TP_NVLINK[0], high + TP_NVLINK[1], words
    if tp > 1 and interconnect is None:
        words = f"; at TP {tp} over an unknown link up to 2.01 GiB more (NVLink's distributed init)"
        return high, low, high + TP_NVLINK[1], words
    return high, low, high, ""


def graph_defaults(total_mib: float, tp: int, version: str = "0.5.23") -> tuple[int, int]:
    """(chunked_prefill_size, decode cuda-graph max batch) SGLang derives from the GPU memory (nvidia-smi's
    memory.total in MiB; 0.5.23 arg_groups/memory_hook.py handle_gpu_memory_settings, per version on 20-35 GiB)."""
    if total_mib < 20 * 1024:
        return 2048, 8
    if total_mib < 35 * 1024:
        v = version_tuple(version)
        for until, (chunked, small_tp, large_tp) in MID_CARD_DEFAULTS:
            if v < until:
                return chunked, small_tp if tp < 4 else large_tp
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
    eager_prefill: bool = False  # a multimodal model whose prefill graphs SGLang turns off (eager_prefill())
    no_graphs: bool = False  # --disable-cuda-graph: no decode or prefill graphs captured, none reserved


def _by_tp(parallel: int) -> float:
    # SGLang 0.4.3.post2 server_args.py __post_init__ (tp_size; 0.4.6 tp_size x pp_size)
    for least, fraction in ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87)):
        if parallel >= least:
            return fraction
    return 0.88


def _older_fraction(total_mib: int, s: MemorySettings, version: tuple[int, ...]) -> tuple[float, str]:
    """The defaults before 0.5.3, per generation (read in the 0.4.3.post2, 0.4.6.post5, 0.4.9.post2 and 0.5.0rc2
    wheels' server_args.py)."""
    if version < BY_TP_UNTIL:
        fraction = _by_tp(s.tp)
        return fraction, f"mem_fraction_static {fraction} (SGLang's default below 0.4.6 at TP {s.tp})"
    parallel = s.tp * s.pp
    if version < LARGE_CARDS_UNTIL:
        fraction = _by_tp(parallel) if total_mib <= 81920 else 0.88
        if total_mib > 96 * 1024:  # 0.4.6.post5: more of a large card, keeping 18 GiB for graphs and activations
            fraction = min(fraction + 48 * 1024 * (1 - fraction) / total_mib, (total_mib - 18 * 1024) / total_mib)
        return fraction, f"mem_fraction_static {fraction:.3f} (SGLang 0.4.6-0.4.7 default at TP x PP {parallel})"
    # 0.4.8-0.5.2: a reserve per GPU class (GiB), + 4 GiB with DP attention
    if total_mib < 35 * 1024:
        reserve = 2.8 + parallel / 10
    elif total_mib < 90 * 1024:
        reserve = 9.5 + parallel / 2
    elif total_mib < 160 * 1024:
        reserve = 12 + parallel / 2
    else:
        reserve = 32.0
    reserve += 4 if s.dp_attention > 1 else 0
    fraction = round((total_mib - reserve * 1024) / total_mib, 3)
    return fraction, f"mem_fraction_static {fraction} (SGLang 0.4.8-0.5.2 default: reserve {reserve:g} GiB)"


def mem_fraction_static(total_bytes: int, settings: MemorySettings, version: str = "0.5.23") -> tuple[float, str]:
    """SGLang's default mem_fraction_static for a GPU whose nvidia-smi memory.total is ``total_bytes``, at
    ``version`` (0.5.23's checked against SGLang's own ServerArgs resolution in tests/oracle/test_sglang_oracle.py).
    A multimodal model's reduction is usable_share's (vlm_factor); the speculative-decoding reserve is not
    modelled."""
    s = settings
    v = version_tuple(version)
    if v < BY_CLASS_UNTIL:
        return _older_fraction(total_bytes // MiB, s, v)
    # whole MiB: nvidia-smi's memory.total (nounits), or torch's total // 1024 // 1024 without nvidia-smi
    # (utils/common.py get_nvgpu_memory_capacity, _cuda_mem_fallback); an RTX 5090's 32,122.9 MiB is 32,122
    total_mib = total_bytes // MiB
    default_chunked, graph_bs = graph_defaults(total_mib, s.tp, version)
    chunked = s.chunked_prefill or default_chunked
    # memory_hook.py: a --max-running-requests below the default decode graph batch lowers it
    if s.max_running_requests is not None:
        graph_bs = min(graph_bs, s.max_running_requests)
    # cuda_graph_hook.py apply_cuda_graph_compatibility: pipeline parallelism turns the prefill graphs off
    # (before the memory rule runs); else graphs up to chunked_prefill_size tokens, MLA a flat 1.5 GiB
    prefill = 0.0 if s.pp > 1 else 1.5 * 1024 if s.mla else _prefill_graph_sizes(chunked) * 8.0
    if v < PREFILL_GRAPHS_SINCE:  # 0.5.3-0.5.9 reserve no prefill graphs
        prefill = 0.0
    if s.dp_attention > 1 and v < DP_KEEPS_PREFILL_GRAPHS_SINCE:  # 0.5.10-0.5.16: DP attention turns them off
        prefill = 0.0
    if s.eager_prefill:  # a multimodal model's prefill runs eagerly (eager_prefill)
        prefill = 0.0
    # --disable-cuda-graph: reserve_for_graph_mb counts the decode graphs (max_bs x 2) and the prefill graphs only
    # when their backend is not DISABLED; DP attention's padding (below) keeps reading max_bs
    decode = 0.0 if s.no_graphs else graph_bs * 2.0
    if s.no_graphs:
        prefill = 0.0
    dp = 0.0
    if s.dp_attention > 1:  # reserve_for_graph_mb: DP attention pads its graphs
        dp = graph_bs * s.dp_attention * 3 + (graph_bs * s.dp_attention * 1.5 if graph_bs > 300 else 0)
    reserved = 512 + max(chunked, 2048) * 1.5 + s.tp * s.pp / 8 * 1024 + decode + dp + prefill
    if total_mib > 60 * 1024:
        reserved = max(reserved, 10240)
    fraction = round((total_mib - reserved) / total_mib, 3)
    graphs = f"prefill graphs {prefill:,.0f} MiB" if prefill else "no prefill graphs"
    decode_words = "CUDA graphs disabled (--disable-cuda-graph)" if s.no_graphs else f"cuda-graph bs {graph_bs}"
    basis = (
        f"mem_fraction_static {fraction} derived by SGLang: reserve {reserved:,.0f} MiB "
        f"(chunked prefill {chunked}, {decode_words}, {graphs}"
        + (f", DP attention x{s.dp_attention} {dp:,.0f} MiB" if dp else "")
        + f") of {total_mib:,.0f} MiB"
    )
    return fraction, basis


def usable_share(
    total_bytes: int,
    utilization: float | None,
    settings: MemorySettings,
    version: str,
    pre_load: int,
    smi_total_bytes: int | None = None,
    architectures: tuple[str, ...] = (),
    vision: tuple[int | None, int | None] | None = None,
) -> Share:
    """The bytes for weights, the memory in use before loading (``pre_load``) and the pool:
    mfs x (total - pre_load) + pre_load, so that the pool is SGLang's mfs x free_before_load - weights
    (0.4.3-0.5.9 model_runner.py profile_max_num_token: rest = available after loading - total_gpu_memory x
    (1 - mfs), total_gpu_memory being the free memory before loading; 0.5.23 kv_cache_configurator.py
    _profile_available_bytes). Activations and graphs live in the (1 - mfs) SGLang keeps back, not in the pool.
    ``total_bytes`` is the CUDA total; the default mfs reads nvidia-smi's memory.total (``smi_total_bytes``,
    get_device_memory_capacity; the CUDA total stands in where it is not known). A multimodal model's fraction is
    reduced as the release does (``vlm_factor``)."""
    if utilization is not None:
        fraction, basis = utilization, f"mem_fraction_static {utilization} (given)"
    else:
        fraction, basis = mem_fraction_static(smi_total_bytes or total_bytes, settings, version)
    if multimodal(architectures, vision, version):
        factor, words = vlm_factor(vision, version, utilization is not None)
        fraction, basis = fraction * factor, basis + words
    usable = int((total_bytes - pre_load) * fraction) + pre_load
    return Share(usable, basis + " x memory free before loading", fraction, ("overhead",) if pre_load else ())


def chunked_prefill(total_bytes: int, dp_attention: int = 1, version: str = "0.5.23") -> tuple[int, str]:
    """The chunked prefill a DP-attention rank runs: SGLang's default for the GPU size at ``version``, divided by
    the DP size (arg_groups/parallel_hook.py handle_data_parallelism)."""
    chunked, _ = graph_defaults(total_bytes // MiB, 1, version)
    if dp_attention > 1:
        return chunked // dp_attention, (
            f"SGLang chunked_prefill_size default for this GPU size, {chunked} / DP attention {dp_attention}"
        )
    return chunked, "SGLang chunked_prefill_size default for this GPU size"
