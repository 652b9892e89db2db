"""TensorRT-LLM's runtime memory as its own profiling pass sees it (PyTorch backend, 1.0-1.3), per GPU.

KvCacheCreator.configure_kv_cache_capacity (tensorrt_llm/_torch/pyexecutor/_util.py) resets torch's peak after the
weights, the temporary KV cache and the executor (its sampler, its CUDA graphs) exist, runs the dummy requests
through the executor, and takes ``peak = torch peak + (device used - torch allocated)`` after ``empty_cache``; the
temporary KV cache is added back to ``total - peak``. So the memory besides weights and KV it subtracts is:

* **activations** of the dummy batch: ``_create_dummy_context_requests(net_max_seq_len - 1)`` sends
  ``max_num_tokens`` tokens (8,192 by default) as requests of ``min(max_num_tokens, max_seq_len - 1)`` tokens, the
  last one shorter. The batch is computed; its bytes per token are the labelled heuristic of engines/overhead.py
  (hidden and MLP activations x 1.0-1.35), which also stands for the attention backend's workspace (a torch tensor
  sized by the C++ kernels, not read). A MoE model's MLP is its expert buffers, counted in the fused-MoE layout of
  engines/vllm_profile.py moe_workspace (TensorRT-LLM's CUTLASS MoE workspace is not read: heuristic). Held to the
  1.1.0rc3 DGX Spark log's itemized "Memory dynamically allocated during inference (inside torch) ... 0.85 GiB"
  (gpt-oss-120b): the range below gives 0.88-1.19 GiB, the dense formula 0.26-0.36 GiB.
* **logits** (computed): modules/logits_processor.py LogitsProcessor keeps the last token of each context request
  (``cumsum(seq_lens) - 1``), gathers the full vocabulary on every rank and casts it ``.float()``: one row per dummy
  request in the model dtype and in fp32. The forward's layers are done by then, so the peak is the larger of the
  two. The sampler is TorchSampler (_util.py builds TRTLLMSampler only for ``sampler_type`` TRTLLMSampler, or auto
  with beam search), and the dummy requests sample greedily: an argmax of those rows, nothing of vocabulary size.
* **CUDA graphs**: captured before the estimate (the 1.1.0rc3 log prints "Run generation only CUDA graph warmup for
  batch size=..." before "Memory used after loading model weights"), so their pool is in the non-torch remainder;
  llmapi/llm_args.py CudaGraphConfig captures 1-31, 32, 64 and 128 by default. Their memory is not computable
  offline: the measured 0.1-0.9 GiB range of engines/overhead.py (heuristic).
* the **FlashInfer attention workspace** (computed), with ``attn_backend`` FLASHINFER only:
  attention_backend/flashinfer.py FlashInferAttentionMetadata.__post_init__ allocates a 320 MiB uint8 torch tensor
  ("even though flashinfer only recommends 128 MB, we have to push it a bit higher to cover all possible CUDA graph
  cases"), held by the executor's metadata and shared by its CUDA-graph metadata (which reuse the buffer), so it is
  in the profiled peak once. The default TRTLLM backend's workspace is sized by the C++ kernels and stays inside the
  activation range.
* **non-torch memory** (CUDA context, NCCL, cuBLAS workspaces: the "Memory used outside torch" line less the
  graphs): the measured 0.15-0.4 GiB range (heuristic).
* the **temporary KV cache** the pass runs in (the estimation cache) is in the peak and added back: it costs the pool
  nothing. Its size changed (``estimation_kv_tokens``): the 1.0/1.1-era _get_token_num_for_estimation sizes it to
  the dummy requests (whole 32-token blocks of each request + 1 generated token, + 1 with the overlap scheduler),
  2026 main's to the largest of those blocks, one request of max_seq_len beside the CUDA-graph batch
  (``ceil((max_seq_len + 1) / 32) + min(max_batch_size, 128) - 1`` blocks) and one block per max_batch_size slot,
  cut to ``free_gpu_memory_fraction x`` the memory free after the weights.

Read in the 1.0/1.1-era _util.py that prints "tmp kv_mem" (the 1.1.0rc3 log's line) and in the 2026 main one that
prints "temporary kv cache memory during profiling": the dummy requests, the peak and the add-back are the same
rule in both, so one rule plans 1.0-1.3's budget; only the estimation cache's size differs, and it is added back.
The release tags themselves were not read (see docs/measure.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kvbudget.engines.base import cdiv, version_tuple
from kvbudget.engines.overhead import ACT_FACTOR, GRAPHS, NON_TORCH, Overhead, activations, dims
from kvbudget.engines.vllm_profile import moe_workspace
from kvbudget.model.spec import ModelSpec

TOKENS_PER_BLOCK = 32  # llmapi/llm_args.py KvCacheConfig.tokens_per_block
GRAPH_SIZES = (*range(1, 32), 32, 64, 128)  # llm_args.py CudaGraphConfig._generate_cuda_graph_batch_sizes(128)
# _util.py _get_token_num_for_estimation sizes the estimation cache for the CUDA-graph warmup and max_batch_size as
# well as the dummy requests in 2026 main; the 1.1.0rc3 log's cache is the dummy requests' alone (8,224 tokens where
# that rule gives 4,160 blocks), the 1.3.0rc15 log's is 8.01 GiB where the dummy requests' would be 1.00 GiB: the
# change lies between the two (1.2's logs print no estimation cache), so 1.2 keeps the older rule
ESTIMATION_CACHE_SINCE = (1, 3)
MAX_GRAPH_BATCH = 128  # CudaGraphConfig's default max_batch_size: _max_cuda_graph_batch_size
# attention_backend/flashinfer.py FlashInferAttentionMetadata.__post_init__: workspace_buffer = 320 * 1024 * 1024 uint8
# (the same figure in the 2025 file and in 2026 main's get_empty(..., cache_name="workspace_buffer"))
FLASHINFER_WORKSPACE = 320 * 2**20


@dataclass(frozen=True)
class Term:
    """One part of the runtime memory, per GPU: its range and whether it is computed from the engine's source or
    a labelled heuristic."""

    name: str
    low: int
    high: int
    how: Literal["computed", "heuristic"]
    basis: str


def dummy_requests(max_num_tokens: int, max_seq_len: int) -> tuple[int, ...]:
    """The prompt lengths of the profiling requests (_util.py _create_dummy_context_requests(net_max_seq_len - 1)):
    requests of min(max_num_tokens, max_seq_len - 1) tokens until max_num_tokens are sent."""
    each = max(1, min(max_num_tokens, max_seq_len - 1))
    full, rest = divmod(max_num_tokens, each)
    return (each,) * full + ((rest,) if rest else ())


def temporary_kv_tokens(requests: tuple[int, ...], overlap: bool = True) -> int:
    """_util.py _get_token_num_for_estimation before 1.3: each request's prompt + 1 generated token (+ 1 with the
    overlap scheduler) in whole blocks; what the KV cache of the dummy pass holds."""
    extra = 2 if overlap else 1
    return sum(cdiv(n + extra, TOKENS_PER_BLOCK) for n in requests) * TOKENS_PER_BLOCK


def estimation_kv_tokens(
    requests: tuple[int, ...],
    *,
    max_seq_len: int,
    max_batch_size: int,
    version: str,
    overlap: bool = True,
    budget_tokens: int | None = None,
) -> int:
    """The tokens of the estimation cache the profiling pass runs in (_util.py _get_token_num_for_estimation).

    Before 1.3: the dummy requests' blocks (``temporary_kv_tokens``). 1.3 (2026 main): the largest of the dummy
    requests' blocks (+ 1 generated token each; the overlap scheduler adds a token only with a draft model), the
    CUDA-graph warmup's ``ceil((max_seq_len + 1) / 32) + min(max_batch_size, 128) - 1`` blocks and one block per
    max_batch_size slot, cut to ``budget_tokens`` (fraction x the memory free after the weights, in whole blocks)
    when given. The pass adds the cache back to the budget, so its size moves the pool by nothing."""
    if version_tuple(version)[:2] < ESTIMATION_CACHE_SINCE:
        return temporary_kv_tokens(requests, overlap)
    # 2026 main _util.py _get_token_num_for_estimation: num_extra_tokens_per_seq = 1 (no draft model), then
    # max(.., max_seq_len_blocks + max_cuda_graph_bs - 1), max(.., batch_size), min(.., fraction x free_mem)
    dummy = sum(cdiv(n + 1, TOKENS_PER_BLOCK) for n in requests)
    graph_warmup = cdiv(max_seq_len + 1, TOKENS_PER_BLOCK) + min(max_batch_size, MAX_GRAPH_BATCH) - 1
    tokens: int = max(dummy, graph_warmup, max_batch_size) * TOKENS_PER_BLOCK
    if budget_tokens is not None:
        tokens = min(tokens, budget_tokens // TOKENS_PER_BLOCK * TOKENS_PER_BLOCK)
    return tokens


def logits_bytes(spec: ModelSpec, requests: int) -> int:
    """LogitsProcessor: one gathered vocabulary row per context request, in the model dtype and its fp32 copy."""
    model_bytes = 4 if spec.dtype in ("float32", "fp32") else 2
    return requests * dims(spec)[2] * (model_bytes + 4)


def _activation_bytes(spec: ModelSpec, tp: int, tokens: int) -> tuple[int, str]:
    """The dummy forward's activations: a MoE model's MLP is its expert buffers, not a dense MLP."""
    hidden, inter, _ = dims(spec)
    moe = moe_workspace(spec, tp, tokens)
    if not moe:
        return activations(spec, tp, tokens), f"hidden and MLP activations (hidden {hidden}, intermediate {inter})"
    return tokens * 4 * hidden * 2 + moe, f"hidden activations (hidden {hidden}) and fused-MoE buffers {moe:,} B"


def terms(
    spec: ModelSpec,
    *,
    tp: int,
    max_num_tokens: int,
    max_seq_len: int,
    batched_basis: str,
    attn_backend: str | None = None,
) -> tuple[Term, ...]:
    """The parts of TensorRT-LLM's profiled runtime memory per GPU, each computed or a labelled heuristic."""
    requests = dummy_requests(max_num_tokens, max_seq_len)
    act, words = _activation_bytes(spec, tp, max_num_tokens)
    logits = logits_bytes(spec, len(requests))
    # the head runs after the layers have freed their buffers: the peak is the larger of the two
    low, high = max(int(ACT_FACTOR[0] * act), logits), max(int(ACT_FACTOR[1] * act), logits)
    batch = f"{len(requests)} dummy request{'s' if len(requests) > 1 else ''} of {requests[0]:,} tokens"
    workspace = (
        (
            Term(
                "FlashInfer workspace",
                FLASHINFER_WORKSPACE,
                FLASHINFER_WORKSPACE,
                "computed",
                "attn_backend FLASHINFER: the metadata's 320 MiB workspace_buffer (attention_backend/flashinfer.py)",
            ),
        )
        if attn_backend == "flashinfer"
        else ()
    )
    return (
        Term(
            "activations",
            low,
            high,
            "heuristic",
            f"the dummy batch ({batch}: max_num_tokens {max_num_tokens:,}"
            + (f", {batched_basis}" if batched_basis else "")
            + f", computed): {words} x 1.0-1.35, "
            + (
                "FlashInfer's workspace apart"
                if attn_backend == "flashinfer"
                else "the attention workspace within the range"
            ),
        ),
        Term(
            "logits",
            logits,
            logits,
            "computed",
            f"{len(requests)} last-token row{'s' if len(requests) > 1 else ''} x vocab {dims(spec)[2]:,} in the "
            "model dtype and fp32 (LogitsProcessor), within the activation peak",
        ),
        Term(
            "CUDA graphs", GRAPHS[0], GRAPHS[1], "heuristic", f"{len(GRAPH_SIZES)} decode graphs up to 128, 0.1-0.9 GiB"
        ),
        *workspace,
        Term("non-torch", NON_TORCH[0], NON_TORCH[1], "heuristic", "CUDA context, NCCL, cuBLAS: 0.15-0.4 GiB"),
    )


def profiled_overhead(parts: tuple[Term, ...]) -> Overhead:
    """The runtime memory KvCacheCreator subtracts besides the weights, from its ``terms``: the activation peak
    (logits included), CUDA graphs, the FlashInfer backend's workspace where it is chosen, and non-torch memory; the
    plan reserves the high end."""
    summed = [p for p in parts if p.name != "logits"]  # the logits are inside the activation peak
    low, high = sum(p.low for p in summed), sum(p.high for p in summed)
    basis = "TensorRT-LLM's profiling pass (KvCacheCreator): " + "; ".join(
        f"{p.name} {p.how}: {p.basis}" for p in parts
    )
    return Overhead(
        high, low, high, "heuristic", basis + "; measure it (calibrate, plan --from-log) or pass --overhead"
    )
