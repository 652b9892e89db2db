"""vLLM's batches in flight: what a sliding window or an attention chunk must hold beyond its own tokens.

vLLM >= 0.26 reserves ``max_in_flight_tokens = max_concurrent_batches x max_num_batched_tokens`` per
sliding-window and chunked-local layer (SlidingWindowSpec / ChunkedLocalAttentionSpec.max_memory_usage_bytes,
v1/kv_cache_interface.py; vLLM PR #47728); before, one batch (max_num_batched_tokens).
``VllmConfig.max_concurrent_batches`` (vllm/config/vllm.py, 0.33): with async scheduling, the V2 model runner
(0.33's default) keeps ``pp + 1`` batches in flight; without pipeline parallelism that is 2, as the V1
runner's async scheduling also keeps. The oracle ran vLLM 0.33 at PP 2 and read ``max_in_flight_tokens``
24,576 for an 8,192-token batch, 16,384 at PP 1 (tests/oracle/test_vllm_matrix.py).
"""

from __future__ import annotations

from kvbudget.engines.base import EngineOptions, version_tuple

DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192  # vLLM API server on >=70 GiB non-A100 GPUs (EngineArgs.get_batch_defaults)
ASYNC_BATCHES = 2  # vLLM >=0.26 async scheduling without pipeline parallelism (VllmConfig.max_concurrent_batches)
IN_FLIGHT_SINCE = (0, 26)  # vLLM PR #47728: sliding window reserves max_in_flight_tokens


def concurrent_batches(pp: int) -> int:
    """``VllmConfig.max_concurrent_batches`` under async scheduling: V2 model runner, pp + 1 (2 at pp 1)."""
    return ASYNC_BATCHES if pp <= 1 else pp + 1


def in_flight(options: EngineOptions, version: str) -> tuple[int, int, str]:
    """(max_num_batched_tokens, R added to windows and chunks, R in words)."""
    batched = options.max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS
    if version_tuple(version)[:2] >= IN_FLIGHT_SINCE:
        batches = concurrent_batches(options.pipeline_parallel)
        r = batches * batched
        return batched, r, f"max_in_flight_tokens {r:,} = {batches} batches x {batched:,}"
    # vLLM <=0.25 SlidingWindowSpec: window-1 + max_num_batched_tokens (kv_cache_interface.py)
    return batched, batched, f"max_num_batched_tokens {batched:,}"
