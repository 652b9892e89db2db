"""The plan's JSON contract (``kvbudget plan --json``, ``kvbudget levers --json``)."""

from __future__ import annotations

from kvbudget.plan.flags import all_engine_commands, all_engine_flags
from kvbudget.plan.levers import Lever
from kvbudget.plan.offload import Offload
from kvbudget.plan.plan import SCHEMA_VERSION, Plan, sessions_per_replica


def plan_json(plan: Plan, offload: Offload | None = None) -> dict[str, object]:
    i = plan.inputs
    offload = offload or plan.offload
    commands = all_engine_commands(plan)  # every serving engine's own plan, made once
    out: dict[str, object] = {
        "schema_version": SCHEMA_VERSION,
        "model": i.spec.name,
        "engine": i.engine.to_json(),
        "gpu": {"id": i.gpu_id, "name": i.gpu_label},
        "kv_dtype": i.kv_dtype_label,
        "context": i.context,
        "gpus": i.gpus,
        "tp": i.tp,
        "pp": i.pp,
        "replicas": plan.replicas,
        "gpu_memory_bytes": i.gpu_memory_bytes,
        "usable_bytes": plan.share.usable_bytes,
        "weights_bytes": plan.weights_per_gpu,
        "weights_total_bytes": i.weights.bytes,
        "overhead_bytes": plan.overhead.bytes,
        "kv_pool_bytes": plan.kv_pool_bytes,
        "per_session_bytes": plan.per_session_bytes,
        "kv_bytes_per_token": plan.layout.kv_bytes_per_token,
        "sessions": plan.sessions,
        "total_sessions": plan.total_sessions,
        "token_budget": plan.token_budget,
        "token_budget_basis": plan.token_budget_basis,
        "statement": plan.statement,
        "engine_log": list(plan.engine_lines),
        "flags": all_engine_flags(plan, commands),
        "commands": commands,
        "warnings": list(plan.warnings),
        "ledger": [line.to_json() for line in plan.ledger],
    }
    if plan.layer_split is not None:  # llama.cpp --n-gpu-layers / --tensor-split: each device's bytes
        out["gpu_layers"] = plan.layer_split.to_json(i.context, plan.sessions)
    if i.options.max_num_seqs is not None:  # vLLM --max-num-seqs as given: sessions run at most this many at once
        out["max_num_seqs"] = i.options.max_num_seqs
    if i.log_check is not None:
        out["from_log"] = i.log_check.to_json()
    if plan.max_context_for_sessions is not None:
        out["max_context_for_sessions"] = plan.max_context_for_sessions
        out["sessions_requested"] = i.sessions
        out["sessions_requested_per_replica"] = sessions_per_replica(i.sessions or 0, plan.replicas)
    if plan.prefix is not None:
        out["prefix"] = {
            "prefix_tokens": plan.prefix.prefix_tokens,
            "shared_tokens": plan.prefix.shared_tokens,
            "shared_bytes": plan.prefix.shared_bytes,
            "sessions": plan.prefix.sessions,
            "basis": plan.prefix.basis,
        }
    if offload is not None:
        out["offload"] = {
            "tier_bytes": offload.tier_bytes,
            "link": offload.link,
            "link_bytes_per_s": offload.link_bytes_per_s,
            "sessions_offloaded": offload.sessions_offloaded,
            "restore_seconds": offload.restore_seconds,
            "basis": offload.basis,
        }
    if plan.alerts is not None:
        out["alerts"] = plan.alerts.to_dict()
    if plan.speeds is not None:
        out["speeds"] = plan.speeds.to_dict()
    return out


def levers_json(plan: Plan, levers: list[Lever]) -> dict[str, object]:
    return {
        "schema_version": SCHEMA_VERSION,
        "model": plan.inputs.spec.name,
        "engine": plan.inputs.engine.to_json(),
        "context": plan.inputs.context,
        "baseline_sessions": plan.sessions,
        "baseline_total_sessions": plan.total_sessions,
        "baseline_gpus": plan.inputs.gpus,
        "baseline_sessions_per_gpu": round(plan.total_sessions / plan.inputs.gpus, 6),
        "levers": [
            {
                "lever": lv.name,
                "change": lv.change,
                "sessions": lv.sessions,
                "total_sessions": lv.total_sessions,
                "delta": lv.delta,
                "memory_effect": lv.memory_effect,
                "refused": lv.refused or None,
                "gpus": lv.gpus,
                "sessions_per_gpu": None if lv.per_gpu is None else round(lv.per_gpu, 6),
                "gain_per_gpu": None if lv.gain_per_gpu is None else round(lv.gain_per_gpu, 6),
                "ranked": lv.per_gpu is not None and not lv.not_ranked,
                "not_ranked": lv.not_ranked or None,
            }
            for lv in levers
        ],
    }
