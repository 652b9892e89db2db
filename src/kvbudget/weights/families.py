"""Which blocks each decoder layer holds, per ``model_type``, and with which widths.

The layer kinds (attention, Mamba, linear attention, cross-attention) come from the ModelSpec the
family readers already built; the widths come from the config. Each rule names the transformers
5.x module whose shapes it reproduces. Multi-token-prediction layers (``num_nextn_predict_layers``,
``num_mtp_modules``) are excluded: engines load them only for speculative decoding.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from kvbudget.model.families.attention import QWEN2_VL
from kvbudget.model.families.fields import Fields
from kvbudget.model.spec import CrossAttention, ModelSpec, Recurrent
from kvbudget.weights import blocks
from kvbudget.weights.blocks import SHARED, Part, QkNorm

LayerRule = Callable[[Fields, ModelSpec, int], list[Part]]

# Config classes whose tie_word_embeddings defaults to True (transformers 5.x); every other
# supported class defaults to False. An explicit value in the config always wins.
TIED_BY_DEFAULT = frozenset(
    {"cohere", "cohere2", "gemma", "gemma2", "gemma3_text", "gemma4_text", "lfm2", "minicpm3", "mamba", "smollm3"}
)


def _experts(f: Fields, *keys: str) -> tuple[int, int]:
    """(number of routed experts, experts per token) under whichever field names the family uses."""
    experts = next((f.positive(k) for k in keys if f.has(k)), 0)
    if not experts:
        raise f.error(f"MoE config needs one of {', '.join(keys)}")
    top_k = f.positive("num_experts_per_tok") if f.has("num_experts_per_tok") else f.positive("experts_per_token")
    if top_k > experts:
        raise f.error(f"num_experts_per_tok {top_k} exceeds the {experts} routed experts")
    return experts, top_k


# --- attention ----------------------------------------------------------------------------------


def standard_attention(f: Fields, model_type: str) -> list[Part]:
    """q/k/v/o with each family's biases and q/k norms (transformers ``*Attention.__init__``)."""
    hidden, heads, kv, hd = f.positive("hidden_size"), f.attention_heads(), f.kv_heads(), f.head_dim()
    bias = f.flag("attention_bias")
    qkv_bias, o_bias = bias, bias
    norm: QkNorm = "none"
    if model_type == "qwen2" or model_type in QWEN2_VL:  # Qwen2Attention: q/k/v bias=True, o bias=False
        qkv_bias, o_bias = True, False
    elif model_type == "qwen2_moe":  # Qwen2MoeAttention: bias=config.qkv_bias (default True)
        qkv_bias, o_bias = f.flag("qkv_bias", default=True), False
    elif model_type in ("glm4_moe", "glm4_shared_moe"):  # Glm4MoeAttention: o_proj bias=False
        o_bias = False
        norm = "head" if f.flag("use_qk_norm") else "none"
    elif model_type in ("qwen3", "qwen3_moe", "qwen3_next", "gemma3_text"):
        norm = "head"
    elif model_type in ("minimax_m2", "olmo2") or (model_type == "cohere" and f.flag("use_qk_norm")):
        norm = "full"
    return blocks.attention(
        hidden,
        heads,
        kv,
        hd,
        qkv_bias=qkv_bias,
        o_bias=o_bias,
        qk_norm=norm,
        q_gate=model_type == "qwen3_next",  # Qwen3NextAttention: q_proj emits query and gate
        sinks=model_type == "gpt_oss",  # GptOssAttention.sinks
    )


def latent(f: Fields) -> list[Part]:
    """DeepseekV3Attention / DeepseekV2Attention (q_lora_rank null -> direct q_proj)."""
    q_lora = f.cfg.get("q_lora_rank")
    return blocks.latent_attention(
        f.positive("hidden_size"),
        f.attention_heads(),
        q_lora_rank=f.positive("q_lora_rank") if q_lora is not None else None,
        kv_lora_rank=f.positive("kv_lora_rank"),
        qk_nope_dim=f.positive("qk_nope_head_dim"),
        qk_rope_dim=f.positive("qk_rope_head_dim"),
        v_head_dim=f.positive("v_head_dim"),
        bias=f.flag("attention_bias"),
    )


# --- feed-forward ---------------------------------------------------------------------------------


def _qwen_sparse(f: Fields, i: int) -> bool:
    """Qwen2MoE/Qwen3MoE/Qwen3-Next: MoE unless i in mlp_only_layers, every decoder_sparse_step-th."""
    only = f.int_list("mlp_only_layers") if f.has("mlp_only_layers") else []
    step = f.positive("decoder_sparse_step", default=1)
    return i not in only and (i + 1) % step == 0


