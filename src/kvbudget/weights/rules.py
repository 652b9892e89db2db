"""The one registry of parameter-count rules: ``model_type`` -> the rule that lists one decoder layer's tensors.

weights/families.py holds the attention, Jamba, Nemotron-H, Qwen3-Next and Mamba rules; weights/sparse_mla.py the
DeepSeek-V3.2 / GLM-5 / Kimi Linear / MiniCPM3 ones; weights/hybrid_rules.py Falcon-H1, LFM2 and Gemma 4.
tests/weights/test_new_param_rules.py checks that every catalog model has a rule.
"""

from __future__ import annotations

from kvbudget.weights.families import ATTENTION_RULES, LayerRule, qwen3_next_layer
from kvbudget.weights.hybrid_rules import falcon_h1_layer, gemma4_layer, lfm2_layer
from kvbudget.weights.sparse_mla import kimi_linear_layer, minicpm3_layer, sparse_mla_layer

LAYER_RULES: dict[str, LayerRule] = {
    **ATTENTION_RULES,
    # Qwen3_5MoeDecoderLayer (modeling_qwen3_5_moe.py) builds the tensors of Qwen3-Next's layer: Gated DeltaNet
    # (in_proj_qkv + in_proj_z = Qwen3-Next's in_proj_qkvz, in_proj_b + in_proj_a = in_proj_ba) or gated attention,
    # then the sparse MoE block with its shared expert and shared_expert_gate on every layer.
    "qwen3_5_moe_text": qwen3_next_layer,
    "deepseek_v32": sparse_mla_layer,
    "glm_moe_dsa": sparse_mla_layer,
    "kimi_linear": kimi_linear_layer,
    "minicpm3": minicpm3_layer,
    "falcon_h1": falcon_h1_layer,
    "lfm2": lfm2_layer,
    "gemma4_text": gemma4_layer,
}
