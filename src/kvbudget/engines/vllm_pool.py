"""vLLM's block pool: page unification, KV-cache groups, and the capacity numbers vLLM logs.

Reproduces ``vllm/v1/core/kv_cache_utils.py`` (``get_kv_cache_groups``,
``unify_kv_cache_spec_page_size``, ``_get_kv_cache_groups_uniform_page_size``,
``get_kv_cache_config_from_groups``, ``get_max_concurrency_for_kv_cache_config``,
``_report_kv_cache_config``) on *buckets*: the layers vLLM gives one identical ``KVCacheSpec``.

Three pool shapes, as in vLLM:

* ``uniform``: every layer has the same spec; a block spans all ``L`` layers
  (``num_blocks = available // page // L``).
* ``uniform_type``: one attention type, different page sizes per layer
  (``UniformTypeKVCacheSpecs``); a block spans the sum of the pages (``num_blocks = available // sum(page)``).
* ``hybrid``: several types; pages unified to the largest, layers cut into KV-cache groups of
  ``group_size`` layers (short groups padded); a block spans ``group_size`` pages.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import lcm
from typing import TYPE_CHECKING, Literal

from kvbudget.engines import version_tuple
from kvbudget.engines.base import cdiv
from kvbudget.errors import EngineRefusalError

if TYPE_CHECKING:
    from kvbudget.model.spec import CacheKind

PoolMode = Literal["uniform", "uniform_type", "hybrid"]
MambaCacheMode = Literal["none", "align"]
KERNEL_BLOCK_ALIGNMENT = 16  # vLLM FlashAttention/Triton kernel block sizes: multiples of 16 (attention backends)
ATTENTION: tuple[CacheKind, ...] = (
    "full_attention",
    "latent_attention",
    "sliding_window",
    "chunked_local",
    "cross_attention",
)
ONE_LINE_LOG_SINCE = (0, 28)  # vLLM 0.28 update_kv_cache_capacity: one "KV cache size ..., Maximum concurrency" line
NULL_BLOCK_CHECK_SINCE = (0, 29)  # vLLM 0.29 get_kv_cache_configs: the admission check reserves the null block


@dataclass(frozen=True)
class Bucket:
    """Layers that hold one identical vLLM ``KVCacheSpec`` on one GPU."""

    kind: CacheKind
    label: str
    layer_indices: tuple[int, ...]
    slot_bytes: int  # bytes of one token in one layer (0 for recurrent state)
    slot_formula: str
    block_size: int
    state_bytes: int = 0  # recurrent: real bytes of one state (MambaSpec page before padding)
    state_formula: str = ""
    page_padded: int = 0  # recurrent: page padded to the attention page (mamba_page_size_padded)
    window: int = 0  # sliding window W, or chunk size of chunked-local attention
    fixed_tokens: int = 0  # cross-attention: encoder (image) tokens per request
    kv_groups: int = 1  # KV-cache groups this bucket is cut into (hybrid pools)
    alloc_layers: int = 0  # layers allocated, padding included (hybrid pools)
    state_pages: int = 1  # recurrent: pages one request holds (mamba_cache_mode none: 1; align: 2 + checkpoint)

    @property
    def layers(self) -> int:
        return len(self.layer_indices)

    @property
    def allocated(self) -> int:
        return self.alloc_layers or self.layers

    @property
    def page_bytes(self) -> int:
        """``page_size_bytes`` of one layer: ``block_size`` tokens, or one padded recurrent state."""
        if self.kind == "recurrent":
            return self.page_padded or self.state_bytes
        return self.slot_bytes * self.block_size

    @property
    def spec_key(self) -> tuple[object, ...]:
        """What makes two vLLM specs equal (the label does not count)."""
        return (
            self.kind,
            self.slot_bytes,
            self.slot_formula,
            self.block_size,
            self.page_bytes,
            self.window,
            self.fixed_tokens,
            self.state_bytes,
        )

    @property
    def type_key(self) -> tuple[object, ...]:
        """``UniformTypeKVCacheSpecs.is_uniform_type``: MLA counts as full attention (a subclass in vLLM)."""
        kind = "full_attention" if self.kind == "latent_attention" else self.kind
        return (kind, self.window if kind in ("sliding_window", "chunked_local") else 0)

    def blocks(self, tokens: int, in_flight: int) -> int:
        """Blocks one request of ``tokens`` tokens holds in one KV-cache group (``max_memory_usage_bytes``).

        ``in_flight`` is max_num_batched_tokens (vLLM <= 0.25) or max_in_flight_tokens (>= 0.26).
        """
        b = self.block_size
        if self.kind in ("full_attention", "latent_attention"):
            # vLLM FullAttentionSpec/MLAAttentionSpec: cdiv(max_model_len, B) (kv_cache_interface.py)
            return cdiv(tokens, b)
        if self.kind == "sliding_window":
            # vLLM SlidingWindowSpec: cdiv(min(W-1+in-flight, max_model_len), B) + 1 (kv_cache_interface.py)
            return cdiv(min(self.window - 1 + in_flight, tokens), b) + 1
        if self.kind == "chunked_local":
            # vLLM ChunkedLocalAttentionSpec: cdiv(min(chunk + in-flight, max_model_len), B) (kv_cache_interface.py)
            return cdiv(min(self.window + in_flight, tokens), b)
        if self.kind == "cross_attention":
            # vLLM CrossAttentionSpec: cdiv(max_num_encoder_input_tokens, B) (kv_cache_interface.py)
            return cdiv(self.fixed_tokens, b)
        # vLLM MambaSpec.max_memory_usage_bytes: mode "none" 1 page, "align" 2 + checkpoint pages
        # (kv_cache_interface.py); state_pages carries the count the engine module decided
        return self.state_pages


@dataclass(frozen=True)
class VllmPool:
    """One model's vLLM block pool on one GPU: what issue-3 capacity planning needs beyond the Layout."""

    version: str
    mode: PoolMode
    buckets: tuple[Bucket, ...]
    page_bytes: int  # one page (uniform, hybrid) or the sum of all layers' pages (uniform_type)
    layers_per_block: int  # pages one block id spans: L (uniform), group_size (hybrid), 1 (uniform_type)
    max_num_batched_tokens: int
    in_flight_tokens: int  # what the sliding/chunked rule adds to the window for this version
    block_size: int | None
    prefix_caching: bool = False  # --enable-prefix-caching as resolved (vLLM's default for the model, or set)
    mamba_cache_mode: MambaCacheMode = "none"
    attention_backend: str = ""  # the backend whose block-size rule was applied (MLA), in vLLM's name

    @property
    def block_bytes(self) -> int:
        """Bytes one block id costs across every layer it spans."""
        return self.page_bytes * self.layers_per_block

    @property
    def num_groups(self) -> int:
        """``len(kv_cache_groups)``."""
        return sum(b.kv_groups for b in self.buckets) if self.mode == "hybrid" else 1

    @property
    def min_block_size(self) -> int:
        """Smallest block size over the groups (``_report_kv_cache_config``); attention groups only."""
        sizes = [b.block_size for b in self.buckets if b.kind != "recurrent"]
        return min(sizes) if sizes else (self.block_size or 1)

    def blocks_per_request(self, max_model_len: int) -> int:
        """Blocks one max-length request needs (``get_max_concurrency_for_kv_cache_config``)."""
        if self.mode == "hybrid":
            # vLLM >= 0.10 hybrid: sum over KV-cache groups of cdiv(max_mem, page) (kv_cache_utils.py)
            return sum(b.kv_groups * b.blocks(max_model_len, self.in_flight_tokens) for b in self.buckets)
        # vLLM uniform / UniformTypeKVCacheSpecs: max over layers of cdiv(max_mem_l, page_l) (kv_cache_utils.py)
        return max(b.blocks(max_model_len, self.in_flight_tokens) for b in self.buckets)


