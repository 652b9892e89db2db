"""llama.cpp (ggml-org/llama.cpp): cells per stream, the iSWA cache, V-less MLA, F32 recurrent state.

The rules follow the newest llama.cpp read for ``shared/reference/engines.md`` (about b9xxx, 2026);
``DEFAULT_VERSION`` only labels reports. engines.md names no build number at which a rule changed
(PR #17046's 256-cell padding and PR #19067's V-less MLA cache are dated, not numbered), so no rule
branches on ``version``; the older MLA storage is chosen with ``options.mla_storage``.

S sequences of N tokens means ``-c S*N -np S`` (one stream per sequence unless ``--kv-unified``):

* full-attention and MLA layers: ``n_stream x n_ctx_seq`` cells;
* sliding-window and chunked layers (iSWA cache): ``n_stream x size_swa`` cells;
* sparse-attention indexer keys (deepseek32, glm-dsa): a second, K-only cache of ``indexer.key_length``
  values per cell in the -ctk type, with the main cache's cells (src/llama-kv-cache-dsa.cpp);
* recurrent layers: ``max(1, S)`` rows of F32 conv (R) and SSM (S) state, whatever -ctk/-ctv say;
* shared-KV layers: nothing. Cross-attention (mllama) is refused: llama.cpp has no such architecture.

``kv_cache_log_lines`` prints what llama.cpp itself logs for the same settings.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from kvbudget.engines.base import NO_SLOTS, EngineOptions, Group, Layout, Slots, pad
from kvbudget.engines.common import group_primitives, shared_kv_group
from kvbudget.engines.contract import EngineRules, rope_factor
from kvbudget.engines.llamacpp_compute import compute_buffer
from kvbudget.engines.overhead import Overhead, Site
from kvbudget.engines.records import Deployment, LoggedMemory, MemoryShape, ServeSettings, Share, StartUp, logged_sum
from kvbudget.errors import EngineRefusalError, InputError
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
from kvbudget.precision import CacheDType, parse_cache_dtype
from kvbudget.units import counted

if TYPE_CHECKING:
    from kvbudget.engines.metrics import EngineMetrics
    from kvbudget.measure.logs.record import EngineLog
    from kvbudget.model.spec import CacheKind
    from kvbudget.weights.sources import WeightSize

NAME = "llamacpp"
DEFAULT_VERSION = "b7900"

# common/arg.cpp kv_cache_types: the only -ctk/-ctv values llama.cpp accepts (ggml type names).
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
_GGML_NAMES = {
    "fp32": "f32",
    "fp16": "f16",
    "bf16": "bf16",
    "q8_0": "q8_0",
    "q4_0": "q4_0",
    "q4_1": "q4_1",
    "iq4_nl": "iq4_nl",
    "q5_0": "q5_0",
    "q5_1": "q5_1",
}
CELL_PAD = 256  # src/llama-context.cpp: n_ctx = GGML_PAD(n_ctx, 256) (PR #17046)
MAX_SEQ = 256  # src/llama-cparams.h: LLAMA_MAX_SEQ
DEFAULT_UBATCH = 512  # common/common.h n_ubatch default
RS_BYTES = 4  # src/llama-model.cpp create_memory: llama_memory_recurrent gets GGML_TYPE_F32 for R and S


def ggml_type_name(dtype: CacheDType) -> str:
    """The ggml name llama.cpp prints for a cache dtype (fp16 -> f16)."""
    return _GGML_NAMES.get(dtype.name, dtype.name)


# The llama.cpp type closest in bytes to a cache type it does not have (ggml-common.h block sizes).
_NEAREST = {
    "fp8": "q8_0 (34 B per 32 values: 8.5 bits)",
    "int8": "q8_0 (34 B per 32 values: 8.5 bits)",
    "nvfp4": "q4_0 (18 B per 32 values: 4.5 bits)",
    "int4": "q4_0 (18 B per 32 values: 4.5 bits)",
}


def check_cache_types(k: CacheDType, v: CacheDType, flash_attn: bool) -> None:
    """Refuse what llama.cpp refuses: unknown -ctk/-ctv, and a quantized V cache without flash attention."""
    for flag, dtype in (("-ctk", k), ("-ctv", v)):
        if dtype.name not in _GGML_NAMES:
            nearest = _NEAREST.get(dtype.name.split("_")[0].split(":")[0])
            hint = f"; the nearest llama.cpp type is {nearest} (--kv-dtype {nearest.split()[0]})" if nearest else ""
            raise EngineRefusalError(
                f"{NAME}: cache type {dtype.name!r} ({flag}) is not one llama.cpp accepts{hint}; "
                f"choose one of: {', '.join(KV_CACHE_TYPES)}"
            )
    # src/llama-context.cpp llama_init_from_model: ggml_is_quantized(type_v) && flash_attn disabled -> error.
    if v.is_quantized and not flash_attn:
        raise EngineRefusalError(
            f"{NAME}: V cache quantization requires flash_attn (V cache {ggml_type_name(v)} with flash attention "
            "off); turn flash attention on or use an f16/bf16/f32 V cache"
        )


def ubatch(options: EngineOptions) -> int:
    return options.n_ubatch or DEFAULT_UBATCH


def context_cells(n_ctx: int, n_seq: int, unified: bool) -> tuple[int, int]:
    """(cells per stream, streams) for ``-c n_ctx -np n_seq``.

    src/llama-context.cpp llama_context::llama_context (PR #17046): n_ctx = pad(n_ctx, 256); unified ->
    n_ctx_seq = n_ctx, one stream; otherwise n_ctx_seq = pad(n_ctx / n_seq_max, 256), n_seq_max streams
    (src/llama-kv-cache.cpp: n_stream = unified ? 1 : n_seq_max).
    """
    if n_seq > MAX_SEQ:
        raise EngineRefusalError(
            f"{NAME}: n_seq_max must be <= {MAX_SEQ} (LLAMA_MAX_SEQ, src/llama-cparams.h); got {n_seq} sequences"
        )
    if n_ctx <= 0 or n_seq <= 0:
        return 0, max(n_seq, 0)
    padded = pad(n_ctx, CELL_PAD)
    if unified:
        return padded, 1
    return pad(padded // n_seq, CELL_PAD), n_seq


def swa_cells(n_ctx_seq: int, window: int, n_seq: int, options: EngineOptions) -> int:
    """Cells per stream of the SWA half of the iSWA cache.

    src/llama-kv-cache-iswa.cpp llama_kv_cache_iswa: size_swa = pad(min(size_base, n_swa * (unified ?
    n_seq_max : 1) + n_ubatch), 256), always padded (issue #17037); --swa-full: size_swa = size_base.
    """
    if options.swa_full:
        return n_ctx_seq
    reserve = window * (n_seq if options.kv_unified else 1) + ubatch(options)
    return pad(min(n_ctx_seq, reserve), CELL_PAD)


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


def _mib(nbytes: int) -> float:
    """llama.cpp's ``(float) bytes / (1024.0f * 1024.0f)``: rounded to float32 first, as it prints it."""
    as_float32: float = struct.unpack("<f", struct.pack("<f", float(nbytes)))[0]
    return as_float32 / 1048576.0


@dataclass(frozen=True)
class LoggedCache:
    """One cache llama.cpp allocates and logs: exact bytes of its K and V (or R and S) tensors."""

    kind: Literal["kv", "swa", "recurrent"]
    cells: int  # per stream (recurrent: mem_size)
    layers: int  # layers in this cache (recurrent: every model layer, as the log counts them)
    n_seq: int
    streams: int
    first_bytes: int  # K (or R)
    second_bytes: int  # V (or S)
    first_type: str
    second_type: str

    @property
    def bytes(self) -> int:
        return self.first_bytes + self.second_bytes

    def log_line(self) -> str:
        """The line as src/llama-kv-cache.cpp / src/llama-memory-recurrent.cpp print it."""
        if self.kind == "recurrent":
            return (
                f"llama_memory_recurrent: size = {_mib(self.bytes):7.2f} MiB ({self.cells:6d} cells, "
                f"{self.layers:3d} layers, {self.n_seq:2d} seqs), R ({self.first_type}): {_mib(self.first_bytes):7.2f} "
                f"MiB, S ({self.second_type}): {_mib(self.second_bytes):7.2f} MiB"
            )
        return (
            f"llama_kv_cache: size = {_mib(self.bytes):7.2f} MiB ({self.cells:6d} cells, {self.layers:3d} layers, "
            f"{self.n_seq:2d}/{self.streams} seqs), K ({self.first_type}): {_mib(self.first_bytes):7.2f} MiB, "
            f"V ({self.second_type}): {_mib(self.second_bytes):7.2f} MiB"
        )


def logged_caches(
    spec: ModelSpec,
    k: CacheDType,
    v: CacheDType,
    n_ctx: int,
    n_seq: int = 1,
    options: EngineOptions | None = None,
) -> list[LoggedCache]:
    """The caches llama.cpp allocates for ``-c n_ctx -np n_seq``, in the order it logs them.

    Takes the spec rather than a Layout: the log splits K from V and R from S and counts every model
    layer, which a Layout's groups do not carry.
    """
    opts = options or EngineOptions()
    if n_ctx < 1 or n_seq < 1:
        raise InputError(f"{NAME}: -c and -np must be positive, got -c {n_ctx} -np {n_seq}")
    parts = plan(spec, k, v, opts)
    n_ctx_seq, n_stream = context_cells(n_ctx, n_seq, opts.kv_unified)
    caches: list[LoggedCache] = []

    def kv(kind: Literal["kv", "swa"], group: list[CachePart], cells: int) -> LoggedCache:
        kb = sum(p.k_bytes * p.group.layers for p in group) * cells * n_stream
        vb = sum(p.v_bytes * p.group.layers for p in group) * cells * n_stream
        layers = sum(p.group.layers for p in group)
        return LoggedCache(kind, cells, layers, n_seq, n_stream, kb, vb, ggml_type_name(k), ggml_type_name(v))

    kv_parts = [p for p in parts if p.cache == "kv"]
    swa_parts = [p for p in parts if p.cache == "swa"]
    if swa_parts:
        caches.append(kv("kv", kv_parts, n_ctx_seq))
        caches.append(kv("swa", swa_parts, swa_cells(n_ctx_seq, window_of(spec) or 0, n_seq, opts)))
    elif kv_parts:
        caches.append(kv("kv", kv_parts, n_ctx_seq))
    indexer = [p for p in parts if p.cache == "indexer"]
    if indexer:
        if swa_parts:
            # llama_kv_cache_dsa_iswa (dots3note) is not modelled: no architecture kvbudget reads uses it.
            raise EngineRefusalError(f"{NAME}: a sparse-attention indexer beside sliding-window layers is not modelled")
        # src/llama-kv-cache-dsa.cpp: "creating main KV cache", then "creating indexer KV cache", each logged.
        caches.append(kv("kv", indexer, n_ctx_seq))
    rec = [p for p in parts if p.cache == "recurrent"]
    if rec:
        mem_size = max(1, n_seq)  # src/llama-memory-recurrent.cpp: mem_size = max(1, n_seq_max)
        rb = sum(p.r_bytes * p.group.layers for p in rec) * mem_size
        sb = sum(p.s_bytes * p.group.layers for p in rec) * mem_size
        # The layers field counts every model layer (n_layer), recurrent or not; R and S stay f32.
        caches.append(LoggedCache("recurrent", mem_size, len(spec.layers), n_seq, 1, rb, sb, "f32", "f32"))
    return caches


def kv_cache_log_lines(
    spec: ModelSpec,
    k: CacheDType,
    v: CacheDType,
    n_ctx: int,
    n_seq: int = 1,
    options: EngineOptions | None = None,
) -> list[str]:
    """The ``llama_kv_cache`` / ``llama_kv_cache_iswa`` / ``llama_memory_recurrent`` lines llama.cpp logs
    for ``-c n_ctx -np n_seq`` (src/llama-kv-cache.cpp, src/llama-memory-recurrent.cpp format strings)."""
    caches = logged_caches(spec, k, v, n_ctx, n_seq, options)
    iswa = any(c.kind == "swa" for c in caches)
    # src/llama-kv-cache-dsa.cpp: the main (MLA) cache and the indexer cache are each announced first
    dsa = ["main", "indexer"] if any(isinstance(s, IndexerKeys) for _, s in spec.primitives()) else []
    lines: list[str] = []
    for cache in caches:
        if cache.kind == "kv" and dsa:
            lines.append(f"llama_kv_cache_dsa: creating {dsa.pop(0)} KV cache, size = {cache.cells} cells")
        elif cache.kind == "kv" and iswa:
            lines.append(f"llama_kv_cache_iswa: creating non-SWA KV cache, size = {cache.cells} cells")
        elif cache.kind == "swa":
            lines.append(f"llama_kv_cache_iswa: creating     SWA KV cache, size = {cache.cells} cells")
        lines.append(cache.log_line())
    return lines


FIT_MARGIN = 1024 * 2**20  # llama.cpp llama_params_fit default per-device margin (PR #16653)


class Rules(EngineRules):
    """llama.cpp (llama-server): no memory fraction, -c cells split into -np slots, no cross-slot sharing."""

    name = NAME
    title = "llama.cpp"
    default_version = DEFAULT_VERSION
    order = 30
    # llama.cpp tools/server: each of the -np slots owns n_ctx/np cells for the server's life; a session's next
    # step reuses its slot's cells (cache_prompt), so a slot is reserved whole, paused or not
    sim_policy = "reserve"
    pool_from_free_memory = False  # llama_kv_cache: n_ctx cells of -c, whatever memory is free (src/llama-kv-cache.cpp)
    sim_basis = "each slot (-np) owns its full share of the context cells for the server's life, paused or not"
    aliases = ("llama.cpp", "llama-cpp", "llama_cpp", "llama-server")
    server = True
    parallel = False
    cheaper_kv_dtypes = ("q8_0", "q4_0")

    def alert_metrics(self) -> EngineMetrics | None:
        from kvbudget.engines.metrics import LLAMACPP

        return LLAMACPP

    def layout(self, spec: ModelSpec, k: CacheDType, v: CacheDType, tp: int, options: EngineOptions) -> Layout:
        return layout(spec, k, v, tp, options, self.version)

    def usable_share(self, m: MemoryShape) -> Share:
        # no fraction: the KV size follows -c/-np; the auto-fit keeps a 1,024 MiB margin per device
        return Share(m.total_bytes - FIT_MARGIN, "total - 1,024 MiB fit margin (llama_params_fit)")

    def batched_tokens(
        self, total_bytes: int, gpu_label: str, options: EngineOptions, context: int = 0
    ) -> tuple[int, str]:
        return ubatch(options), "llama.cpp -ub (n_ubatch)"

    def served_dtype(self, spec: ModelSpec, capability: int | None) -> tuple[str, str]:
        # common/arg.cpp: -ctk / -ctv default to f16 whatever the weights' types
        if parse_cache_dtype(spec.dtype, what="model dtype").name in ("fp16", "bf16"):
            return spec.dtype, ""  # the same 2 bytes per value as llama.cpp's f16 default
        return "fp16", f"{self.title} caches f16 by default (-ctk/-ctv f16), whatever the checkpoint's {spec.dtype}"

    def loaded_weights(self, spec: ModelSpec, weights: WeightSize, model_ref: str, precision: str | None) -> WeightSize:
        # a GGUF's tensors less the token embedding, which load_tensors keeps on the CPU (weights/gguf_loaded.py);
        # Ollama (a subclass) keeps the file's bytes: not held to a log here
        if self.name != NAME:
            return weights
        from kvbudget.weights.gguf_loaded import llamacpp_on_gpu

        return llamacpp_on_gpu(spec, weights, model_ref, precision)

    def overhead(self, spec: ModelSpec, site: Site) -> Overhead:
        # one stream's cells: -c N*S -np S keeps pad(N, 256) cells a stream (context_cells)
        n_kv = pad(site.context, CELL_PAD) if site.context > 0 else 0
        return compute_buffer(spec, ubatch=site.batched, n_kv=n_kv, flash_attn=site.flash_attn, what=self.title)

    def shared_prefix(self, prefix: int, block: int | None, unified: bool = False) -> tuple[int, str]:
        return 0, "llama.cpp slots keep separate cells (no sharing without --kv-unified)"

    def sessions(self, d: Deployment, warnings: list[str]) -> int:
        if d.sessions == MAX_SEQ:
            warnings.append(f"llama.cpp serves at most {MAX_SEQ} slots (LLAMA_MAX_SEQ); memory would allow more")
        return d.sessions

    def start_up(self, d: Deployment) -> StartUp:
        if d.sessions < 1:
            return StartUp((), 0, "llama.cpp cells (no session fits)")
        n_ctx = d.sessions * d.context
        lines = tuple(kv_cache_log_lines(d.spec, d.k, d.v, n_ctx, d.sessions, d.options))
        cells, streams = context_cells(n_ctx, d.sessions, d.options.kv_unified)
        return StartUp(
            lines,
            cells * streams,
            f"llama.cpp cells: {counted(streams, 'stream')} x {cells:,} cells (-c {n_ctx} -np {d.sessions})",
        )

    def logged_memory(self, log: EngineLog) -> LoggedMemory:
        """The compute buffers are its runtime overhead (llama_context: ... compute buffer size)."""
        return LoggedMemory(None, logged_sum(log, ("compute_buffer_bytes",)))

    def serve_command(self, s: ServeSettings) -> tuple[str, ...]:
        sessions = max(s.sessions, 1)
        # llama-server loads a .gguf file: a repo id or directory stands as MODEL.gguf for the user's file
        args = ["llama-server", "-m", s.model if s.model.endswith(".gguf") else "MODEL.gguf"]
        args += ["-c", str(sessions * s.context), "-np", str(sessions)]
        args += [
            "-ctk",
            ggml_type_name(s.k),
            "-ctv",
            ggml_type_name(s.v),
            "-fa",
            "on" if s.options.flash_attn else "off",
        ]
        if s.options.n_ubatch:
            args += ["-b", str(max(s.options.n_ubatch, 2048)), "-ub", str(s.options.n_ubatch)]
        if s.options.swa_full:
            args.append("--swa-full")
        if s.options.kv_unified:
            args.append("--kv-unified")
        if s.past_native and self.name == NAME:
            # common/arg.cpp: YaRN over the trained context (llama-server warns past n_ctx_train otherwise)
            args += [
                "--rope-scaling",
                "yarn",
                "--rope-scale",
                str(s.rope_factor),
                "--yarn-orig-ctx",
                str(s.native_context),
            ]
        return tuple(args)

    def past_window(self, context: int, native: int) -> str:
        # llama.cpp common/arg.cpp: YaRN from the command line; llama-server warns past n_ctx_train otherwise
        return (
            f"llama-server needs YaRN over the {native:,}-token trained window: --rope-scaling yarn --rope-scale "
            f"{rope_factor(context, native)} --yarn-orig-ctx {native}"
        )
