"""Levers: what each change buys in sessions at the same cap, so a user sees at once that weight
quantization saves memory once while context costs per session.

Each lever is the same plan with one input changed. A lever the engine cannot take (a cache dtype
it refuses, weights that no longer fit) is listed with its reason instead of a number.
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


def levers(base: Plan, weight_bits: int | None = None, reweigh: Reweigh | None = None) -> list[Lever]:
    """Every lever, best first (most sessions over the whole deployment)."""
    out = []
    for name, change, inputs in _variants(base.inputs, weight_bits, reweigh):
        try:
            plan = make_plan(inputs)
        except KvBudgetError as exc:
            out.append(Lever(name, change, None, None, None, "", str(exc)))
            continue
        sessions = plan.prefix.sessions if plan.prefix is not None else plan.sessions
        total = sessions * plan.replicas
        out.append(Lever(name, change, sessions, total, total - base.total_sessions, _effect(base, plan)))
    return sorted(out, key=lambda lv: (lv.total_sessions is None, -(lv.total_sessions or 0), lv.name))
