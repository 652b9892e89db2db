"""Hybrids with a fixed per-sequence recurrent state, and pure state-space models.

* Jamba: attention on layers with i % attn_layer_period == attn_layer_offset; Mamba-1 elsewhere
  (JambaConfig.layers_block_type).
* Nemotron-H / Nemotron 3: ``hybrid_override_pattern`` (M Mamba-2, * attention, - MLP, E MoE) or
  ``layers_block_type``; Mamba-2 inner size = mamba_num_heads * mamba_head_dim (NemotronHMamba2Mixer).
* Configs re-saved by transformers 5 rename the layer kinds (``_LEGACY_LAYER_TYPE_REMAP`` in
  configuration_utils.py): ``mamba`` -> ``linear_attention``, ``attention`` -> ``full_attention``; MLP and
  MoE kinds keep their names. Nemotron-H and Granite 4 accept both spellings.
* Falcon-H1: every layer runs attention *and* a Mamba-2 block (attn_layer_indices null).
* Granite 4 hybrid (granitemoehybrid): ``layer_types`` of "mamba"/"attention" (default: all Mamba);
  inner = expand*hidden.
* Qwen3-Next and Qwen3.5 (``qwen3_5_text``, ``qwen3_5_moe_text``): gated delta net, with full attention
  every ``full_attention_interval``-th layer.
* mamba / mamba2: no attention at all.
"""

from __future__ import annotations

from dataclasses import replace

from kvbudget.model.families.fields import Fields
from kvbudget.model.spec import FullAttention, LayerSpec, Primitive, Recurrent


def _attention(f: Fields) -> FullAttention:
    return FullAttention(f.kv_heads(), f.head_dim(), f.head_dim())


def _mamba2(
    f: Fields,
    *,
    heads: str,
    head_dim: str,
    state: str,
    groups: str,
    conv: str,
    inner: int | None = None,
    group_default: int | None = None,
    conv_default: int | None = None,
) -> Recurrent:
    n_heads = f.positive(heads)
    h_dim = f.positive(head_dim)
    return Recurrent(
        "mamba2",
        conv_kernel=f.positive(conv, default=conv_default),
        d_inner=inner if inner is not None else n_heads * h_dim,
        d_state=f.positive(state),
        n_groups=f.positive(groups, default=group_default),
        num_heads=n_heads,
        head_dim=h_dim,
        conv_dtype=None,
        ssm_dtype=f.state_dtype("mamba_ssm_cache_dtype"),
    )


def read_jamba(f: Fields, model_type: str) -> tuple[LayerSpec, ...]:
    n = f.num_layers()
    period = f.positive("attn_layer_period")
    offset = f.cfg.get("attn_layer_offset", 0)
    if not isinstance(offset, int) or not 0 <= offset < period:
        raise f.error(f"attn_layer_offset must be an integer in [0, attn_layer_period), got {offset!r}")
    if f.has("sliding_window"):
        raise f.error("Jamba with a sliding_window is not modelled; remove it or use a config without it")
    mamba = Recurrent(
        "mamba1",
        conv_kernel=f.positive("mamba_d_conv"),
        d_inner=f.positive("mamba_expand") * f.positive("hidden_size"),
        d_state=f.positive("mamba_d_state"),
    )
    attention = _attention(f)
    return tuple(LayerSpec(i, (attention,) if i % period == offset else (mamba,)) for i in range(n))


_NEMOTRON_CODES = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
# transformers 5 configuration_utils._LEGACY_LAYER_TYPE_REMAP, read backwards.
_TF5_KINDS = {"linear_attention": "mamba", "full_attention": "attention"}


def _legacy_kinds(kinds: list[str]) -> list[str]:
    """Layer kinds in the pre-transformers-5 spelling (mamba / attention), whichever spelling the file uses."""
    return [_TF5_KINDS.get(kind, kind) for kind in kinds]


def read_nemotron_h(f: Fields, model_type: str) -> tuple[LayerSpec, ...]:
    if f.has("layers_block_type"):
        kinds = _legacy_kinds(f.str_list("layers_block_type"))
    elif f.has("layer_types"):
        kinds = _legacy_kinds(f.str_list("layer_types"))
    elif f.has("hybrid_override_pattern"):
        pattern = f.string("hybrid_override_pattern")
        bad = sorted(set(pattern) - set(_NEMOTRON_CODES))
        if bad:
            raise f.error(f"hybrid_override_pattern has unknown layer codes {bad}; known: M * - E")
        kinds = [_NEMOTRON_CODES[c] for c in pattern]
    else:
        raise f.error("needs 'hybrid_override_pattern' or 'layers_block_type' to place its layers")
    if f.has("num_hidden_layers") and f.num_layers() != len(kinds):
        raise f.error(f"layer pattern has {len(kinds)} layers but num_hidden_layers is {f.num_layers()}")
    unknown = sorted(set(kinds) - set(_NEMOTRON_CODES.values()))
    if unknown:
        raise f.error(
            f"layers_block_type has unknown kinds {unknown}; known: mamba (linear_attention), attention "
            "(full_attention), mlp, moe"
        )
    mamba = _mamba2(
        f,
        heads="mamba_num_heads",
        head_dim="mamba_head_dim",
        state="ssm_state_size",
        groups="n_groups",
        conv="conv_kernel",
    )
    if mamba.ssm_dtype is None:
        # NemotronHConfig defaults mamba_ssm_cache_dtype to float32 (transformers configuration_nemotron_h.py),
        # and vLLM's NemotronHForCausalLMConfig hook uses the same default (model_executor/models/config.py).
        mamba = replace(mamba, ssm_dtype="float32")
    attention = _attention(f) if "attention" in kinds else None
    layers: list[LayerSpec] = []
    for i, kind in enumerate(kinds):
        states: tuple[Primitive, ...] = ()
        if kind == "mamba":
            states = (mamba,)
        elif kind == "attention" and attention is not None:
            states = (attention,)
        layers.append(LayerSpec(i, states, kind))
    return tuple(layers)


