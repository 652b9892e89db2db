"""The speed model's efficiencies: fitted, not guessed (docs/speed.md has each with its figures and errors).

Fitted by ``bench/speed.py --fit`` (kvbudget.speed.fit) to the training half of the published measurements in
tests/data/speed/ (TensorRT-LLM's performance overview tables, H100 SXM and H200 SXM, FP8 Llama-3.1-8B and
Llama-3.3-70B, trtllm-bench offline throughput); the other half and every Llama-3.1-405B figure are held out,
and tests/speed/test_fit.py holds the model to the errors docs/speed.md states. Only TensorRT-LLM published
enough fixed-shape figures: for vLLM, SGLang and the rest the same efficiencies are used, labelled as fitted to
another engine.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Efficiency:
    """Shares of the datasheet roofs an engine reaches, and its fixed costs.

    ``prefill``: of the dense peak in prefill; ``decode_compute``: of the dense peak in a compute-bound decode
    iteration; ``bandwidth``: of the memory bandwidth in a memory-bound one; ``step_overhead_s``: fixed seconds
    per decode iteration; ``allreduce_latency_s``: fixed seconds per all-reduce (tensor parallelism)."""

    prefill: float
    decode_compute: float
    bandwidth: float
    step_overhead_s: float
    allreduce_latency_s: float
    basis: str

    def to_dict(self) -> dict[str, object]:
        return {
            "prefill_compute": self.prefill,
            "decode_compute": self.decode_compute,
            "memory_bandwidth": self.bandwidth,
            "step_overhead_s": self.step_overhead_s,
            "allreduce_latency_s": self.allreduce_latency_s,
            "basis": self.basis,
        }


FIT_SOURCE = (
    "fitted to TensorRT-LLM performance overview (docs/source/performance/perf-overview.md, v1.0 tables: "
    "trtllm-bench offline throughput, H100/H200 SXM, FP8), training half; see docs/speed.md"
)

# bench/speed.py --fit prints these (kvbudget.speed.fit.fit on the training figures)
FITTED = Efficiency(
    prefill=0.570,  # of the dense peak in prefill
    decode_compute=0.392,  # of the dense peak in a compute-bound decode iteration
    bandwidth=0.740,  # of the datasheet memory bandwidth
    step_overhead_s=0.0033,  # per decode iteration
    allreduce_latency_s=20.5e-6,  # per all-reduce (2 per layer)
    basis=FIT_SOURCE,
)


def efficiency_for(engine: str) -> Efficiency:
    """The efficiencies used for ``engine``: the fitted ones, labelled when fitted to another engine."""
    if engine == "trtllm":
        return FITTED
    from dataclasses import replace

    return replace(FITTED, basis=f"{FIT_SOURCE}; {engine} has no fitted figures: TensorRT-LLM's used")
