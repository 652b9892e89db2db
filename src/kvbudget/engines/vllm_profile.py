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

V0 (before 0.8) profiles differently (worker/model_runner.py profile_run): one forward of
``max_num_batched_tokens`` split over ``max_num_seqs`` (256) dummy sequences, then the sampler on one fp32 logits
row per sequence. Its logged peaks hold no V1-sized sampler term: DeepSeek-R1-Distill-Qwen-14B at TP 2 logged a
0.19 GiB activation peak (issue #13061) where 256 x 152,064 x 37 B would be 1.34 GiB. So V0's overhead is the
batch's activations x 1.23 (fitted on the two RTX 3090 Llama-3.1-8B profiles of issue #10517, 20,000 and 29,000
tokens, 1.23x and 1.24x) + 256 fp32 logits rows + non-torch memory; the batch is V0's own default
(engines/vllm_memory.py batched_tokens: the whole max_model_len up to 32K). docs/measure.md gives the held-out error.
"""

from __future__ import annotations

from kvbudget.engines.overhead import ACT_FACTOR, GRAPHS, NON_TORCH, Overhead, activations, dims
from kvbudget.model.spec import ModelSpec

V0_ACT_FIT = 1.23  # V0 activation peak / (T x (4 hidden + 2 intermediate / tp) x 2 B), issue #10517 (fit split)
V0_SEQUENCES = 256  # V0 SchedulerConfig max_num_seqs default: one fp32 logits row each in the dummy sampler run
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


def v0_profiled_overhead(spec: ModelSpec, *, tp: int, batched: int, batched_basis: str) -> Overhead:
    """vLLM V0's profile: activations of the batch x 1.23 + 256 fp32 logits rows + non-torch memory (no graphs:
    V0 captures CUDA graphs after sizing the cache). The plan reserves the fitted figure; the range is
    activations x 1.0-1.35 and non-torch 0.15-0.4 GiB."""
    hidden, inter, vocab = dims(spec)
    act = activations(spec, tp, batched)
    logits = V0_SEQUENCES * vocab * 4
    low = int(ACT_FACTOR[0] * act) + logits + NON_TORCH[0]
    high = int(ACT_FACTOR[1] * act) + logits + NON_TORCH[1]
    fitted = int(V0_ACT_FIT * act) + logits + NON_TORCH[1]
    basis = (
        f"vLLM V0's profile run: activations at {batched:,} batched tokens"
        + (f" ({batched_basis})" if batched_basis else "")
        + f" x {V0_ACT_FIT} (hidden {hidden}, intermediate {inter}; fitted on issue #10517's RTX 3090 profiles), "
        f"{V0_SEQUENCES} fp32 logits rows x vocab {vocab:,}, non-torch 0.4 GiB; "
        "measure it (calibrate, plan --from-log) or pass --overhead"
    )
    return Overhead(fitted, low, high, "heuristic", basis)
