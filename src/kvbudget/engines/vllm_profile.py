"""vLLM's runtime memory as its profiler sees it, per GPU, from its own profiling path (V1 gpu_worker.py
determine_available_memory, gpu_model_runner.py profile_run):

    non-KV = weights + torch peak increase during profile_run + non-torch increase [+ CUDA graphs from 0.20]

* profile_run runs ``_dummy_run(max_num_batched_tokens)`` (the activation peak: hidden and MLP activations of
  the batch), then ``_dummy_sampler_run`` on the hidden states of ``min(max_num_seqs, max_num_batched_tokens)``
  requests: fp32 logits of that many sequences x the full vocabulary, with top-k and top-p set for every request.
  The two runs follow each other, so the torch peak is the larger of the two, not their sum.
* Which top-k/top-p sampler runs decides the sampler's bytes per (sequence, vocabulary entry)
  (v1/sample/ops/topk_topp_sampler.py, per version; ``sampler_path``):
  - the PyTorch-native path sorts the logits (fp32 values + int64 indices), then softmax, cumsum, scatter,
    probabilities and exponential noise: 37 B, fitted on vLLM 0.10.1's refusal of gpt-oss-120b on one H100 PCIe
    ("Available KV cache memory: -2.14 GiB", issue #23278, with the weights as loaded, weights/loaded.py); held out:
    vLLM 0.11.0's refusal of the same model on an H100 SXM at the defaults (-2.28 GiB, issue #27508: planned -2.09)
    and its 1.71 GiB at 0.95 (planned 1.87);
  - FlashInfer's kernel sorts nothing: the bf16 logits (2 B), their fp32 copy (4 B), FlashInfer's top-k-masked
    logits (4 B) and its softmax probabilities (4 B) = 14 B, read from flashinfer sampling.py
    top_k_top_p_sampling_from_logits (top_k_mask_logits, then softmax, then top_p_sampling_from_probs);
  - from 0.17.0 the native path sorts nothing either: apply_top_k_top_p hands a batch of 8 or more rows to a Triton
    kernel (topk_topp_triton.py, pivot-based, in place on the fp32 logits), so the dummy run holds the bf16 logits
    (2 B, still referenced by _dummy_sampler_run), their fp32 copy (4 B, Sampler.forward), the softmax
    probabilities (4 B, forward_native) and the exponential noise (4 B, random_sample) = 14 B, plus the kernel's
    cached buffer of min(SMs, requests) fp32 vocabulary rows (read in the 0.17.0, 0.17.1, 0.19.0, 0.20.0 and
    0.22.0 wheels; the 0.12.0-0.16.0 wheels' apply_top_k_top_p still sorts).
  vLLM 0.8 turned FlashInfer sampling off for FlashInfer >= 0.2.3 (PR #14815); 0.9-0.11.0 use it whenever
  flashinfer-python is installed (PR #15777), but their wheels list it only as an extra (``vllm[flashinfer]``;
  the wheel metadata of 0.10.1, 0.10.2 and 0.11.0), so a plain install samples natively; 0.11.1 made
  flashinfer-python a dependency and turned the sampler off by default (PR #26859; 0.17.1 and 0.19.0 still ask
  for VLLM_USE_FLASHINFER_SAMPLER=1, and so do 0.20.0-0.20.2); PR #40376 turned it back on by default, from the
  0.21.0 wheel (envs.py default True in 0.21.0, 0.22.0 and 0.22.1). Where the path depends on the
  installation (0.9-0.11.0) the plan keeps the native figure, which errs toward a smaller pool, and says how much
  less FlashInfer keeps.
* Where a release defaults the model to Model Runner V2 (0.22+, ``model_runner_v2``), the dummy sampler run samples
  greedily with no top-k/top-p path: the bf16 logits and their fp32 copy (0.22-0.25) or the bf16 logits alone (0.26+).
* The activation factor, non-torch memory and CUDA-graph range are engines/overhead.py's measured ranges.
* ``--max-num-seqs`` caps the CUDA graphs V1 captures (vLLM 0.33.0 vllm/config/vllm.py
  VllmConfig._set_cudagraph_sizes; ``capture_sizes``). vLLM's estimate of their memory (subtracted from 0.20;
  0.33.0 gpu_model_runner.py profile_cudagraph_memory) is the first, largest capture plus (n - 1) x the next one's,
  so it grows with the largest size and the count: the measured range, which stands for the default capture set,
  is scaled by the share of that set captured (heuristic).

V0 (before 0.8, and 0.8-0.9 below compute capability 8.0) profiles differently (worker/model_runner.py
profile_run): one forward of ``max_num_batched_tokens`` split over ``max_num_seqs`` (256) dummy sequences, then the
sampler on one fp32 logits row per sequence with ``SamplingParams(top_p=0.99, top_k=self.vocab_size - 1)``, which
sorts those rows as V1's native path does. So V0's overhead is the larger of the batch's activations x 1.23 (fitted
on the two RTX 3090 Llama-3.1-8B profiles of issue #10517, 20,000 and 29,000 tokens, 1.23x and 1.24x) + the logits
rows, and the sampler's sort (37 B per entry), + non-torch memory; the batch is V0's own default
(engines/vllm_memory.py batched_tokens: the whole max_model_len up to 32K). Only the driver worker samples and the
executor keeps the smallest pool of all workers, so at TP > 1 a non-driver rank prints a larger pool than the one
vLLM allocates (issue #13061: 8.69 GiB in the poster's figures, 81,536 tokens = 7.46 GiB allocated).
docs/measure.md gives the held-out error.
"""

