"""Cross-attention decoders (Llama 3.2 Vision): the listed layers attend to a fixed set of image
tokens instead of the text, so their cache does not grow with the conversation."""

from __future__ import annotations

from kvbudget.model.families.fields import Fields
from kvbudget.model.spec import CrossAttention, FullAttention, LayerSpec


def read_mllama(f: Fields, model_type: str) -> tuple[LayerSpec, ...]:
    n = f.num_layers()
    cross = set(f.int_list("cross_attention_layers"))
    bad = sorted(i for i in cross if not 0 <= i < n)
    if bad:
        raise f.error(f"cross_attention_layers {bad} lie outside 0..{n - 1}")
    kv, dim = f.kv_heads(), f.head_dim()
    return tuple(
        LayerSpec(i, (CrossAttention(kv, dim, dim),) if i in cross else (FullAttention(kv, dim, dim),))
        for i in range(n)
    )