def is_moe_layer(f: Fields, model_type: str, i: int, n_layers: int) -> bool:
    """Whether layer i has routed experts, by each family's config rule."""
    if model_type in ("mixtral", "gpt_oss", "minimax_m2"):
        return True
    if model_type in ("qwen2_moe", "qwen3_moe", "qwen3_next"):
        return _qwen_sparse(f, i)
    if model_type in ("deepseek_v2", "deepseek_v3", "kimi_k2"):
        # DeepseekV3DecoderLayer: MoE when i >= first_k_dense_replace and i % moe_layer_freq == 0
        first = f.cfg.get("first_k_dense_replace", 0)
        freq = f.positive("moe_layer_freq", default=1)
        return f.has("n_routed_experts") and i >= (first if isinstance(first, int) else 0) and i % freq == 0
    if model_type in ("glm4_moe", "glm4_shared_moe"):
        first = f.cfg.get("first_k_dense_replace", 1)
        return i >= (first if isinstance(first, int) else 1)
    if model_type == "llama4_text":
        # Llama4TextConfig: moe_layers default range(step - 1, n, step)
        if f.has("moe_layers"):
            return i in f.int_list("moe_layers")
        step = f.positive("interleave_moe_layer_step", default=1)
        return i in range(step - 1, n_layers, step)
    if model_type == "jamba":
        # JambaConfig: experts on i % expert_layer_period == expert_layer_offset (when num_experts > 1)
        period = f.positive("expert_layer_period", default=2)
        offset = f.cfg.get("expert_layer_offset", 1)
        return f.positive("num_experts", default=1) > 1 and i % period == (offset if isinstance(offset, int) else 1)
    return False


def moe(f: Fields, model_type: str) -> list[Part]:
    """Routed experts, shared experts and router of one MoE layer."""
    hidden = f.positive("hidden_size")
    if model_type in ("deepseek_v2", "deepseek_v3", "kimi_k2", "glm4_moe", "glm4_shared_moe"):
        experts, top_k = _experts(f, "n_routed_experts")
        inter = f.positive("moe_intermediate_size")
        parts = blocks.routed_experts(experts, top_k, hidden, inter)
        shared = f.cfg.get("n_shared_experts") or 0
        if shared:  # DeepseekV3MoE.shared_experts: one MLP of moe_intermediate_size x n_shared_experts
            parts += blocks.gated_mlp(hidden, inter * f.positive("n_shared_experts"), component=SHARED)
        # noaux_tc routing keeps e_score_correction_bias (DeepSeek-V3/R1, Kimi K2, GLM-4.5)
        score = model_type != "deepseek_v2" or f.cfg.get("topk_method") == "noaux_tc"
        return parts + blocks.router(hidden, experts, score_bias=score)
    if model_type in ("qwen2_moe", "qwen3_moe", "qwen3_next"):
        experts, top_k = _experts(f, "num_experts")
        parts = blocks.routed_experts(experts, top_k, hidden, f.positive("moe_intermediate_size"))
        if model_type != "qwen3_moe" and f.has("shared_expert_intermediate_size"):
            # Qwen2MoeSparseMoeBlock: shared_expert MLP + a 1-output shared_expert_gate
            parts += blocks.gated_mlp(hidden, f.positive("shared_expert_intermediate_size"), component=SHARED)
            parts.append(blocks.part(blocks.ROUTER, "router", hidden))
        return parts + blocks.router(hidden, experts)
    if model_type == "llama4_text":  # Llama4TextMoe: experts + shared_expert of intermediate_size
        experts, top_k = _experts(f, "num_local_experts")
        inter = f.positive("intermediate_size")
        parts = blocks.routed_experts(experts, top_k, hidden, inter)
        return parts + blocks.gated_mlp(hidden, inter, component=SHARED) + blocks.router(hidden, experts)
    if model_type == "gpt_oss":  # GptOssMLP: biased experts and router
        experts, top_k = _experts(f, "num_local_experts")
        parts = blocks.routed_experts(experts, top_k, hidden, f.positive("intermediate_size"), bias=True)
        return parts + blocks.router(hidden, experts, bias=True)
    if model_type == "minimax_m2":  # MiniMaxM2SparseMoeBlock: e_score_correction_bias (use_routing_bias)
        experts, top_k = _experts(f, "num_local_experts")
        parts = blocks.routed_experts(experts, top_k, hidden, f.positive("intermediate_size"))
        return parts + blocks.router(hidden, experts, score_bias=f.flag("use_routing_bias", default=True))
    experts, top_k = _experts(f, "num_local_experts", "num_experts")  # Mixtral, Jamba
    parts = blocks.routed_experts(experts, top_k, hidden, f.positive("intermediate_size"))
    return parts + blocks.router(hidden, experts)