from __future__ import annotations

from typing import Literal

from kvbudget.engines.base import version_tuple
from kvbudget.engines.overhead import ACT_FACTOR, GRAPHS, NON_TORCH, Overhead, activations, dims
from kvbudget.engines.vllm_encoder import EncoderPass
from kvbudget.errors import InputError
from kvbudget.model.spec import ModelSpec

Sampler = Literal["native", "triton", "flashinfer", "flashinfer if installed", "mrv2 fp32", "mrv2"]

V0_ACT_FIT = 1.23  # V0 activation peak / (T x (4 hidden + 2 intermediate / tp) x 2 B), issue #10517 (fit split)
V0_SEQUENCES = 256  # V0 SchedulerConfig max_num_seqs default: one fp32 logits row each in the dummy sampler run
# vLLM 0.33.0 vllm/config/vllm.py _set_cudagraph_sizes: default_max_graph_size, 1,024 on data-center Blackwell
# (is_device_capability_family(100)), else 512
GRAPH_CEILING = 512
GRAPH_CEILING_SM100 = 1024
SAMPLER_BYTES = (
    37  # native path, per (profiled sequence, vocab entry); fitted on vLLM 0.10.1 gpt-oss-120b H100 (#23278)
)
FLASHINFER_BYTES = (
    14  # bf16 logits 2 + fp32 logits 4 + top-k-masked logits 4 + probabilities 4 (flashinfer sampling.py)
)
FITTED_ON = "gpt-oss-120b on an H100 PCIe, vLLM 0.10.1 (github.com/vllm-project/vllm/issues/23278)"
FLASHINFER_IF_INSTALLED = ((0, 9), (0, 11, 1))  # PR #15777 (on when importable) .. PR #26859 (off by default)
# PR #40376 "Enable FlashInfer top-k/top-p sampler by default": envs.py VLLM_USE_FLASHINFER_SAMPLER defaults to None
# (off) in the 0.20.0, 0.20.1 and 0.20.2 wheels and to True in the 0.21.0, 0.22.0 and 0.22.1 wheels (a 0.21.0 start-up
# of Qwen2.5-Omni logs "Using FlashInfer for top-p & top-k sampling" with no sampler setting)
FLASHINFER_DEFAULT_SINCE = (0, 21)
# vLLM 0.17.0 topk_topp_sampler.py apply_top_k_top_p: "if HAS_TRITON and logits.shape[0] >= 8: return
# apply_top_k_top_p_triton(...)" (0.16.0 sorts); the dummy sampler run always has 8 rows or more
TRITON_SINCE = (0, 17)
TRITON_MIN_ROWS = 8
TRITON_BYTES = 2 + 4 + 4 + 4  # bf16 logits, fp32 logits, softmax probabilities, exponential noise (sampler.py)
# topk_topp_triton.py caches one fp32 vocabulary row per Triton program, min(SMs, requests) of them; the catalog holds
# no SM counts, so the plan counts min(requests, 192) rows: 192 bounds every catalog NVIDIA GPU (RTX PRO 6000: 188)
TRITON_BUFFER_ROWS = 192
# Model Runner V2 (vllm/v1/worker/gpu/model_runner.py, the default runner for the models ``model_runner_v2`` names):
# _dummy_sampler_run builds InputBatch.make_dummy requests whose sampling states keep their defaults (temperature 0,
# top_k = vocabulary, top_p 1: "the sampler may skip top_k, top_p, and logprobs, using less GPU memory than what is
# possible during actual execution"), so no top-k/top-p path runs and Gumbel sampling reads the logits in place. The
# 0.22.0-0.25.0 wheels' Sampler.apply_sampling_params still copies the bf16 logits to fp32 first (2 + 4 B per entry);
# from 0.26.0 the copy is made only for raw logprobs (0.26.0) or when a request needs logits processing (0.27.0,
# 0.28.0), so the dummy run keeps the bf16 logits alone (2 B)
MRV2_SINCE = (0, 22)
MRV2_FP32_BEFORE = (0, 26)
MRV2_FP32_BYTES = 2 + 4
MRV2_BYTES = 2
MRV2_ARCHS_0_22 = frozenset({"Qwen3ForCausalLM"})  # 0.22.0 DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES
MRV2_ARCHS_0_23 = frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM"})  # 0.23.0 and 0.24.0
MRV2_MOE_ARCHS = frozenset({"DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM"})  # 0.24-0.28


