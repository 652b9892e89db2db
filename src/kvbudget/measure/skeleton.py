"""Measure the real cache transformers allocates for a model, on a geometry-preserving skeleton, and
compare it with kvbudget's ``transformers`` engine.

The skeleton (``skeleton_config``) keeps every cache-shaping field and shrinks the rest; it is built
with ``AutoModelForCausalLM.from_config(cfg, dtype=<model dtype>)`` from seed 0, runs a prefill of
N random tokens with the cache on and one decode step with the returned cache, and then sums the
cache tensors' ``untyped_storage().nbytes()``, each storage counted once (by data pointer): what is
really allocated, including a sliding layer's storage behind its shorter view. Bytes are attributed
per layer and classified into the engine layout's groups (K/V to the attention group of the layer,
conv and recurrent states to its recurrent group). The prediction is the layout at N + 1 tokens.

torch and transformers are imported only here, lazily (extra ``kvbudget[measure]``).
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass
from typing import Any

from kvbudget.engines import transformers as hf_engine
from kvbudget.engines.base import EngineOptions, Layout
from kvbudget.errors import InputError, MissingExtraError, UnknownArchitectureError
from kvbudget.measure.skeleton_config import skeleton_config
from kvbudget.model.spec import ModelSpec
from kvbudget.precision import parse_cache_dtype

SCHEMA_VERSION = 1
_TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


@dataclass(frozen=True)
class GroupMeasurement:
    """One layout group: what kvbudget predicts and what the cache tensors really hold."""

    kind: str
    label: str
    layers: int
    predicted_bytes: int
    measured_bytes: int

    @property
    def difference(self) -> int:
        """measured - predicted, in bytes."""
        return self.measured_bytes - self.predicted_bytes

    @property
    def match(self) -> bool:
        return self.difference == 0


@dataclass(frozen=True)
class Measurement:
    """A skeleton's real cache next to the prediction, in bytes, for one sequence."""

    model: str
    model_type: str
    tokens: int
    cached_tokens: int
    device: str
    dtype: str
    transformers_version: str
    groups: tuple[GroupMeasurement, ...]
    unclassified_bytes: int
    layer_bytes: tuple[int, ...]
    seconds: float
    warnings: tuple[str, ...] = ()

    @property
    def predicted_bytes(self) -> int:
        return sum(g.predicted_bytes for g in self.groups)

    @property
    def measured_bytes(self) -> int:
        return sum(g.measured_bytes for g in self.groups) + self.unclassified_bytes

    @property
    def difference(self) -> int:
        return self.measured_bytes - self.predicted_bytes

    @property
    def match(self) -> bool:
        return self.difference == 0 and all(g.match for g in self.groups)

    def to_json(self) -> dict[str, object]:
        """The versioned JSON contract of ``kvbudget measure --json``."""
        return {
            "schema_version": SCHEMA_VERSION,
            "model": self.model,
            "model_type": self.model_type,
            "tokens": self.tokens,
            "cached_tokens": self.cached_tokens,
            "device": self.device,
            "dtype": self.dtype,
            "engine": hf_engine.NAME,
            "engine_version": self.transformers_version,
            "predicted_bytes": self.predicted_bytes,
            "measured_bytes": self.measured_bytes,
            "difference_bytes": self.difference,
            "match": self.match,
            "unclassified_bytes": self.unclassified_bytes,
            "groups": [
                {
                    "kind": g.kind,
                    "label": g.label,
                    "layers": g.layers,
                    "predicted_bytes": g.predicted_bytes,
                    "measured_bytes": g.measured_bytes,
                    "difference_bytes": g.difference,
                    "match": g.match,
                }
                for g in self.groups
            ],
            "layer_bytes": list(self.layer_bytes),
            "seconds": round(self.seconds, 3),
            "warnings": list(self.warnings),
        }


def _import() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError:
        raise MissingExtraError(
            "measuring needs torch and transformers; install them with: pip install 'kvbudget[measure]'"
        ) from None
    return torch, transformers