def read_falcon_h1(f: Fields, model_type: str) -> tuple[LayerSpec, ...]:
    n = f.num_layers()
    inner = f.positive("mamba_d_ssm") if f.has("mamba_d_ssm") else None
    # FalconH1Config defaults (transformers): mamba_n_groups 1, mamba_d_conv 4.
    mamba = _mamba2(
        f,
        heads="mamba_n_heads",
        head_dim="mamba_d_head",
        state="mamba_d_state",
        groups="mamba_n_groups",
        conv="mamba_d_conv",
        inner=inner,
        group_default=1,
        conv_default=4,
    )
    attention = _attention(f)
    indices = f.int_list("attn_layer_indices") if f.has("attn_layer_indices") else list(range(n))
    return tuple(LayerSpec(i, (attention, mamba) if i in indices else (mamba,), "attention+mamba2") for i in range(n))


def read_granite_hybrid(f: Fields, model_type: str) -> tuple[LayerSpec, ...]:
    n = f.num_layers()
    # GraniteMoeHybridConfig.__post_init__ (transformers 5.24): layer_types None -> every layer linear_attention
    kinds = _legacy_kinds(f.str_list("layer_types")) if f.has("layer_types") else ["mamba"] * n
    if len(kinds) != n:
        raise f.error(f"layer_types has {len(kinds)} entries but num_hidden_layers is {n}")
    unknown = sorted(set(kinds) - {"mamba", "attention"})
    if unknown:
        raise f.error(
            f"layer_types has unknown kinds {unknown}; known: mamba (linear_attention), attention (full_attention)"
        )
    inner = f.positive("mamba_expand") * f.positive("hidden_size")
    mamba = _mamba2(
        f,
        heads="mamba_n_heads",
        head_dim="mamba_d_head",
        state="mamba_d_state",
        groups="mamba_n_groups",
        conv="mamba_d_conv",
        inner=inner,
    )
    attention = _attention(f) if "attention" in kinds else None
    return tuple(
        LayerSpec(i, (mamba,) if kind == "mamba" else (attention,) if attention else (), kind)
        for i, kind in enumerate(kinds)
    )


def read_qwen3_next(f: Fields, model_type: str) -> tuple[LayerSpec, ...]:
    n = f.num_layers()
    if f.has("layer_types"):
        kinds = f.str_list("layer_types")
        if len(kinds) != n:
            raise f.error(f"layer_types has {len(kinds)} entries but num_hidden_layers is {n}")
    else:
        interval = f.positive("full_attention_interval")
        kinds = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]
    unknown = sorted(set(kinds) - {"full_attention", "linear_attention"})
    if unknown:
        raise f.error(f"layer_types has unknown kinds {unknown}; known: full_attention, linear_attention")
    gdn = Recurrent(
        "gated_delta_net",
        conv_kernel=f.positive("linear_conv_kernel_dim"),
        num_k_heads=f.positive("linear_num_key_heads"),
        head_k_dim=f.positive("linear_key_head_dim"),
        num_v_heads=f.positive("linear_num_value_heads"),
        head_v_dim=f.positive("linear_value_head_dim"),
        # Only a config pin counts here; each engine applies its own default (vLLM: model dtype, which its
        # Qwen3-Next logs confirm via the 1,072-token attention block; SGLang and transformers: fp32).
        ssm_dtype=f.state_dtype("mamba_ssm_dtype") or f.state_dtype("mamba_ssm_cache_dtype"),
    )
    attention = _attention(f)
    return tuple(
        LayerSpec(i, (attention,) if kind == "full_attention" else (gdn,), kind) for i, kind in enumerate(kinds)
    )


def read_mamba(f: Fields, model_type: str) -> tuple[LayerSpec, ...]:
    n = f.num_layers()
    if model_type == "mamba2":
        state: Recurrent = _mamba2(
            f,
            heads="num_heads",
            head_dim="head_dim",
            state="state_size",
            groups="n_groups",
            conv="conv_kernel",
            inner=f.positive("expand") * f.positive("hidden_size"),
        )
    else:
        # MambaConfig recomputes intermediate_size = expand x hidden_size (transformers configuration_mamba.py);
        # a config without expand keeps its intermediate_size.
        inner = f.positive("expand") * f.positive("hidden_size") if f.has("expand") else f.positive("intermediate_size")
        state = Recurrent(
            "mamba1", conv_kernel=f.positive("conv_kernel"), d_inner=inner, d_state=f.positive("state_size")
        )
    return tuple(LayerSpec(i, (state,), model_type) for i in range(n))