def sampler_path(version: str) -> Sampler:
    """The top-k/top-p sampler vLLM ``version`` runs by default (topk_topp_sampler.py; module docstring)."""
    v = version_tuple(version)
    if v[:2] >= FLASHINFER_DEFAULT_SINCE:
        return "flashinfer"
    if v[:2] >= TRITON_SINCE:
        return "triton"
    low, high = FLASHINFER_IF_INSTALLED
    return "flashinfer if installed" if low <= v < high else "native"


def chosen_sampler(version: str, flashinfer: bool | None, runs_on_gpu: bool = True) -> Sampler:
    """The top-k/top-p path of vLLM ``version`` with VLLM_USE_FLASHINFER_SAMPLER set to ``flashinfer`` and
    flashinfer-python installed (topk_topp_sampler.py TopKTopPSampler.__init__ reads the variable first; off, the
    release's own non-FlashInfer path: the sort before 0.17, the Triton kernel from 0.17); None: the release's
    default (``sampler_path``). Every V1 release can take FlashInfer's path: 0.8 did with a FlashInfer older than
    0.2.3 (it logs "Using FlashInfer for top-p & top-k sampling" then; PR #14815 turned newer ones off), 0.9-0.11.0
    whenever it is installed (PR #15777), 0.11.1-0.20 when the variable asks for it. Where FlashInfer cannot run
    (``runs_on_gpu`` False: an AMD GPU, where TopKTopPSampler takes the native path on ROCm, or an NVIDIA GPU below
    SM 7.5; 0.33.0 flashinfer_sampler_supported: "if not current_platform.is_cuda(): return False") the release's
    non-FlashInfer path is the only one, and asking for FlashInfer is refused."""
    native: Sampler = "triton" if version_tuple(version)[:2] >= TRITON_SINCE else "native"
    if not runs_on_gpu:
        if flashinfer:
            raise InputError(
                "--flashinfer-sampler: FlashInfer does not run on this GPU (CUDA-only, compute capability 7.5 or "
                "later), so vLLM samples without it; drop it or give off"
            )
        return native
    if flashinfer is None:
        return sampler_path(version)
    return "flashinfer" if flashinfer else native


