"""The report's latency next to its capacity, each figure with where it comes from:

* at the planned sessions: ``kvbudget speed`` (kvbudget.speed.answer ``estimate_speed``, the roofline with the
  fitted efficiencies; ``computed``) for the report's deployment with as many requests in flight as the plan
  holds over all its replicas, every one a request of ``--isl``/``--osl`` tokens (speed's defaults), or of the
  ``--workload``'s mean step (plan/sizing_load.py ``workload_shape``: a benchmark-like figure of the typical
  step; ``kvbudget size`` holds its targets at the workload's p99 step, and the report's simulation gives p99);
* with a simulation: the simulator's time to first token and inter-token latency p50 / p99 and the output speed
  a session sees (``kvbudget simulate --json`` ``latency``), after the speeds it ran at (its ``speeds``:
  ``computed``, ``given`` by --prefill-rate / --decode-rate, or ``measured``).

No figure is worked out here: each is the value of the library call behind the CLI command that prints it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.errors import KvBudgetError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.plan.plan import Plan
    from kvbudget.requests.report import ReportRequest
    from kvbudget.speed.answer import Speed

# the ``kvbudget speed --json`` fields the report keeps (schema: the same fields of speed.json)
PLANNED_FIELDS = (
    "concurrency",
    "batch_per_replica",
    "queued",
    "isl",
    "osl",
    "prefix",
    "provenance",
    "ttft_s",
    "itl_s",
    "decode_tokens_per_s_per_request",
    "output_tokens_per_s",
    "output_tokens_per_s_per_gpu",
    "prefill_tokens_per_s",
    "binding",
    "compute_basis",
    "efficiency",
    "basis",
    "not_modelled",
    "warnings",
)


@dataclass(frozen=True)
class SimulatedLatency:
    """The simulator's latency (``simulate --json`` ``latency``) and the speeds it ran at (its ``speeds``)."""

    latency: dict[str, object]
    speeds: dict[str, object]

    def quantile(self, key: str, q: str) -> float | None:
        values = self.latency.get(key)
        value = values.get(q) if isinstance(values, dict) else None
        return float(value) if isinstance(value, int | float) else None

    def to_dict(self) -> dict[str, object]:
        return {**self.latency, "speeds": self.speeds}


@dataclass(frozen=True)
class Latency:
    """Latency at the planned sessions (``planned``, or why there is none: ``unavailable``) and, with a
    simulation, the simulated one; ``shape``: the request shape the planned figures are for."""

    planned: Speed | None
    unavailable: str | None
    shape: str
    simulated: SimulatedLatency | None = None

    def planned_doc(self) -> dict[str, object] | None:
        if self.planned is None:
            return None
        doc = self.planned.to_dict()
        return {key: doc[key] for key in PLANNED_FIELDS}

    def to_dict(self) -> dict[str, object]:
        return {
            "planned": self.planned_doc(),
            "planned_unavailable": self.unavailable,
            "shape": self.shape,
            "simulated": None if self.simulated is None else self.simulated.to_dict(),
        }


def _shape(request: ReportRequest, cap: int) -> tuple[dict[str, object], str]:
    """The request shape's speed options and their basis: --isl/--osl (speed's defaults), else a workload's mean
    step."""
    if request.workload and request.isl is None and request.osl is None:
        from kvbudget.plan.sizing_load import workload_shape
        from kvbudget.workload.loader import load_workload

        shape = workload_shape(load_workload(request.workload), cap)
        return {"isl": shape.isl, "osl": shape.osl, "prefix": shape.cached}, shape.basis
    return {"isl": request.isl, "osl": request.osl}, ""


def planned_latency(request: ReportRequest, plan: Plan) -> Latency:
    """``kvbudget speed`` for the report's deployment at the sessions its plan holds (module doc); a deployment the
    speed model does not cover (no catalog GPU, pipeline parallelism, no session at the cap) gets the reason."""
    from kvbudget.requests.base import narrowed
    from kvbudget.requests.speed import SpeedRequest
    from kvbudget.speed.answer import estimate_speed

    if plan.total_sessions < 1:
        return Latency(None, "no session fits at the cap: there is no load to time", "")
    try:
        options, basis = _shape(request, plan.inputs.context)
        speed = estimate_speed(narrowed(SpeedRequest, request, concurrency=str(plan.total_sessions), **options))
    except KvBudgetError as exc:
        return Latency(None, str(exc), "")
    cached = f" ({speed.prefix:,} of them prefix-cache hits)" if speed.prefix else ""
    shape = basis or (
        f"every session sends {speed.isl:,}-token prompts{cached} and generates {speed.osl:,} tokens (--isl, --osl)"
    )
    return Latency(speed, None, shape)


def simulated_latency(doc: dict[str, object]) -> SimulatedLatency:
    """The latency and speeds of a ``simulate --json`` document."""
    latency, speeds = doc["latency"], doc["speeds"]
    if not isinstance(latency, dict) or not isinstance(speeds, dict):
        raise TypeError("simulate --json: latency and speeds are objects")
    return SimulatedLatency(latency, speeds)
