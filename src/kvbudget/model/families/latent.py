"""Multi-head latent attention (DeepSeek-V2/V3/R1, Kimi K2).

The config says ``num_key_value_heads = num_attention_heads``, which is not what any MLA engine
caches: each token stores one ``kv_lora_rank + qk_rope_head_dim`` latent per layer (576 for
DeepSeek-V3). Engines that expand it (transformers before PR #47761, legacy llama.cpp GGUFs) store
per-head K of ``qk_nope + qk_rope`` and V of ``v_head_dim``; both are derivable from this primitive.
"""

from __future__ import annotations

from kvbudget.model.families.fields import Fields
from kvbudget.model.spec import LatentAttention, LayerSpec


def read_latent_model(f: Fields, model_type: str) -> tuple[LayerSpec, ...]:
    if f.has("index_topk") or f.has("index_head_dim"):
        raise f.error(
            f"model_type {model_type!r}: sparse attention with an indexer cache (index_head_dim, index_topk) "
            "is not modelled yet; kvbudget will not guess its per-token cost"
        )
    latent = LatentAttention(
        kv_lora_rank=f.positive("kv_lora_rank"),
        rope_dim=f.positive("qk_rope_head_dim"),
        num_heads=f.attention_heads(),
        qk_nope_dim=f.positive("qk_nope_head_dim"),
        v_head_dim=f.positive("v_head_dim"),
    )
    return tuple(LayerSpec(i, (latent,)) for i in range(f.num_layers()))
