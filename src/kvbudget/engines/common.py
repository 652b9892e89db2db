"""Arithmetic shared by every engine: slot bytes of attention layers, recurrent state bytes,
tensor-parallel head placement, and grouping identical layers."""

from __future__ import annotations

from kvbudget.engines.base import NO_SLOTS, Group, Slots, capped_slots, exact_slots
from kvbudget.errors import EngineRefusalError
from kvbudget.model.spec import (
    DELTA_VARIANTS,
    ChunkedLocal,
    FullAttention,
    IndexerKeys,
    LatentAttention,
    MeasuredState,
    ModelSpec,
    Primitive,
    Recurrent,
    SharedKV,
    SlidingWindow,
)
from kvbudget.precision import CacheDType, parse_cache_dtype

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.model.spec import CacheKind


def group_primitives(spec: ModelSpec, *, measured: str | None = None) -> list[tuple[Primitive, tuple[int, ...]]]:
    """Identical primitives with the layer indices that hold them, in order of first appearance.

    A derived layout's measured state (``MeasuredState``) is refused unless the engine sizes it (``measured``
    names the engine that does); a serving engine never silently drops it."""
    if measured is None:
        for _, state in spec.primitives():
            if isinstance(state, MeasuredState):
                raise EngineRefusalError(
                    f"{spec.name}: its layout was derived from transformers, whose recurrent state ("
                    f"{', '.join(f'{n} {list(s)} {d}' for n, s, d in state.tensors)}) each serving engine keeps in its "
                    "own shape and dtype; only --engine transformers (or ideal) sizes it"
                )
    order: list[Primitive] = []
    where: dict[Primitive, list[int]] = {}
    for index, state in spec.primitives():
        if state not in where:
            order.append(state)
            where[state] = []
        where[state].append(index)
    return [(state, tuple(where[state])) for state in order]


def kv_heads_per_rank(total: int, tp: int, engine: str) -> tuple[int, str | None]:
    """KV heads one rank stores, and a warning when they are replicated.

    vLLM ``ModelConfig.get_num_kv_heads`` and SGLang ``get_num_kv_heads``: max(1, H // tp), with
    replication when tp > H. Both require tp to divide H, or H to divide tp (vLLM's check).
    """
    if tp == 1:
        return total, None
    if tp >= total:
        if tp % total:
            raise EngineRefusalError(
                f"{engine}: tensor-parallel size {tp} is not a multiple of the {total} KV heads; "
                "the engine refuses this split, pick a --tp that divides or is divided by the KV heads"
            )
        if tp > total:
            return 1, (
                f"tp={tp} > {total} KV heads: each KV head is replicated on {tp // total} GPUs "
                "(1 head per GPU), so adding GPUs beyond the KV-head count does not shrink the cache per GPU"
            )
        return 1, None
    if total % tp:
        raise EngineRefusalError(
            f"{engine}: {total} KV heads cannot be split evenly over tensor-parallel size {tp}; "
            "pick a --tp that divides the KV heads"
        )
    return total // tp, None


def heads_on_rank(total: int, tp: int, engine: str, warnings: list[str]) -> int:
    """``kv_heads_per_rank``'s heads, its replication warning (if any) added to ``warnings``."""
    heads, warning = kv_heads_per_rank(total, tp, engine)
    if warning:
        warnings.append(warning)
    return heads


def attention_slot(heads: int, k_dim: int, v_dim: int, k: CacheDType, v: CacheDType) -> tuple[int, str]:
    """Bytes of one token in one attention layer: heads x (K row + V row)."""
    k_row, v_row = k.row_bytes(k_dim), v.row_bytes(v_dim)
    if k == v and k_dim == v_dim and k.block_elems == 1 and not k.row_extra_bytes:
        text = f"2 (K,V) x {heads} kv heads x {k_dim} dims x {k.block_bytes} B ({k.name})"
    else:
        text = f"{heads} kv heads x (K {k_dim} dims @ {k.name} = {k_row} B + V {v_dim} dims @ {v.name} = {v_row} B)"
    return heads * (k_row + v_row), text


