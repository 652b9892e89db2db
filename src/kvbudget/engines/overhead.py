"""Runtime memory besides weights and KV (activations, non-torch memory, CUDA graphs), per GPU.

It cannot be known exactly offline: it is a labelled heuristic with a low-high range, re-derived from
measured vLLM profiles, unless the user passes a measured ``--overhead`` (or ``plan --from-log``).
Each engine's ``Rules.overhead`` picks the parts that apply to it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvbudget.model.spec import ModelSpec
from kvbudget.provenance import Label

GiB = 2**30

# Measured ranges (tests/data/logs/vllm_profiles.csv and SOURCES.md, vLLM logs of issues #10517, #12126,
# #13061, #14452, #15815, #52872): non-torch memory 0.16-0.35 GiB on one GPU (up to 0.4 with NCCL);
# CUDA graphs 0.1-0.9 GiB where V1 >= 0.20 subtracts them; activation peak 1.0-1.35 x the hidden and MLP
# activations of the profiled batch (Llama-3.1-8B at 20,000 and 29,000 tokens: 1.23x and 1.24x).
NON_TORCH = (int(0.15 * GiB), int(0.4 * GiB))
GRAPHS = (int(0.1 * GiB), int(0.9 * GiB))
ACT_FACTOR = (1.0, 1.35)
SAMPLER_SEQUENCES = 256  # fp32 logits of this many sequences held by the sampler during profiling


@dataclass(frozen=True)
class Site:
    """Where an engine profiles its runtime memory: the tensor-parallel degree, the tokens of its profiling
    batch (and where that figure comes from), and the GPU (its memory, its catalog label and interconnect;
    empty when the plan gives a bare ``--gpu-memory``)."""

    tp: int
    batched: int
    batched_basis: str
    gpu_memory: int = 0
    gpu_label: str = ""
    interconnect: str | None = None
    context: int = 0  # tokens per session (llama.cpp: one stream's cells, the scores' width without flash attention)
    flash_attn: bool = True
    max_num_seqs: int | None = None  # vLLM --max-num-seqs as set; None: its default for the GPU
    pp: int = 1  # pipeline stages: the first GPU holds the first stage (vLLM samples on the last stage only)
    quantized: bool = (
        False  # a quantized checkpoint or --weights precision (vLLM 0.22-0.23 keep those on Model Runner V1)
    )
    enforce_eager: bool = False  # vLLM --enforce-eager: no CUDA graphs captured, so none reserved
    flashinfer_sampler: bool | None = None  # vLLM VLLM_USE_FLASHINFER_SAMPLER; None: the release's default path
    attn_backend: str | None = None  # TensorRT-LLM attn_backend; None: TRTLLM, its default


@dataclass(frozen=True)
class Overhead:
    """Runtime memory besides weights and KV, per GPU."""

    bytes: int
    low: int
    high: int
    provenance: Label
    basis: str
    # bytes more the last pipeline stage holds than the GPU this overhead is for (vLLM: its dummy sampler run, which
    # only the last stage makes); 0 without pipeline parallelism
    last_stage_extra: int = 0


def _int(cfg: dict[str, object], key: str, default: int) -> int:
    value = cfg.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


# Where a config lacks a size the overhead model reads, a stand-in takes its place (dims: a Llama-3-sized
# vocabulary and hidden width, the 4 x hidden MLP of the original transformer); the ledger says which (assumed_dims)
_READ = (("hidden_size", "hidden size"), ("intermediate_size", "MLP width"), ("vocab_size", "vocabulary"))


def dims(spec: ModelSpec) -> tuple[int, int, int]:
    cfg = spec.config
    hidden = _int(cfg, "hidden_size", 4096)
    return hidden, _int(cfg, "intermediate_size", 4 * hidden), _int(cfg, "vocab_size", 128_000)


def assumed_dims(spec: ModelSpec, basis: str) -> str:
    """The sizes an overhead of ``basis`` read that the config does not give, with the stand-in each took
    ("vocabulary not in the config: 128,000 assumed"); empty when the config gives them all. The MLP width only
    where the basis used it (a MoE profile reads its experts' buffers instead)."""
    hidden, inter, vocab = dims(spec)
    figures = {"hidden_size": hidden, "intermediate_size": inter, "vocab_size": vocab}
    used = {"hidden_size": True, "intermediate_size": f"intermediate {inter}" in basis, "vocab_size": True}
    missing = [
        f"{words} not in the config: {figures[key]:,} assumed"
        for key, words in _READ
        if used[key] and _int(spec.config, key, 0) == 0
    ]
    return "; ".join(missing)


def activations(spec: ModelSpec, tp: int, batched: int) -> int:
    """Hidden and MLP activations of the profiled batch: T x (4 x hidden + 2 x intermediate / tp) x 2 B."""
    hidden, inter, _ = dims(spec)
    return batched * (4 * hidden + 2 * inter // tp) * 2


def activation_overhead(spec: ModelSpec, *, tp: int, batched: int, batched_basis: str, graphs: bool) -> Overhead:
    """A server that profiles a batch: activations x 1.0-1.35 (the measured range), the sampler's fp32 logits
    for 256 sequences x vocab, non-torch memory 0.15-0.4 GiB, and CUDA graphs 0.1-0.9 GiB where the engine
    subtracts them before sizing the cache. The plan reserves the high end; docs/measure.md gives this
    model's error against real logs."""
    hidden, inter, vocab = dims(spec)
    act = activations(spec, tp, batched)
    logits = SAMPLER_SEQUENCES * vocab * 4 // tp
    graph = GRAPHS if graphs else (0, 0)
    low = int(ACT_FACTOR[0] * act) + logits + NON_TORCH[0] + graph[0]
    high = int(ACT_FACTOR[1] * act) + logits + NON_TORCH[1] + graph[1]
    basis = (
        f"heuristic from measured vLLM logs: activations at {batched:,} batched tokens"
        + (f" ({batched_basis})" if batched_basis else "")
        + f" x 1.0-1.35 (hidden {hidden}, intermediate {inter}), sampler logits, non-torch 0.15-0.4 GiB"
        + (", CUDA graphs 0.1-0.9 GiB" if graphs else "")
        + "; measure it (calibrate, plan --from-log) or pass --overhead"
    )
    return Overhead(high, low, high, "heuristic", basis)


def compute_buffer_overhead(spec: ModelSpec, *, ubatch: int, what: str) -> Overhead:
    """An engine that keeps one compute buffer for a ubatch and its logits, and no CUDA-graph reserve
    (llama.cpp and the engines built on it)."""
    hidden, inter, vocab = dims(spec)
    act = activations(spec, 1, ubatch)
    logits = ubatch * vocab * 4  # the output buffer for one ubatch of logits
    low, high = act + logits, int(ACT_FACTOR[1] * act) + logits + NON_TORCH[0]
    basis = (
        f"heuristic: {what} compute buffer for one ubatch of {ubatch:,} tokens (hidden {hidden}, "
        f"intermediate {inter}) and its logits; measure it (calibrate, plan --from-log) or pass --overhead"
    )
    return Overhead(high, low, high, "heuristic", basis)


def plus(overhead: Overhead, extra: int, words: str) -> Overhead:
    """The overhead with a fixed term added to its figure and both ends of its range (0: unchanged)."""
    if not extra:
        return overhead
    return replace(
        overhead,
        bytes=overhead.bytes + extra,
        low=overhead.low + extra,
        high=overhead.high + extra,
        basis=f"{overhead.basis}; + {words}",
    )


def measured_overhead(value: int, basis: str | None = None) -> Overhead:
    return Overhead(value, value, value, "measured", basis or "given with --overhead (measured)")
