"""The speed model's efficiencies: fitted, not guessed (docs/speed.md has each with its figures and errors).

Fitted by ``bench/speed.py`` (kvbudget.speed.fit) to the training part of the published measurements in
tests/data/speed/, in two stages: the five throughput ones on TensorRT-LLM's performance overview tables (H100 SXM
and H200 SXM, FP8 Llama-3.1-8B and Llama-3.3-70B, trtllm-bench offline throughput); then, those held, the bf16
prefill share and the prefill queue factor on the latency figures (TensorRT-LLM v0.5's batch-1 first-token latency
on H100, L40S and A100; NVIDIA NIM 1.8.0's TTFT and inter-token latency of Llama-3.3-70B on 2 x H100). The rest is
held out, and tests/speed/test_fit.py holds the model to the errors docs/speed.md states per kind of figure. Every
figure is of a TensorRT-LLM engine: for vLLM, SGLang and the rest the same efficiencies are used, labelled as
fitted to another engine.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Efficiency:
    """Shares of the datasheet roofs an engine reaches, and its fixed costs.

    ``prefill``: of the dense peak in prefill with fp8 / fp4 products, ``prefill_bf16`` with bf16 ones;
    ``decode_compute``: of the dense peak in a compute-bound decode iteration; ``bandwidth``: of the memory
    bandwidth in a memory-bound one; ``step_overhead_s``: fixed seconds per decode iteration;
    ``allreduce_latency_s``: fixed seconds per all-reduce (tensor parallelism); ``prefill_queue``: the steady-state
    wait for other requests' prefills, as a share of the M/M/1 mean wait (kvbudget.speed.answer.prefill_wait)."""

    prefill: float
    prefill_bf16: float
    decode_compute: float
    bandwidth: float
    step_overhead_s: float
    allreduce_latency_s: float
    prefill_queue: float
    basis: str

    def to_dict(self) -> dict[str, object]:
        return {
            "prefill_compute": self.prefill,
            "prefill_compute_bf16": self.prefill_bf16,
            "decode_compute": self.decode_compute,
            "memory_bandwidth": self.bandwidth,
            "step_overhead_s": self.step_overhead_s,
            "allreduce_latency_s": self.allreduce_latency_s,
            "prefill_queue": self.prefill_queue,
            "basis": self.basis,
        }


FIT_SOURCE = (
    "fitted to TensorRT-LLM performance overview (docs/source/performance/perf-overview.md, v1.0 tables: "
    "trtllm-bench offline throughput, H100/H200 SXM, FP8), TensorRT-LLM v0.5 first-token latency and NVIDIA NIM "
    "1.8.0 TTFT / inter-token latency (Llama-3.3-70B, 2 x H100), training part; see docs/speed.md"
)

# the first five: kvbudget.speed.fit.fit of THROUGHPUT_PARAMETERS on the 20 training figures of
# trtllm_perf_overview.json (tests/speed/test_fit.py); the last two: bench/speed.py --fit (LATENCY_PARAMETERS on
# every training figure, the five held)
FITTED = Efficiency(
    prefill=0.570,  # of the dense peak in prefill
    prefill_bf16=0.779,  # with bf16 products (fitted on TensorRT-LLM v0.5 A100 FP16 first-token latency)
    decode_compute=0.392,  # of the dense peak in a compute-bound decode iteration
    bandwidth=0.740,  # of the datasheet memory bandwidth
    step_overhead_s=0.0033,  # per decode iteration
    allreduce_latency_s=20.5e-6,  # per all-reduce (2 per layer)
    prefill_queue=1.148,  # x the M/M/1 wait for others' prefills (fitted on NIM's TTFT at concurrency 1 and 25)
    basis=FIT_SOURCE,
)


def efficiency_for(engine: str) -> Efficiency:
    """The efficiencies used for ``engine``: the fitted ones, labelled when fitted to another engine."""
    if engine == "trtllm":
        return FITTED
    from dataclasses import replace

    return replace(FITTED, basis=f"{FIT_SOURCE}; {engine} has no fitted figures: TensorRT-LLM's used")
