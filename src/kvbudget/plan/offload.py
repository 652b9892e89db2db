"""An offload tier: CPU memory (or disk) that holds sessions' caches off the GPU, and what bringing
one back costs over the link. Offload converts an out-of-memory into latency; it is never free."""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.plan.plan import Plan


@dataclass(frozen=True)
class Offload:
    tier_bytes: int
    link: str
    link_bytes_per_s: int
    sessions_offloaded: int
    session_bytes_per_replica: int
    restore_seconds: float
    basis: str


def offload_tier(plan: Plan, tier_bytes: int, link: str, link_bytes_per_s: int) -> Offload:
    """How many sessions at the cap the tier holds per replica, and the time to restore one.

    Every GPU of a replica holds its own shard of a session and restores it over its own link in
    parallel, so the restore time is one GPU's share over one link (per-direction bandwidth)."""
    i = plan.inputs
    per_replica = plan.per_session_bytes * i.tp * i.pp
    held = tier_bytes // per_replica if per_replica else 0
    seconds = plan.per_session_bytes / link_bytes_per_s
    basis = (
        f"{tier_bytes:,} B / {per_replica:,} B per session ({plan.per_session_bytes:,} B x {i.tp * i.pp} GPUs); "
        f"restore {plan.per_session_bytes:,} B per GPU over {link} at {link_bytes_per_s / 1e9:g} GB/s per direction"
    )
    return Offload(tier_bytes, link, link_bytes_per_s, held, per_replica, seconds, basis)
