"""The ``kvbudget weights`` answer: parameters, bytes per serving precision, and the checkpoint's
exact size when one can be read, with a single figure to plan with.

Precedence of that figure: a measured size given by the user, then the checkpoint's exact tensor
bytes (safetensors headers, Hub metadata, GGUF tensor table), then the computed estimate at the
first requested precision.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kvbudget.errors import KvBudgetError, SourceError
from kvbudget.model.spec import ModelSpec
from kvbudget.weights.params import ParamCount
from kvbudget.weights.precision import WeightEstimate
from kvbudget.weights.sources import WeightSize

SCHEMA_VERSION = 1
DEFAULT_PRECISIONS = ("bf16", "fp8", "int8", "awq", "nvfp4", "mxfp4", "q8_0", "q6_k", "q4_k", "q2_k", "2bit")
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


@dataclass(frozen=True)
class WeightsReport:
    model: str
    count: ParamCount | None
    estimates: tuple[WeightEstimate, ...]
    exact: WeightSize | None = None
    measured: WeightSize | None = None
    notes: tuple[str, ...] = ()

    @property
    def serving(self) -> WeightSize | None:
        """The figure to plan with: measured, else exact, else the first computed estimate."""
        from kvbudget.weights.sources import computed

        if self.measured is not None:
            return self.measured
        if self.exact is not None:
            return self.exact
        return computed(self.estimates[0]) if self.estimates else None

    def to_json(self) -> dict[str, object]:
        """The versioned JSON contract of ``kvbudget weights --json``."""
        count = self.count
        serving = self.serving
        return {
            "schema_version": SCHEMA_VERSION,
            "model": self.model,
            "model_type": count.model_type if count else None,
            "params": None
            if count is None
            else {
                "total": count.total,
                "active": count.active,
                "tied_embeddings": count.tied_embeddings,
                "components": [
                    {"name": c.name, "params": c.params, "active": c.active, "kinds": dict(c.kinds)}
                    for c in count.components()
                ],
            },
            "precisions": [
                {
                    "name": e.precision.name,
                    "bits_per_weight": float(e.precision.bits),
                    "group_size": e.precision.group_size,
                    "description": e.precision.description,
                    "bytes": e.total_bytes,
                    "unquantized_bytes": e.unquantized_bytes,
                    "unquantized": e.unquantized(),
                    "provenance": "computed",
                    "basis": e.basis,
                }
                for e in self.estimates
            ],
            "exact": self.exact.to_json() if self.exact else None,
            "measured": self.measured.to_json() if self.measured else None,
            "serving": serving.to_json() if serving else None,
            "notes": [*(count.notes if count else ()), *self.notes],
        }


def weights_report(
    ref: str,
    *,
    precisions: Sequence[str] = DEFAULT_PRECISIONS,
    group_size: int = 128,
    quantize_embeddings: bool = False,
    keep: Sequence[str] = (),
    weights_size: str | None = None,
    revision: str | None = None,
) -> WeightsReport:
    """Everything ``kvbudget weights`` shows for one model reference."""
    from kvbudget.model import catalog
    from kvbudget.model.sources import resolve
    from kvbudget.weights import sources
    from kvbudget.weights.params import count_params
    from kvbudget.weights.precision import estimate_weights, weight_precision

    notes: list[str] = []
    exact: WeightSize | None = None
    count: ParamCount | None = None
    path = Path(ref).expanduser()
    in_catalog = catalog.lookup(ref) is not None
    local = not in_catalog and path.exists()
    safetensors = local and path.is_dir() and bool(sources.safetensors_files(path))
    gguf_dir = local and path.is_dir() and not safetensors and bool(sources.gguf_files(path))
    if (local and path.is_file() and path.suffix.lower() == ".gguf") or gguf_dir:
        exact = sources.from_gguf(path)
        notes.append("GGUF: exact bytes from the tensor table; give the model's config.json for a parameter breakdown")
    elif safetensors:
        exact = sources.from_safetensors(path)
        if (path / "config.json").is_file():
            count = _count_or_note(resolve(ref), notes)
        else:
            notes.append("no config.json in the directory: no parameter breakdown")
    else:
        spec = resolve(ref)
        if not local and not in_catalog and _REPO_ID.match(ref):
            try:
                exact = sources.from_hub(ref, revision=revision)
            except SourceError as exc:
                notes.append(f"exact size unavailable: {exc}")
        # With nothing else to show, an architecture without a rule fails closed.
        fail_closed = exact is None and weights_size is None
        count = count_params(spec) if fail_closed else _count_or_note(spec, notes)
    estimates = []
    if count is not None:
        for name in precisions:
            precision = weight_precision(name, group_size=group_size)
            estimates.append(
                estimate_weights(count, precision, quantize_embeddings=quantize_embeddings, keep_components=keep)
            )
    measured = sources.measured(weights_size) if weights_size is not None else None
    if measured is not None and estimates:
        first = estimates[0]
        notes.append(
            f"measured {measured.bytes:,} B overrides the computed {first.total_bytes:,} B at {first.precision.name} "
            f"({measured.bytes - first.total_bytes:+,} B)"
        )
    return WeightsReport(spec_name(ref, count), count, tuple(estimates), exact, measured, tuple(notes))


def _count_or_note(spec: ModelSpec, notes: list[str]) -> ParamCount | None:
    """The parameter count, or None with a note when an exact or measured figure is there anyway."""
    from kvbudget.weights.params import count_params

    try:
        return count_params(spec)
    except KvBudgetError as exc:
        notes.append(f"no computed figure: {exc}")
        return None


def spec_name(ref: str, count: ParamCount | None) -> str:
    return count.model if count is not None else Path(ref).name or ref
