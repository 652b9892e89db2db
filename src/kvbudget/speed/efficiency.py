"""The speed model's efficiencies: fitted, not guessed (docs/speed.md has each with its figures and errors).

Fitted by ``bench/speed.py`` (kvbudget.speed.fit) to the training part of the published measurements in
tests/data/speed/, in three stages: the five throughput ones on TensorRT-LLM's performance overview tables (H100
SXM and H200 SXM, FP8 Llama-3.1-8B and Llama-3.3-70B, trtllm-bench offline throughput); then, those held, the
prefill attention share on the throughput figures; then the bf16 prefill share and the prefill queue factor on the
latency figures (TensorRT-LLM v0.5's batch-1 first-token latency
on H100, L40S and A100; NVIDIA NIM 1.8.0's TTFT and inter-token latency of Llama-3.3-70B on 2 x H100). The rest is
held out, and tests/speed/test_fit.py holds the model to the errors docs/speed.md states per kind of figure.

vLLM and SGLang have their own fits (``VLLM``, ``SGLANG``) on GPUStack's performance-lab measurements of each
(gpustack_vllm.json, gpustack_sglang.json): the prefill shares, the per-iteration and per-sequence costs (vLLM's per
MoE layer and its ratio of the prefill shares on A100 too) and the fixed cost a request sees through the API server;
the names they have no figures for are TensorRT-LLM's, listed in ``Efficiency.borrowed``. llama.cpp and the other
engines use TensorRT-LLM's, labelled as fitted to another engine. vLLM's fit is also held to a closed-loop sweep it
was not fitted to (closed_loop_vllm.json: vLLM 0.23.0, A100 40GB, --max-concurrency 1 and 8), which it misses
(-30.1% throughput at 8); refits with it did no better on the held-out figures overall, so they were not adopted
(docs/speed.md "vLLM held to a closed loop").
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Efficiency:
    """Shares of the datasheet roofs an engine reaches, and its fixed costs.

    ``prefill``: of the dense peak in prefill with fp8 / fp4 products, ``prefill_bf16`` with bf16 ones;
    ``prefill_attention``: of the dense bf16 peak in prefill attention, whatever the weights' precision
    (FlashAttention runs bf16; kvbudget.speed.roofline.Roofline.prefill_seconds);
    ``decode_compute``: of the dense peak in a compute-bound decode iteration; ``bandwidth``: of the memory
    bandwidth in a memory-bound one; ``step_overhead_s``: fixed seconds per decode iteration;
    ``allreduce_latency_s``: fixed seconds per all-reduce (tensor parallelism); ``prefill_queue``: the steady-state
    wait for other requests' prefills, as a share of the M/M/1 mean wait (kvbudget.speed.answer.prefill_wait);
    ``sequence_s``: seconds per running sequence added to each decode iteration (host-side scheduling, sampling
    and detokenizing, which vLLM and SGLang do per sequence); ``request_s``: the fixed seconds an API-server
    benchmark sees in every TTFT (HTTP, tokenization, scheduling); ``moe_layer_overhead_s``: seconds per layer with
    routed experts added to each decode iteration (its kernels' fixed time: 0 for TensorRT-LLM, whose figures are
    dense models); ``prefill_a100``: the ratio of every prefill share (fp8, bf16, attention) on the A100 (the GPUs
    of ``A100_GPUS``, kvbudget.speed.roofline.Machine.a100) to the fitted one (1 for the engines not fitted apart);
    ``borrowed``: the names of the efficiencies taken
    from TensorRT-LLM's fit (the engine has no figures for them)."""

    prefill: float
    prefill_bf16: float
    prefill_attention: float
    decode_compute: float
    bandwidth: float
    step_overhead_s: float
    allreduce_latency_s: float
    prefill_queue: float
    basis: str
    sequence_s: float = 0.0  # per running sequence per decode iteration: host work that grows with the batch
    request_s: float = 0.0  # fixed seconds in every request's TTFT: HTTP, tokenization, scheduling (API servers)
    moe_layer_overhead_s: float = 0.0  # per MoE layer per decode iteration: router, align/sort, fused-MoE kernels
    prefill_a100: float = 1.0  # x every prefill share on the A100 (A100_GPUS); 1: not fitted apart
    borrowed: tuple[str, ...] = ()  # the efficiencies taken from another engine's fit (no figures of this engine)
    fitted_to: str = "TensorRT-LLM"  # whose published figures the (not borrowed) efficiencies were fitted to

    @property
    def fit(self) -> str:
        """Whose fit, in words ("vLLM's fit"; an engine without figures uses "TensorRT-LLM's fit")."""
        return f"{self.fitted_to}'s fit"

    def to_dict(self) -> dict[str, object]:
        return {
            "prefill_compute": self.prefill,
            "prefill_compute_bf16": self.prefill_bf16,
            "prefill_attention": self.prefill_attention,
            "decode_compute": self.decode_compute,
            "memory_bandwidth": self.bandwidth,
            "step_overhead_s": self.step_overhead_s,
            "allreduce_latency_s": self.allreduce_latency_s,
            "prefill_queue": self.prefill_queue,
            "sequence_s": self.sequence_s,
            "request_s": self.request_s,
            "moe_layer_overhead_s": self.moe_layer_overhead_s,
            "prefill_a100": self.prefill_a100,
            "borrowed": list(self.borrowed),
            "fitted_to": self.fitted_to,
            "basis": self.basis,
        }


