"""Derived layouts: a model type no hand-written reader knows, sized from its reference implementation.

transformers builds the model from its config on PyTorch's meta device (shapes and dtypes only, no memory,
the full geometry), runs a prefill of ``probe`` tokens and one decode step with the cache on, and kvbudget
reads what every cache layer holds — its class, each tensor's shape and dtype — and maps it onto its own
primitives:

* ``DynamicLayer`` keys ``[1, H, N + 1, Dk]`` and values ``[1, H, N + 1, Dv]``: full attention (H, Dk, Dv);
  an MLA latent cached as one head of K and V is the same bytes;
* ``DynamicSlidingWindowLayer``: it keeps ``W - 1`` tokens, so ``W`` = the cached length + 1 (a chunked
  layer when the config's ``layer_types`` says ``chunked_attention``);
* ``DynamicIndexedLayer``: attention plus the indexer's ``[1, N + 1, D]`` keys;
* ``LinearAttentionLayer`` (and the ``...AndFullAttention`` hybrid): its conv and recurrent state tensors
  as measured, a fixed per-sequence state (``MeasuredState``), which only the transformers and ideal
  engines size (each serving engine keeps recurrent state its own way);
* ``DummyLayer``: nothing.

Any other cache or layer class, a tensor kvbudget does not recognise, or a model that returns no cache fails
closed. The spec says where it came from ("derived from transformers X.Y"). torch and transformers are the
``measure`` extra, imported only here.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from typing import Any

from kvbudget.errors import MissingExtraError, UnknownArchitectureError
from kvbudget.model.spec import (
    ChunkedLocal,
    FullAttention,
    IndexerKeys,
    LayerSpec,
    MeasuredState,
    ModelSpec,
    Primitive,
    SlidingWindow,
)

SHORT_PROBE = 32  # tokens of the first run: enough to see every layer's cache class (recurrent scans loop per token)
LONG_PROBE = 131_072  # past every window, when the config names none; free on the meta device for attention
_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
_DROP = (
    "quantization_config",
    "compression_config",
    "auto_map",
    "_name_or_path",
    "transformers_version",
    "attn_implementation",
)
_ATTENTION_CLASSES = ("DynamicLayer", "DynamicSlidingWindowLayer", "DynamicIndexedLayer")
_STATE_CLASSES = ("LinearAttentionLayer", "LinearAttentionAndFullAttentionLayer")
_KNOWN_CLASSES = (*_ATTENTION_CLASSES, *_STATE_CLASSES, "DummyLayer")


def _tensors(obj: object, name: str) -> Iterator[tuple[str, Any]]:
    import torch

    if isinstance(obj, torch.Tensor):
        yield name, obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from _tensors(value, f"{name}[{key}]")
    elif isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            yield from _tensors(value, f"{name}[{i}]")


def _dtype(tensor: Any) -> str:
    name = str(tensor.dtype).removeprefix("torch.")
    return _DTYPES.get(name, name)


def _layer(index: int, layer: Any, tokens: int, layer_type: str | None, where: str) -> LayerSpec:
    kind = type(layer).__name__
    if kind not in _KNOWN_CLASSES:
        raise UnknownArchitectureError(
            f"{where}: layer {index} caches in a {kind}, a cache class kvbudget has never seen"
        )
    found = {name: t for attr, value in vars(layer).items() for name, t in _tensors(value, attr)}
    found = {n: t for n, t in found.items() if t.dim() > 0}  # scalar bookkeeping (the window as a tensor)
    states: list[Primitive] = []
    keys, values = found.pop("keys", None), found.pop("values", None)
    if kind in (*_ATTENTION_CLASSES, "LinearAttentionAndFullAttentionLayer") and (keys is None) != (values is None):
        raise UnknownArchitectureError(f"{where}: layer {index} ({kind}) holds keys or values alone")
    if keys is not None and values is not None:
        if keys.dim() != 4 or values.dim() != 4 or keys.shape[:3] != values.shape[:3]:
            raise UnknownArchitectureError(
                f"{where}: layer {index} ({kind}) keys {tuple(keys.shape)} / values {tuple(values.shape)} are not "
                "[batch, kv heads, tokens, dim]"
            )
        _, heads, cached, k_dim = (int(d) for d in keys.shape)
        v_dim = int(values.shape[3])
        if kind == "DynamicSlidingWindowLayer":
            if cached >= tokens:
                raise UnknownArchitectureError(
                    f"{where}: layer {index} is a sliding layer whose window exceeds the {tokens:,}-token probe"
                )
            window = cached + 1  # DynamicSlidingWindowLayer keeps sliding_window - 1 tokens
            local: Primitive = (
                ChunkedLocal(heads, k_dim, v_dim, window)
                if layer_type == "chunked_attention"
                else SlidingWindow(heads, k_dim, v_dim, window)
            )
            states.append(local)
        elif cached == tokens:
            states.append(FullAttention(heads, k_dim, v_dim))
        else:
            raise UnknownArchitectureError(
                f"{where}: layer {index} ({kind}) caches {cached:,} of {tokens:,} tokens, not every token"
            )
    if kind == "DynamicIndexedLayer":
        indexer = found.pop("indexer_keys", None)
        if indexer is None or indexer.dim() != 3 or int(indexer.shape[1]) != tokens:
            raise UnknownArchitectureError(f"{where}: layer {index}'s indexer keys are not [batch, tokens, dim]")
        states.append(IndexerKeys(int(indexer.shape[2])))
    if kind in _STATE_CLASSES:
        parts = tuple(
            (name, tuple(int(d) for d in t.shape[1:]), _dtype(t))
            for name, t in sorted(found.items())
            if name.startswith(("conv_states", "recurrent_states"))
        )
        found = {n: t for n, t in found.items() if not n.startswith(("conv_states", "recurrent_states"))}
        if not parts:
            raise UnknownArchitectureError(f"{where}: layer {index} ({kind}) holds no conv or recurrent state")
        states.append(MeasuredState(parts))
    if found:
        raise UnknownArchitectureError(
            f"{where}: layer {index} ({kind}) also caches {', '.join(sorted(found))}, which kvbudget cannot place"
        )
    return LayerSpec(index, tuple(states), f"derived: {kind}")


def _refusal(where: str, version: str, model_type: object, exc: Exception) -> UnknownArchitectureError:
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return UnknownArchitectureError(
        f"{where}: transformers {version} could not run model_type {model_type!r} to derive its cache "
        f"({type(exc).__name__}: {message[:200]})"
    )


def _run(model: Any, tokens: int, where: str, version: str, model_type: object) -> Any:
    """A prefill of ``tokens`` and one decode step on the meta device; the DynamicCache it leaves."""
    import torch

    try:
        ids = torch.zeros((1, tokens), dtype=torch.long)
        out = model(input_ids=ids, use_cache=True)
        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        out = model(input_ids=ids[:, :1], past_key_values=cache, use_cache=True)
        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
    except Exception as exc:
        raise _refusal(where, version, model_type, exc) from None
    if cache is None or type(cache).__name__ != "DynamicCache":
        kind = "no cache" if cache is None else f"a {type(cache).__name__}"
        raise UnknownArchitectureError(
            f"{where}: transformers {version} returns {kind} for model_type {model_type!r}; kvbudget derives "
            "layouts only from DynamicCache layers"
        )
    return cache


def _long_probe(fields: Mapping[str, object]) -> int:
    """Twice the largest window or chunk the config names (at least 64 tokens), else LONG_PROBE."""
    windows = [
        v
        for k, v in fields.items()
        if ("window" in k or "chunk" in k) and isinstance(v, int) and not isinstance(v, bool) and v > 0
    ]
    return min(max(2 * max(windows), 64), 1 << 22) if windows else LONG_PROBE


def derive_spec(
    cfg: Mapping[str, object],
    *,
    name: str,
    source: str,
    where: str,
    notes: tuple[str, ...] = (),
) -> ModelSpec:
    """The layout transformers' own implementation of ``cfg`` keeps, or UnknownArchitectureError."""
    try:
        import torch
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError:  # the measure extra
        raise MissingExtraError(
            f"{where}: kvbudget has no reader for model_type {cfg.get('model_type')!r}; install 'kvbudget[measure]' "
            "to derive its layout from transformers' own implementation"
        ) from None
    model_type = cfg.get("model_type")
    fields = {k: v for k, v in cfg.items() if k not in _DROP}
    inner = fields.get("text_config")
    decoder: Mapping[str, object] = inner if isinstance(inner, Mapping) else fields  # multimodal: the decoder's
    version = transformers.__version__
    hf: Any = transformers  # transformers' own annotations are partial
    auto_config: Any = AutoConfig
    auto_model: Any = AutoModelForCausalLM
    try:
        config = auto_config.for_model(**fields)
    except (ValueError, KeyError) as exc:
        raise UnknownArchitectureError(
            f"{where}: model_type {model_type!r} is known neither to kvbudget nor to transformers {version} ({exc})"
        ) from None
    dtype = str(fields.get("dtype") or fields.get("torch_dtype") or "bfloat16")
    torch_dtype = getattr(torch, dtype, None) if dtype in _DTYPES else torch.bfloat16
    hf.logging.set_verbosity_error()
    with warnings.catch_warnings(), torch.device("meta"), torch.no_grad():
        warnings.simplefilter("ignore")
        try:
            model = auto_model.from_config(config, dtype=torch_dtype)
        except Exception as exc:
            raise _refusal(where, version, model_type, exc) from None
        probe = SHORT_PROBE
        cache = _run(model, probe, where, version, model_type)
        if any(type(layer).__name__ == "DynamicSlidingWindowLayer" for layer in cache.layers):
            probe = _long_probe({**fields, **decoder})  # a window shows only in a prefill longer than it
            cache = _run(model, probe, where, version, model_type)
    layer_types = decoder.get("layer_types")
    types = list(layer_types) if isinstance(layer_types, list) else []
    # Llama 4 names no layer types: its sliding-class layers are chunked at attention_chunk_size
    chunked = "chunked_attention" if not types and decoder.get("attention_chunk_size") else None
    layers = tuple(
        _layer(i, layer, probe + 1, str(types[i]) if i < len(types) else chunked, where)
        for i, layer in enumerate(cache.layers)
    )
    if not any(layer.states for layer in layers):
        raise UnknownArchitectureError(f"{where}: transformers' cache for {model_type!r} holds nothing")
    max_pos = decoder.get("max_position_embeddings")
    return ModelSpec(
        name=name,
        model_type=str(model_type),
        layers=layers,
        dtype=dtype,
        max_position_embeddings=max_pos if isinstance(max_pos, int) and max_pos > 0 else None,
        source=source,
        notes=(
            *notes,
            f"derived from transformers {version}: model_type {model_type!r} has no hand-written reader; its "
            f"DynamicCache after {probe:,} + 1 tokens on the meta device gave each layer's cache",
        ),
        config=dict(fields),
    )
