"""Prefix sharing: S sessions that start with the same byte-stable P-token prefix (system prompt +
tool catalogue) can share that prefix's cache blocks — only whole blocks, and only where the engine
shares them.

* vLLM automatic prefix caching: full blocks only (block hashes over whole blocks), so
  floor(P / block) x block tokens are shared (vllm/v1/core/kv_cache_utils.py hash_block_tokens).
* SGLang RadixAttention: shared at page granularity (page 1 by default: every token).
* llama.cpp: slots do not share cells unless the cache is unified (``--kv-unified``); kvbudget
  counts no sharing for it.
* transformers: no cross-sequence sharing.
* ideal: the whole prefix.

Only layers whose cache keeps growing (full and latent attention) share the prefix in the plan:
a windowed layer has long since evicted a long prefix at the cap.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.engines import EngineRef
from kvbudget.plan.capacity import StagedLayout


@dataclass(frozen=True)
class PrefixSharing:
    prefix_tokens: int
    shared_tokens: int
    shared_bytes: int
    sessions: int
    basis: str


def shared_prefix_tokens(engine: EngineRef, prefix: int, block: int | None, unified: bool = False) -> tuple[int, str]:
    if engine.name == "vllm":
        b = block or 16
        return prefix // b * b, f"vLLM prefix caching shares whole {b}-token blocks"
    if engine.name == "sglang":
        b = block or 1
        return prefix // b * b, f"SGLang RadixAttention shares whole {b}-token pages"
    if engine.name == "llamacpp":
        return 0, "llama.cpp slots keep separate cells (no sharing without --kv-unified)"
    if engine.name == "transformers":
        return 0, "transformers caches each sequence separately"
    return prefix, "ideal: the whole prefix is shared"


def prefix_sharing(layout: StagedLayout, engine: EngineRef, pool: int, cap: int, prefix: int) -> PrefixSharing:
    """Sessions at ``cap`` when they share a ``prefix``-token prefix: S x one - (S - 1) x shared <= pool."""
    shared, basis = shared_prefix_tokens(engine, min(prefix, cap), layout.first.block_size)
    per_token = layout.kv_bytes_per_token
    shared_bytes = shared * per_token
    one = layout.sequence_bytes(cap)
    if one > pool:
        sessions = 0
    elif one <= shared_bytes:
        sessions = 1
    else:
        sessions = max(1, (pool - shared_bytes) // (one - shared_bytes))
    return PrefixSharing(
        prefix,
        shared,
        shared_bytes,
        sessions,
        f"{basis}; {shared:,} tokens x {per_token:,} B held once instead of per session",
    )