# The GPUs an engine's ``prefill_a100`` applies to: the A100 80GB SXM its figures measured (GPUStack's vLLM rows) and
# the cards of the same chip at the same clocks (108 SMs, 312 TFLOPS bf16 dense), which differ in memory, form or
# link only: the 40 GB and PCIe A100s and the A800 (an A100 with its NVLink cut to 400 GB/s). Not every compute
# capability 8.0 GPU: the A30 is 8.0 too but a smaller part (56 SMs, 165 TFLOPS, 933 GB/s) that no published figure
# measures, and the ratio, given to it, made it prefill faster than an RTX 4090 whose every roof is higher
# (tests/speed/test_dominance.py). Catalog ids (kvbudget.hardware), as Machine.gpu holds them.
A100_GPUS = frozenset({"a100-80gb", "a100-40gb", "a100-80gb-pcie", "a800-80gb"})

FIT_SOURCE = (
    "fitted to TensorRT-LLM performance overview (docs/source/performance/perf-overview.md, v1.0 tables: "
    "trtllm-bench offline throughput, H100/H200 SXM, FP8), TensorRT-LLM v0.5 first-token latency and NVIDIA NIM "
    "1.8.0 TTFT / inter-token latency (Llama-3.3-70B, 2 x H100), training part; see docs/speed.md"
)

# the first five: kvbudget.speed.fit.fit of THROUGHPUT_PARAMETERS on the 20 training figures of
# trtllm_perf_overview.json (tests/speed/test_fit.py); then the attention share (ATTENTION_PARAMETERS, the five held)
# on the 22 training throughput figures (those 20 and NIM's two: their 5,000-token prompts weigh attention); the last
# two: LATENCY_PARAMETERS on every training figure, the rest held (bench/speed.py --fit gives the last three)
FITTED = Efficiency(
    prefill=0.570,  # of the dense peak in prefill
    prefill_bf16=0.779,  # with bf16 products (fitted on TensorRT-LLM v0.5 A100 FP16 first-token latency)
    prefill_attention=0.779,  # of the bf16 peak in prefill attention, any weights (a flat optimum: 0.69 to 1.0 alike)
    decode_compute=0.392,  # of the dense peak in a compute-bound decode iteration
    bandwidth=0.740,  # of the datasheet memory bandwidth
    step_overhead_s=0.0033,  # per decode iteration
    allreduce_latency_s=20.5e-6,  # per all-reduce (2 per layer)
    prefill_queue=1.148,  # x the M/M/1 wait for others' prefills (fitted on NIM's TTFT at concurrency 1 and 25)
    basis=FIT_SOURCE,
)


GPUSTACK = "GPUStack performance lab (docs/performance-lab/, vllm bench serve)"
VLLM_SOURCE = (
    f"fitted to vLLM v0.11.0 (v0.10.2 for gpt-oss-120b on H100) figures of the {GPUSTACK}: H100 SXM, A100 80GB and "
    "H200, Qwen3-8B/14B/32B/235B-A22B, gpt-oss-20b/120b, DeepSeek-R1, training part; see docs/speed.md"
)
SGLANG_SOURCE = (
    f"fitted to SGLang v0.5.3 to v0.5.5.post1 figures of the {GPUSTACK}: H100 SXM, A100 80GB and H200, "
    "Qwen3-8B/14B/32B/235B-A22B, DeepSeek-R1, training part; see docs/speed.md"
)

