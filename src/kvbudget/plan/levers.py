"""Levers: what each change buys in sessions at the same cap, so a user sees at once that weight
quantization saves memory once while context costs per session.

Each lever is the same plan with one input changed. A lever the engine cannot take (a cache dtype
it refuses, weights that no longer fit) is listed with its reason instead of a number.

Levers are ranked in comparable units: sessions per GPU at the same cap (the GPU is the same, so per GPU is
also per dollar). "tp x2" doubles the GPUs, so it is ranked by what each of them holds, not by twice the GPUs
against one. A lever that changes the cap (cap x1/2, cap x2) or whose gain is an engine clamping the cap (Ollama
clamps num_ctx to the trained window) buys sessions by serving less context: it is listed, with its figures,
after the ranked ones and not counted as a capacity gain.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from kvbudget.engines import engine_names, parse_engine
from kvbudget.errors import KvBudgetError
from kvbudget.plan.plan import Plan, PlanInputs, make_plan
from kvbudget.precision import parse_cache_dtype
from kvbudget.units import exact_bytes
from kvbudget.weights.sources import WeightSize

WEIGHT_STEPS = {16: 8, 8: 4, 4: 2}


@dataclass(frozen=True)
class Lever:
    name: str
    change: str
    sessions: int | None
    total_sessions: int | None
    delta: int | None
    memory_effect: str
    refused: str = ""
    gpus: int | None = None
    per_gpu: float | None = None  # total sessions / GPUs: the ranked figure
    gain_per_gpu: float | None = None  # per_gpu minus the deployment's own
    not_ranked: str = ""  # why the lever is not a capacity gain at the same cap (it changes or clamps the cap)


@dataclass(frozen=True)
class LeverRanking:
    """The levers of one plan, best first (``kvbudget levers``)."""

    plan: Plan
    levers: tuple[Lever, ...]

    def to_dict(self) -> dict[str, object]:
        """The ``kvbudget levers --json`` document."""
        from kvbudget.plan.report import levers_json

        return levers_json(self.plan, list(self.levers))


Reweigh = Callable[[int], WeightSize]


def scaled_weights(weights: WeightSize, bits: int) -> Reweigh:
    """For a measured size at ``bits``: the same checkpoint at fewer bits scales linearly (the seeds' rule)."""
    return lambda lower: WeightSize(
        weights.bytes * lower // bits, weights.provenance, f"{weights.basis}, scaled {bits}->{lower} bits"
    )


def _weights_step(bits: int | None, reweigh: Reweigh | None) -> tuple[WeightSize, str] | None:
    if bits is None or reweigh is None or bits not in WEIGHT_STEPS:
        return None
    lower = WEIGHT_STEPS[bits]
    return reweigh(lower), f"weights {bits}->{lower}-bit"


def _variants(i: PlanInputs, weight_bits: int | None, reweigh: Reweigh | None) -> list[tuple[str, str, PlanInputs]]:
    out = [
        ("cap x1/2", f"--context {i.context // 2:,}", replace(i, context=max(1, i.context // 2))),
        ("cap x2", f"--context {i.context * 2:,}", replace(i, context=i.context * 2)),
    ]
    for name in i.engine.rules.cheaper_kv_dtypes:  # in the engine's own vocabulary
        dtype = parse_cache_dtype(name)
        if dtype != i.k:
            out.append((f"KV {name}", f"--kv-dtype {name}", replace(i, k=dtype, v=dtype)))
    step = _weights_step(weight_bits, reweigh)
    if step is not None:
        out.append((step[1], "quantize the weights one step", replace(i, weights=step[0])))
    out.append(("tp x2", f"--tp {i.tp * 2} --gpus {i.gpus * 2}", replace(i, tp=i.tp * 2, gpus=i.gpus * 2)))
    if not i.prefix:
        prefix = min(4096, i.context // 2)
        out.append((f"shared {prefix:,}-token prefix", f"--prefix {prefix}", replace(i, prefix=prefix)))
    for other in engine_names(servers_only=True):
        if other != i.engine.name:
            out.append((f"engine {other}", f"--engine {other}", replace(i, engine=parse_engine(other))))
    return out


def _effect(base: Plan, plan: Plan) -> str:
    once = (
        (base.weights_per_gpu - plan.weights_per_gpu)
        + (base.overhead.bytes - plan.overhead.bytes)
        + (plan.share.usable_bytes - base.share.usable_bytes)
    )
    per = base.per_session_bytes - plan.per_session_bytes
    parts = []
    if once:
        parts.append(f"{'frees' if once > 0 else 'costs'} {exact_bytes(abs(once))} once per GPU")
    if per:
        parts.append(f"{'saves' if per > 0 else 'costs'} {exact_bytes(abs(per))} per session")
    if plan.prefix is not None and plan.prefix.shared_bytes:
        parts.append(f"shares {exact_bytes(plan.prefix.shared_bytes)} across sessions")
    return "; ".join(parts) or "same bytes per session and per GPU"


def _not_ranked(base: Plan, name: str, plan: Plan) -> str:
    """Why a lever's sessions are not a capacity gain at the same cap ("" when they are)."""
    if plan.inputs.context != base.inputs.context:
        return f"changes the cap to {plan.inputs.context:,} tokens"
    i = plan.inputs
    served = i.engine.rules.served_cap(i.spec, i.context)
    if served < i.context:
        return f"{i.engine.rules.title} clamps the cap to {served:,} tokens: the gain is the clamp, not capacity"
    return ""


def levers(base: Plan, weight_bits: int | None = None, reweigh: Reweigh | None = None) -> list[Lever]:
    """Every lever: capacity gains first, most sessions per GPU at the same cap first; then the levers that change
    or clamp the cap; then those the engine refuses."""
    base_per_gpu = base.total_sessions / base.inputs.gpus
    out = []
    for name, change, inputs in _variants(base.inputs, weight_bits, reweigh):
        try:
            plan = make_plan(inputs)
        except KvBudgetError as exc:
            out.append(Lever(name, change, None, None, None, "", str(exc)))
            continue
        sessions = plan.prefix.sessions if plan.prefix is not None else plan.sessions
        total = sessions * plan.replicas
        per_gpu = total / plan.inputs.gpus
        out.append(
            Lever(
                name,
                change,
                sessions,
                total,
                total - base.total_sessions,
                _effect(base, plan),
                gpus=plan.inputs.gpus,
                per_gpu=per_gpu,
                gain_per_gpu=per_gpu - base_per_gpu,
                not_ranked=_not_ranked(base, name, plan),
            )
        )

    def rank(lv: Lever) -> tuple[int, float, str]:
        group = 2 if lv.per_gpu is None else 1 if lv.not_ranked else 0
        return (group, -(lv.per_gpu or 0.0), lv.name)

    return sorted(out, key=rank)
