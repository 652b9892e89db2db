"""Multi-head latent attention (DeepSeek-V2/V3/R1, Kimi K2, MiniCPM3) and sparse MLA with a lightning
indexer (DeepSeek-V3.2 ``deepseek_v32``, GLM-5 ``glm_moe_dsa``).

The config says ``num_key_value_heads = num_attention_heads``, which is not what any MLA engine
caches: each token stores one ``kv_lora_rank + qk_rope_head_dim`` latent per layer (576 for
DeepSeek-V3). Engines that expand it (transformers before PR #47761, legacy llama.cpp GGUFs) store
per-head K of ``qk_nope + qk_rope`` and V of ``v_head_dim``; both are derivable from this primitive.

Sparse MLA (DSA) adds, per layer that runs its own indexer, a key cache of ``index_head_dim`` values per
token (``IndexerKeys``). Which layers run one (transformers 5.24 ``GlmMoeDsaConfig.__post_init__``):
``indexer_types`` ("full" runs it, "shared" reuses the previous full layer's top-k and caches no keys),
else ``index_topk_pattern`` (F/S), else layer i is full when max(i - index_skip_topk_offset + 1, 0) %
index_topk_freq == 0 (defaults 2 and 1: every layer). DeepSeek-V3.2 runs one on every layer.

MiniCPM3: ``v_head_dim`` defaults to hidden_size / num_attention_heads (``MiniCPM3Config``).
"""

from __future__ import annotations

from kvbudget.model.families.fields import Fields
from kvbudget.model.spec import IndexerKeys, LatentAttention, LayerSpec, Primitive

SPARSE_TYPES = ("deepseek_v32", "glm_moe_dsa")
# transformers _LEGACY_LAYER_TYPE_REMAP: "deepseek_sparse_attention" -> "indexed_attention" (configuration_utils.py)
_DSA_LAYER_TYPES = ("indexed_attention", "deepseek_sparse_attention")


def latent_primitive(f: Fields, v_default: int | None = None) -> LatentAttention:
    """The MLA latent of one layer, from the DeepSeek-style fields (``v_default``: the family's v_head_dim)."""
    if f.has("v_head_dim") or v_default is not None:
        v_dim = f.positive("v_head_dim", default=v_default)
    else:
        # MiniCPM3Config: v_head_dim None -> hidden_size // num_attention_heads
        v_dim = f.positive("hidden_size") // f.attention_heads()
    return LatentAttention(
        kv_lora_rank=f.positive("kv_lora_rank"),
        rope_dim=f.positive("qk_rope_head_dim"),
        num_heads=f.attention_heads(),
        qk_nope_dim=f.positive("qk_nope_head_dim"),
        v_head_dim=v_dim,
    )


def indexer_layers(f: Fields, n: int) -> list[bool]:
    """Which layers run (and cache keys for) their own indexer."""
    if f.has("indexer_types"):
        types = f.str_list("indexer_types")
        if len(types) != n or set(types) - {"full", "shared"}:
            raise f.error(f"indexer_types must hold {n} entries of 'full' or 'shared', got {types!r}")
        return [t == "full" for t in types]
    pattern = f.cfg.get("index_topk_pattern")
    if pattern is not None:
        if not isinstance(pattern, str) or len(pattern) != n or set(pattern) - {"F", "S"}:
            raise f.error(f"index_topk_pattern must be {n} characters of F and S, got {pattern!r}")
        return [c == "F" for c in pattern]
    freq = f.positive("index_topk_freq", default=1)
    offset = f.cfg.get("index_skip_topk_offset", 2)
    if not isinstance(offset, int) or isinstance(offset, bool):
        raise f.error(f"field 'index_skip_topk_offset' must be a whole number, got {offset!r}")
    return [max(i - offset + 1, 0) % freq == 0 for i in range(n)]


def read_latent_model(f: Fields, model_type: str) -> tuple[LayerSpec, ...]:
    n = f.num_layers()
    latent = latent_primitive(f)
    sparse = model_type in SPARSE_TYPES
    if not sparse:
        if f.has("index_topk") or f.has("index_head_dim"):
            raise f.error(
                f"model_type {model_type!r}: sparse attention with an indexer cache (index_head_dim, index_topk) "
                "is not part of this family; kvbudget will not guess its per-token cost"
            )
        return tuple(LayerSpec(i, (latent,)) for i in range(n))
    if f.has("layer_types"):
        unknown = sorted(set(f.str_list("layer_types")) - set(_DSA_LAYER_TYPES))
        if unknown or len(f.str_list("layer_types")) != n:
            raise f.error(f"layer_types must hold {n} sparse-attention layers, found kinds {unknown or '(count)'}")
    keys = IndexerKeys(f.positive("index_head_dim"))
    full = [True] * n if model_type == "deepseek_v32" else indexer_layers(f, n)
    layers: list[LayerSpec] = []
    for i in range(n):
        states: tuple[Primitive, ...] = (latent, keys) if full[i] else (latent,)
        layers.append(LayerSpec(i, states, "sparse MLA" if full[i] else "sparse MLA, shared top-k"))
    return tuple(layers)
