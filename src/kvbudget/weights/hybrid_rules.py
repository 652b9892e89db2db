"""Parameter-count rules for Falcon-H1 (parallel attention + Mamba-2), LFM2 (short convolutions + attention) and
Gemma 4 (sliding/global attention with per-type geometry, optional MoE block beside the MLP).

Each rule reproduces the tensor shapes of the transformers 5.24 module it names (``modeling_<type>.py``); the
totals are checked against those modules instantiated on the meta device and against the published checkpoint
totals (tests/weights/test_new_param_rules.py).
"""

from __future__ import annotations

from kvbudget.model.families.fields import Fields
from kvbudget.model.spec import ModelSpec
from kvbudget.weights import blocks
from kvbudget.weights.blocks import Part


def falcon_h1_layer(f: Fields, spec: ModelSpec, i: int) -> list[Part]:
    """FalconH1DecoderLayer (modeling_falcon_h1.py): attention (q/k/v/o, bias=attention_bias) and a Mamba-2 mixer
    side by side, a gated MLP (bias=mlp_bias), 2 RMSNorms (input_layernorm, pre_ff_layernorm).

    FalconH1Mixer: d_ssm = mamba_d_ssm (else mamba_expand x hidden); in_proj emits d_ssm + conv_dim + heads with
    bias=mamba_proj_bias, conv1d over d_ssm + 2 groups d_state (bias=mamba_conv_bias), dt_bias, A_log and D per head,
    the gated RMSNorm only when mamba_rms_norm, out_proj with bias=projectors_bias. The mup_vector is a
    non-persistent buffer (not in the checkpoint)."""
    hidden = f.positive("hidden_size")
    bias = f.flag("attention_bias")
    attention = blocks.attention(hidden, f.attention_heads(), f.kv_heads(), f.head_dim(), qkv_bias=bias, o_bias=bias)
    d_ssm = f.positive("mamba_d_ssm") if f.has("mamba_d_ssm") else f.positive("mamba_expand", default=2) * hidden
    mamba = blocks.mamba2(
        hidden,
        d_ssm,
        f.positive("mamba_n_heads"),
        f.positive("mamba_n_groups", default=1),
        f.positive("mamba_d_state"),
        f.positive("mamba_d_conv", default=4),
        conv_bias=f.flag("mamba_conv_bias", default=True),
        gated_norm=f.flag("mamba_rms_norm"),
    )
    if f.flag("mamba_proj_bias"):  # in_proj bias: d_ssm + conv_dim + heads
        in_proj = 2 * d_ssm + 2 * f.positive("mamba_n_groups", default=1) * f.positive("mamba_d_state")
        mamba.append(blocks.part(blocks.MAMBA, "vector", in_proj + f.positive("mamba_n_heads")))
    if f.flag("projectors_bias"):  # out_proj bias
        mamba.append(blocks.part(blocks.MAMBA, "vector", hidden))
    mlp = blocks.gated_mlp(hidden, f.positive("intermediate_size"), bias=f.flag("mlp_bias"))
    return attention + mamba + mlp + blocks.norms(2, hidden)