def profile_sampler(
    version: str, spec: ModelSpec, quantized: bool = False, otherwise: Sampler | None = None
) -> Sampler:
    """The sampler path vLLM ``version``'s profile run takes for this model: Model Runner V2's greedy dummy run where
    that runner is the model's default (``model_runner_v2``), else ``otherwise`` (default: the version's top-k/top-p
    path, ``sampler_path``)."""
    if model_runner_v2(version, spec, quantized):
        return "mrv2 fp32" if version_tuple(version)[:2] < MRV2_FP32_BEFORE else "mrv2"
    return otherwise if otherwise is not None else sampler_path(version)


def graph_ceiling(capability: int | None) -> int:
    """vLLM's default largest capture size on a GPU of this compute capability (x10; None: Hopper)."""
    return GRAPH_CEILING_SM100 if capability is not None and capability // 10 == 10 else GRAPH_CEILING


def capture_sizes(max_num_seqs: int, batched: int, ceiling: int = GRAPH_CEILING) -> tuple[int, ...]:
    """The batch sizes vLLM V1 captures CUDA graphs for, no speculative decoding, performance mode "balanced"
    (vLLM 0.33.0 vllm/config/vllm.py VllmConfig._set_cudagraph_sizes): top = min(max_num_seqs x 2, ceiling) capped
    at max_num_batched_tokens; 1, 2, 4, range(8, min(top + 1, 256), 8) and range(256, top + 1, 16); then
    max_num_batched_tokens where it is at most top, and max_num_seqs itself (the uniform decode size) where it is at
    most the uncapped top and at most max_num_batched_tokens."""
    uncapped = min(max_num_seqs * 2, ceiling)
    top = min(batched, uncapped)
    sizes = {i for i in (1, 2, 4) if i <= top}
    if top >= 8:
        sizes.update(range(8, min(top + 1, 256), 8))
    if top >= 256:
        sizes.update(range(256, top + 1, 16))
    if batched <= top:
        sizes.add(batched)
    if max_num_seqs <= uncapped and max_num_seqs <= batched:
        sizes.add(max_num_seqs)
    return tuple(sorted(sizes))


def graph_range(seqs: int, default_seqs: int, batched: int, ceiling: int = GRAPH_CEILING) -> tuple[int, int, int, int]:
    """The CUDA-graph memory range (low, high), the graphs captured at ``seqs`` and at vLLM's default
    ``default_seqs``: the measured range (engines/overhead.py GRAPHS, the default set) x captured / default."""
    n, base = len(capture_sizes(seqs, batched, ceiling)), len(capture_sizes(default_seqs, batched, ceiling))
    return GRAPHS[0] * n // base, GRAPHS[1] * n // base, n, base


def sampler_bytes(spec: ModelSpec, sequences: int, path: Sampler = "native") -> int:
    """The dummy sampler run's peak: every rank samples from the full vocabulary (logits are gathered)."""
    vocab = dims(spec)[2]
    if path == "triton" and sequences >= TRITON_MIN_ROWS:
        return sequences * vocab * TRITON_BYTES + min(sequences, TRITON_BUFFER_ROWS) * vocab * 4
    return sequences * vocab * sampler_entry_bytes(path)


def sampler_entry_bytes(path: Sampler) -> int:
    """Bytes per (sequence, vocabulary entry) the dummy sampler run keeps on a path without a per-row buffer."""
    if path == "mrv2 fp32":
        return MRV2_FP32_BYTES
    if path == "mrv2":
        return MRV2_BYTES
    return FLASHINFER_BYTES if path == "flashinfer" else SAMPLER_BYTES


