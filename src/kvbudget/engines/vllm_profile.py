"""vLLM's runtime memory as its profiler sees it, per GPU, from its own profiling path (V1 gpu_worker.py
determine_available_memory, gpu_model_runner.py profile_run):

    non-KV = weights + torch peak increase during profile_run + non-torch increase [+ CUDA graphs from 0.21]

* profile_run runs ``_dummy_run(max_num_batched_tokens)`` (the activation peak: hidden and MLP activations of
  the batch), then ``_dummy_sampler_run`` on the hidden states of ``min(max_num_seqs, max_num_batched_tokens)``
  requests: fp32 logits of that many sequences x the full vocabulary, with top-k and top-p set for every request
  (the PyTorch path sorts them: sorted values, int64 indices, probabilities). The two runs follow each other, so
  the torch peak is the larger of the two, not their sum.
* The sampler's bytes per (sequence, vocabulary entry) are fitted, not read: 37 B reproduces vLLM 0.10.1's
  refusal of gpt-oss-120b on one H100 ("Available KV cache memory: -2.14 GiB", issue #23278, with the weights as
  loaded, weights/loaded.py); 4 B of fp32 logits + 4 B sorted values + 8 B int64 indices + fp32 softmax, cumsum
  and probabilities account for ~30 B. docs/measure.md gives the error on the logs it was not fitted on.
* The activation factor, non-torch memory and CUDA-graph range are engines/overhead.py's measured ranges.
"""

from __future__ import annotations

from kvbudget.engines.overhead import ACT_FACTOR, GRAPHS, NON_TORCH, Overhead, activations, dims
from kvbudget.model.spec import ModelSpec

SAMPLER_BYTES = 37  # per (profiled sequence, vocab entry); fitted on vLLM 0.10.1 gpt-oss-120b H100 (issue #23278)
FITTED_ON = "gpt-oss-120b on an H100, vLLM 0.10.1 (github.com/vllm-project/vllm/issues/23278)"


def sampler_bytes(spec: ModelSpec, sequences: int) -> int:
    """The dummy sampler run's peak: every rank samples from the full vocabulary (logits are gathered)."""
    return sequences * dims(spec)[2] * SAMPLER_BYTES


def profiled_overhead(
    spec: ModelSpec, *, tp: int, batched: int, batched_basis: str, seqs: int, seqs_basis: str, graphs: bool
) -> Overhead:
    """non-torch + max(activation peak, sampler peak) [+ CUDA graphs]; the plan reserves the high end."""
    hidden, inter, vocab = dims(spec)
    act = activations(spec, tp, batched)
    sequences = min(seqs, batched)
    sampler = sampler_bytes(spec, sequences)
    graph = GRAPHS if graphs else (0, 0)
    low = NON_TORCH[0] + max(int(ACT_FACTOR[0] * act), sampler) + graph[0]
    high = NON_TORCH[1] + max(int(ACT_FACTOR[1] * act), sampler) + graph[1]
    basis = (
        f"vLLM's profile run: the larger of the activations at {batched:,} batched tokens"
        + (f" ({batched_basis})" if batched_basis else "")
        + f" x 1.0-1.35 (hidden {hidden}, intermediate {inter}) and the sampler at {sequences:,} sequences "
        f"({seqs_basis}) x vocab {vocab:,} x {SAMPLER_BYTES} B ({sampler:,} B; the constant fitted on {FITTED_ON})"
        + ", non-torch 0.15-0.4 GiB"
        + (", CUDA graphs 0.1-0.9 GiB" if graphs else "")
        + "; measure it (calibrate, plan --from-log) or pass --overhead"
    )
    return Overhead(high, low, high, "heuristic", basis)
