"""The textbook formula, exact per layer, with no blocks or pages (the seeds' numbers).

Per token per layer: 2 x kv_heads x head_dim x bytes (K and V) for attention; (kv_lora_rank +
rope_dim) x bytes for latent attention; index_head_dim x bytes (one key, no V) for a sparse-attention
indexer; sliding-window and chunked layers stop growing at the
window / chunk; recurrent layers hold conv (d_conv - 1 columns) + SSM state per sequence, in the
model dtype unless the config pins it; cross-attention layers hold the image tokens.
"""

from __future__ import annotations

from kvbudget.engines.base import (
    EngineOptions,
    Group,
    Layout,
    exact_slots,
)
from kvbudget.engines.common import (
    attention_group,
    attention_slot,
    cross_attention_group,
    expanded_mla_slot,
    fixed_state_group,
    group_primitives,
    heads_on_rank,
    indexer_group,
    kernel_minus_one_state,
    kv_heads_per_rank,
    latent_slot,
    local_slots,
    measured_state_group,
    shared_kv_group,
)
from kvbudget.engines.contract import EngineRules
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
from kvbudget.precision import CacheDType

NAME = "ideal"
DEFAULT_VERSION = ""


def layout(spec: ModelSpec, k: CacheDType, v: CacheDType, tp: int, options: EngineOptions, version: str = "") -> Layout:
    groups: list[Group] = []
    warnings: list[str] = []
    for state, indices in group_primitives(spec, measured=NAME):
        n = len(indices)
        if isinstance(state, FullAttention | SlidingWindow | ChunkedLocal | CrossAttention):
            heads = heads_on_rank(state.kv_heads, tp, NAME, warnings)
            slot, text = attention_slot(heads, state.k_dim, state.v_dim, k, v)
            if isinstance(state, CrossAttention):
                groups.append(cross_attention_group(indices, slot, text, options.image_tokens))
            else:
                # the textbook: every token for full attention, at most the window or one chunk for local attention
                groups.append(attention_group(state, indices, slot, text, local_slots(state, "window", "one chunk")))
        elif isinstance(state, LatentAttention):
            if tp > 1:
                warnings.append(f"latent attention: the latent is replicated on all {tp} GPUs, not split")
            if options.mla_storage == "expanded":
                slot, text = expanded_mla_slot(state, kv_heads_per_rank(state.num_heads, tp, NAME)[0], k, v)
                label = "latent attention, expanded per-head K/V"
            else:
                slot, text = latent_slot(state, k)
                label = "latent attention (MLA)"
            groups.append(Group("latent_attention", label, n, slot, text, exact_slots(), True, layer_indices=indices))
        elif isinstance(state, Recurrent):
            size, text = kernel_minus_one_state(
                state, tp=tp, engine=NAME, conv_default=spec.dtype, ssm_default=spec.dtype
            )
            groups.append(fixed_state_group("recurrent", f"{state.variant} state", indices, size, text))
        elif isinstance(state, IndexerKeys):
            if tp > 1:
                warnings.append(f"indexer keys: one key head, replicated on all {tp} GPUs, not split")
            slot = k.row_bytes(state.head_dim)
            text = f"1 indexer key x {state.head_dim} dims x {k.per_element()} ({k.name}), no V"
            groups.append(indexer_group(indices, slot, text, exact_slots()))
        elif isinstance(state, SharedKV):
            groups.append(shared_kv_group(state, indices))
        elif isinstance(state, MeasuredState):
            groups.append(measured_state_group(state, indices, tp, NAME))
    return Layout(NAME, version, k, v, tp, tuple(groups), None, (), tuple(dict.fromkeys(warnings)))


class Rules(EngineRules):
    """The textbook: the whole card, no blocks, the whole prefix shared (the seeds' simple budget)."""

    name = NAME
    title = "ideal"
    default_version = DEFAULT_VERSION
    order = 0
    cheaper_kv_dtypes = ("fp8", "int4")

    def layout(self, spec: ModelSpec, k: CacheDType, v: CacheDType, tp: int, options: EngineOptions) -> Layout:
        return layout(spec, k, v, tp, options, self.version)

    def shared_prefix(self, prefix: int, block: int | None, unified: bool = False) -> tuple[int, str]:
        return prefix, "ideal: the whole prefix is shared"
