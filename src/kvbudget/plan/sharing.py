"""Prefix sharing: S sessions that start with the same byte-stable P-token prefix (system prompt +
tool catalogue) can share that prefix's cache blocks — only whole blocks, and only where the engine
shares them. Each engine's rule is its ``Rules.shared_prefix`` (vLLM: whole blocks; SGLang: whole
pages; llama.cpp and transformers: none; ideal: the whole prefix).

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


def prefix_sharing(layout: StagedLayout, engine: EngineRef, pool: int, cap: int, prefix: int) -> PrefixSharing:
    """Sessions at ``cap`` when they share a ``prefix``-token prefix: S x one - (S - 1) x shared <= pool."""
    shared, basis = engine.rules.shared_prefix(min(prefix, cap), layout.first.block_size)
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
