"""vLLM's memory rules: the share of the card (gpu_memory_utilization) and the batch it profiles.

* ``gpu_memory_utilization`` is a fraction of TOTAL device memory for the whole instance (weights,
  activations, KV); default 0.92 in the newest CacheConfig, 0.9 before (vllm/config/cache.py).
* The API server's ``max_num_batched_tokens`` default follows the GPU (EngineArgs.get_batch_defaults):
  16,384 on GPUs with >= 160 GiB (0.28+), 8,192 on GPUs with >= 70 GiB that are not A100 (nor GB10),
  else 2,048.
* From 0.20 the worker subtracts its CUDA-graph estimate before sizing the cache (envs.py default on).
"""

from __future__ import annotations

from kvbudget.engines.base import version_tuple
from kvbudget.engines.records import Share

GiB = 2**30
UTIL_NEW = 0.92  # vLLM newest CacheConfig / CLI help "default value of 0.92" (vllm/config/cache.py @002f10e0)
UTIL_OLD = 0.9  # vLLM CacheConfig before (vllm/config/cache.py @c1d86421)
# config/cache.py of the released wheels: 0.19.0 "gpu_memory_utilization: float = Field(default=0.9", 0.20.0, 0.22.0
# and 0.22.1 "default=0.92"; vLLM 0.22.1 prints "--gpu-memory-utilization=0.9200" where none was given
# (github.com/NnamdiOdozi/mlops-assignment logs/vllm.log)
UTIL_SINCE = (0, 20)
BATCH_160GIB_SINCE = (0, 28)  # vLLM 0.28 EngineArgs.get_batch_defaults: a >= 160 GiB tier (16,384)
V1_SINCE = (0, 8)  # vLLM 0.8.0 made the V1 engine the default (VLLM_USE_V1)
V0_CHUNKED_ABOVE = 32768  # V0's OpenAI server enables chunked prefill for max_model_len > 32K
# V0 SchedulerConfig with chunked prefill and no --max-num-batched-tokens: 512 ("the best balance between ITL and TTFT
# on A100"; printed "Chunked prefill is enabled with max_num_batched_tokens=512." by 0.5.4, 0.6.4.dev and 0.6.4.post1
# start-ups); kvbudget plans 2,048 from 0.6.5, where that default was raised (the release not pinned by a log)
V0_CHUNKED_512_BEFORE = (0, 6, 5)
# vLLM gpu_worker.determine_available_memory subtracts the CUDA graph estimate where envs.py's
# VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS is on: os.getenv(..., "0") in the 0.18.0 and 0.18.1 wheels (0.19 logs print
# "In v0.19, CUDA graph memory profiling will be enabled by default ... To try it now, set ...=1"), "1" in the 0.20.0,
# 0.20.1, 0.20.2, 0.21.0, 0.22.0, 0.22.1 and 0.24.0-0.28.0 wheels; 0.20.0's gpu_worker.py prints "CUDA graph memory
# profiling is enabled (default since v0.21.0)" all the same, and 0.20.0 start-ups log that line after an "Estimated
# CUDA graph memory" one (kvbudget had 0.21, from the message's wording)
GRAPHS_SINCE = (0, 20)
# --enforce-eager (read in the 0.20.0 wheel): VllmConfig.__post_init__ (config/vllm.py) sets compilation mode NONE and
# cudagraph_mode NONE ("Cudagraph is disabled under eager mode"); gpu_worker.determine_available_memory then skips
# profile_cudagraph_memory (the estimate stays 0) and compile_or_warm_up_model skips capture_model, which returns 0 at
# once for CUDAGraphMode.NONE (v1/worker/gpu_model_runner.py). Before 0.20 (V1) and in V0 the graphs are captured
# after the pool is sized, so the flag never changed the pool there; the plan reserves none for them either way.
EAGER_WORDS = (
    "--enforce-eager: vLLM captures no CUDA graphs (cudagraph_mode NONE), so none are reserved and, from 0.20, no "
    "graph estimate is subtracted before the pool is sized"
)
# vLLM 0.8.0-0.9.0 V1 gpu_worker.determine_available_memory counts as non-torch memory (total - free) - torch allocated
# after the profile: this process's CUDA context and loaded kernels and every other process on the GPU; 0.9.1 measures
# from a snapshot taken after the CUDA context exists (utils.memory_profiling, PR #19312; read in the released wheels)
WHOLE_DEVICE_NON_TORCH = ((0, 8), (0, 9, 1))
# vLLM 0.8-0.9 EngineArgs._is_v1_supported_oracle (arg_utils.py): "Compute Capability < 8.0 is not supported by the V1
# Engine. Falling back to V0." A T4 or an RTX 20xx (SM 7.5) runs V0's worker and profile there (logged by vLLM 0.8.2 on
# a T4, huggingface/cookbook fine_tune_chatbot_docs_synthetic.ipynb). The upper bound is where kvbudget stops reading
# V0 (0.10 removed the V0 engine's paths; the exact release the fallback went is not pinned).
V1_MIN_CAPABILITY = 80
V0_FALLBACK_ON_OLD_GPUS = ((0, 8), (0, 10))
# vLLM 0.10.1-0.13.x VllmConfig.__post_init__ (config/__init__.py, then config/vllm.py): a model with an
# attention_chunk_size (Llama 4) turns the hybrid KV cache manager off "by default" unless
# VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1 (envs.py default "0"); 0.10.0 has no such rule, and the 0.14.0,
# 0.14.1, 0.15.1, 0.16.0-0.19.0 and 0.34.0 wheels default the variable to "1" (read in each released wheel)
CHUNKED_HYBRID_OFF = ((0, 10, 1), (0, 14))


