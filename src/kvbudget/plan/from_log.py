"""A plan's ledger lines taken from what an engine measured at start-up (``plan --from-log LOG``).

A user who booted once has the figures kvbudget otherwise estimates: the GPU's total as the engine
saw it (CUDA's figure, not nvidia-smi's), the weights as loaded, and the runtime overhead the engine
profiled. Each becomes a ledger line labelled ``measured`` with the log line it came from, so plans
for other caps, cache dtypes and session counts on that card start from real numbers.

The weights, parallel sizes and settings are read the same way for every engine; which figures stand
for the GPU total and the overhead is each engine's rule (``Rules.logged_memory``: vLLM's profile,
SGLang's free memory before loading, llama.cpp's compute buffers).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.engines import EngineRef
from kvbudget.engines.records import Measured, log_line
from kvbudget.measure.logs.record import EngineLog, Figure, Refusal


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
    path: str = ""
    tp: int | None = None  # None: the log does not state it
    pp: int | None = None
    context: int | None = None  # max_model_len / context length the engine ran with
    cache_dtype: str | None = None
    block_size: int | None = None
    kv_pool: Figure | None = None  # KV memory per GPU as printed (vLLM "Available KV cache memory")
    kv_tokens: Figure | None = None  # the engine's own capacity figures, as printed
    kv_blocks: Figure | None = None
    refusal: Refusal | None = None
    generation: str | None = None  # vLLM "V0" / "V1"
    enforce_eager: bool = False  # no CUDA graphs, as the log's arguments print it (vLLM enforce_eager, SGLang
    # disable_cuda_graph)
    flashinfer_sampler: bool | None = None  # the sampler line vLLM printed (FlashInfer, or the native fallback)
    log: EngineLog | None = None  # what was read, for the checks that it belongs to the plan (measure/belong.py)


def _int_setting(log: EngineLog, name: str) -> int | None:
    value = log.setting(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def log_inputs(log: EngineLog) -> LogInputs:
    from kvbudget.engines import parse_engine, release_number

    base = parse_engine(log.engine)
    release = release_number(log.version or "")  # "0.33.0-rc2" -> 0.33.0
    engine = parse_engine(f"{log.engine}@{release}") if base.rules.logs_version and release else base
    out = LogInputs(engine, path=log.path, refusal=log.refusal, generation=log.generation, log=log)
    # a log that prints its arguments (vLLM non-default args / engine config, SGLang server_args) omits a
    # default tp/pp of 1; a log without them (prefixes stripped, an excerpt) does not say
    printed_args = log.model is not None
    out.tp = _int_setting(log, "tp") or (1 if printed_args else None)
    out.pp = _int_setting(log, "pp") or (1 if printed_args else None)
    out.parallel = (out.tp or 1) * (out.pp or 1)
    out.context = _int_setting(log, "context")
    dtype = log.setting("cache_dtype")
    out.cache_dtype = dtype if isinstance(dtype, str) and dtype != "auto" else None
    out.block_size = _int_setting(log, "block_size")
    out.kv_tokens, out.kv_blocks = log.figure("kv_tokens"), log.figure("kv_blocks")
    util = log.setting("utilization")
    out.utilization = util if isinstance(util, float) else None
    out.max_num_batched_tokens = _int_setting(log, "max_num_batched_tokens")
    out.enforce_eager = log.setting("enforce_eager") is True
    sampler = log.setting("flashinfer_sampler")
    out.flashinfer_sampler = sampler if isinstance(sampler, bool) else None
    weights = log.measured.get("weights_bytes")
    if weights is not None:
        out.weights_per_gpu = Measured(int(weights.value), f"measured: {log_line(log, weights)} per GPU")
    memory = engine.rules.logged_memory(log)
    out.gpu_memory, out.overhead, out.kv_pool = memory.gpu_memory, memory.overhead, memory.kv_pool
    return out
