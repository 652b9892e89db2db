"""Parameter counts of the building blocks of a decoder, one ``Part`` per tensor group.

Each count is the product of the tensor shapes the reference implementation creates, cited per
block (transformers 5.x ``modeling_*.py``; shapes cross-checked by instantiating every catalog
config on the meta device). A ``Part`` records what kind of tensor it is, because serving
quantizers treat kinds differently (see ``weights.precision``):

* ``linear``: projection matrices (nn.Linear weights and fused expert matrices) — quantized;
* ``embedding`` / ``lm_head``: the token table and the output projection — 16-bit by default;
* ``norm``: RMSNorm / LayerNorm scales — always 16-bit;
* ``router``: MoE router weights and score-correction biases — always 16-bit (gpt-oss and
  MiniMax-M2 list them in ``modules_to_not_convert``);
* ``vector``: biases, attention sinks, conv1d kernels and SSM vectors (A_log, D, dt_bias) —
  always 16-bit (GPTQ/AWQ/FP8 replace nn.Linear weights only);
* ``vision``: a VLM's vision tower and projector (weights/vision.py) — 16-bit, not read per decoded token.

``active`` is what one token touches: routed experts count ``top_k / n_experts`` of their total.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TensorKind = Literal["linear", "embedding", "lm_head", "norm", "router", "vector", "vision"]
QkNorm = Literal["none", "head", "full"]

# Component names used in breakdowns (one place, so renderers and tests agree).
EMBEDDINGS = "embeddings"
ATTENTION = "attention"
MLP = "mlp"
ROUTED = "moe routed experts"
SHARED = "moe shared experts"
ROUTER = "moe router"
LATENT = "moe latent projections"
MAMBA = "mamba"
LINEAR_ATTENTION = "linear attention"
NORMS = "norms"
LM_HEAD = "lm_head"


@dataclass(frozen=True)
class Part:
    """One group of tensors: ``params`` elements of one kind inside one component."""

    component: str
    kind: TensorKind
    params: int
    active: int


def part(component: str, kind: TensorKind, params: int) -> Part:
    """A group that every token uses (active = total)."""
    return Part(component, kind, params, params)


def norms(count: int, size: int) -> list[Part]:
    """``count`` RMSNorm/LayerNorm scale vectors of ``size`` (no bias)."""
    return [part(NORMS, "norm", count * size)] if count and size else []


def attention(
    hidden: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    *,
    v_head_dim: int | None = None,
    qkv_bias: bool = False,
    o_bias: bool = False,
    qk_norm: QkNorm = "none",
    q_gate: bool = False,
    sinks: bool = False,
) -> list[Part]:
    """q/k/v/o projections of (grouped-query) attention.

    ``q_gate``: Qwen3-Next's q_proj emits a gate as wide as the query (heads x head_dim x 2).
    ``qk_norm``: "head" = one head_dim norm each for q and k (Qwen3, Gemma 3, GLM);
    "full" = norms over all heads (MiniMax-M2, OLMo 2, Cohere). ``sinks``: one learned logit per
    head (gpt-oss ``self_attn.sinks``).
    """
    v_dim = v_head_dim or head_dim
    q_out = heads * head_dim * (2 if q_gate else 1)
    k_out, v_out = kv_heads * head_dim, kv_heads * v_dim
    parts = [part(ATTENTION, "linear", hidden * (q_out + k_out + v_out) + heads * v_dim * hidden)]
    biases = (q_out + k_out + v_out if qkv_bias else 0) + (hidden if o_bias else 0)
    if biases:
        parts.append(part(ATTENTION, "vector", biases))
    if qk_norm == "head":
        parts.append(part(ATTENTION, "norm", 2 * head_dim))
    elif qk_norm == "full":
        parts.append(part(ATTENTION, "norm", heads * head_dim + kv_heads * head_dim))
    if sinks:
        parts.append(part(ATTENTION, "vector", heads))
    return parts


def latent_attention(
    hidden: int,
    heads: int,
    *,
    q_lora_rank: int | None,
    kv_lora_rank: int,
    qk_nope_dim: int,
    qk_rope_dim: int,
    v_head_dim: int,
    bias: bool = False,
) -> list[Part]:
    """Multi-head latent attention (DeepseekV3Attention): q_a/q_b (or a direct q_proj),
    kv_a_proj_with_mqa (latent + shared rope key), kv_a_layernorm, kv_b_proj, o_proj.
    ``bias`` (config attention_bias) adds biases to q_a, kv_a and o, as DeepseekV3Attention does."""
    q_head = qk_nope_dim + qk_rope_dim
    linear = hidden * (kv_lora_rank + qk_rope_dim) + kv_lora_rank * heads * (qk_nope_dim + v_head_dim)
    linear += heads * v_head_dim * hidden
    norm = kv_lora_rank
    bias_params = (kv_lora_rank + qk_rope_dim + hidden) if bias else 0
    if q_lora_rank:
        linear += hidden * q_lora_rank + q_lora_rank * heads * q_head
        norm += q_lora_rank
        bias_params += q_lora_rank if bias else 0
    else:
        linear += hidden * heads * q_head
    parts = [part(ATTENTION, "linear", linear), part(ATTENTION, "norm", norm)]
    if bias_params:
        parts.append(part(ATTENTION, "vector", bias_params))
    return parts


def gated_mlp(hidden: int, inter: int, *, component: str = MLP, bias: bool = False) -> list[Part]:
    """SwiGLU/GeGLU MLP: gate and up (hidden -> inter) and down (inter -> hidden): 3 x hidden x inter."""
    parts = [part(component, "linear", 3 * hidden * inter)]
    if bias:
        parts.append(part(component, "vector", 2 * inter + hidden))
    return parts


def plain_mlp(hidden: int, inter: int, *, component: str = MLP) -> list[Part]:
    """Non-gated MLP (Nemotron-H relu^2): up and down only, 2 x hidden x inter."""
    return [part(component, "linear", 2 * hidden * inter)]


def routed_experts(
    experts: int,
    top_k: int,
    d_model: int,
    inter: int,
    *,
    gated: bool = True,
    bias: bool = False,
) -> list[Part]:
    """``experts`` MLPs of width ``inter``; a token uses ``top_k`` of them.

    ``bias``: gpt-oss experts carry gate_up_proj_bias (2 x inter) and down_proj_bias (d_model).
    """
    per_expert = (3 if gated else 2) * d_model * inter
    parts = [Part(ROUTED, "linear", experts * per_expert, top_k * per_expert)]
    if bias:
        per_bias = (2 * inter if gated else inter) + d_model
        parts.append(Part(ROUTED, "vector", experts * per_bias, top_k * per_bias))
    return parts


def router(hidden: int, experts: int, *, bias: bool = False, score_bias: bool = False) -> list[Part]:
    """Router (gate) matrix hidden x experts, plus a bias (gpt-oss) and/or the
    ``e_score_correction_bias`` of noaux_tc routing (DeepSeek-V3, GLM-4.5, MiniMax-M2, Nemotron 3),
    a persistent buffer saved in the checkpoint."""
    return [part(ROUTER, "router", hidden * experts + (experts if bias else 0) + (experts if score_bias else 0))]


def mamba1(
    hidden: int,
    d_inner: int,
    d_state: int,
    d_conv: int,
    dt_rank: int,
    *,
    conv_bias: bool = True,
    proj_bias: bool = False,
    inner_norms: bool = False,
) -> list[Part]:
    """Mamba-1 mixer (JambaMambaMixer / MambaMixer): in_proj (2 x d_inner), conv1d (+bias),
    x_proj (dt_rank + 2 d_state), dt_proj (+bias), A_log (d_inner x d_state), D, out_proj.
    ``inner_norms``: Jamba's dt/b/c layernorms."""
    linear = hidden * 2 * d_inner + d_inner * (dt_rank + 2 * d_state) + dt_rank * d_inner + d_inner * hidden
    vector = d_inner * d_conv + (d_inner if conv_bias else 0) + d_inner  # conv1d, its bias, dt_proj bias
    vector += d_inner * d_state + d_inner  # A_log, D
    if proj_bias:
        vector += 2 * d_inner + hidden
    parts = [part(MAMBA, "linear", linear), part(MAMBA, "vector", vector)]
    if inner_norms:
        parts.append(part(MAMBA, "norm", dt_rank + 2 * d_state))
    return parts