# bench/speed.py --fit-all: kvbudget.speed.fit.fit_from of ENGINE_PARAMETERS[engine] on the training figures of
# tests/data/speed/gpustack_<engine>.json, from TensorRT-LLM's values and from these (the lower loss;
# tests/speed/test_fit.py); the names not fitted are TensorRT-LLM's
VLLM = replace(
    FITTED,
    prefill=0.136,  # fp8 products (Qwen3-235B-A22B-FP8 tp 4, DeepSeek-R1 tp 8: block-scaled MoE GEMMs)
    prefill_bf16=0.325,  # bf16 products on H100 / H200 (chunked prefill: 8,192 tokens a step, v1 default)
    prefill_attention=0.368,  # of the bf16 peak in prefill attention (the 32,000-token rows: FA2 on A100, FA3 H100)
    step_overhead_s=0.000794,  # per decode iteration (CUDA graphs)
    sequence_s=0.000147,  # per running sequence per iteration (Python scheduler, sampler, detokenizer)
    request_s=0.0426,  # per request: HTTP, chat template and tokenization, scheduling (API server)
    # per MoE layer per iteration: router, align/sort, fused-MoE kernels at small batches (GPUStack's gpt-oss-120b
    # and DeepSeek-R1 runs at concurrency 4: 4.3 and 12.9 ms a step beyond their bytes, Qwen3-8B's 36 dense
    # layers ~1 ms; a cost on every layer, fitted with it, ran to its bound: docs/speed.md)
    moe_layer_overhead_s=0.000215,
    # x every prefill share on the A100 (A100_GPUS): GPUStack's prefill-heavy bf16 Qwen3-14B/32B rows came
    # out 21-40% slow on A100 80GB and 4-35% fast on H100 SXM with one share. A GEMM alone explains ~1.07 of it
    # (stas00/ml-engineering compute/accelerator "Maximum Achievable Matmul FLOPS": bf16 matmul 267.9 of 312 TFLOPS
    # on A100 SXM, 85.9%, 792.1 of 989, 80.1%, on H100 SXM); the rest is vLLM's own: FlashAttention 2 on A100
    # against 3 on H100, and 2,048 batched tokens a step on A100 against 8,192 (EngineArgs.get_batch_defaults)
    prefill_a100=1.32,
    basis=VLLM_SOURCE,
    fitted_to="vLLM",
    borrowed=("decode_compute", "memory_bandwidth", "allreduce_latency_s", "prefill_queue"),
)
SGLANG = replace(
    FITTED,
    prefill=0.224,  # fp8 products (Qwen3-14B-FP8, Qwen3-8B-FP8)
    prefill_bf16=0.688,  # bf16 products
    step_overhead_s=0.00133,  # per decode iteration
    sequence_s=0.000147,  # per running sequence per iteration
    request_s=0.0141,  # per request
    basis=SGLANG_SOURCE,
    fitted_to="SGLang",
    # prefill_attention too: its one long-prompt training figure cannot tell it from the fp8 share (fit.py)
    borrowed=(
        "prefill_attention",
        "decode_compute",
        "memory_bandwidth",
        "allreduce_latency_s",
        "prefill_queue",
        "moe_layer_overhead_s",  # its MoE figures are batches of hundreds (ShareGPT): TensorRT-LLM's 0
    ),
)
OWN = {"trtllm": FITTED, "vllm": VLLM, "sglang": SGLANG}


def efficiency_for(engine: str) -> Efficiency:
    """The efficiencies used for ``engine``: its own fit where it has one (the names it borrows from TensorRT-LLM's
    listed in ``borrowed``), else TensorRT-LLM's, labelled as fitted to another engine."""
    if engine in OWN:
        return OWN[engine]
    names = ("prefill_compute", "prefill_compute_bf16", "prefill_attention", "decode_compute", "memory_bandwidth")
    return replace(
        FITTED,
        basis=f"{FIT_SOURCE}; {engine} has no fitted figures: TensorRT-LLM's used",
        borrowed=(*names, "step_overhead_s", "allreduce_latency_s", "prefill_queue", "moe_layer_overhead_s"),
    )
