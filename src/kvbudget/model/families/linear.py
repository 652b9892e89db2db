"""Linear-attention and short-convolution hybrids: Kimi Linear (KDA + MLA) and LFM2 (short conv + GQA).

* Kimi Linear (``kimi_linear``, transformers 5.24 ``KimiLinearConfig``): ``layer_types`` when given, else
  ``linear_attn_config.full_attn_layers`` / ``kda_layers`` (1-indexed), else full attention on layers i > 0
  with i % 4 == 0. Full layers are MLA (the DeepSeek latent fields); the others are Kimi delta attention
  with ``linear_attn_config.num_heads`` (``linear_num_heads``, 32) heads of ``head_dim``
  (``linear_head_dim``, 128) and a ``short_conv_kernel_size`` (``linear_conv_kernel_dim``, 4) conv over q,
  k and v. Its recurrent state is fp32 in every engine (transformers ``.to(torch.float32)``, vLLM
  ``kda_state_dtype``, SGLang's float32 SSM default, llama.cpp F32), so the reader pins it.
* LFM2 (``lfm2``, ``lfm2_moe``, ``Lfm2Config``): ``layer_types`` of ``full_attention`` / ``conv``, else
  ``full_attn_idxs`` (default: every layer attention). Conv layers keep a short-convolution state of
  ``conv_L_cache`` columns over ``hidden_size`` channels (``Lfm2ShortConv``) and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping

from kvbudget.model.families.fields import Fields
from kvbudget.model.families.latent import latent_primitive
from kvbudget.model.spec import FullAttention, LatentAttention, LayerSpec, Recurrent

FULL = "full_attention"
LINEAR = "linear_attention"


def _kimi_layer_types(f: Fields, n: int, linear: Mapping[str, object]) -> list[str]:
    if f.has("layer_types"):
        types = f.str_list("layer_types")
        if len(types) != n:
            raise f.error(f"layer_types has {len(types)} entries but num_hidden_layers is {n}")
        return types
    full, kda = linear.get("full_attn_layers"), linear.get("kda_layers")
    if full is not None and kda is not None:
        lists = Fields(dict(linear), f.where)
        types = [""] * n
        for key, kind in (("full_attn_layers", FULL), ("kda_layers", LINEAR)):
            for layer in lists.int_list(key):
                if not 1 <= layer <= n:
                    raise f.error(f"linear_attn_config.{key} has layer {layer}, outside 1..{n} (1-indexed)")
                types[layer - 1] = kind
        missing = [i for i, t in enumerate(types) if not t]
        if missing:
            raise f.error(f"linear_attn_config places no attention kind on layers {missing} (0-indexed)")
        return types
    return [FULL if i and i % 4 == 0 else LINEAR for i in range(n)]


def read_kimi_linear(f: Fields, model_type: str) -> tuple[LayerSpec, ...]:
    n = f.num_layers()
    raw = f.cfg.get("linear_attn_config") or {}
    if not isinstance(raw, Mapping):
        raise f.error(f"field 'linear_attn_config' must be an object, got {raw!r}")
    linear = Fields(dict(raw), f.where)
    types = _kimi_layer_types(f, n, raw)
    unknown = sorted(set(types) - {FULL, LINEAR})
    if unknown:
        raise f.error(f"layer_types has unknown kinds {unknown}; known: {FULL}, {LINEAR}")
    heads = linear.positive("num_heads") if linear.has("num_heads") else f.positive("linear_num_heads", default=32)
    dim = linear.positive("head_dim") if linear.has("head_dim") else f.positive("linear_head_dim", default=128)
    conv = (
        linear.positive("short_conv_kernel_size")
        if linear.has("short_conv_kernel_size")
        else f.positive("linear_conv_kernel_dim", default=4)
    )
    kda = Recurrent(
        "kda",
        conv_kernel=conv,
        num_k_heads=heads,
        head_k_dim=dim,
        num_v_heads=heads,
        head_v_dim=dim,
        ssm_dtype="float32",
    )
    # KimiLinearConfig: v_head_dim defaults to 128
    latent: LatentAttention | None = latent_primitive(f, v_default=128) if FULL in types else None
    return tuple(
        LayerSpec(i, (latent,) if kind == FULL and latent is not None else (kda,), "MLA" if kind == FULL else "KDA")
        for i, kind in enumerate(types)
    )


def read_lfm2(f: Fields, model_type: str) -> tuple[LayerSpec, ...]:
    n = f.num_layers()
    if f.has("layer_types"):
        types = f.str_list("layer_types")
        if len(types) != n:
            raise f.error(f"layer_types has {len(types)} entries but num_hidden_layers is {n}")
    else:
        idxs = f.int_list("full_attn_idxs") if f.has("full_attn_idxs") else list(range(n))
        types = [FULL if i in idxs else "conv" for i in range(n)]
    unknown = sorted(set(types) - {FULL, "conv"})
    if unknown:
        raise f.error(f"layer_types has unknown kinds {unknown}; known: {FULL}, conv")
    conv = Recurrent("short_conv", conv_kernel=f.positive("conv_L_cache", default=3), d_inner=f.positive("hidden_size"))
    attention = FullAttention(f.kv_heads(), f.head_dim(), f.head_dim()) if FULL in types else None
    return tuple(
        LayerSpec(i, (attention,) if kind == FULL and attention is not None else (conv,), kind)
        for i, kind in enumerate(types)
    )
