"""Turning command-line choices into a plan's inputs: which GPU, which weights figure.

Weights, most exact first: a measured size the user gives (labelled "measured"); the checkpoint's
own tensor headers when the model reference is a local directory or GGUF file ("exact"); otherwise
computed from the architecture ("computed") at the requested serving precision, else at the precision
the checkpoint ships (its ``quantization_config``: weights/checkpoint.py), else in the dtype the engine
runs the checkpoint in (a float32 checkpoint runs in bf16 on vLLM).
"""

from __future__ import annotations

from pathlib import Path

from kvbudget import hardware
from kvbudget.errors import InputError
from kvbudget.model.spec import ModelSpec
from kvbudget.provenance import Kind
from kvbudget.weights import sources
from kvbudget.weights.params import count_params
from kvbudget.weights.precision import estimate_weights, weight_precision


def gpu_memory(gpu: str | None, given_bytes: int | None) -> tuple[int, str, Kind | None, str | None]:
    """(bytes per GPU, label, provenance, basis) from ``--gpu NAME`` or ``--gpu-memory SIZE`` (exactly one).

    A catalog GPU gives its total as CUDA reports it (what every engine sizes from), not nvidia-smi's.
    """
    if (gpu is None) == (given_bytes is None):
        field = "--gpu" if gpu is None else "--gpu-memory"  # the one missing, or the second given
        raise InputError(
            f"{field}: give exactly one of --gpu NAME (see `kvbudget gpus`) or --gpu-memory SIZE (e.g. 24GiB)"
        )
    if gpu is not None:
        entry = hardware.gpu(gpu)
        return entry.cuda_total_bytes, entry.name, entry.cuda_provenance, f"{entry.name}: {entry.cuda_basis}"
    assert given_bytes is not None
    return given_bytes, "given", None, None


def weights_figure(
    spec: ModelSpec, model_ref: str, precision: str | None, size: int | None, group_size: int = 128
) -> sources.WeightSize:
    """The weights line of the ledger (whole model, all GPUs)."""
    if size is not None:
        if precision is not None:
            raise InputError("--weights-size: give either --weights PRECISION or --weights-size SIZE, not both")
        return sources.measured(size)
    path = Path(model_ref).expanduser()
    if precision is None and path.exists():
        if path.suffix.lower() == ".gguf" or (path.is_dir() and sources.gguf_files(path)):
            return sources.from_gguf(path)
        if path.is_dir() and sources.safetensors_files(path):
            return sources.from_safetensors(path)
    if precision is None:
        from kvbudget.weights.checkpoint import checkpoint_precision

        shipped = checkpoint_precision(spec)
        if shipped is not None:
            estimate = estimate_weights(count_params(spec), shipped.precision, keep_components=shipped.keep)
            return sources.computed(estimate, f"{shipped.basis}; --weights overrides")
    chosen = weight_precision(precision or spec.dtype, group_size=group_size, what="--weights")
    return sources.computed(estimate_weights(count_params(spec), chosen))