def dense_mlp(f: Fields, model_type: str) -> list[Part]:
    hidden = f.positive("hidden_size")
    if model_type == "llama4_text":  # Llama4TextMLP on non-MoE layers uses intermediate_size_mlp
        return blocks.gated_mlp(hidden, f.positive("intermediate_size_mlp"))
    bias = model_type in ("llama", "granite") and f.flag("mlp_bias")  # LlamaMLP bias=config.mlp_bias
    return blocks.gated_mlp(hidden, f.positive("intermediate_size"), bias=bias)


def feed_forward(f: Fields, model_type: str, i: int, n_layers: int) -> list[Part]:
    return moe(f, model_type) if is_moe_layer(f, model_type, i, n_layers) else dense_mlp(f, model_type)


# --- whole layers -----------------------------------------------------------------------------------

# RMSNorms per decoder layer: Gemma 2/3 wrap both blocks (4); Cohere runs attention and MLP in
# parallel off one LayerNorm (1); OLMo 2 normalizes after each block (2); everyone else 2.
NORMS_PER_LAYER = {"gemma2": 4, "gemma3_text": 4, "cohere": 1}


def attention_layer(f: Fields, spec: ModelSpec, i: int) -> list[Part]:
    """A transformer layer: attention (standard or latent) + MLP or MoE + its norms."""
    mt = spec.model_type
    hidden = f.positive("hidden_size")
    if mt in ("deepseek_v2", "deepseek_v3", "kimi_k2"):
        mixer = latent(f)
    else:
        mixer = standard_attention(f, mt)
        if mt == "mllama_text_model" and any(isinstance(s, CrossAttention) for s in spec.layers[i].states):
            # MllamaCrossAttentionDecoderLayer: head_dim q/k norms and two tanh gates
            mixer += [blocks.part(blocks.ATTENTION, "norm", 2 * f.head_dim())]
            mixer += [blocks.part(blocks.ATTENTION, "vector", 2)]
    n = len(spec.layers)
    return mixer + feed_forward(f, mt, i, n) + blocks.norms(NORMS_PER_LAYER.get(mt, 2), hidden)


def _dt_rank(f: Fields, key: str) -> int:
    value = f.cfg.get(key, "auto")
    return math.ceil(f.positive("hidden_size") / 16) if value == "auto" else f.positive(key)


def jamba_layer(f: Fields, spec: ModelSpec, i: int) -> list[Part]:
    """JambaAttentionDecoderLayer / JambaMambaDecoderLayer: mixer + FFN + 2 norms."""
    hidden = f.positive("hidden_size")
    if any(isinstance(s, Recurrent) for s in spec.layers[i].states):
        mixer = blocks.mamba1(
            hidden,
            f.positive("mamba_expand") * hidden,
            f.positive("mamba_d_state"),
            f.positive("mamba_d_conv"),
            _dt_rank(f, "mamba_dt_rank"),
            conv_bias=f.flag("mamba_conv_bias", default=True),
            proj_bias=f.flag("mamba_proj_bias"),
            inner_norms=True,
        )
    else:
        mixer = blocks.attention(hidden, f.attention_heads(), f.kv_heads(), f.head_dim())
    return mixer + feed_forward(f, "jamba", i, len(spec.layers)) + blocks.norms(2, hidden)


def _mamba2_mixer(f: Fields, *, heads: str, head_dim: str, state: str, groups: str, conv: str) -> list[Part]:
    return blocks.mamba2(
        f.positive("hidden_size"),
        f.positive(heads) * f.positive(head_dim),
        f.positive(heads),
        f.positive(groups, default=1),
        f.positive(state),
        f.positive(conv, default=4),
        conv_bias=f.flag("use_conv_bias", default=True),
        proj_bias=f.flag("use_bias"),
    )