def mamba2(
    hidden: int,
    d_inner: int,
    heads: int,
    groups: int,
    d_state: int,
    d_conv: int,
    *,
    conv_bias: bool = True,
    proj_bias: bool = False,
    gated_norm: bool = True,
) -> list[Part]:
    """Mamba-2 mixer (Mamba2Mixer / NemotronHMamba2Mixer): in_proj emits z, x, B, C and dt
    (2 d_inner + 2 groups d_state + heads); depthwise conv1d over x, B, C; dt_bias, A_log, D per
    head; a gated RMSNorm over d_inner; out_proj."""
    conv_dim = d_inner + 2 * groups * d_state
    proj = 2 * d_inner + 2 * groups * d_state + heads
    linear = hidden * proj + d_inner * hidden
    vector = conv_dim * d_conv + (conv_dim if conv_bias else 0) + 3 * heads
    if proj_bias:
        vector += proj + hidden
    parts = [part(MAMBA, "linear", linear), part(MAMBA, "vector", vector)]
    if gated_norm:
        parts.append(part(MAMBA, "norm", d_inner))
    return parts


def gated_delta_net(hidden: int, k_heads: int, k_dim: int, v_heads: int, v_dim: int, d_conv: int) -> list[Part]:
    """Qwen3-Next Gated DeltaNet (Qwen3NextGatedDeltaNet): in_proj_qkvz (2 k + 2 v), in_proj_ba
    (2 v_heads), conv1d over q, k, v (no bias), dt_bias and A_log per value head, a head_v_dim
    gated RMSNorm, out_proj."""
    key, value = k_heads * k_dim, v_heads * v_dim
    linear = hidden * (2 * key + 2 * value) + hidden * 2 * v_heads + value * hidden
    vector = (2 * key + value) * d_conv + 2 * v_heads
    return [
        part(LINEAR_ATTENTION, "linear", linear),
        part(LINEAR_ATTENTION, "vector", vector),
        part(LINEAR_ATTENTION, "norm", v_dim),
    ]
