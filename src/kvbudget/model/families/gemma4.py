"""Gemma 4 (``gemma4_text``, the decoder of ``gemma4``): per-layer-type KV heads and head dims, and KV
shared across the last layers.

Rules of transformers 5.24 ``Gemma4TextConfig.__post_init__`` and ``kv_sharing_modes``
(models/gemma4/configuration_gemma4.py), which the cache builds from:

* ``layer_types`` default: sliding unless (i + 1) % 6 == 0; the last layer is forced to full attention;
* sliding layers: ``num_key_value_heads`` x ``head_dim``, window ``sliding_window``;
* full layers: ``head_dim = global_head_dim`` (default 512) and, when ``attention_k_eq_v`` (K = V
  attention: no ``v_proj``, but V is still cached as its own tensor), ``num_key_value_heads =
  num_global_key_value_heads``. A config re-saved by transformers 5 carries these as ``per_layer_config``
  overrides ({"5": {"head_dim": 512, "num_key_value_heads": 2}}) instead, which then win;
* the last ``num_kv_shared_layers`` layers reuse the KV of the last earlier layer of their own type and
  hold nothing (``kv_sharing_modes`` "reuse"; the cache makes them dummy layers).
"""

from __future__ import annotations

from collections.abc import Mapping

from kvbudget.model.families.fields import Fields
from kvbudget.model.spec import FullAttention, LayerSpec, Primitive, SharedKV, SlidingWindow

FULL = "full_attention"
SLIDING = "sliding_attention"
_OVERRIDABLE = ("head_dim", "num_key_value_heads")


def _layer_types(f: Fields, n: int) -> list[str]:
    if f.has("layer_types"):
        types = f.str_list("layer_types")
        if len(types) != n:
            raise f.error(f"layer_types has {len(types)} entries but num_hidden_layers is {n}")
    else:
        types = [SLIDING if (i + 1) % 6 else FULL for i in range(n)]
    unknown = sorted(set(types) - {FULL, SLIDING})
    if unknown:
        raise f.error(f"layer_types has kinds {unknown} that Gemma 4 does not have; known: {FULL}, {SLIDING}")
    types[-1] = FULL  # Gemma4TextConfig: "Last layer must use `full_attention`" (forced, with a warning)
    return types


def _overrides(f: Fields, n: int, types: list[str]) -> dict[int, dict[str, int]]:
    """Per-layer head_dim / num_key_value_heads, from per_layer_config or the global_* fields."""
    raw = f.cfg.get("per_layer_config")
    if raw is not None:
        if not isinstance(raw, Mapping):
            raise f.error(f"field 'per_layer_config' must map layer indices to overrides, got {raw!r}")
        out: dict[int, dict[str, int]] = {}
        for key, value in raw.items():
            if not str(key).isdigit() or not 0 <= int(key) < n or not isinstance(value, Mapping):
                raise f.error(f"per_layer_config entry {key!r}: {value!r} is not a layer index with overrides")
            stray = sorted(set(value) - set(_OVERRIDABLE))
            if stray:
                raise f.error(f"per_layer_config overrides {stray} on layer {key}, which kvbudget cannot place")
            out[int(key)] = {k: Fields(value, f.where).positive(k) for k in value}
        return out
    overrides: dict[str, int] = {"head_dim": f.positive("global_head_dim", default=512)}
    if f.flag("attention_k_eq_v", default=False) and f.has("num_global_key_value_heads"):
        overrides["num_key_value_heads"] = f.positive("num_global_key_value_heads")
    return {i: overrides for i, t in enumerate(types) if t == FULL}


def read_gemma4(f: Fields, model_type: str) -> tuple[LayerSpec, ...]:
    n = f.num_layers()
    if f.cfg.get("use_bidirectional_attention") == "all":
        raise f.error(
            "use_bidirectional_attention 'all' makes every layer bidirectional (an embedding model): there is no "
            "growing KV cache to size"
        )
    types = _layer_types(f, n)
    overrides = _overrides(f, n, types)
    window = f.positive("sliding_window")
    kv, dim = f.kv_heads(), f.positive("head_dim")
    shared = f.non_negative("num_kv_shared_layers")
    if shared >= n:
        raise f.error(f"num_kv_shared_layers {shared} leaves no layer to hold the KV of num_hidden_layers {n}")
    first_shared = n - shared
    layers: list[LayerSpec] = []
    for i, layer_type in enumerate(types):
        if i >= first_shared:
            producers = [j for j in range(first_shared) if types[j] == layer_type]
            if not producers:
                raise f.error(f"layer {i} ({layer_type}) shares KV, but no earlier {layer_type} layer produces it")
            layers.append(LayerSpec(i, (SharedKV(producers[-1]),), "shared KV"))
            continue
        heads = overrides.get(i, {}).get("num_key_value_heads", kv)
        head_dim = overrides.get(i, {}).get("head_dim", dim)
        state: Primitive = (
            SlidingWindow(heads, head_dim, head_dim, window)
            if layer_type == SLIDING
            else FullAttention(heads, head_dim, head_dim)
        )
        layers.append(LayerSpec(i, (state,), layer_type))
    return tuple(layers)
