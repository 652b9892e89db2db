"""A plan's ledger lines taken from what an engine measured at start-up (``plan --from-log LOG``).

A user who booted once has the figures kvbudget otherwise estimates: the GPU's total as the engine
saw it (CUDA's figure, not nvidia-smi's), the weights as loaded, and the runtime overhead the engine
profiled. Each becomes a ledger line labelled ``measured`` with the log line it came from, so plans
for other caps, cache dtypes and session counts on that card start from real numbers.

Per engine (what its planner subtracts; see kvbudget.plan.budget):
* vLLM: total_gpu_memory; weights ("Model loading took" / "model weights take", per GPU); overhead =
  activation peak + non-torch memory, + CUDA graphs where V1 >= 0.21 subtracts them (gpu_worker.py).
* SGLang: memory free before loading ("Load weight begin. avail mem"); weights ("Load weight end ...
  mem usage"). Its overhead is the share mem_fraction_static leaves, not a profiled figure.
* llama.cpp / Ollama: weights = the model buffers; overhead = the compute buffers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvbudget.engines import EngineRef, version_tuple
from kvbudget.measure.logs.record import EngineLog, Figure

VLLM_GRAPHS_SUBTRACTED_SINCE = (0, 21)  # vLLM V1 gpu_worker: KV memory excludes CUDA graph memory from 0.21


@dataclass(frozen=True)
class Measured:
    bytes: int
    basis: str


@dataclass
class LogInputs:
    """What a start-up log contributes to a plan; None where the log did not measure it."""

    engine: EngineRef
    gpu_memory: Measured | None = None
    weights_per_gpu: Measured | None = None
    parallel: int = 1  # tp x pp of the logged run: per-GPU weights x parallel = the whole model
    overhead: Measured | None = None
    utilization: float | None = None
    max_num_batched_tokens: int | None = None
    notes: list[str] = field(default_factory=list)


def _line(log: EngineLog, fig: Figure) -> str:
    return f"{log.path}:{fig.line} '{fig.text}'"


def _sum(log: EngineLog, names: tuple[str, ...]) -> Measured | None:
    figs = [(n, log.measured[n]) for n in names if n in log.measured]
    if not figs:
        return None
    return Measured(sum(int(f.value) for _, f in figs), " + ".join(f"{n} {_line(log, f)}" for n, f in figs))


def _int_setting(log: EngineLog, name: str) -> int | None:
    value = log.setting(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def log_inputs(log: EngineLog) -> LogInputs:
    from kvbudget.engines import parse_engine

    name = "llamacpp" if log.engine == "ollama" else log.engine
    version = log.version if log.engine in ("vllm", "sglang") and log.version else None
    engine = parse_engine(f"{name}@{version}" if version else name)
    out = LogInputs(engine)
    out.parallel = (_int_setting(log, "tp") or 1) * (_int_setting(log, "pp") or 1)
    util = log.setting("utilization")
    out.utilization = util if isinstance(util, float) else None
    out.max_num_batched_tokens = _int_setting(log, "max_num_batched_tokens")
    weights = log.measured.get("weights_bytes")
    if weights is not None:
        out.weights_per_gpu = Measured(int(weights.value), f"measured: {_line(log, weights)} per GPU")
    if log.engine == "vllm":
        total = log.measured.get("total_gpu_memory_bytes")
        if total is not None:
            out.gpu_memory = Measured(int(total.value), f"measured: CUDA total as vLLM saw it, {_line(log, total)}")
        names: tuple[str, ...] = ("activation_peak_bytes", "non_torch_bytes")
        if log.generation == "V1" and version_tuple(engine.version) >= VLLM_GRAPHS_SUBTRACTED_SINCE:
            names += ("cuda_graph_bytes",)
        if all(n in log.measured for n in names[:2]):
            out.overhead = _sum(log, names)
        elif weights is not None:
            out.notes.append("the log has no activation/non-torch profile: the overhead stays a heuristic")
    elif log.engine == "sglang":
        free = log.measured.get("free_before_load_bytes")
        if free is not None:
            out.gpu_memory = Measured(int(free.value), f"measured: free before loading, {_line(log, free)}")
    else:
        out.overhead = _sum(log, ("compute_buffer_bytes",))
    return out