def model_runner_v2(version: str, spec: ModelSpec, quantized: bool = False) -> bool:
    """Whether vLLM ``version`` runs this model on Model Runner V2 by default (VllmConfig.use_v2_model_runner with
    VLLM_USE_V2_MODEL_RUNNER unset and no feature it lacks; ``_is_default_v2_model_runner_model`` of each wheel's
    config/vllm.py): 0.22 Qwen3ForCausalLM, 0.23 Llama/Mistral/Qwen3ForCausalLM, both dense and unquantized only;
    0.24 those and three MoE architectures, quantized or not; from 0.25 every dense generative model that is neither
    hybrid nor attention-free, and the listed MoE ones."""
    v = version_tuple(version)[:2]
    if v < MRV2_SINCE:
        return False
    names = spec.config.get("architectures")
    archs = {str(a) for a in names} if isinstance(names, list) else set()
    moe = bool(_config_int(spec, "num_local_experts", "num_experts", "n_routed_experts"))
    recurrent = any(state.kind == "recurrent" for _, state in spec.primitives())
    if v < (0, 24):
        listed = MRV2_ARCHS_0_22 if v < (0, 23) else MRV2_ARCHS_0_23
        return bool(archs & listed) and not moe and not quantized
    if v < (0, 25):
        return bool(archs & (MRV2_ARCHS_0_23 | MRV2_MOE_ARCHS))
    if recurrent:
        return False
    return not moe or bool(archs & MRV2_MOE_ARCHS)


def _config_int(spec: ModelSpec, *keys: str) -> int:
    for key in keys:
        value = spec.config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def moe_workspace(spec: ModelSpec, tp: int, batched: int) -> int:
    """The fused-MoE buffers of the dummy forward, per GPU (0 for a dense model).

    vLLM's fused_moe.py (fused_experts_impl) allocates, for M tokens routed to top-k experts, N = the expert width
    per GPU and K = hidden: intermediate_cache1 (M, topk, 2N), intermediate_cache2 (M x topk, N) and
    intermediate_cache3 (M, topk, K) in the activation dtype (2 B). M is the batch (the chunk,
    VLLM_FUSED_MOE_CHUNK_SIZE, is larger than every default batch)."""
    experts = _config_int(spec, "num_local_experts", "num_experts", "n_routed_experts")
    topk = _config_int(spec, "num_experts_per_tok")
    if not (experts and topk):
        return 0
    hidden = _config_int(spec, "hidden_size")
    width = _config_int(spec, "moe_intermediate_size", "intermediate_size") // max(tp, 1)
    return batched * topk * (2 * width + width + hidden) * 2


def _activations(spec: ModelSpec, tp: int, batched: int) -> int:
    """The dummy forward's activations: a MoE model's MLP is its fused-expert buffers, not a dense MLP."""
    moe = moe_workspace(spec, tp, batched)
    if not moe:
        return activations(spec, tp, batched)
    return batched * 4 * dims(spec)[0] * 2 + moe


def _sampler_words(path: Sampler, spec: ModelSpec, sequences: int) -> str:
    if path == "flashinfer":
        return (
            f"{FLASHINFER_BYTES} B (FlashInfer top-k/top-p, no sort: vLLM's default from 0.21, "
            "VLLM_USE_FLASHINFER_SAMPLER=1 with flashinfer-python installed before)"
        )
    if path in ("mrv2", "mrv2 fp32"):
        return (
            f"{sampler_entry_bytes(path)} B (Model Runner V2, this model's default runner in this version: its dummy "
            "sampler run samples greedily, no top-k/top-p, "
            + ("from the bf16 logits and their fp32 copy)" if path == "mrv2 fp32" else "from the bf16 logits alone)")
        )
    if path == "triton":
        return (
            f"{TRITON_BYTES} B (vLLM's Triton top-k/top-p, 0.17-0.20's default and VLLM_USE_FLASHINFER_SAMPLER=0's "
            f"path from 0.21, no sort: bf16 and fp32 logits, probabilities, noise) + the kernel's buffer of up to "
            f"{TRITON_BUFFER_ROWS} fp32 vocabulary rows"
        )
    words = f"{SAMPLER_BYTES} B (the native sort path; the constant fitted on {FITTED_ON})"
    if path == "flashinfer if installed":
        less = sampler_bytes(spec, sequences) - sampler_bytes(spec, sequences, "flashinfer")
        words += (
            f"; with flashinfer-python installed (vllm[flashinfer], the vLLM container) this version samples with "
            f"FlashInfer and keeps up to {less / 2**30:.2f} GiB less: boot once and calibrate"
        )
    return words


