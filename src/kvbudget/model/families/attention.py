"""Decoder-only attention models: dense MHA/GQA/MQA, sliding windows in every config spelling,
chunked-local attention with global NoPE layers (Llama 4), and layers that share another layer's KV.

Layer-type rules follow the transformers config classes (5.x), which mirror each model's code:

* ``layer_types`` list when present (gpt-oss, Gemma 3, newer configs);
* Gemma 2: layer i slides when (i+1) % 2 != 0 (Gemma2Config);
* ``sliding_window_pattern`` p (Gemma 3, Cohere2): layer i slides when (i+1) % p != 0;
* EXAONE 4 (Exaone4Config): no ``sliding_window`` means every layer is full; a pattern string such as
  "LLLG" repeats L (local, sliding) and G (global) over the layers, an int p works as above;
* Qwen2/Qwen3 family: sliding only when ``use_sliding_window`` and i >= ``max_window_layers``;
* Mistral/Mixtral/Phi-3/Starcoder2: a non-null ``sliding_window`` applies to every layer;
* Llama 4: ``attention_chunk_size`` on RoPE layers; layer i is global NoPE when
  ``no_rope_layers[i] == 0``; absent or empty, (i+1) % ``no_rope_layer_interval`` (4) == 0 (Llama4TextConfig).
"""

from __future__ import annotations

from kvbudget.model.families.fields import Fields
from kvbudget.model.spec import ChunkedLocal, FullAttention, LayerSpec, Primitive, SharedKV, SlidingWindow

FULL = "full_attention"
SLIDING = "sliding_attention"
CHUNKED = "chunked_attention"
ATTENTION_TYPES = (FULL, SLIDING, CHUNKED)

QWEN2_VL = {"qwen2_vl", "qwen2_5_vl", "qwen2_vl_text", "qwen2_5_vl_text"}  # Qwen2 decoders of the VL models
QWEN_STYLE = {"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"} | QWEN2_VL
ALL_SLIDING_WHEN_SET = {"mistral", "mixtral", "phi3", "starcoder2"}


def attention_layer_types(f: Fields, model_type: str, n_layers: int) -> list[str]:
    """One of full/sliding/chunked per layer, from whichever spelling the config uses."""
    if f.has("layer_types"):
        types = f.str_list("layer_types")
        if len(types) != n_layers:
            raise f.error(f"layer_types has {len(types)} entries but num_hidden_layers is {n_layers}")
        return types
    window = f.optional_positive("sliding_window")
    if model_type == "exaone4":
        return _exaone4_types(f, window, n_layers)
    if model_type == "gemma2":
        return [SLIDING if (i + 1) % 2 else FULL for i in range(n_layers)]
    if f.has("sliding_window_pattern"):
        pattern = f.positive("sliding_window_pattern")
        return [SLIDING if (i + 1) % pattern else FULL for i in range(n_layers)]
    if model_type in QWEN_STYLE:
        if window is None or not f.flag("use_sliding_window"):
            return [FULL] * n_layers
        first = f.positive("max_window_layers", default=n_layers) if f.has("max_window_layers") else 0
        return [SLIDING if i >= first else FULL for i in range(n_layers)]
    if model_type == "llama4_text" and f.has("attention_chunk_size"):
        # an empty list is no list: Llama4TextConfig keeps ``no_rope_layers`` only when it is truthy, else the interval
        # (RedHatAI's Llama-4-Scout FP8-dynamic config.json writes ``[]``)
        if f.has("no_rope_layers") and f.cfg.get("no_rope_layers") != []:
            rope = f.int_list("no_rope_layers")
            if len(rope) != n_layers:
                raise f.error(f"no_rope_layers has {len(rope)} entries but num_hidden_layers is {n_layers}")
        else:
            interval = f.positive("no_rope_layer_interval", default=4)
            rope = [int((i + 1) % interval != 0) for i in range(n_layers)]
        return [CHUNKED if rope[i] else FULL for i in range(n_layers)]
    if window is not None and model_type in ALL_SLIDING_WHEN_SET:
        return [SLIDING] * n_layers
    return [FULL] * n_layers


def _exaone4_types(f: Fields, window: int | None, n_layers: int) -> list[str]:
    pattern = f.cfg.get("sliding_window_pattern", 4)
    if window is None or pattern in (None, 0):
        return [FULL] * n_layers
    if isinstance(pattern, str):
        if not pattern or set(pattern) - {"L", "G"}:
            raise f.error(f"sliding_window_pattern {pattern!r} must be a string of L (local) and G (global)")
        return [SLIDING if pattern[i % len(pattern)] == "L" else FULL for i in range(n_layers)]
    period = f.positive("sliding_window_pattern")
    return [SLIDING if (i + 1) % period else FULL for i in range(n_layers)]


def attention_primitive(f: Fields, layer_type: str, kv_heads: int, k_dim: int, v_dim: int) -> Primitive:
    """The primitive for one attention layer of the given type."""
    if layer_type == SLIDING:
        return SlidingWindow(kv_heads, k_dim, v_dim, f.positive("sliding_window"))
    if layer_type == CHUNKED:
        return ChunkedLocal(kv_heads, k_dim, v_dim, f.positive("attention_chunk_size"))
    return FullAttention(kv_heads, k_dim, v_dim)


def read_attention_model(f: Fields, model_type: str) -> tuple[LayerSpec, ...]:
    """Every layer is an attention layer (of some type); optionally the last layers share KV."""
    n_layers = f.num_layers()
    kv_heads = f.kv_heads()
    k_dim = f.head_dim()
    v_dim = f.positive("v_head_dim") if f.has("v_head_dim") else k_dim
    types = attention_layer_types(f, model_type, n_layers)
    unknown = sorted({t for t in types if t not in ATTENTION_TYPES})
    if unknown:
        raise f.error(
            f"model_type {model_type!r}: layer_types {unknown} are not attention layers kvbudget can place "
            "for this family; this architecture needs its own reader"
        )
    shared = f.non_negative("num_kv_shared_layers")
    if shared >= n_layers:
        raise f.error(f"num_kv_shared_layers {shared} must be below num_hidden_layers {n_layers}")
    first_shared = n_layers - shared
    layers: list[LayerSpec] = []
    for i, layer_type in enumerate(types):
        if i >= first_shared:
            # Gemma-3n: a shared layer reads the last non-shared layer of the same type
            # (transformers drops the last num_kv_shared_layers cache layers; vLLM kv_sharing_target_layer_name).
            candidates = [j for j in range(first_shared) if types[j] == layer_type]
            if not candidates:
                raise f.error(f"layer {i} shares KV but no earlier {layer_type} layer exists to share from")
            layers.append(LayerSpec(i, (SharedKV(candidates[-1]),), "shared KV"))
            continue
        layers.append(LayerSpec(i, (attention_primitive(f, layer_type, kv_heads, k_dim, v_dim),)))
    return tuple(layers)
