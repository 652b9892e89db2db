"""One combination of ``kvbudget size`` sized for the load (plan/sizing.py runs every combination): ``plan``'s replica
at the cap, the sessions it holds in memory and within the latency targets on its speeds (``kvbudget speed``'s
roofline, or a load test's measured speeds), the replicas the load needs over the fewer of the two and the
constraint that bound them, or why no replica count serves the load (``unmet``), saying what would."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvbudget.errors import KvBudgetError
from kvbudget.plan.compare import Choice
from kvbudget.plan.sizing_load import Latency, Load, Shape

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.plan.cap_refusals import CapRefusals
    from kvbudget.plan.plan import Plan
    from kvbudget.plan.sizing_check import Simulated
    from kvbudget.requests.size import SizeRequest
    from kvbudget.simulate.measured import MeasuredSpeeds
    from kvbudget.speed.roofline import Roofline
    from kvbudget.workload.model import Workload


@dataclass(frozen=True)
class Candidate:
    """One combination sized for the load, or why it cannot serve it (``unmet``)."""

    choice: Choice
    plan: Plan | None
    load: Load | None
    unmet: str = ""
    price_per_gpu_hour: float | None = None
    memory_sessions: int = 0  # per replica at the cap (plan)
    latency_sessions: int = 0  # per replica within the targets
    replicas: int = 0
    binding: str = ""  # memory, prefill (TTFT) or decode (inter-token latency)
    latency: Latency | None = None  # at the load each replica runs (ceil(load / replicas))
    speeds: tuple[str, str] | None = None  # (provenance, basis) of the latency's speeds; None: memory alone
    refusals: CapRefusals | None = None  # the workload's sessions this row's cap refuses (None: no workload)
    simulated: Simulated | None = None  # the count checked by simulation (plan/sizing_check.py); None: not checked
    computed_replicas: int = 0  # speed's arithmetic (every session generating at once): the count before the check

    @property
    def replicas_basis(self) -> str:
        """How the count was found: ``simulated`` (the fewest replicas simulate finds within the targets) or
        ``computed`` (memory's count, or speed's arithmetic: an upper bound when latency binds)."""
        return "simulated" if self.simulated is not None and self.simulated.replicas is not None else "computed"

    @property
    def sessions_per_replica(self) -> int:
        return min(self.memory_sessions, self.latency_sessions)

    @property
    def gpus(self) -> int:
        return self.replicas * self.choice.tp

    @property
    def capacity(self) -> int:
        """Sessions the deployment holds within memory and the targets."""
        return self.sessions_per_replica * self.replicas

    @property
    def headroom(self) -> int:
        return self.capacity - (self.load.sessions if self.load else 0)

    @property
    def cost_per_hour(self) -> float | None:
        return None if self.price_per_gpu_hour is None or self.unmet else self.price_per_gpu_hour * self.gpus

    @property
    def cost_per_session_hour(self) -> float | None:
        cost = self.cost_per_hour
        return None if cost is None or self.load is None else cost / self.load.sessions

    def to_dict(self) -> dict[str, object]:
        c = self.choice
        out: dict[str, object] = {
            "model": self.plan.inputs.spec.name if self.plan else c.model,
            "gpu": c.gpu,
            "engine": self.plan.inputs.engine.label if self.plan else c.engine,
            "context": c.context,
            "kv_dtype": self.plan.inputs.kv_dtype_label if self.plan else c.kv_dtype,
            "weights": c.weights,
            "tp": c.tp,
            "met": not self.unmet,
            "unmet": self.unmet or None,
            "load": self.load.to_dict() if self.load else None,
            "sessions_per_replica_memory": self.memory_sessions,
            "sessions_per_replica_latency": self.latency_sessions,
            "replicas": self.replicas,
            "replicas_basis": self.replicas_basis,
            "replicas_computed": self.computed_replicas or self.replicas,
            "simulation": self.simulated.to_dict() if self.simulated else None,
            "gpus": self.gpus,
            "capacity_sessions": self.capacity,
            "headroom_sessions": self.headroom if not self.unmet else None,
            "binding": self.binding or None,
            "latency": self.latency.to_dict() if self.latency else None,
            "speeds": {"provenance": self.speeds[0], "basis": self.speeds[1]} if self.speeds else None,
            "price_per_gpu_hour": self.price_per_gpu_hour,
            "cost_per_hour": _round(self.cost_per_hour),
            "cost_per_session_hour": _round(self.cost_per_session_hour),
            "refused_at_cap": self.refusals.to_dict() if self.refusals else None,
            "warnings": list(self.plan.warnings) if self.plan else [],
        }
        return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def candidate(
    request: SizeRequest,
    choice: Choice,
    shape: Shape,
    workload: Workload | None,
    price: float | None,
    measured: MeasuredSpeeds | None = None,
) -> Candidate:
    from kvbudget.plan.build import plan_deployment
    from kvbudget.requests.base import narrowed
    from kvbudget.requests.plan import PlanRequest

    try:
        plan = plan_deployment(narrowed(PlanRequest, request, **choice.options(), sessions=None, speed_from=None))
    except KvBudgetError as exc:
        return Candidate(choice, None, None, str(exc), price)
    if plan.sessions < 1:
        from kvbudget.units import format_bytes

        why = (
            f"no session at the {request.context:,}-token cap fits one replica: it needs "
            f"{format_bytes(plan.per_session_bytes)} of cache, the KV pool is {format_bytes(plan.kv_pool_bytes)} per "
            "GPU; add a larger --tp, a larger GPU, an fp8 --kv-dtype or a lower cap"
        )
        return Candidate(choice, plan, None, why, price)
    if measured is not None:
        return sized(request, choice, plan, measured, shape, workload, price)
    try:
        roof = size_roofline(request, choice, plan)
    except KvBudgetError as exc:
        if request.ttft is None and request.itl is None and request.rate is None:
            roof = None
        else:
            return Candidate(choice, plan, None, str(exc), price, plan.sessions)
    return sized(request, choice, plan, roof, shape, workload, price)


def size_roofline(request: SizeRequest, choice: Choice, plan: Plan) -> Roofline:
    from kvbudget.requests.base import narrowed
    from kvbudget.requests.speed import SpeedRequest
    from kvbudget.speed.answer import roofline_of, speed_gpu
    from kvbudget.speed.efficiency import efficiency_for

    speed = narrowed(SpeedRequest, request, **{k: v for k, v in choice.options().items() if k != "context"})
    return roofline_of(speed, plan, speed_gpu(speed), efficiency_for(plan.inputs.engine.name))[0]


def sized(
    request: SizeRequest,
    choice: Choice,
    plan: Plan,
    roof: Roofline | MeasuredSpeeds | None,
    shape: Shape,
    workload: Workload | None,
    price: float | None,
) -> Candidate:
    from kvbudget.plan.sizing_load import at_percentile, latency_at, most_sessions, rate_load
    from kvbudget.simulate.measured import MeasuredSpeeds

    memory = plan.sessions
    if roof is None:  # no targets and no compute figures: memory alone
        load = Load(request.sessions or 0, f"--sessions {request.sessions:,} at peak, whole deployment")
        replicas = math.ceil(load.sessions / memory)
        return Candidate(choice, plan, load, "", price, memory, memory, replicas, "memory")
    speeds = (
        ("measured", f"{roof.prefill_basis}; {roof.decode_basis}")
        if isinstance(roof, MeasuredSpeeds)
        else ("computed", f"roofline (kvbudget speed), efficiencies of {roof.efficiency.fit}{_borrowed(roof)}")
    )
    shape = at_percentile(roof, shape)  # the p99 step on this row's speeds (a workload's; else the one shape)
    alone = latency_at(roof, shape, 1)
    missed = alone.misses(request.ttft, request.itl)
    if missed:
        what = (
            f"TTFT {alone.ttft_s:.2f} s > --ttft {request.ttft:g} s"
            if missed == "prefill"
            else f"inter-token latency {alone.itl_s * 1000:.1f} ms > --itl {request.itl * 1000:g} ms"  # type: ignore[operator]
        )
        return Candidate(
            choice,
            plan,
            None,
            f"one session alone misses the target ({what}): no replica count meets it; "
            + (
                f"a --ttft of {math.ceil(alone.ttft_s * 100) / 100:.2f} s or more"  # rounded up: it is met
                if missed == "prefill"
                else f"an --itl of {math.ceil(alone.itl_s * 10_000) / 10:.1f} ms or more"
            )
            + ", a faster GPU or a larger --tp would",
            price,
            memory,
            speeds=speeds,
        )
    fits = most_sessions(roof, shape, memory, request.ttft, request.itl)
    if request.rate is not None:
        load = rate_load(request.rate, workload, shape, latency_at(roof, shape, fits), speeds[0])
    else:
        load = Load(request.sessions or 0, f"--sessions {request.sessions:,} at peak, whole deployment")
    per = min(memory, fits)
    replicas = math.ceil(load.sessions / per)
    running = math.ceil(load.sessions / replicas)
    binding = "memory" if memory <= fits else latency_at(roof, shape, fits + 1).misses(request.ttft, request.itl)
    latency = latency_at(roof, shape, running)
    return Candidate(choice, plan, load, "", price, memory, fits, replicas, binding, latency, speeds)


def _borrowed(roof: Roofline) -> str:
    """What the row's efficiencies borrow from TensorRT-LLM's fit, if its engine has a fit of its own."""
    e = roof.efficiency
    return f" ({', '.join(e.borrowed)} from TensorRT-LLM's)" if e.borrowed and e.fitted_to != "TensorRT-LLM" else ""