def nemotron_h_layer(f: Fields, spec: ModelSpec, i: int) -> list[Part]:
    """NemotronHBlock: one norm + one mixer (Mamba-2, attention, relu^2 MLP or latent MoE)."""
    hidden = f.positive("hidden_size")
    kind = spec.layers[i].label
    if kind == "mamba":
        mixer = _mamba2_mixer(
            f,
            heads="mamba_num_heads",
            head_dim="mamba_head_dim",
            state="ssm_state_size",
            groups="n_groups",
            conv="conv_kernel",
        )
    elif kind == "attention":
        bias = f.flag("attention_bias")
        mixer = blocks.attention(hidden, f.attention_heads(), f.kv_heads(), f.head_dim(), qkv_bias=bias, o_bias=bias)
    elif kind == "mlp":
        mixer = blocks.plain_mlp(hidden, f.positive("intermediate_size"))
    else:
        # NemotronHMoE: relu^2 experts, optionally in a moe_latent_size space behind fc1/fc2
        # latent projections; a relu^2 shared expert; router with e_score_correction_bias.
        experts, top_k = _experts(f, "n_routed_experts")
        width = f.positive("moe_latent_size") if f.has("moe_latent_size") else hidden
        mixer = blocks.routed_experts(experts, top_k, width, f.positive("moe_intermediate_size"), gated=False)
        if width != hidden:
            mixer.append(blocks.part(blocks.LATENT, "linear", 2 * hidden * width))
        mixer += blocks.plain_mlp(hidden, f.positive("moe_shared_expert_intermediate_size"), component=SHARED)
        mixer += blocks.router(hidden, experts, score_bias=True)
    return mixer + blocks.norms(1, hidden)


def qwen3_next_layer(f: Fields, spec: ModelSpec, i: int) -> list[Part]:
    """Qwen3NextDecoderLayer: gated attention or Gated DeltaNet, then MLP/MoE, 2 norms."""
    hidden = f.positive("hidden_size")
    if spec.layers[i].label == "linear_attention":
        mixer = blocks.gated_delta_net(
            hidden,
            f.positive("linear_num_key_heads"),
            f.positive("linear_key_head_dim"),
            f.positive("linear_num_value_heads"),
            f.positive("linear_value_head_dim"),
            f.positive("linear_conv_kernel_dim"),
        )
    else:
        mixer = standard_attention(f, "qwen3_next")
    return mixer + feed_forward(f, "qwen3_next", i, len(spec.layers)) + blocks.norms(2, hidden)


def mamba_layer(f: Fields, spec: ModelSpec, i: int) -> list[Part]:
    """MambaBlock / Mamba2Block: one norm + the mixer."""
    hidden = f.positive("hidden_size")
    if spec.model_type == "mamba2":
        # Mamba2Mixer: intermediate_size = expand * hidden_size
        mixer = blocks.mamba2(
            hidden,
            f.positive("expand", default=2) * hidden,
            f.positive("num_heads"),
            f.positive("n_groups", default=1),
            f.positive("state_size"),
            f.positive("conv_kernel", default=4),
            conv_bias=f.flag("use_conv_bias", default=True),
            proj_bias=f.flag("use_bias"),
        )
    else:
        # MambaMixer: in/out_proj bias=use_bias, dt_proj always biased, no inner norms
        inner = f.positive("intermediate_size") if f.has("intermediate_size") else 2 * hidden
        mixer = blocks.mamba1(
            hidden,
            inner,
            f.positive("state_size"),
            f.positive("conv_kernel", default=4),
            _dt_rank(f, "time_step_rank"),
            conv_bias=f.flag("use_conv_bias", default=True),
            proj_bias=f.flag("use_bias"),
        )
    return mixer + blocks.norms(1, hidden)


ATTENTION_FAMILIES = (
    "llama",
    "granite",
    "mistral",
    "mixtral",
    "qwen2",
    *sorted(QWEN2_VL),
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "phi3",
    "cohere",
    "gemma",
    "gemma2",
    "gemma3_text",
    "gpt_oss",
    "llama4_text",
    "minimax_m2",
    "glm4_moe",
    "glm4_shared_moe",
    "olmo2",
    "smollm3",  # SmolLM3Attention / SmolLM3MLP (modeling_smollm3.py): Llama's shapes; NoPE layers change no weight
    "deepseek_v2",
    "deepseek_v3",
    "kimi_k2",
    "mllama_text_model",
)

# The rules of this module; weights/rules.py adds the newer families' and is the registry callers use.
ATTENTION_RULES: dict[str, LayerRule] = dict.fromkeys(ATTENTION_FAMILIES, attention_layer)
ATTENTION_RULES.update(
    {
        "jamba": jamba_layer,
        "nemotron_h": nemotron_h_layer,
        "qwen3_next": qwen3_next_layer,
        "mamba": mamba_layer,
        "mamba2": mamba_layer,
    }
)