def profiled_overhead(
    spec: ModelSpec,
    *,
    tp: int,
    batched: int,
    batched_basis: str,
    seqs: int,
    seqs_basis: str,
    graphs: bool,
    sampler: Sampler = "native",
    default_seqs: int | None = None,
    capability: int | None = None,
    encoder: EncoderPass | None = None,
    pp: int = 1,
) -> Overhead:
    """non-torch + max(activation peak, sampler peak) [+ CUDA graphs]; the plan reserves the high end. A
    vision-language model's ``encoder`` pass runs first and what it leaves referenced stays through the text pass
    (engines/vllm_encoder.py): torch peak = max(encoder peak, held + text peak).

    With pipeline parallelism (``pp`` > 1) the figure is the first stage's: profile_run makes the dummy sampler run
    only ``if get_pp_group().is_last_rank`` (vLLM 0.9.2 v1/worker/gpu_model_runner.py profile_run; 0.12.0 alike), so
    the first stage's peak is its forward alone, and the last stage's excess is ``last_stage_extra``. Each worker
    sizes its own pool from its own profile and the engine keeps the smallest block count of all
    (v1/core/kv_cache_utils.py unify_kv_cache_configs)."""
    hidden, inter, vocab = dims(spec)
    act, moe = _activations(spec, tp, batched), moe_workspace(spec, tp, batched)
    # gpu_model_runner.py _dummy_run: num_reqs = min(num_tokens, max_num_seqs) rows reach _dummy_sampler_run
    sequences = min(seqs, batched)
    sampler_peak = sampler_bytes(spec, sequences, sampler)
    low_graph, high_graph, captured, base = graph_range(seqs, default_seqs or seqs, batched, graph_ceiling(capability))
    graph = (low_graph, high_graph) if graphs else (0, 0)
    # where the sampler depends on the installation, the range reaches down to FlashInfer's figure, so a pool within
    # that difference of zero or of a session boundary is flagged near the edge (plan/edge.py)
    low_sampler = sampler_bytes(spec, sequences, "flashinfer") if sampler == "flashinfer if installed" else sampler_peak
    text_low, text_high = max(int(ACT_FACTOR[0] * act), low_sampler), max(int(ACT_FACTOR[1] * act), sampler_peak)
    last_stage_extra = 0
    if pp > 1:  # the first stage runs no sampler: its peak is the forward's; the last stage keeps the difference
        forward_low, forward_high = int(ACT_FACTOR[0] * act), int(ACT_FACTOR[1] * act)
        last_stage_extra = text_high - forward_high
        text_low, text_high = forward_low, forward_high
    if encoder is not None:  # gpu_model_runner.py profile_run: the encoder's batch first, its inputs and outputs kept
        text_low = max(encoder.peak_low, encoder.held + text_low)
        text_high = max(encoder.peak_high, encoder.held + text_high)
    low = NON_TORCH[0] + text_low + graph[0]
    high = NON_TORCH[1] + text_high + graph[1]
    basis = (
        f"vLLM's profile run: the larger of the activations at {batched:,} batched tokens"
        + (f" ({batched_basis})" if batched_basis else "")
        + f" x 1.0-1.35 (hidden {hidden}, "
        + (f"fused-MoE buffers {moe:,} B" if moe else f"intermediate {inter}")
        + f") and the sampler at {sequences:,} sequences "
        f"({seqs_basis}) x vocab {vocab:,} x {_sampler_words(sampler, spec, sequences)} = {sampler_peak:,} B"
        + ", non-torch 0.15-0.4 GiB"
        + (_graph_words(captured, base) if graphs else "")
        + _encoder_words(spec, encoder)
        + _stage_words(pp, last_stage_extra)
        + "; measure it (calibrate, plan --from-log) or pass --overhead"
    )
    return Overhead(high, low, high, "heuristic", basis, last_stage_extra)


def _stage_words(pp: int, extra: int) -> str:
    if pp <= 1:
        return ""
    return (
        f"; pipeline stage 1 of {pp}: no sampler run (vLLM samples on the last stage only), so its peak is the "
        f"forward's; the last stage keeps {extra:,} B less pool and the engine takes the smaller block count"
    )