def default_utilization(version: str) -> float:
    return UTIL_NEW if version_tuple(version) >= UTIL_SINCE else UTIL_OLD


def usable_share(total_bytes: int, utilization: float | None, version: str) -> Share:
    util = utilization if utilization is not None else default_utilization(version)
    # vLLM Worker.determine_available_memory: requested = total x gpu_memory_utilization (gpu_worker.py)
    how = "given" if utilization is not None else f"default for vLLM {version}"
    return Share(int(total_bytes * util), f"gpu_memory_utilization {util} ({how}) x total memory", util)


def batched_tokens(
    total_bytes: int, gpu_label: str, version: str, context: int = 0, capability: int | None = None
) -> tuple[int, str]:
    """The API server's max_num_batched_tokens default for this GPU (EngineArgs.get_batch_defaults); before V1
    (and where V1 falls back to V0 on a GPU below compute capability 8.0), the V0 scheduler's (SchedulerConfig): the
    whole max_model_len where chunked prefill is off."""
    label = gpu_label.lower()
    if runs_v0(version, capability):
        # vLLM V0 (0.6-0.7) SchedulerConfig.__post_init__ (vllm/config.py): without chunked prefill the batch is
        # max(max_model_len, 2048); the OpenAI server turns chunked prefill on for max_model_len > 32K
        # (EngineArgs.create_engine_config), and then profiles _DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
        if 0 < context <= V0_CHUNKED_ABOVE:
            return max(context, 2048), "vLLM V0 default without chunked prefill: max(max_model_len, 2048)"
        if version_tuple(version) < V0_CHUNKED_512_BEFORE:
            return 512, "vLLM V0 (before 0.6.5) default with chunked prefill (max_model_len above 32K)"
        return 2048, "vLLM V0 default with chunked prefill (max_model_len above 32K)"
    if total_bytes >= 160 * GiB and version_tuple(version)[:2] >= BATCH_160GIB_SINCE:
        # vLLM >= 0.28 get_batch_defaults: "GPUs like B200/B300 with >= 160GB" (engine/arg_utils.py)
        return 16384, "vLLM API-server default on >=160 GiB GPUs"
    if total_bytes >= 70 * GiB and "a100" not in label and "gb10" not in label:
        return 8192, "vLLM API-server default on >=70 GiB non-A100 GPUs"
    return 2048, "vLLM API-server default below 70 GiB or on A100"


def max_num_seqs(total_bytes: int, gpu_label: str) -> tuple[int, str]:
    """The API server's max_num_seqs default for this GPU (EngineArgs.get_batch_defaults, V1): 1,024 on GPUs
    with >= 70 GiB that are not A100 (nor GB10), else 256."""
    label = gpu_label.lower()
    if total_bytes >= 70 * GiB and "a100" not in label and "gb10" not in label:
        return 1024, "vLLM default max_num_seqs on >=70 GiB non-A100 GPUs"
    return 256, "vLLM default max_num_seqs below 70 GiB or on A100"


def running_limit(given: int | None, total_bytes: int, gpu_label: str) -> tuple[int, str]:
    """The sequences vLLM runs at once: --max-num-seqs as set, else its default for the GPU (``max_num_seqs``).
    The scheduler admits no more (v1/core/sched/scheduler.py: ``len(self.running) == self.max_num_running_reqs``
    stops the waiting loop; max_num_running_reqs = scheduler_config.max_num_seqs)."""
    if given is not None:
        return given, f"--max-num-seqs {given:,} as set"
    return max_num_seqs(total_bytes, gpu_label)


def is_v0(version: str) -> bool:
    return version_tuple(version)[:2] < V1_SINCE


def runs_v0(version: str, capability: int | None) -> bool:
    """Whether vLLM ``version`` runs its V0 engine on a GPU of this compute capability (x10; None: not known)."""
    if is_v0(version):
        return True
    low, high = V0_FALLBACK_ON_OLD_GPUS
    old_gpu = capability is not None and capability < V1_MIN_CAPABILITY
    return old_gpu and low <= version_tuple(version)[:2] < high


def subtracts_graphs(version: str) -> bool:
    return version_tuple(version) >= GRAPHS_SINCE


def whole_device_non_torch(version: str) -> bool:
    """Whether this V1 version counts everything on the device outside its torch allocations as non-torch memory."""
    low, high = WHOLE_DEVICE_NON_TORCH
    return low <= version_tuple(version) < high


def chunked_hybrid_off_by_default(version: str) -> bool:
    """Whether vLLM ``version`` caches chunked-local-attention layers as full attention unless told otherwise."""
    low, high = CHUNKED_HYBRID_OFF
    return low <= version_tuple(version) < high