def latent_slot(mla: LatentAttention, k: CacheDType) -> tuple[int, str]:
    """Bytes of one token's latent in one MLA layer: (kv_lora_rank + rope_dim) in the K dtype, no V."""
    row = k.row_bytes(mla.latent_dim)
    return row, f"({mla.kv_lora_rank} latent + {mla.rope_dim} rope) dims x {k.per_element()} ({k.name}), no V"


def expanded_mla_slot(mla: LatentAttention, heads: int, k: CacheDType, v: CacheDType) -> tuple[int, str]:
    """Per-head K (qk_nope + rope) and V (v_head_dim), as engines that decompress before caching store it."""
    k_dim = mla.qk_nope_dim + mla.rope_dim
    return attention_slot(heads, k_dim, mla.v_head_dim, k, v)


def state_dtype(pinned: str | None, fallback: str) -> CacheDType:
    return parse_cache_dtype(pinned or fallback, what="recurrent state dtype")


def recurrent_bytes(
    rec: Recurrent, *, tp: int, conv_len: int, conv_dtype: CacheDType, ssm_dtype: CacheDType
) -> tuple[int, str]:
    """Bytes of one sequence's state in one layer: conv (conv_len x channels) + SSM state."""
    channels = rec.conv_channels(tp)
    conv = conv_len * channels * conv_dtype.block_bytes
    ssm_shape = rec.ssm_shape(tp)
    ssm = rec.ssm_elems(tp) * ssm_dtype.block_bytes
    conv_bytes = conv_dtype.block_bytes
    text = f"{rec.variant}: conv {conv_len} x {channels:,} x {conv_bytes} B ({conv_dtype.name}) = {conv:,} B"
    if ssm_shape:
        shape = " x ".join(str(d) for d in ssm_shape)
        text += f" + state {shape} x {ssm_dtype.block_bytes} B ({ssm_dtype.name}) = {ssm:,} B"
    else:
        text += ", no recurrent state"
    return conv + ssm, text


def check_recurrent_tp(rec: Recurrent, tp: int, engine: str) -> None:
    """Recurrent heads must split evenly over tensor-parallel ranks."""
    heads = rec.num_heads if rec.variant == "mamba2" else rec.num_v_heads if rec.variant in DELTA_VARIANTS else 0
    if tp > 1 and heads and heads % tp:
        raise EngineRefusalError(f"{engine}: {heads} recurrent heads cannot be split over tensor-parallel size {tp}")
    if tp > 1 and rec.variant in ("mamba1", "short_conv") and rec.d_inner % tp:
        raise EngineRefusalError(f"{engine}: Mamba inner size {rec.d_inner} cannot be split over tp={tp}")


def shared_kv_group(state: SharedKV, indices: tuple[int, ...], why: str = "reuses another layer") -> Group:
    """Layers that read another layer's cache: they allocate nothing on any engine."""
    return Group(
        "shared_kv", f"shares layer {state.target}'s KV", len(indices), 0, why, NO_SLOTS, False, layer_indices=indices
    )


def fixed_state_group(kind: CacheKind, label: str, indices: tuple[int, ...], size: int, formula: str) -> Group:
    """Layers holding a fixed number of bytes per sequence (recurrent state, a cross-attention source)."""
    return Group(kind, label, len(indices), 0, "", NO_SLOTS, False, size, formula, layer_indices=indices)


def cross_attention_group(indices: tuple[int, ...], slot: int, text: str, image_tokens: int) -> Group:
    """Cross-attention layers caching K/V of ``image_tokens`` source tokens once per sequence."""
    return fixed_state_group(
        "cross_attention",
        f"cross attention ({image_tokens:,} image tokens)",
        indices,
        slot * image_tokens,
        f"{image_tokens:,} image tokens x {slot:,} B ({text})",
    )