def lfm2_ffn_width(f: Fields) -> int:
    """Lfm2MLP: with block_auto_adjust_ff_dim, int(2 x intermediate_size / 3), times block_ffn_dim_multiplier,
    rounded up to a multiple of block_multiple_of (LFM2-350M: 6656 -> 4437 -> 4608)."""
    width = f.positive("intermediate_size")
    if not f.flag("block_auto_adjust_ff_dim", default=True):
        return width
    width = int(2 * width / 3)
    multiplier = f.cfg.get("block_ffn_dim_multiplier", 1.0)
    if isinstance(multiplier, int | float) and not isinstance(multiplier, bool):
        multiple = f.positive("block_multiple_of", default=256)
        width = multiple * ((int(multiplier * width) + multiple - 1) // multiple)
    return width


def lfm2_layer(f: Fields, spec: ModelSpec, i: int) -> list[Part]:
    """Lfm2DecoderLayer (modeling_lfm2.py): Lfm2ShortConv (in_proj hidden -> 3 hidden, a depthwise conv1d of
    conv_L_cache taps, out_proj; biases when conv_bias) or Lfm2Attention (q/k/v/out_proj without bias, q/k RMSNorms
    over head_dim); a SwiGLU MLP (w1, w3, w2); operator_norm and ffn_norm. The model's one final norm is
    embedding_norm."""
    hidden = f.positive("hidden_size")
    if spec.layers[i].label == "conv":
        bias = f.flag("conv_bias")
        kernel = f.positive("conv_L_cache", default=3)
        mixer = [blocks.part(blocks.LINEAR_ATTENTION, "linear", 4 * hidden * hidden)]
        mixer.append(blocks.part(blocks.LINEAR_ATTENTION, "vector", hidden * kernel + (5 * hidden if bias else 0)))
    else:
        mixer = blocks.attention(hidden, f.attention_heads(), f.kv_heads(), f.head_dim(), qk_norm="head")
    return mixer + blocks.gated_mlp(hidden, lfm2_ffn_width(f)) + blocks.norms(2, hidden)


def gemma4_layer(f: Fields, spec: ModelSpec, i: int) -> list[Part]:
    """Gemma4TextDecoderLayer (modeling_gemma4.py).

    Gemma4TextAttention: full_attention layers use global_head_dim and, with attention_k_eq_v, the
    num_global_key_value_heads and no v_proj (values are the keys); sliding layers head_dim and num_key_value_heads.
    q_norm and k_norm over the head dim (v_norm has no scale); the last num_kv_shared_layers reuse an earlier layer's
    K/V and have no k/v projections or k_norm. Gemma4TextMLP (x2 width on shared layers when use_double_wide_mlp);
    4 RMSNorms and the persistent layer_scalar. With enable_moe_block, beside the MLP: Gemma4TextRouter (proj
    hidden x num_experts, scale over hidden, per_expert_scale), Gemma4TextExperts (num_experts x gated
    moe_intermediate_size, top_k_experts per token) and 3 more RMSNorms."""
    hidden, heads = f.positive("hidden_size"), f.attention_heads()
    if f.non_negative("hidden_size_per_layer_input") or f.flag("attention_bias"):
        raise f.error(
            "hidden_size_per_layer_input or attention_bias set: no parameter-count rule for those Gemma 4 variants; "
            "give the checkpoint or --weights-size"
        )
    layer_types = f.str_list("layer_types") if f.has("layer_types") else []
    full = i < len(layer_types) and layer_types[i] == "full_attention"
    k_eq_v = full and f.flag("attention_k_eq_v")
    head_dim = f.positive("global_head_dim", default=512) if full else f.head_dim()
    kv = f.kv_heads()
    if k_eq_v and f.has("num_global_key_value_heads"):
        kv = f.positive("num_global_key_value_heads")
    shared = i >= len(spec.layers) - f.non_negative("num_kv_shared_layers")
    q_o = 2 * hidden * heads * head_dim
    k_v = 0 if shared else hidden * kv * head_dim * (1 if k_eq_v else 2)
    parts = [blocks.part(blocks.ATTENTION, "linear", q_o + k_v)]
    parts.append(blocks.part(blocks.ATTENTION, "norm", head_dim * (1 if shared else 2)))
    wide = 2 if shared and f.flag("use_double_wide_mlp") else 1
    parts += blocks.gated_mlp(hidden, wide * f.positive("intermediate_size"))
    parts += blocks.norms(4, hidden)
    parts.append(blocks.part(blocks.NORMS, "vector", 1))  # layer_scalar
    if f.flag("enable_moe_block"):
        experts = f.positive("num_experts")
        top_k = f.positive("top_k_experts")
        if top_k > experts:
            raise f.error(f"top_k_experts {top_k} exceeds the {experts} routed experts")
        parts += blocks.routed_experts(experts, top_k, hidden, f.positive("moe_intermediate_size"))
        parts += blocks.router(hidden, experts)
        parts.append(blocks.part(blocks.ROUTER, "router", hidden + experts))  # scale, per_expert_scale
        parts += blocks.norms(3, hidden)
    return parts