def _encoder_words(spec: ModelSpec, encoder: EncoderPass | None = None) -> str:
    """The vision encoder's dummy pass of the profile run (V1 gpu_model_runner.py profile_run, "Encoder cache will be
    initialized with a budget of N tokens, and profiled with K <modality> items"): counted where
    engines/vllm_encoder.py has a rule for the tower and the version, else said to be left out (V0 profiles with
    dummy multimodal data too)."""
    if "vision_config" not in spec.config:
        return ""
    if encoder is not None:
        return (
            f"; first the vision encoder's dummy pass (encoder budget {encoder.budget:,} tokens: {encoder.basis}): "
            f"forward peak {encoder.peak_high:,} B, then {encoder.held:,} B of its pixels and outputs held through "
            "the text pass, so the torch peak is the larger of the encoder's and held + the text model's "
            "(a text-only --limit-mm-per-prompt or --skip-mm-profiling skips it)"
        )
    return (
        "; not counted: the vision encoder's dummy pass of the profile run (the encoder-cache budget of dummy images "
        "or videos through the vision tower), which can exceed the language model's peak: boot once and calibrate"
    )


def _graph_words(captured: int, base: int) -> str:
    if captured == base:
        return ", CUDA graphs 0.1-0.9 GiB"
    return f", CUDA graphs 0.1-0.9 GiB x {captured}/{base} captured sizes (max_num_seqs caps them)"


def v0_profiled_overhead(
    spec: ModelSpec, *, tp: int, batched: int, batched_basis: str, seqs: int = V0_SEQUENCES
) -> Overhead:
    """vLLM V0's profile: the larger of the forward's activations (x 1.23, + one fp32 logits row per dummy
    sequence) and the dummy sampler's top-k/top-p sort, + non-torch memory (no graphs: V0 captures CUDA graphs after
    sizing the cache). The plan reserves the fitted figure; the range is activations x 1.0-1.35 and non-torch
    0.15-0.4 GiB.

    vLLM V0 worker/model_runner.py profile_run samples its max_num_seqs dummy prompts with
    ``SamplingParams(top_p=0.99, top_k=self.vocab_size - 1)`` ("Enable top-k sampling to reflect the accurate memory
    usage"), so the sampler sorts one fp32 logits row per sequence over the full vocabulary, as V1's native path does
    (``SAMPLER_BYTES`` per entry). The forward's activations are freed before it, so the torch peak is the larger of
    the two. Only the driver worker samples (execute_model: "if not self.is_driver_worker: return"; the logits are
    gathered to rank 0), and the executor keeps the smallest pool of all workers (determine_num_available_blocks:
    ``num_gpu_blocks = min(b[0] for b in num_blocks)``), so at any TP the pool is the driver's, sampler included."""
    hidden, inter, vocab = dims(spec)
    act = activations(spec, tp, batched)
    sequences = min(seqs, batched)
    logits = sequences * vocab * 4
    sampler = sampler_bytes(spec, sequences)
    low = max(int(ACT_FACTOR[0] * act) + logits, sampler) + NON_TORCH[0]
    high = max(int(ACT_FACTOR[1] * act) + logits, sampler) + NON_TORCH[1]
    fitted = max(int(V0_ACT_FIT * act) + logits, sampler) + NON_TORCH[1]
    basis = (
        f"vLLM V0's profile run: the larger of the activations at {batched:,} batched tokens"
        + (f" ({batched_basis})" if batched_basis else "")
        + f" x {V0_ACT_FIT} (hidden {hidden}, intermediate {inter}; fitted on issue #10517's RTX 3090 profiles) "
        f"+ {sequences} fp32 logits rows, and the dummy sampler's top-k/top-p sort on the driver worker: "
        f"{sequences} sequences (max_num_seqs) x vocab {vocab:,} x {SAMPLER_BYTES} B = {sampler:,} B; non-torch 0.4 GiB"
        + _encoder_words(spec)
        + "; measure it (calibrate, plan --from-log) or pass --overhead"
    )
    return Overhead(fitted, low, high, "heuristic", basis)
