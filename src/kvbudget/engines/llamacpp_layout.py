"""llama.cpp's cache for each group of identical layers: K and V rows per cell, the V-less MLA cache, the F32
recurrent state, the DSA indexer keys, and the per-GPU layout (see llamacpp.py for the rules)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kvbudget.engines.base import NO_SLOTS, EngineOptions, Group, Layout, Slots
from kvbudget.engines.common import group_primitives, shared_kv_group
from kvbudget.engines.llamacpp_cells import (
    DEFAULT_VERSION,
    NAME,
    RS_BYTES,
    check_cache_types,
    context_cells,
    ggml_type_name,
    swa_cells,
    ubatch,
)
from kvbudget.errors import EngineRefusalError
from kvbudget.model.spec import (
    DELTA_VARIANTS,
    ChunkedLocal,
    CrossAttention,
    FullAttention,
    IndexerKeys,
    LatentAttention,
    ModelSpec,
    Recurrent,
    SharedKV,
    SlidingWindow,
)
from kvbudget.precision import CacheDType

if TYPE_CHECKING:
    from kvbudget.model.spec import CacheKind


def recurrent_rows(rec: Recurrent) -> tuple[int, int]:
    """(n_embd_r, n_embd_s): F32 values of one sequence's conv (R) and SSM (S) state in one layer.

    src/llama-hparams.cpp: n_embd_r = (d_conv - 1) * (d_inner + 2 * n_group * d_state) and
    n_embd_s = d_state * d_inner for Mamba (Mamba-1 has n_group 0). Gated delta net GGUFs map
    d_inner = v_dim * n_v_heads, d_state = k_dim, n_group = n_k_heads (convert_hf_to_gguf Qwen3Next).
    Kimi delta attention: n_embd_r = 3 * (d_conv - 1) * n_head * kda_head_dim, n_embd_s = kda_head_dim^2 *
    n_head, the same numbers. LFM2 short convolution: n_embd_r = n_embd * (L_cache - 1), no S.
    """
    if rec.variant == "short_conv":
        return (rec.conv_kernel - 1) * rec.d_inner, 0
    if rec.variant in DELTA_VARIANTS:
        d_inner, d_state, n_group = rec.num_v_heads * rec.head_v_dim, rec.head_k_dim, rec.num_k_heads
    else:
        d_inner, d_state = rec.d_inner, rec.d_state
        n_group = rec.n_groups if rec.variant == "mamba2" else 0
    return (rec.conv_kernel - 1) * (d_inner + 2 * n_group * d_state), d_state * d_inner


@dataclass(frozen=True)
class CachePart:
    """One group of identical layers as llama.cpp allocates it.

    ``cache`` is ``kv`` (the base cache), ``swa`` (the SWA half of the iSWA cache), ``indexer`` (the DSA
    indexer's key cache), ``recurrent`` or ``none``. ``k_bytes``/``v_bytes`` are one cell of one layer;
    ``r_bytes``/``s_bytes`` one sequence of one layer.
    """

    cache: str
    group: Group
    k_bytes: int = 0
    v_bytes: int = 0
    r_bytes: int = 0
    s_bytes: int = 0


def window_of(spec: ModelSpec) -> int | None:
    """llama.cpp keeps one window per model (hparams.n_swa); refuse specs that need more."""
    windows = {s.window for _, s in spec.primitives() if isinstance(s, SlidingWindow)}
    chunks = {s.chunk for _, s in spec.primitives() if isinstance(s, ChunkedLocal)}
    if len(windows | chunks) > 1 or (windows and chunks):
        raise EngineRefusalError(
            f"{NAME}: llama.cpp has a single sliding window / chunk size per model (hparams.n_swa), "
            f"but this model uses {sorted(windows)} (sliding) and {sorted(chunks)} (chunked)"
        )
    both = windows | chunks
    return next(iter(both)) if both else None


def _full_slots(options: EngineOptions) -> Slots:
    """src/llama-model.cpp create_memory: kv_size = n_ctx_seq cells in each of n_stream streams."""

    def cells(tokens: int, sequences: int) -> int:
        per_stream, streams = context_cells(tokens * sequences, sequences, options.kv_unified)
        return per_stream * streams

    if options.kv_unified:
        return Slots("pad(N x S, 256) cells in one stream (--kv-unified)", cells)
    return Slots("S streams x pad(pad(N x S, 256) / S, 256) cells (-c N*S -np S)", cells)


def _swa_slots(window: int, options: EngineOptions) -> Slots:
    """src/llama-kv-cache-iswa.cpp: the SWA cache has size_swa cells in each stream (see swa_cells)."""

    def cells(tokens: int, sequences: int) -> int:
        per_stream, streams = context_cells(tokens * sequences, sequences, options.kv_unified)
        return swa_cells(per_stream, window, sequences, options) * streams

    if options.swa_full:
        return Slots("as full attention (--swa-full)", cells)
    span = f"{window:,} x S" if options.kv_unified else f"{window:,}"
    return Slots(f"streams x pad(min(n_ctx_seq, {span} + {ubatch(options)} ubatch), 256) cells (iSWA)", cells)


def _v_width_max(spec: ModelSpec, storage: str) -> int:
    """n_embd_v_gqa_max(): the widest V row over all layers (src/llama-hparams.cpp)."""
    widths = [0]
    for _, s in spec.primitives():
        if isinstance(s, FullAttention | SlidingWindow | ChunkedLocal):
            widths.append(s.kv_heads * s.v_dim)
        elif isinstance(s, LatentAttention):
            widths.append(s.num_heads * s.v_head_dim if storage == "expanded" else s.kv_lora_rank)
    return max(widths)


def _attention_rows(
    heads: int, k_dim: int, v_dim: int, k: CacheDType, v: CacheDType, v_trans_width: int
) -> tuple[int, int, str]:
    """K and V bytes of one cell in one layer. src/llama-kv-cache.cpp: K [n_embd_k_gqa, kv_size, n_stream];
    V [v_trans ? n_embd_v_gqa_max : n_embd_v_gqa, ...] with v_trans = !flash_attn (V is then a float type)."""
    k_bytes = heads * k.row_bytes(k_dim)
    if v_trans_width:
        v_bytes = v.row_bytes(v_trans_width)
        v_text = f"V {v_trans_width:,} values (widest layer, transposed: flash attention off) @ {v.name}"
    else:
        v_bytes = heads * v.row_bytes(v_dim)
        v_text = f"V {heads} x {v_dim} @ {v.name}"
    text = f"K {heads} kv heads x {k_dim} @ {k.name} = {k_bytes:,} B + {v_text} = {v_bytes:,} B"
    return k_bytes, v_bytes, text


def plan(spec: ModelSpec, k: CacheDType, v: CacheDType, options: EngineOptions) -> tuple[CachePart, ...]:
    """Every group of identical layers with the bytes llama.cpp allocates for it."""
    check_cache_types(k, v, options.flash_attn)
    window = window_of(spec)
    storage = options.mla_storage or "latent"
    trans = 0 if options.flash_attn else _v_width_max(spec, storage)
    parts: list[CachePart] = []
    for state, indices in group_primitives(spec):
        n = len(indices)
        if isinstance(state, FullAttention | SlidingWindow | ChunkedLocal):
            kb, vb, text = _attention_rows(state.kv_heads, state.k_dim, state.v_dim, k, v, trans)
            if isinstance(state, FullAttention):
                group = Group("full_attention", "full attention", n, kb + vb, text, _full_slots(options), True)
                parts.append(CachePart("kv", replace(group, layer_indices=indices), kb, vb))
                continue
            assert window is not None
            sliding = isinstance(state, SlidingWindow)
            kind: CacheKind = "sliding_window" if sliding else "chunked_local"
            label = f"{'sliding window' if sliding else 'chunked'} {window:,} (iSWA cache)"
            group = Group(kind, label, n, kb + vb, text, _swa_slots(window, options), options.swa_full)
            parts.append(CachePart("swa", replace(group, layer_indices=indices), kb, vb))
        elif isinstance(state, LatentAttention):
            parts.append(_latent_part(state, indices, k, v, storage, trans, options))
        elif isinstance(state, Recurrent):
            n_r, n_s = recurrent_rows(state)
            text = f"{state.variant}: R {n_r:,} + S {n_s:,} values x {RS_BYTES} B (f32 whatever -ctk/-ctv say)"
            size = (n_r + n_s) * RS_BYTES
            group = Group("recurrent", f"{state.variant} state (f32)", n, 0, "", NO_SLOTS, False, size, text)
            group = replace(group, layer_indices=indices)
            parts.append(CachePart("recurrent", group, r_bytes=n_r * RS_BYTES, s_bytes=n_s * RS_BYTES))
        elif isinstance(state, IndexerKeys):
            # src/llama-kv-cache-dsa.cpp: kv_lid is a llama_kv_cache with n_head_kv 1 and n_embd_head_k =
            # indexer_head_size, V-less like the MLA cache (is_mla), -ctk type, the main cache's kv_size.
            kb = k.row_bytes(state.head_dim)
            text = f"K only: 1 indexer key x {state.head_dim} @ {k.name} = {kb:,} B"
            group = Group("indexer", "indexer keys (DSA key cache)", n, kb, text, _full_slots(options), True)
            parts.append(CachePart("indexer", replace(group, layer_indices=indices), kb, 0))
        elif isinstance(state, SharedKV):
            # src/llama-kv-cache.cpp: layers at or past n_layer_kv_from_start reuse an earlier layer's cells.
            group = shared_kv_group(state, indices)
            parts.append(CachePart("none", group))
        elif isinstance(state, CrossAttention):
            # src/llama-arch.cpp lists no mllama architecture (gguf-py MODEL_ARCH has none either).
            raise EngineRefusalError(
                f"{NAME}: llama.cpp has no cross-attention decoder (no mllama / Llama 3.2 Vision architecture "
                "in src/llama-arch.cpp), so this model cannot be served by it; use --engine vllm or transformers"
            )
    return tuple(parts)


def _latent_part(
    mla: LatentAttention,
    indices: tuple[int, ...],
    k: CacheDType,
    v: CacheDType,
    storage: str,
    trans: int,
    options: EngineOptions,
) -> CachePart:
    n = len(indices)
    slots = _full_slots(options)
    if storage == "expanded":
        # Legacy deepseek2 GGUF (before PR #12801): n_head_kv = n_head, K = qk_nope + rope, V = v_head_dim.
        kb, vb, text = _attention_rows(mla.num_heads, mla.qk_nope_dim + mla.rope_dim, mla.v_head_dim, k, v, trans)
        label = "latent attention, expanded per-head K/V (legacy GGUF)"
    elif storage == "latent+v":
        # MLA GGUF before PR #19067: one KV head, K = kv_lora_rank + rope (576), V = kv_lora_rank (512).
        kb, vb, text = _attention_rows(1, mla.latent_dim, mla.kv_lora_rank, k, v, trans)
        label = "latent attention, K latent + V (before PR #19067)"
    else:
        # PR #19067 "kv-cache : support V-less cache" (2026-01-24): K only; V is a view of K's first
        # kv_lora_rank values, so it costs nothing and must have K's type.
        if k != v:
            raise EngineRefusalError(
                f"{NAME}: the MLA cache stores only K and reads V as a view of it (PR #19067), so K and V must "
                f"use the same type; got -ctk {ggml_type_name(k)} and -ctv {ggml_type_name(v)}"
            )
        kb, vb = k.row_bytes(mla.latent_dim), 0
        text = (
            f"K only: ({mla.kv_lora_rank} latent + {mla.rope_dim} rope) @ {k.name} = {kb:,} B; "
            "V is a view of K (PR #19067)"
        )
        label = "latent attention (MLA, V-less)"
    group = Group("latent_attention", label, n, kb + vb, text, slots, True, layer_indices=indices)
    return CachePart("kv", group, kb, vb)


def layout(
    spec: ModelSpec, k: CacheDType, v: CacheDType, tp: int, options: EngineOptions, version: str = DEFAULT_VERSION
) -> Layout:
    if tp > 1:
        # src/llama-kv-cache.cpp: each layer's K/V tensors live on model.dev_layer(il) (split mode "layer").
        raise EngineRefusalError(
            f"{NAME}: llama.cpp does not shard the KV cache by tensor parallelism: it splits whole layers "
            "across devices (--split-mode layer) and each layer's K/V lives with its layer; use --tp 1 for "
            "the total and divide by your layer split"
        )
    parts = plan(spec, k, v, options)
    notes = [
        "llama.cpp: S sequences of N tokens = -c N*S -np S; the context is padded to 256 cells "
        "(src/llama-context.cpp)" + ("; one unified stream" if options.kv_unified else "; one stream per sequence"),
    ]
    if any(p.cache == "recurrent" for p in parts):
        notes.append("llama.cpp keeps recurrent state (R conv, S ssm) in f32 whatever the K/V cache type")
    if spec.model_type == "mistral" and any(p.cache == "swa" for p in parts):
        notes.append(
            "convert_hf_to_gguf drops Mistral-7B's sliding window; read the .gguf itself for what "
            "llama.cpp really caches (then all layers are full)"
        )
    return Layout(NAME, version or DEFAULT_VERSION, k, v, tp, tuple(p.group for p in parts), None, tuple(notes))
