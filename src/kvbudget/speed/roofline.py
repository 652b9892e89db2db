"""Seconds from FLOPs and bytes: the roofline of one deployment (one replica of ``tp`` GPUs).

* Prefill is compute-bound: linear FLOPs over the GPU's dense peak at the precision the engine multiplies in,
  over the fitted prefill efficiency of the weights' kind (fitted apart for fp8 / fp4 checkpoints and for bf16
  ones: a bf16 GEMM reaches a larger share of its peak). An fp8 / fp4 checkpoint on a GPU without those tensor
  cores multiplies at the bf16 peak (weight-only kernels: vLLM's Marlin W8A16 on Ampere) at the lower of two
  shares: the bf16 one (widening the weights never beats a bf16 GEMM) and what a GPU with the format would reach,
  the format's share x the datasheets' ratio of its peak to bf16 (``FORMAT_PEAK_RATIO``). Such a GPU gains from the
  checkpoint's fewer weight bytes only, never from the format's compute. Plus attention FLOPs over the bf16 peak,
  over their own fitted share (``prefill_attention``): FlashAttention runs in bf16 whatever the weights'
  precision, so an fp8 or fp4 model's attention is not costed at its GEMMs' share (docs/speed.md). An fp8 KV
  cache is read into bf16 attention in SGLang (sgl-project/sglang issue 10083: dequantized at read) but runs in
  fp8 in vLLM's FlashAttention 3 backend (vLLM docs features/quantization/quantized_kvcache.md: queries quantized
  too); costed at the bf16 peak all the same (no published figure of it to fit), so such a vLLM prefill comes out
  slower than it runs.
* A decode iteration takes the longer of reading its bytes (weights touched + every sequence's cache) at the
  fitted share of the memory bandwidth and computing its FLOPs at the fitted share of the peak, plus a fixed
  per-iteration cost (scheduling, sampling, kernel launches: fitted) and, for engines whose host work grows with
  the batch (vLLM, SGLang: scheduling, sampling and detokenizing each sequence in Python), a cost per running
  sequence (fitted; 0 for TensorRT-LLM, whose figures need none).
* Tensor parallelism splits FLOPs, weights and cache ``tp`` ways and adds two all-reduces per layer (after
  attention and after the MLP) of the step's activations (bf16), a ring all-reduce moving 2 (tp-1)/tp of them
  over the interconnect, each with a fixed latency (fitted).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.speed.efficiency import A100_GPUS, Efficiency
from kvbudget.speed.work import ModelWork

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from collections.abc import Callable

ACTIVATION_BYTES = 2  # bf16 activations cross the all-reduce in every engine modelled
# a format's dense peak over the bf16 one on the GPUs that have its tensor cores (their datasheets: fp8 twice bf16 on
# Ada, Hopper and Blackwell, fp4 four times on Blackwell; tests/speed pins it for the catalog): a GPU without the
# format runs the checkpoint weight-only at bf16 no faster than one with it (Roofline.prefill_efficiency)
FORMAT_PEAK_RATIO = {"fp8": 2.0, "fp4": 4.0}


@dataclass(frozen=True)
class Machine:
    """One replica's rates: per-GPU peaks (FLOP/s), bandwidth (B/s), the link (B/s per direction) and ``tp``."""

    linear_flops: float  # dense peak at the compute precision of the weights' products
    attention_flops: float  # dense bf16 peak
    bandwidth: float
    link: float
    tp: int
    # the weights' product format: "bf16" (a bf16 checkpoint, or weight-only int quantization widened to bf16),
    # "fp8" or "fp4" (those checkpoints); with ``native`` False the GPU lacks the format's tensor cores and
    # ``linear_flops`` is its bf16 peak (weight-only: Roofline.prefill_efficiency)
    products: str = "bf16"
    native: bool = True
    gpu: str = ""  # the catalog GPU's id ("": none, as the simulator's measured machine)

    @property
    def a100(self) -> bool:
        """One of the GPUs ``Efficiency.prefill_a100`` was fitted on or stands for (``A100_GPUS``: the A100 in
        every memory size and form, and the A800, its chip at its clocks). Not every compute capability 8.0 GPU: the
        A30 shares the capability but not the chip's size or bandwidth, and no published figure measures it."""
        return self.gpu in A100_GPUS


@dataclass(frozen=True)
class Step:
    """One decode iteration: its seconds and what each roof alone would take."""

    seconds: float
    memory_s: float
    compute_s: float
    overhead_s: float
    allreduce_s: float
    bytes: float
    flops: float

    @property
    def bound(self) -> str:
        return "memory bandwidth" if self.memory_s >= self.compute_s else "compute"