def _build(spec: ModelSpec, tokens: int, torch: Any, transformers: Any, dtype: Any) -> Any:
    kwargs = skeleton_config(spec, tokens + 1)
    try:
        config = transformers.AutoConfig.for_model(spec.model_type, **kwargs)
    except (ValueError, KeyError) as exc:
        raise UnknownArchitectureError(
            f"{spec.name}: transformers {transformers.__version__} cannot build a {spec.model_type!r} skeleton "
            f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
        ) from None
    torch.manual_seed(0)
    if spec.model_type == "mllama_text_model":
        # MllamaTextConfig has no AutoModelForCausalLM entry of its own (models/auto/modeling_auto.py).
        return transformers.MllamaForCausalLM._from_config(config, dtype=dtype)
    return transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)


def _cache_of(output: Any) -> Any:
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def _run(model: Any, tokens: int, torch: Any, device: str) -> Any:
    """Prefill ``tokens`` random tokens with the cache on, then one decode step; return the cache."""
    import inspect

    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    vocab = int(model.config.get_text_config(decoder=True).vocab_size)
    generator = torch.Generator(device="cpu").manual_seed(0)
    prompt = torch.randint(3, vocab, (1, tokens), generator=generator).to(device)
    step = torch.randint(3, vocab, (1, 1), generator=generator).to(device)
    with torch.no_grad():
        cache = _cache_of(model(input_ids=prompt, use_cache=True))
        return _cache_of(model(input_ids=step, use_cache=True, **{cache_kw: cache}))


def _layer_tensors(layer: Any) -> dict[str, list[Any]]:
    """A cache layer's tensors by what holds them, whatever its class: "kv" (keys, values), "indexer"
    (the sparse-attention indexer's keys, DynamicIndexedLayer) and "recurrent" (conv + recurrent state)."""
    out: dict[str, list[Any]] = {"kv": [], "indexer": [], "recurrent": []}
    for name in ("keys", "values"):
        tensor = getattr(layer, name, None)
        if tensor is not None:
            out["kv"].append(tensor)
    tensor = getattr(layer, "indexer_keys", None)
    if tensor is not None:
        out["indexer"].append(tensor)
    for name in ("conv_states", "recurrent_states"):
        held = getattr(layer, name, None)
        if isinstance(held, dict):
            out["recurrent"].extend(t for t in held.values() if t is not None)
    return out


def _owners(layout: Layout) -> dict[str, dict[int, int]]:
    """For each holder ("kv", "indexer", "recurrent"): layer index -> position of its group in the layout."""
    owners: dict[str, dict[int, int]] = {"kv": {}, "indexer": {}, "recurrent": {}}
    for pos, group in enumerate(layout.groups):
        target = owners[group.kind] if group.kind in ("indexer", "recurrent") else owners["kv"]
        for index in group.layer_indices:
            target[index] = pos
    return owners


def _tally(cache: Any, layout: Layout) -> tuple[list[int], int, list[int]]:
    """Measured bytes per layout group, unclassified bytes, and bytes per cache layer."""
    owners = _owners(layout)
    per_group = [0] * len(layout.groups)
    per_layer: list[int] = []
    unclassified = 0
    seen: set[int] = set()
    for index, layer in enumerate(cache.layers):
        layer_total = 0
        for holder, tensors in _layer_tensors(layer).items():
            owner = owners[holder]
            for tensor in tensors:
                storage = tensor.untyped_storage()
                size = int(storage.nbytes())
                pointer = int(storage.data_ptr())
                if size == 0 or pointer in seen:
                    continue
                seen.add(pointer)
                layer_total += size
                if index in owner:
                    per_group[owner[index]] += size
                else:
                    unclassified += size
        per_layer.append(layer_total)
    return per_group, unclassified, per_layer


