"""Parameter-count rules for the latent-attention (MLA) families beyond DeepSeek-V3: DeepSeek-V3.2 and GLM-5
(sparse MLA with a DSA indexer), Kimi Linear (MLA + Kimi delta attention) and MiniCPM3 (dense MLA).

Each rule reproduces the tensor shapes of the transformers 5.24 module it names (``modeling_<type>.py``); the
totals are checked against those modules instantiated on the meta device and against the published checkpoint
totals (tests/weights/test_new_param_rules.py). Multi-token-prediction layers are excluded, as for DeepSeek-V3.
"""

from __future__ import annotations

from kvbudget.model.families.fields import Fields
from kvbudget.model.spec import IndexerKeys, LatentAttention, ModelSpec
from kvbudget.weights import blocks
from kvbudget.weights.blocks import SHARED, Part
from kvbudget.weights.families import dense_mlp, latent, moe


def dsa_indexer(f: Fields) -> list[Part]:
    """DeepseekV32Indexer / GlmMoeDsaIndexer (modeling_deepseek_v32.py, modeling_glm_moe_dsa.py): wq_b
    Linear(q_lora_rank, index_n_heads x index_head_dim), wk Linear(hidden, index_head_dim), weights_proj
    Linear(hidden, index_n_heads), all without bias, and k_norm, a LayerNorm (weight and bias) over index_head_dim."""
    hidden, heads, dim = f.positive("hidden_size"), f.positive("index_n_heads"), f.positive("index_head_dim")
    linear = f.positive("q_lora_rank") * heads * dim + hidden * dim + hidden * heads
    return [blocks.part(blocks.ATTENTION, "linear", linear), blocks.part(blocks.ATTENTION, "norm", 2 * dim)]


def _sparse_layer(f: Fields, i: int, first_dense_default: int) -> bool:
    """``mlp_layer_types[i] == "sparse"`` where the config lists them, else i >= first_k_dense_replace (the
    default list DeepseekV32Config, GlmMoeDsaConfig and KimiLinearConfig build)."""
    if f.has("mlp_layer_types"):
        types = f.str_list("mlp_layer_types")
        if i >= len(types):
            raise f.error(f"field 'mlp_layer_types' lists {len(types)} layers; give one per decoder layer")
        return types[i] == "sparse"
    first = f.cfg.get("first_k_dense_replace", first_dense_default)
    return i >= (first if isinstance(first, int) else first_dense_default)


def sparse_mla_layer(f: Fields, spec: ModelSpec, i: int) -> list[Part]:
    """DeepseekV32DecoderLayer / GlmMoeDsaDecoderLayer: MLA (q_lora, kv_a with the shared rope key, kv_b, o), the
    DSA indexer on layers that run their own ("full" in GLM-5.2's indexer_types; a "shared" layer has none:
    ``indexer = None if skip_topk``), a DeepSeek-V3 MoE (routed + shared experts, router with
    e_score_correction_bias) or a dense MLP, and 2 RMSNorms."""
    mixer = latent(f)
    if any(isinstance(s, IndexerKeys) for s in spec.layers[i].states):
        mixer += dsa_indexer(f)
    ffn = moe(f, "deepseek_v3") if _sparse_layer(f, i, 3) else dense_mlp(f, "deepseek_v3")
    return mixer + ffn + blocks.norms(2, f.positive("hidden_size"))


def minicpm3_layer(f: Fields, spec: ModelSpec, i: int) -> list[Part]:
    """MiniCPM3DecoderLayer (modeling_minicpm3.py): MLA as DeepSeek-V2/V3 (q_a/q_b, kv_a_proj_with_mqa, kv_b, o),
    a gated MLP (bias=mlp_bias), 2 RMSNorms. The embedding's embed_scale is a non-persistent buffer."""
    hidden = f.positive("hidden_size")
    mlp = blocks.gated_mlp(hidden, f.positive("intermediate_size"), bias=f.flag("mlp_bias"))
    return latent(f) + mlp + blocks.norms(2, hidden)


def kimi_delta_attention(f: Fields) -> list[Part]:
    """KimiLinearDeltaAttention (modeling_kimi_linear.py), with linear_attn_config's num_heads x head_dim = d:
    q/k/v_proj Linear(hidden, d); conv1d depthwise over 3d channels, no bias; forget gate f_a Linear(hidden, head_dim)
    and f_b Linear(head_dim, d), dt_bias (d) and A_log (num_heads); b_proj Linear(hidden, num_heads); output gate
    g_a Linear(hidden, head_dim) and g_b Linear(head_dim, d); o_norm, a gated RMSNorm over head_dim; o_proj."""
    cfg = f.cfg.get("linear_attn_config")
    sub = Fields(cfg if isinstance(cfg, dict) else {}, f"{f.where}: linear_attn_config")
    hidden = f.positive("hidden_size")
    heads, dim = sub.positive("num_heads", default=32), sub.positive("head_dim", default=128)
    kernel = sub.positive("short_conv_kernel_size", default=4)
    width = heads * dim
    linear = 3 * hidden * width + 2 * (hidden * dim + dim * width) + hidden * heads + width * hidden
    return [
        blocks.part(blocks.LINEAR_ATTENTION, "linear", linear),
        blocks.part(blocks.LINEAR_ATTENTION, "vector", 3 * width * kernel + width + heads),
        blocks.part(blocks.LINEAR_ATTENTION, "norm", dim),
    ]


def kimi_linear_layer(f: Fields, spec: ModelSpec, i: int) -> list[Part]:
    """KimiLinearDecoderLayer: MLA (direct q_proj when q_lora_rank is null) on the full_attn_layers, Kimi delta
    attention on the rest; KimiLinearMoE (num_experts routed, num_experts_per_token of them per token, one shared
    MLP of moe_intermediate_size x num_shared_experts, a router with e_score_correction_bias) from
    first_k_dense_replace (default 1) on, a dense MLP before; 2 RMSNorms."""
    hidden = f.positive("hidden_size")
    is_mla = any(isinstance(s, LatentAttention) for s in spec.layers[i].states)
    mixer = latent(f) if is_mla else kimi_delta_attention(f)
    if not _sparse_layer(f, i, 1):
        return mixer + dense_mlp(f, "kimi_linear") + blocks.norms(2, hidden)
    experts = f.positive("num_experts") if f.has("num_experts") else f.positive("n_routed_experts")
    top_k_key = "num_experts_per_token" if f.has("num_experts_per_token") else "num_experts_per_tok"
    top_k = f.positive(top_k_key)
    if top_k > experts:
        raise f.error(f"{top_k_key} {top_k} exceeds the {experts} routed experts")
    inter = f.positive("moe_intermediate_size")
    shared_key = "num_shared_experts" if f.has("num_shared_experts") else "n_shared_experts"
    ffn = blocks.routed_experts(experts, top_k, hidden, inter)
    ffn += blocks.gated_mlp(hidden, inter * f.positive(shared_key, default=1), component=SHARED)
    ffn += blocks.router(hidden, experts, score_bias=True)
    return mixer + ffn + blocks.norms(2, hidden)
