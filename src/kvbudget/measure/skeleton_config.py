"""A geometry-preserving skeleton config: every field that shapes the cache is kept, the rest shrinks.

Pure Python (no torch), so the rules are testable anywhere. Kept: layer count and layer types,
KV / attention heads, head dims, windows and chunks, MLA ranks, Mamba and gated-delta-net heads,
sizes, conv kernel and state size. Shrunk: hidden size, MLP and expert sizes, expert count,
vocabulary, query LoRA rank and Mamba dt rank. Where a family derives a cache dimension from the
hidden size, the dimension is pinned explicitly (``head_dim``, ``mamba_d_ssm``) or the multiplier is
rescaled (``expand``) so the cached shapes stay exactly those of the spec.
"""

from __future__ import annotations

from typing import Any

from kvbudget.errors import ConfigError
from kvbudget.model.spec import (
    ChunkedLocal,
    CrossAttention,
    FullAttention,
    LatentAttention,
    ModelSpec,
    Recurrent,
    SlidingWindow,
)

HIDDEN = 64
INTERMEDIATE = 64
VOCAB = 256
EXPERTS = 4
EXPERTS_PER_TOKEN = 2
Q_LORA_RANK = 32
DT_RANK = 8

# Fields that belong to the checkpoint or loader, not the architecture.
_DROP = (
    "quantization_config",
    "compression_config",
    "auto_map",
    "architectures",
    "torch_dtype",
    "dtype",
    "_name_or_path",
    "transformers_version",
    "text_config",
    "vision_config",
    "use_cache",
    "attn_implementation",
)
_EXPERT_COUNTS = ("num_local_experts", "n_routed_experts", "num_experts")
_EXPERT_TOP_K = ("num_experts_per_tok", "experts_per_token", "moe_topk", "top_k_experts", "num_experts_per_token")
# Families whose recurrent state width is the hidden size itself (LFM2's short convolution holds
# hidden_size x L_cache, transformers 5.24 modeling_lfm2.py): the hidden size is kept, not shrunk.
_KEEP_HIDDEN = ("lfm2",)
_SMALL_MLP = (
    "intermediate_size",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "intermediate_size_mlp",
    "ffn_hidden_size",
)
# Families whose attention head_dim is hidden_size // num_attention_heads, with no head_dim field
# (transformers 5.24 models/mllama/modeling_mllama.py MllamaTextSelfAttention / CrossAttention).
_HEAD_DIM_FROM_HIDDEN = ("mllama_text_model",)
# Families whose Mamba inner size is expand * hidden_size (transformers 5.24 configuration / modeling files).
_EXPAND_KEY = {"jamba": "mamba_expand", "granitemoehybrid": "mamba_expand", "mamba2": "expand", "mamba": "expand"}


def _attention_dims(spec: ModelSpec) -> tuple[int, int] | None:
    """(kv heads, K head dim) of the first attention-like layer, or None."""
    for _, state in spec.primitives():
        if isinstance(state, FullAttention | SlidingWindow | ChunkedLocal | CrossAttention):
            return state.kv_heads, state.k_dim
    return None


def _recurrent(spec: ModelSpec) -> Recurrent | None:
    for _, state in spec.primitives():
        if isinstance(state, Recurrent):
            return state
    return None


def _has_latent(spec: ModelSpec) -> bool:
    return any(isinstance(state, LatentAttention) for _, state in spec.primitives())


def _int(cfg: dict[str, Any], key: str, default: int = 0) -> int:
    value = cfg.get(key)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def _hidden_size(cfg: dict[str, Any], heads: int, inner: int | None) -> int:
    """The smallest hidden size >= HIDDEN that the attention heads (and a Mamba inner size) divide."""
    hidden = HIDDEN
    step = max(heads, 1)
    hidden = -(-hidden // step) * step
    if inner is not None:
        while inner % hidden:
            hidden += step
            if hidden > inner:
                return _int(cfg, "hidden_size", hidden)
    return hidden


def skeleton_config(spec: ModelSpec, tokens: int) -> dict[str, Any]:
    """Keyword arguments for ``AutoConfig.for_model(spec.model_type, **kwargs)``.

    ``tokens`` is the longest sequence the skeleton will see (prompt plus decode steps); the position
    limit is raised to it when the config's own is lower.
    """
    if not spec.config:
        raise ConfigError(f"{spec.name}: the spec carries no config to build a skeleton from")
    cfg: dict[str, Any] = {k: v for k, v in spec.config.items() if k not in _DROP}
    cfg.pop("model_type", None)
    model_type = spec.model_type
    attention = _attention_dims(spec)
    rec = _recurrent(spec)
    heads = _int(cfg, "num_attention_heads", 1)

    if attention is not None and not _has_latent(spec):
        kv_heads, head_dim = attention
        cfg["num_key_value_heads"] = kv_heads
        cfg["head_dim"] = head_dim  # pinned: some families would derive it from the shrunk hidden size
        cfg.pop("attention_head_dim", None)

    inner = None
    expand_key = _EXPAND_KEY.get(model_type)
    if rec is not None and expand_key is not None:
        inner = rec.d_inner
    if model_type in _HEAD_DIM_FROM_HIDDEN and attention is not None:
        # head_dim = hidden // heads here: keep the KV heads as the query heads so hidden stays small.
        kv_heads, head_dim = attention
        cfg["num_attention_heads"] = kv_heads
        cfg["hidden_size"] = kv_heads * head_dim
        cfg.pop("head_dim", None)
    elif model_type not in _KEEP_HIDDEN:
        cfg["hidden_size"] = _hidden_size(cfg, heads, inner)
    hidden = int(cfg["hidden_size"])
    if inner is not None and expand_key is not None:
        if inner % hidden:
            raise ConfigError(f"{spec.name}: Mamba inner size {inner} is not a multiple of hidden size {hidden}")
        cfg[expand_key] = inner // hidden
        if model_type == "mamba":
            cfg["intermediate_size"] = inner
    if model_type == "falcon_h1" and rec is not None:
        cfg["mamba_d_ssm"] = rec.d_inner  # FalconH1Config falls back to 1024, not heads x d_head

    for key in _SMALL_MLP:
        if key in cfg and not (model_type == "mamba" and key == "intermediate_size"):
            cfg[key] = INTERMEDIATE
    if model_type != "mamba" and "intermediate_size" not in cfg:
        cfg["intermediate_size"] = INTERMEDIATE
    for key in _EXPERT_COUNTS:
        if isinstance(cfg.get(key), int) and cfg[key] > EXPERTS:
            cfg[key] = EXPERTS
    for key in _EXPERT_TOP_K:
        if isinstance(cfg.get(key), int) and cfg[key] > EXPERTS_PER_TOKEN:
            cfg[key] = EXPERTS_PER_TOKEN
    if "n_group" in cfg or "topk_group" in cfg or model_type in ("deepseek_v2", "deepseek_v3", "kimi_k2"):
        cfg["n_group"] = 1  # grouped routing needs the (shrunk) expert count to split into n_group groups
        cfg["topk_group"] = 1
    if isinstance(cfg.get("q_lora_rank"), int):
        cfg["q_lora_rank"] = Q_LORA_RANK
    for key in ("mamba_dt_rank", "time_step_rank"):
        if key in cfg:
            cfg[key] = DT_RANK

    cfg["vocab_size"] = VOCAB
    cfg.update(pad_token_id=0, bos_token_id=1, eos_token_id=2)
    cfg["max_position_embeddings"] = max(_int(cfg, "max_position_embeddings"), tokens + 1)
    cfg["use_cache"] = True
    return cfg