@dataclass(frozen=True)
class Roofline:
    """A model on a machine with efficiencies; ``weights_per_gpu`` bytes resident on each GPU and ``kv_bytes``
    the engine's cache bytes per GPU for (tokens, sequences)."""

    work: ModelWork
    machine: Machine
    efficiency: Efficiency
    weights_per_gpu: int
    total_params: int
    kv_bytes: Callable[[int, int], int]

    def allreduce_seconds(self, tokens: int) -> float:
        tp = self.machine.tp
        if tp <= 1:
            return 0.0
        moved = 2 * (tp - 1) / tp * tokens * self.work.hidden * ACTIVATION_BYTES
        return 2 * self.work.layers * (self.efficiency.allreduce_latency_s + moved / self.machine.link)

    @property
    def prefill_efficiency(self) -> float:
        """The fitted share of the peak in prefill of the weights' products (``Efficiency.prefill_bf16`` for bf16
        ones, ``Efficiency.prefill`` for fp8 / fp4 ones on their own tensor cores; weight-only, on a GPU without
        them, the lower of the bf16 share and the format's share x ``FORMAT_PEAK_RATIO``; attention has its own:
        ``Efficiency.prefill_attention``)."""
        e, m = self.efficiency, self.machine
        if m.products == "bf16":
            share = e.prefill_bf16
        elif m.native:
            share = e.prefill
        else:  # weight-only at the bf16 peak: no faster than a bf16 GEMM, nor than a GPU with the format's cores
            share = min(e.prefill_bf16, e.prefill * FORMAT_PEAK_RATIO[m.products])
        return share * self.a100_factor

    @property
    def attention_efficiency(self) -> float:
        """The fitted share of the bf16 peak in prefill attention on this machine (``Efficiency.prefill_attention``,
        x ``Efficiency.prefill_a100`` on the A100)."""
        return self.efficiency.prefill_attention * self.a100_factor

    @property
    def a100_factor(self) -> float:
        """The ratio of every prefill share on this machine to the fitted one: ``Efficiency.prefill_a100`` on the
        GPUs it was fitted for (``Machine.a100``), else 1."""
        return self.efficiency.prefill_a100 if self.machine.a100 else 1.0

    def prefill_seconds(self, new: int, cached: int, sequences: int) -> float:
        """Seconds to prefill ``sequences`` prompts of ``new`` tokens after ``cached`` prefix-cache hits each."""
        if new <= 0 or sequences <= 0:
            return 0.0
        m, tp = self.machine, self.machine.tp
        linear = self.work.linear_flops(new * sequences, sequences) / tp / m.linear_flops
        attention = self.work.attention_flops(cached, new) * sequences / tp / m.attention_flops
        return (
            linear / self.prefill_efficiency
            + attention / self.attention_efficiency
            + self.allreduce_seconds(new * sequences)
        )

    def decode_step(self, batch: int, context: int) -> Step:
        """One iteration of ``batch`` sequences at ``context`` tokens each."""
        attention = batch * self.work.attention_flops(context - 1, 1)
        return self.iteration(batch, self.kv_bytes(context, batch), attention)

    def iteration(self, batch: int, kv_bytes: int, attention_flops: float) -> Step:
        """One decode iteration of ``batch`` sequences whose caches hold ``kv_bytes`` per GPU in all and whose
        attention over them costs ``attention_flops`` (whole model, before tensor parallelism)."""
        weights, matmul, fixed = self.decode_terms(batch)
        allreduce = self.allreduce_seconds(batch)
        overhead = self.efficiency.step_overhead_s + fixed - allreduce  # + the per-sequence seconds
        data = weights + kv_bytes
        flops = (matmul + attention_flops) / self.machine.tp
        memory_s, compute_s = self._roofs(data, flops)
        seconds = max(memory_s, compute_s) + self.efficiency.step_overhead_s + fixed
        return Step(seconds, memory_s, compute_s, overhead, allreduce, data, flops)

    def iteration_seconds(self, terms: tuple[float, int, float], kv_bytes: int, attention_flops: float) -> float:
        """``iteration(batch, kv_bytes, attention_flops).seconds`` from ``terms = decode_terms(batch)``: the
        simulator asks it twice a step and keeps the terms per batch size (tests/speed pins the equality)."""
        weights, matmul, fixed = terms
        memory_s, compute_s = self._roofs(weights + kv_bytes, (matmul + attention_flops) / self.machine.tp)
        return max(memory_s, compute_s) + self.efficiency.step_overhead_s + fixed

    def decode_terms(self, batch: int) -> tuple[float, int, float]:
        """What one decode iteration of ``batch`` sequences costs whatever their caches hold: the weights it reads
        per GPU (bytes), its matrix products' FLOPs (whole model) and its seconds that add to the roofs: the
        all-reduces and the engine's per-sequence cost (``Efficiency.sequence_s`` x ``batch``)."""
        weights = self.weights_per_gpu * self.work.read_params(batch) / self.total_params
        e, work = self.efficiency, self.work
        fixed = self.allreduce_seconds(batch) + e.sequence_s * batch + work.moe_layers * e.moe_layer_overhead_s
        return weights, self.work.decode_flops(batch), fixed

    def _roofs(self, data: float, flops: float) -> tuple[float, float]:
        """Seconds of an iteration's reads (``data`` bytes per GPU) and of its ``flops`` (per GPU), each roof alone."""
        m, e = self.machine, self.efficiency
        memory_s = data / (m.bandwidth * e.bandwidth)
        compute_s = flops / (m.linear_flops * e.decode_compute) if m.linear_flops else 0.0
        return memory_s, compute_s