def num_blocks(pool: VllmPool, available_bytes: int) -> int:
    """``num_blocks`` vLLM gets from ``available_bytes`` of KV memory on one GPU (``get_num_blocks``).

    Uniform: available // page // L; uniform type: available // sum(pages); hybrid: available // page // group_size.
    """
    # vLLM get_num_blocks: int(available // page_size // num_layers), floored at 0 (kv_cache_utils.py)
    return max(available_bytes // pool.page_bytes // pool.layers_per_block, 0)


def max_concurrency(pool: VllmPool, available_bytes: int, max_model_len: int) -> float:
    """vLLM's "Maximum concurrency for N tokens per request": num_blocks / blocks one max-length request needs."""
    # vLLM get_max_concurrency_for_kv_cache_config: num_blocks / num_block_per_request (kv_cache_utils.py)
    return num_blocks(pool, available_bytes) / pool.blocks_per_request(max_model_len)


def kv_cache_size_tokens(pool: VllmPool, available_bytes: int, max_model_len: int) -> int:
    """The number in vLLM's "GPU KV cache size: N tokens" log line, by version.

    <= 0.9: num_blocks x block_size; 0.10-0.26: num_blocks // num_groups x min block size;
    >= 0.27: int(max_concurrency x max_model_len).
    """
    blocks = num_blocks(pool, available_bytes)
    version = version_tuple(pool.version)[:2]
    if version <= (0, 9):
        # vLLM <= 0.9 _report_kv_cache_config: num_blocks * block_size (kv_cache_utils.py)
        return blocks * pool.min_block_size
    if version <= (0, 26):
        # vLLM 0.10-0.26 _report_kv_cache_config: num_blocks // len(groups) * min_block_size (kv_cache_utils.py)
        return blocks // pool.num_groups * pool.min_block_size
    # vLLM >= 0.27 (PRs #40694/#38364): int(max_concurrency * max_model_len) (kv_cache_utils.py)
    return int(max_concurrency(pool, available_bytes, max_model_len) * max_model_len)


def report_lines(pool: VllmPool, available_bytes: int, max_model_len: int) -> tuple[str, ...]:
    """The startup capacity log line(s), formatted as vLLM formats them: one line from 0.28, two before."""
    tokens = kv_cache_size_tokens(pool, available_bytes, max_model_len)
    concurrency = max_concurrency(pool, available_bytes, max_model_len)
    size = f"GPU KV cache size: {tokens:,} tokens"
    most = f"Maximum concurrency for {max_model_len:,} tokens per request: {concurrency:.2f}x"
    if version_tuple(pool.version)[:2] >= ONE_LINE_LOG_SINCE:
        # vLLM >= 0.28 update_kv_cache_capacity: "%s KV cache size: %s tokens, Maximum concurrency ..."
        # (kv_cache_utils.py)
        return (f"{size}, {most}",)
    # vLLM <= 0.27 _report_kv_cache_config: two info lines (kv_cache_utils.py)
    return (size, most)


def needed_bytes(pool: VllmPool, max_model_len: int) -> int:
    """Bytes one request of ``max_model_len`` tokens needs (``_max_memory_usage_bytes_from_groups``)."""
    # vLLM 0.33 kv_cache_planning.py: bytes_per_block x sum over groups of cdiv(max_memory_usage, page)
    return pool.block_bytes * pool.blocks_per_request(max_model_len)


def admission_bytes(pool: VllmPool, available_bytes: int) -> int:
    """The KV memory vLLM's admission check plans against: less the null block from 0.29."""
    if version_tuple(pool.version)[:2] >= NULL_BLOCK_CHECK_SINCE:
        # vLLM >= 0.29 get_kv_cache_configs: "Reserve the null block BlockPool permanently holds back"
        # (kv_cache_planning.py; kv_cache_utils.py before 0.33)
        return available_bytes - pool.block_bytes
    return available_bytes


def estimate_max_model_len(pool: VllmPool, available_bytes: int, max_model_len: int) -> int:
    """vLLM's "estimated maximum model length": the longest request that fits (0 if not one token)."""
    # vLLM _estimate_max_model_len_from_groups: binary search over [1, max_model_len] (kv_cache_planning.py)
    memory = admission_bytes(pool, available_bytes)
    if needed_bytes(pool, 1) > memory:
        return 0
    lo, hi = 1, max_model_len
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if needed_bytes(pool, mid) <= memory:
            lo = mid
        else:
            hi = mid - 1
    return lo


def check_admission(pool: VllmPool, available_bytes: int, max_model_len: int) -> None:
    """Raise EngineRefusalError where vLLM refuses to start: one request of ``max_model_len`` must fit."""
    memory = admission_bytes(pool, available_bytes)
    if memory <= 0:
        # vLLM _check_enough_kv_cache_memory: "No available memory for the cache blocks" (kv_cache_planning.py)
        raise EngineRefusalError(
            f"vllm {pool.version} refuses to start: No available memory for the cache blocks "
            f"({available_bytes:,} B of KV memory, {pool.block_bytes:,} B per block"
            + (", one held back as the null block)" if memory != available_bytes else ")")
            + "; raise --gpu-memory-utilization"
        )
    needed = needed_bytes(pool, max_model_len)
    if needed <= memory:
        return
    estimate = estimate_max_model_len(pool, available_bytes, max_model_len)
    hint = f" Based on the available memory, the estimated maximum model length is {estimate}." if estimate else ""
    raise EngineRefusalError(
        f"vllm {pool.version} refuses to start: To serve at least one request with the model's max seq len "
        f"({max_model_len}), {needed / 2**30:.2f} GiB KV cache is needed, which is larger than the available KV "
        f"cache memory ({memory / 2**30:.2f} GiB).{hint}"
    )


def group_buckets(buckets: list[Bucket]) -> tuple[PoolMode, tuple[Bucket, ...], int, int, tuple[str, ...]]:
    """vLLM ``get_kv_cache_groups``: (mode, buckets with groups set, page bytes, layers per block, notes)."""
    if len({b.spec_key for b in buckets}) == 1:
        # vLLM is_kv_cache_spec_uniform: one group, a block spans all layers (kv_cache_utils.py)
        return "uniform", tuple(buckets), buckets[0].page_bytes, sum(b.layers for b in buckets), ()
    if len({b.type_key for b in buckets}) == 1 and len({b.block_size for b in buckets}) == 1:
        # vLLM UniformTypeKVCacheSpecs: one group, block = sum of per-layer pages (kv_cache_interface.py)
        total = sum(b.page_bytes * b.layers for b in buckets)
        note = f"one attention type with different page sizes: a block spans the sum of all pages ({total:,} B)"
        return "uniform_type", tuple(buckets), total, 1, (note,)
    unified = _unify_page_size(buckets)
    return _uniform_page_groups(unified)


def _unify_page_size(buckets: list[Bucket]) -> list[Bucket]:
    # vLLM unify_kv_cache_spec_page_size: smaller pages get block_size *= max/page (kv_cache_utils.py)
    largest = max(b.page_bytes for b in buckets)
    out: list[Bucket] = []
    for b in buckets:
        if b.page_bytes == largest:
            out.append(b)
            continue
        if b.kind == "recurrent" or largest % b.page_bytes:
            raise EngineRefusalError(
                f"vllm: the {b.label} page ({b.page_bytes:,} B) does not divide the largest page "
                f"({largest:,} B); vLLM cannot unify the page sizes of this hybrid model (NotImplementedError)"
            )
        out.append(replace(b, block_size=b.block_size * (largest // b.page_bytes)))
    return out


def _uniform_page_groups(buckets: list[Bucket]) -> tuple[PoolMode, tuple[Bucket, ...], int, int, tuple[str, ...]]:
    # vLLM _get_kv_cache_groups_uniform_page_size (kv_cache_utils.py): group_size = min bucket length,
    # or the max when max < 1.5 * min; each bucket cut into cdiv(len, group_size) groups, short ones padded.
    lengths = [b.layers for b in buckets]
    group_size = min(lengths)
    if max(lengths) < group_size * 1.5:
        group_size = max(lengths)
    notes: list[str] = []
    out: list[Bucket] = []
    for b in buckets:
        groups = cdiv(b.layers, group_size)
        padding = group_size - b.layers % group_size
        if padding != group_size:
            notes.append(
                f"vLLM: Add {padding} padding layers, may waste at most {padding / b.layers * 100:.2f}% KV cache "
                f"memory ({b.label}: {b.layers} layers in {groups} groups of {group_size})"
            )
        out.append(replace(b, kv_groups=groups, alloc_layers=groups * group_size))
    page = out[0].page_bytes
    notes.insert(
        0,
        f"hybrid pool: {sum(b.kv_groups for b in out)} KV-cache groups of {group_size} layers, "
        f"page {page:,} B; a block spans {group_size} pages ({group_size * page:,} B)",
    )
    return "hybrid", tuple(out), page, group_size, tuple(notes)


def align_mamba(
    buckets: list[Bucket],
    block: int,
    notes: list[str],
    checkpoint_alignment: int = 1,
    kernel_alignment: int = KERNEL_BLOCK_ALIGNMENT,
) -> tuple[int, int]:
    """vLLM hybrid attention + Mamba: raise the block size, pad the Mamba page. Returns (block, padded page).

    ``checkpoint_alignment``: in mamba_cache_mode "align", the prefill checkpoints' token alignment
    (vLLM 0.33: 64 for Gated DeltaNet with FlashInfer's prefill kernel, else 1)."""
    attention = [b for b in buckets if b.kind in ATTENTION]
    states = [b for b in buckets if b.kind == "recurrent"]
    if not attention or not states:
        return block, 0
    # vLLM >=0.27 Platform._align_hybrid_block_size (older HybridAttentionMambaModelConfig.verify_and_update_config):
    # attn_block = align * cdiv(mamba_page, align * attn_page_per_token), align = max(kernel alignment, block);
    # vLLM 0.33 (platforms/interface.py): in mode "align", align = lcm(align, checkpoint alignment)
    per_token = attention[0].slot_bytes
    mamba_page = max(b.state_bytes for b in states)
    align = lcm(max(kernel_alignment, block), checkpoint_alignment)
    attn_block = align * cdiv(mamba_page, align * per_token)
    if block < attn_block:
        notes.append(
            f"vLLM: Setting attention block size to {attn_block} tokens to ensure that attention page "
            f"size is >= mamba page size ({attn_block} = {align} x cdiv({mamba_page:,} B state, "
            f"{align} x {per_token:,} B per token))"
        )
        block = attn_block
    attn_page = block * per_token
    if attn_page == mamba_page:
        return block, 0
    pct = 100 * (attn_page - mamba_page) / mamba_page
    notes.append(
        f"vLLM: Padding mamba page size by {pct:.2f}% to ensure that mamba page size and attention page "
        f"size are exactly equal ({mamba_page:,} B -> {attn_page:,} B)"
    )
    return block, attn_page


def disable_hybrid(buckets: list[Bucket]) -> list[Bucket]:
    # vLLM unify_hybrid_kv_cache_specs (--disable-hybrid-kv-cache-manager): sliding and chunked layers
    # become FullAttentionSpec when full attention is present (kv_cache_utils.py)
    kinds = {b.kind for b in buckets}
    if not kinds & {"full_attention", "latent_attention"} or not kinds & {"sliding_window", "chunked_local"}:
        return buckets
    out = [
        replace(b, kind="full_attention", window=0, label=f"{b.label}, cached as full attention (hybrid manager off)")
        if b.kind in ("sliding_window", "chunked_local")
        else b
        for b in buckets
    ]
    if len({b.type_key for b in out}) > 1:
        raise EngineRefusalError(
            "vllm: Hybrid KV cache manager is disabled but failed to convert the KV cache "
            "specs to one unified type (this model also has recurrent or cross-attention layers)"
        )
    return out
