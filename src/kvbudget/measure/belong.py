"""A measurement belongs to the deployment it is used for, or it is refused.

A start-up log used by ``plan --from-log``, ``calibrate`` or ``report --log`` must be of the model, engine
and GPU being planned; what cannot match is refused with one line naming the mismatch and the fix:

* **Model by name**: a log names its model (vLLM ``model=``, SGLang ``model_path=``); when the name is one
  the catalog knows (a Hub id or its last path part), its geometry (every layer's KV state) must be the
  planned model's. A local path or an alias the catalog does not know is not evidence either way.
* **Model by weights**: the weights the engine loaded (per GPU, x the log's tp x pp) over the planned
  model's parameter count is the bits each parameter took. Every format a serving engine loads lies in
  MIN_BITS..MAX_BITS (llama.cpp's IQ1_S is 1.56 bits; fp32 is 32); outside it, the log loaded another
  model.
* **GPU**: the device total an engine printed (vLLM and TensorRT-LLM read CUDA's own total,
  torch.cuda.mem_get_info) lies within 90-101% of the card's nvidia-smi total (H100 SXM: 79.2 of 79.6 GiB;
  RTX 3090: 23.58 of 24 GiB, tests/data/logs); outside it, the log ran on another card.
* **Engine**: plan/build.py refuses a log of another engine than ``--engine``.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from kvbudget.errors import InputError, KvBudgetError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.hardware import Gpu
    from kvbudget.measure.logs.record import EngineLog, Figure
    from kvbudget.model.spec import ModelSpec

MIN_BITS = {"llamacpp": 1.5, "ollama": 1.5}  # GGUF IQ1_S: 1.5625 bits per weight (llama.cpp ggml-common.h)
DEFAULT_MIN_BITS = 2.0  # vLLM, SGLang, TensorRT-LLM: no loaded format below 2 bits (GPTQ/AQLM 2-bit)
MAX_BITS = 34.0  # fp32 (32) and a margin for buffers the load counts
GPU_LOW, GPU_HIGH = 0.90, 1.01  # CUDA's total over nvidia-smi's: 0.98-0.995 measured


def log_model_name(log: EngineLog) -> str | None:
    for key in ("model", "model_name"):
        value = log.setting(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _catalog_spec(name: str) -> ModelSpec | None:
    """The catalog's model for a name the log printed (a Hub id, or the last part of a path); None if unknown."""
    from kvbudget.model import catalog
    from kvbudget.model.sources import resolve

    for candidate in (name, PurePosixPath(name).name):
        if candidate and len(candidate) <= 200 and catalog.lookup(candidate) is not None:
            return resolve(candidate)
    return None


def check_model(log: EngineLog, spec: ModelSpec, model: str, what: str) -> None:
    """InputError when the log names a model the catalog knows whose geometry is not ``spec``'s."""
    named = log_model_name(log)
    if named is None:
        return
    logged = _catalog_spec(named)
    if logged is None or logged.layers == spec.layers:
        return
    raise InputError(
        f"{what} {log.path}: the log is of {named} ({logged.name}: {_shape(logged)}), not of {model} "
        f"({_shape(spec)}); its figures are that model's: give --model {named} or a log of {model}"
    )


def _shape(spec: ModelSpec) -> str:
    return f"{len(spec.layers)} layers"


def check_weights(
    log: EngineLog, weights: Figure, parallel: int | None, spec: ModelSpec, model: str, what: str
) -> None:
    """InputError when the logged weights (per GPU; ``parallel`` GPUs, None when unknown) cannot be ``spec``'s."""
    from kvbudget.weights.params import count_params

    try:
        params = count_params(spec).total
    except KvBudgetError:  # an architecture whose parameters kvbudget does not count: no evidence
        return
    if params <= 0 or weights.value <= 0:
        return
    low_bits = MIN_BITS.get(log.engine, DEFAULT_MIN_BITS)
    most = weights.high * 8 / params  # the whole model on one GPU: the fewest GPUs, the fewest bytes
    least = weights.low * 8 * (parallel or 1) / params
    if least > MAX_BITS or (parallel is not None and most * parallel < low_bits):
        bits = weights.value * 8 * (parallel or 1) / params
        gpus = f" x {parallel} GPUs" if parallel and parallel > 1 else ""
        raise InputError(
            f"{what} {log.path}: line {weights.line:,}: the engine loaded {weights.text} of weights"
            f"{gpus}, {bits:.3g} bits for each of {model}'s {params:,} parameters; every loadable format takes "
            f"{low_bits:g}-{MAX_BITS:g}: the log is of another model; give the log's model as --model or a log of "
            f"{model}"
        )


def check_gpu(total: Figure | None, gpu: Gpu | None, path: str, what: str) -> None:
    """InputError when the device total the engine printed is not ``gpu``'s."""
    if total is None or gpu is None:
        return
    if not GPU_LOW * gpu.memory_bytes <= total.value <= GPU_HIGH * gpu.memory_bytes:
        gib = gpu.memory_bytes / 2**30
        raise InputError(
            f"{what} {path}: the engine saw a device of {total.text} (line {total.line:,}); --gpu {gpu.id} holds "
            f"{gib:.1f} GiB: the log ran on another GPU; give --gpu of the logged card or a log from a {gpu.id}"
        )


def check_engine(logged: str, planned: str, path: str, what: str) -> None:
    """InputError when a measurement's engine is not the planned one (a log's reader, a load test's server)."""
    if logged != planned:
        raise InputError(
            f"{what} {path}: measured on {logged}, but the plan is for {planned}: its figures are that engine's; "
            f"give --engine {logged} or a measurement of {planned}"
        )


def check_served_model(served: object, spec: ModelSpec, model: str, path: str, what: str = "--loadtest") -> None:
    """InputError when a load test's server served a model the catalog knows whose geometry is not ``spec``'s."""
    if not isinstance(served, str) or not served.strip():
        return
    logged = _catalog_spec(served.strip())
    if logged is None or logged.layers == spec.layers:
        return
    raise InputError(
        f"{what} {path}: the server served {served} ({logged.name}: {_shape(logged)}), not {model} "
        f"({_shape(spec)}): its sessions are that model's; give --model {served} or a load test of {model}"
    )
