"""Hugging Face transformers: ``DynamicCache(config=...)`` as the model's own forward builds it, in
steady state (after the prefill and at least one decode step), one sequence batch on one device.

Rules (transformers 5.24.0, ``src/transformers/cache_utils.py`` unless noted), each checked against
the real cache tensors by ``kvbudget measure`` and the oracle tests (``untyped_storage().nbytes()``):

* full attention, ``DynamicLayer``: K and V ``[B, H_kv, N, D]``, grown by ``torch.cat``: N slots;
* sliding window W, ``DynamicSlidingWindowLayer``: ``update`` keeps ``full[:, :, -W+1:]``, a *view*
  of the concatenated tensor, so after a decode step the storage is the W-token ``torch.cat`` output
  (the view shows W-1): min(N, W) slots. Right after a prefill longer than W the storage briefly
  holds the whole prompt, and every ``torch.cat`` briefly doubles a layer;
* chunked attention (Llama 4): ``"chunked_attention"`` maps to the same class with
  ``sliding_window = attention_chunk_size``: min(N, chunk) slots;
* latent attention (DeepSeek-V2/V3, Kimi K2): since PR #47761 (merged 2026-08-04; measured on 5.24)
  the latent ``keys [B,1,S,kv_lora_rank]`` and ``values [B,1,S,qk_rope_head_dim]``; before it
  (measured on 4.57.6) the expanded per-head K ``qk_nope + qk_rope`` and V ``v_head_dim``;
* recurrent layers (``LinearAttentionLayer``): conv state zeros of ``(*conv_input[:-1],
  conv_kernel_size)``, i.e. ``d_conv`` columns, not ``d_conv - 1``, in the compute dtype; the SSM /
  recurrent state is ``zeros_like`` the state the mixer returns, which every PyTorch mixer
  computes in fp32 (see ``_SSM_STATE_SOURCE``), whatever ``mamba_ssm_cache_dtype`` says;
* sparse-attention indexer (DeepSeek-V3.2, GLM-5), ``DynamicIndexedLayer``: ``indexer_keys [B, S,
  index_head_dim]`` in the compute dtype, grown by ``torch.cat`` beside the latent: N slots;
* short convolution (LFM2 ``conv`` layers): conv state of ``conv_L_cache`` columns, no recurrent state;
* cross attention (Mllama): a ``DynamicLayer`` holding the image tokens' K and V;
* KV-sharing and MLP/MoE-only layers: ``DummyLayer``, nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from kvbudget.engines.base import (
    EngineOptions,
    Group,
    Layout,
    Slots,
    exact_slots,
    version_tuple,
)
from kvbudget.engines.common import (
    attention_group,
    attention_slot,
    cross_attention_group,
    expanded_mla_slot,
    fixed_state_group,
    group_primitives,
    indexer_group,
    local_slots,
    measured_state_group,
    recurrent_bytes,
    shared_kv_group,
)
from kvbudget.engines.contract import EngineRules, yarn_override
from kvbudget.errors import EngineRefusalError
from kvbudget.model.spec import (
    ChunkedLocal,
    CrossAttention,
    FullAttention,
    IndexerKeys,
    LatentAttention,
    MeasuredState,
    ModelSpec,
    Recurrent,
    SharedKV,
    SlidingWindow,
)
from kvbudget.precision import CacheDType, parse_cache_dtype

NAME = "transformers"
DEFAULT_VERSION = "5.24.0"

# The cache is the model's compute dtype (DynamicLayer.lazy_initialization takes the dtype of the
# first key_states), so these are the dtypes a model can be loaded in.
COMPUTE_DTYPES = ("bf16", "fp16", "fp32")
# PR #47761 (merged 2026-08-04) caches the MLA latent. Its first release is not pinned: kvbudget
# treats 5.x as latent (verified on 5.24.0) and < 5 as expanded (verified on 4.57.6).
MLA_LATENT_SINCE = (5,)
VERIFIED_LATENT = (5, 24)
# The layered cache design (DynamicLayer, DynamicSlidingWindowLayer, LinearAttentionLayer) appeared
# around 4.56; before it caches were tuples (and Gemma defaulted to the static HybridCache).
LAYERED_SINCE = (4, 56)

# Where each recurrent mixer hands transformers an fp32 state (transformers 5.24.0, PyTorch path):
_SSM_STATE_SOURCE = {
    # models/*/modeling_*.py ``mamba2_chunk_scan``: ``hidden_states.float()`` -> final_state fp32
    "mamba2": "mamba2_chunk_scan computes in fp32 (modeling_nemotron_h/falcon_h1/granitemoehybrid/mamba2.py)",
    # models/qwen3_next/modeling_qwen3_next.py ``torch_chunk_gated_delta_rule``: inputs ``.to(torch.float32)``
    "gated_delta_net": "torch_chunk_gated_delta_rule computes in fp32 (modeling_qwen3_next.py)",
    # models/jamba|mamba/modeling_*.py ``mamba_selective_scan``: fp32 discrete_A * state + fp32 deltaB_u
    "mamba1": "mamba_selective_scan promotes the state to fp32 (modeling_jamba.py, modeling_mamba.py)",
    # models/kimi_linear/modeling_kimi_linear.py: update_recurrent_state(last_recurrent_state.to(torch.float32))
    "kda": "KimiDeltaAttention stores the state .to(torch.float32) (modeling_kimi_linear.py)",
    # models/lfm2/modeling_lfm2.py Lfm2ShortConv: only the conv state is cached
    "short_conv": "Lfm2ShortConv keeps only a conv state (modeling_lfm2.py)",
}
FP32 = parse_cache_dtype("fp32")


def _check(k: CacheDType, v: CacheDType, tp: int) -> CacheDType:
    """The one cache dtype transformers uses, or a refusal that says what to do instead."""
    for dtype in (k, v):
        if dtype.name not in COMPUTE_DTYPES:
            raise EngineRefusalError(
                f"transformers: cache dtype {dtype.name} is not modelled. transformers' DynamicCache keeps the "
                "model's compute dtype (bf16, fp16 or fp32); its QuantizedCache (quanto/HQQ backends keep the last "
                "128 tokens unquantized, residual_length; the fp8 backend quantizes per tensor) refuses models that "
                "are not all full attention and is not modelled yet. Use --engine ideal with --kv-dtype int4 or "
                "int2 for a KIVI-style estimate"
            )
    if k != v:
        raise EngineRefusalError(
            f"transformers: K ({k.name}) and V ({v.name}) differ, but DynamicCache stores both in the model's "
            "compute dtype; give one --kv-dtype"
        )
    if tp != 1:
        raise EngineRefusalError(
            f"transformers: tp={tp} is not modelled; transformers' cache lives on one device per layer "
            "(device_map splits layers, it does not shard KV heads), so use --tp 1 for the bytes per sequence"
        )
    return k


def _mla_group(
    state: LatentAttention,
    n: int,
    indices: tuple[int, ...],
    dtype: CacheDType,
    options: EngineOptions,
    version: tuple[int, ...],
    warnings: list[str],
) -> Group:
    storage = options.mla_storage
    if storage == "latent+v":
        raise EngineRefusalError(
            "transformers: --mla-storage latent+v does not exist in transformers; it caches either the latent "
            "(>= 5, PR #47761) or the expanded per-head K and V (< 5)"
        )
    if storage is None:
        storage = "latent" if version >= MLA_LATENT_SINCE else "expanded"
        if MLA_LATENT_SINCE <= version < VERIFIED_LATENT:
            warnings.append(
                "latent attention: the first transformers release with PR #47761 (latent MLA cache, merged "
                "2026-08-04) is not pinned; latent is verified on 5.24.0 and releases from before August 2026 "
                "cache the expanded per-head K/V (--mla-storage expanded)"
            )
    if storage == "expanded":
        # < 5 (modeling_deepseek_v3.py @ 4.57.6): kv_b_proj decompresses before cache.update, so the cache
        # holds key_states [B, heads, S, qk_nope + rope] and value_states [B, heads, S, v_head_dim].
        slot, text = expanded_mla_slot(state, state.num_heads, dtype, dtype)
        return Group(
            "latent_attention",
            "latent attention, expanded per-head K/V (transformers < 5)",
            n,
            slot,
            text,
            exact_slots(),
            True,
            layer_indices=indices,
        )
    # >= 5 (modeling_deepseek_v3.py @ 5.24.0): cache.update(kv_nope [B,1,S,kv_lora_rank], k_rot [B,1,S,rope]).
    slot = dtype.row_bytes(state.kv_lora_rank) + dtype.row_bytes(state.rope_dim)
    text = (
        f"keys {state.kv_lora_rank} latent + values {state.rope_dim} rope dims x {dtype.block_bytes} B ({dtype.name})"
    )
    return Group(
        "latent_attention", "latent attention (MLA)", n, slot, text, exact_slots(), True, layer_indices=indices
    )


def _recurrent_group(state: Recurrent, n: int, indices: tuple[int, ...], dtype: CacheDType, notes: list[str]) -> Group:
    # cache_utils.py LinearAttentionLayer.lazy_initialization: conv state of conv_kernel_size columns (each mixer
    # passes conv_kernel_size=config.*conv*), dtype of the conv input (compute dtype); recurrent state zeros_like
    # the mixer's fp32 final state.
    size, text = recurrent_bytes(state, tp=1, conv_len=state.conv_kernel, conv_dtype=dtype, ssm_dtype=FP32)
    notes.append(
        f"{state.variant} state: {_SSM_STATE_SOURCE[state.variant]}; conv keeps d_conv "
        f"({state.conv_kernel}) columns, not d_conv - 1"
    )
    if state.ssm_dtype is not None and parse_cache_dtype(state.ssm_dtype, what="ssm dtype") != FP32:
        notes.append(
            f"{state.variant} state: the config pins {state.ssm_dtype}, but transformers' PyTorch mixer keeps fp32"
        )
    return fixed_state_group("recurrent", f"{state.variant} state", indices, size, text)


def _dynamic_cache_slots(state: FullAttention | SlidingWindow | ChunkedLocal) -> Slots:
    """Token slots transformers' DynamicCache stores in steady state, per layer type: DynamicLayer.update
    torch.cats every token; DynamicSlidingWindowLayer.update keeps a view of the last W-1 tokens of a W-token
    cat output; get_layer_types_and_kwargs maps chunked_attention to DynamicSlidingWindowLayer(attention_chunk_size)."""
    return local_slots(state, "W-1 token view of a W-token tensor", "sliding-window layer of the chunk size")


def layout(
    spec: ModelSpec, k: CacheDType, v: CacheDType, tp: int, options: EngineOptions, version: str = DEFAULT_VERSION
) -> Layout:
    version = version or DEFAULT_VERSION
    dtype = _check(k, v, tp)
    ver = version_tuple(version)
    groups: list[Group] = []
    warnings: list[str] = []
    notes: list[str] = [
        "DynamicCache(config=...) in steady state, after at least one decode step; bytes per device holding the layer"
    ]
    if ver < LAYERED_SINCE:
        warnings.append(
            f"transformers {version}: before the layered cache (~4.56) caches were tuples and Gemma "
            "used the static HybridCache; these rules follow the layered DynamicCache"
        )
    elif ver < MLA_LATENT_SINCE:
        warnings.append(
            f"transformers {version}: only the MLA rule is version-specific and verified on 4.57.6; "
            "the other rules are those of 5.24.0"
        )
    for state, indices in group_primitives(spec, measured=NAME):
        n = len(indices)
        if isinstance(state, FullAttention | SlidingWindow | ChunkedLocal | CrossAttention):
            slot, text = attention_slot(state.kv_heads, state.k_dim, state.v_dim, dtype, dtype)
            if isinstance(state, SlidingWindow):
                notes.append(
                    "sliding layers: right after a prefill longer than the window the storage briefly "
                    "holds the whole prompt"
                )
            if not isinstance(state, CrossAttention):
                groups.append(attention_group(state, indices, slot, text, _dynamic_cache_slots(state)))
            else:
                # modeling_mllama.py: cross-attention layers cache.update the image K/V once, never the text.
                groups.append(cross_attention_group(indices, slot, text, options.image_tokens))
        elif isinstance(state, LatentAttention):
            groups.append(_mla_group(state, n, indices, dtype, options, ver, warnings))
        elif isinstance(state, Recurrent):
            groups.append(_recurrent_group(state, n, indices, dtype, notes))
        elif isinstance(state, IndexerKeys):
            # cache_utils.py DynamicIndexedLayer.update_indexer: torch.cat of [B, S, index_head_dim] keys in the
            # dtype the indexer hands it (the compute dtype: wk -> k_norm, modeling_deepseek_v32.py).
            slot = dtype.row_bytes(state.head_dim)
            text = f"indexer_keys {state.head_dim} dims x {dtype.block_bytes} B ({dtype.name})"
            groups.append(indexer_group(indices, slot, text, exact_slots()))
        elif isinstance(state, SharedKV):
            # get_layer_types_and_kwargs: KV-sharing consumers become DummyLayer (no tensors).
            groups.append(shared_kv_group(state, indices))
        elif isinstance(state, MeasuredState):
            # a derived layout: the conv / recurrent tensors this transformers was measured to keep
            groups.append(measured_state_group(state, indices, tp, NAME))
    return Layout(
        NAME,
        version,
        dtype,
        dtype,
        tp,
        tuple(groups),
        None,
        tuple(dict.fromkeys(notes)),
        tuple(dict.fromkeys(warnings)),
    )


class Rules(EngineRules):
    """transformers: no server and no pool; each sequence holds its own DynamicCache on one device per layer."""

    name = NAME
    title = "transformers"
    default_version = DEFAULT_VERSION
    order = 60
    aliases = ("hf", "huggingface")
    below: ClassVar[Mapping[str, str]] = {"5": "4.57.6"}  # the last 4.x release (MLA expanded before 5)
    parallel = False

    def layout(self, spec: ModelSpec, k: CacheDType, v: CacheDType, tp: int, options: EngineOptions) -> Layout:
        return layout(spec, k, v, tp, options, self.version)

    def shared_prefix(self, prefix: int, block: int | None, unified: bool = False) -> tuple[int, str]:
        return 0, "transformers caches each sequence separately"

    def past_window(self, context: int, native: int) -> str:
        # transformers 5 does not refuse a longer input; rope scaling comes from the config (rope_parameters in 5,
        # rope_scaling before)
        return (
            f"transformers {self.version} does not refuse it, but the model needs rope scaling over its window set "
            f"in the config before loading: {yarn_override(context, native)}"
        )
