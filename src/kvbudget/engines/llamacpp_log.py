"""The cache lines llama.cpp logs at start-up (``llama_kv_cache``, ``llama_kv_cache_iswa``,
``llama_memory_recurrent``), byte for byte, for ``-c n_ctx -np n_seq``."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Literal

from kvbudget.engines.base import EngineOptions
from kvbudget.engines.llamacpp_cells import NAME, context_cells, ggml_type_name, swa_cells
from kvbudget.engines.llamacpp_layout import CachePart, plan, window_of
from kvbudget.errors import EngineRefusalError, InputError
from kvbudget.model.spec import IndexerKeys, ModelSpec
from kvbudget.precision import CacheDType


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


def layer_cache_bytes(
    spec: ModelSpec,
    k: CacheDType,
    v: CacheDType,
    n_ctx: int,
    n_seq: int = 1,
    options: EngineOptions | None = None,
    caches: tuple[str, ...] = ("kv", "swa", "indexer", "recurrent"),
) -> tuple[int, ...]:
    """The cache bytes of each model layer for ``-c n_ctx -np n_seq``, the same cells as ``logged_caches``;
    ``caches`` picks which (``recurrent`` is the ``RS buffer`` llama.cpp logs apart from the ``KV buffer``).

    llama.cpp allocates each layer's K/V (or R/S) on that layer's device (src/llama-kv-cache.cpp: ``dev =
    model.dev_layer(il)`` with offload_kqv on), so a device's ``KV buffer`` is the sum over its layers.
    """
    opts = options or EngineOptions()
    if n_ctx < 1 or n_seq < 1:
        raise InputError(f"{NAME}: -c and -np must be positive, got -c {n_ctx} -np {n_seq}")
    n_ctx_seq, n_stream = context_cells(n_ctx, n_seq, opts.kv_unified)
    window = window_of(spec) or 0
    per_layer = [0] * len(spec.layers)
    for part in plan(spec, k, v, opts):
        if part.cache not in caches:
            continue
        if part.cache == "recurrent":
            each = (part.r_bytes + part.s_bytes) * max(1, n_seq)  # mem_size = max(1, n_seq_max)
        elif part.cache == "swa":
            each = (part.k_bytes + part.v_bytes) * swa_cells(n_ctx_seq, window, n_seq, opts) * n_stream
        else:
            each = (part.k_bytes + part.v_bytes) * n_ctx_seq * n_stream
        for il in part.group.layer_indices or ():
            per_layer[il] += each  # a DSA layer has its MLA cache and its indexer keys
    return tuple(per_layer)