def measure(spec: ModelSpec, tokens: int = 64, device: str = "cpu") -> Measurement:
    """Build ``spec``'s skeleton, prefill ``tokens`` tokens, decode one, and compare its real cache bytes
    with the ``transformers`` engine's layout at ``tokens + 1`` tokens (one sequence)."""
    if tokens < 1:
        raise InputError(f"--tokens: {tokens} must be at least 1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # import-time and build-time warnings of the skeleton are not the user's
        torch, transformers = _import()
    if device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: torch sees no CUDA device here; use --device cpu")
    cache_dtype = parse_cache_dtype(spec.dtype, what="model dtype")
    if cache_dtype.name not in _TORCH_DTYPES:
        raise InputError(f"{spec.name}: model dtype {spec.dtype} is not a compute dtype transformers can run")
    dtype = getattr(torch, _TORCH_DTYPES[cache_dtype.name])
    started = time.perf_counter()
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = _build(spec, tokens, torch, transformers, dtype).to(device).eval()
    finally:
        transformers.logging.set_verbosity(verbosity)
    return measure_model(spec, model, tokens, device, started)


def measure_model(
    spec: ModelSpec, model: Any, tokens: int, device: str = "cpu", started: float | None = None
) -> Measurement:
    """Prefill ``tokens`` tokens into a built transformers ``model`` of ``spec``, decode one, and compare its real
    cache bytes with the ``transformers`` engine's layout at ``tokens + 1`` tokens (one sequence)."""
    torch, transformers = _import()
    started = time.perf_counter() if started is None else started
    cache_dtype = parse_cache_dtype(spec.dtype, what="model dtype")
    version = str(transformers.__version__)
    # The skeleton sees text only, so cross-attention layers hold no image tokens.
    layout = hf_engine.layout(spec, cache_dtype, cache_dtype, 1, EngineOptions(image_tokens=0), version)
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cache = _run(model, tokens, torch, device)
    finally:
        transformers.logging.set_verbosity(verbosity)
    per_group, unclassified, per_layer = _tally(cache, layout)
    seconds = time.perf_counter() - started
    cached = tokens + 1
    groups = tuple(
        GroupMeasurement(g.kind, g.label, g.layers, g.bytes_at(cached, 1), measured)
        for g, measured in zip(layout.groups, per_group, strict=True)
    )
    return Measurement(
        spec.name,
        spec.model_type,
        tokens,
        cached,
        device,
        cache_dtype.name,
        version,
        groups,
        unclassified,
        tuple(per_layer),
        seconds,
        layout.warnings,
    )


def render_measurement(m: Measurement) -> str:
    """The text table of ``kvbudget measure``: group, predicted, measured, match."""
    from kvbudget.render.text import fit, table
    from kvbudget.units import format_int

    rows = [
        [
            g.label,
            str(g.layers),
            format_int(g.predicted_bytes),
            format_int(g.measured_bytes),
            f"{g.difference:+,}",
            "yes" if g.match else "NO",
        ]
        for g in m.groups
    ]
    if m.unclassified_bytes:
        rows.append(
            ["(not in any group)", "", "0", format_int(m.unclassified_bytes), f"{m.unclassified_bytes:+,}", "NO"]
        )
    rows.append(
        [
            "total",
            str(len(m.layer_bytes)),
            format_int(m.predicted_bytes),
            format_int(m.measured_bytes),
            f"{m.difference:+,}",
            "yes" if m.match else "NO",
        ]
    )
    head = (
        f"{m.model} ({m.model_type}) · transformers {m.transformers_version} · cache {m.dtype} · {m.device}\n"
        f"skeleton: prefill {format_int(m.tokens)} tokens + 1 decode step = {format_int(m.cached_tokens)} tokens "
        f"cached, one sequence · {m.seconds:.1f} s · bytes"
    )
    body = table(
        ["group", "layers", "predicted B", "measured B", "difference", "match"],
        rows,
        [False, True, True, True, True, False],
    )
    lines = [head, body, *(f"warning: {w}" for w in m.warnings)]
    return fit("\n".join(lines))


def measure_command(model_ref: str, *, tokens: int, device: str, as_json: bool) -> str:
    """What ``kvbudget measure`` prints."""
    from kvbudget.model.sources import resolve

    result = measure(resolve(model_ref), tokens, device)
    if as_json:
        return json.dumps(result.to_json(), indent=2)
    return render_measurement(result)
