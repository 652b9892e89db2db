"""From a capacity plan and a workload to the simulator's inputs.

The replica's KV pool, block size and per-sequence bytes are the plan's own (``make_plan``): the
same engine layout, the same ledger, so the simulation and the static worst case differ only in
how sessions use the pool. Decode speed is the roofline over the plan's weights per GPU and the
GPU catalog's HBM bandwidth; swap uses a host link from the catalog.
"""

from __future__ import annotations

from kvbudget.plan.plan import Plan
from kvbudget.simulate.costs import MemoryModel
from kvbudget.simulate.policies import DEFAULT_PREFILL_TOKENS_PER_S, CapPolicy, TimeModel
from kvbudget.workload.model import CapPolicy as WorkloadCap


def memory_from_plan(plan: Plan) -> MemoryModel:
    """One replica's pool: bytes per GPU, the layout's per-sequence rule, the engine's sharing rule."""
    layout = plan.layout
    block = layout.first.block_size
    engine = plan.inputs.engine
    unified = plan.inputs.options.kv_unified

    def shared(prefix: int) -> int:
        return engine.rules.shared_prefix(prefix, block, unified)[0]

    return MemoryModel(
        pool_bytes=plan.kv_pool_bytes,
        cap_tokens=plan.inputs.context,
        sequence_bytes=layout.sequence_bytes,
        block_size=block or 1,
        prefix_bytes_per_token=layout.kv_bytes_per_token,
        shared_prefix=shared,
        label=f"{plan.inputs.spec.name} on {engine.label}, {plan.inputs.kv_dtype_label} cache",
    )


def time_from_plan(
    plan: Plan,
    bandwidth_bytes_per_s: float | None,
    *,
    prefill_tokens_per_s: float = DEFAULT_PREFILL_TOKENS_PER_S,
    decode_tokens_per_s: float | None = None,
    swap_bytes_per_s: float = 64e9,
) -> TimeModel:
    return TimeModel(
        weights_bytes=plan.weights_per_gpu,
        bandwidth_bytes_per_s=bandwidth_bytes_per_s or 0.0,
        prefill_tokens_per_s=prefill_tokens_per_s,
        decode_tokens_per_s=decode_tokens_per_s,
        swap_bytes_per_s=swap_bytes_per_s,
    )


def cap_from_workload(cap: WorkloadCap, serving_cap: int) -> CapPolicy:
    """The workload's ``[cap]`` as the simulator applies it (target measured against the cap in force)."""
    limit = min(cap.tokens, serving_cap) if cap.tokens else serving_cap
    if cap.action == "refuse":
        return CapPolicy("refuse", cap_tokens=cap.tokens)
    return CapPolicy(
        cap.action,
        target_tokens=min(cap.target_for(limit), limit - 1),
        summary_tokens=cap.summary_tokens,
        cap_tokens=cap.tokens,
    )