def attention_group(
    state: FullAttention | SlidingWindow | ChunkedLocal, indices: tuple[int, ...], slot: int, text: str, slots: Slots
) -> Group:
    """A group of self-attention layers; kind, label and whether it keeps growing follow the primitive."""
    kind: CacheKind
    if isinstance(state, SlidingWindow):
        kind, label, grows = "sliding_window", f"sliding window {state.window:,}", False
    elif isinstance(state, ChunkedLocal):
        kind, label, grows = "chunked_local", f"chunked local {state.chunk:,}", False
    else:
        kind, label, grows = "full_attention", "full attention", True
    return Group(kind, label, len(indices), slot, text, slots, grows, layer_indices=indices)


def local_slots(state: FullAttention | SlidingWindow | ChunkedLocal, window_why: str, chunk_why: str) -> Slots:
    """Token slots of a cache that keeps every token for full attention and at most the window, or one chunk,
    for local attention (the textbook, transformers' DynamicCache); ``*_why`` says why the cap is what it is."""
    if isinstance(state, SlidingWindow):
        return capped_slots(state.window, window_why)
    if isinstance(state, ChunkedLocal):
        return capped_slots(state.chunk, chunk_why)
    return exact_slots()


def kernel_minus_one_state(
    state: Recurrent, *, tp: int, engine: str, conv_default: str, ssm_default: str
) -> tuple[int, str]:
    """One sequence's state in one layer for engines that keep ``conv_kernel - 1`` conv columns
    (vLLM, SGLang, the textbook): the config's dtype pins win, else the engine's defaults."""
    check_recurrent_tp(state, tp, engine)
    return recurrent_bytes(
        state,
        tp=tp,
        conv_len=state.conv_kernel - 1,
        conv_dtype=state_dtype(state.conv_dtype, conv_default),
        ssm_dtype=state_dtype(state.ssm_dtype, ssm_default),
    )


FP8_INDEXER_QUANT_BLOCK = 128  # vLLM Indexer.quant_block_size / SGLang NSATokenToKVPool.quant_block_size


def fp8_indexer_record(
    engine: str, spec: ModelSpec, state: IndexerKeys, indices: tuple[int, ...], unknown: str
) -> tuple[int, str]:
    """(bytes per token per layer, formula) of the fp8 indexer-key record vLLM and SGLang keep for a
    sparse-attention (DSA) model: index_head_dim fp8 bytes + one fp32 scale per 128 values, whatever
    --kv-cache-dtype says. Refused when some sparse-attention layers reuse another layer's top-k
    (indexer_types 'shared'): ``unknown`` says what is not known about the engine's rule for them."""
    latent = sum(1 for _, s in spec.primitives() if isinstance(s, LatentAttention))
    if len(indices) != latent:
        raise EngineRefusalError(
            f"{engine}: {latent - len(indices)} of {latent} sparse-attention layers reuse another layer's top-k "
            f"(indexer_types 'shared'); {unknown}"
        )
    scales = state.head_dim // FP8_INDEXER_QUANT_BLOCK
    return state.head_dim + scales * 4, f"1 indexer key x ({state.head_dim} fp8 B + {scales} fp32 scales)"


def indexer_group(indices: tuple[int, ...], slot: int, text: str, slots: Slots) -> Group:
    """Layers keeping a sparse-attention indexer's key cache: one key per token, growing like full attention."""
    label = "indexer keys (sparse attention)"
    return Group("indexer", label, len(indices), slot, text, slots, True, layer_indices=indices)


def measured_state_group(state: MeasuredState, indices: tuple[int, ...], tp: int, engine: str) -> Group:
    """A derived layout's measured per-sequence state, byte for byte as transformers holds it (one device)."""
    if tp > 1:
        raise EngineRefusalError(
            f"{engine}: how a derived recurrent state splits over tensor-parallel ranks is unknown"
        )
    size, parts = 0, []
    for name, shape, dtype in state.tensors:
        elems = 1
        for dim in shape:
            elems *= dim
        width = parse_cache_dtype(dtype, what="derived state dtype").row_bytes(elems)
        size += width
        parts.append(f"{name} {' x '.join(map(str, shape))} @ {dtype} = {width:,} B")
    return fixed_state_group("recurrent", "derived recurrent state", indices, size, " + ".join(parts))
