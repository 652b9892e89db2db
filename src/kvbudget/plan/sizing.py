"""``kvbudget size``: how many of which GPU a load needs. Every combination of the request's lists (models, GPUs,
engines, cache dtypes, weights precisions, tensor-parallel sizes) is planned as ``plan`` plans one replica at the
cap; a replica holds the fewer of the sessions its KV pool serves at the cap (memory, the worst case reserved)
and the sessions it runs within the latency targets (plan/sizing_load.py: ``kvbudget speed``'s roofline at that
concurrency). The replicas are the load over that, rounded up; the binding constraint is whichever set the
sessions per replica. A combination no replica count serves (the weights do not fit, no session fits at the cap,
one session alone misses a target, the cap refuses more of the workload's sessions than tolerated) is listed
with its reason, which names what would meet it; one without a price is ranked by its GPUs, after the priced ones.
With a workload, each row says how many of its sessions outgrow the cap (plan/cap_refusals.py: counted on the
sessions ``simulate`` draws), and the answer names the smallest of ``CAP_CANDIDATES`` that keeps them within
the tolerance.

``--speed-from RESULT.json``: a load test's measured speeds (simulate/measured.py) replace the roofline for the
rows of the model and engine it measured; the other rows keep the roofline, and each row says which it used
(``speeds``). The result records neither the GPU nor tp, weights or cache dtype: a sweep listing several of
those is refused, and so is a load test of none of the listed models and engines.

One combination's row (its ``Candidate``: planned, held to the targets, its replicas) is plan/sizing_candidate.py;
this module runs every combination, the cap's refusals and the simulation's check over them, and ranks them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvbudget.errors import InputError, KvBudgetError
from kvbudget.plan.cap_refusals import CapRefusals, SessionLengths, pct, smallest_cap
from kvbudget.plan.compare import Choice
from kvbudget.plan.sizing_candidate import Candidate, candidate, size_roofline
from kvbudget.plan.sizing_load import Shape
from kvbudget.units import a_or_an, format_tokens

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.requests.size import SizeRequest
    from kvbudget.simulate.measured import MeasuredSpeeds
    from kvbudget.workload.model import Workload

__all__ = ["CAP_CANDIDATES", "SCHEMA_VERSION", "Candidate", "Sizing", "held_shape", "size_deployments", "size_roofline"]

SCHEMA_VERSION = 1
# The caps size looks through for the smallest that keeps refusals within the tolerance: 4K to 1M, doubling.
CAP_CANDIDATES = tuple(1024 * 2**k for k in range(2, 11))


@dataclass(frozen=True)
class Sizing:
    """The answer of ``kvbudget size``: deployments that meet the load and targets, cheapest first, then the rest."""

    context: int
    sessions: int | None  # as asked (None: from the rate, per deployment)
    rate_per_s: float | None
    ttft_s: float | None
    itl_s: float | None
    shape: Shape
    candidates: tuple[Candidate, ...]
    recommendation: str
    speed_from: str | None = None  # the load test whose measured speeds some rows use (its file name)
    refusal_rate: float = 0.001  # the sessions the cap may refuse (--target-refusal-rate)
    refusals: CapRefusals | None = None  # at the asked cap, the whole prefix kept (None: no workload)
    cap_within: CapRefusals | None = None  # the smallest of CAP_CANDIDATES within the tolerance
    speed_origin: str = "load test"  # what measured ``speed_from``: a load test or the engine's log
    simulate_check: str = ""  # why the latency-bound counts were not checked by simulation ("": they were, or none)

    @property
    def met(self) -> tuple[Candidate, ...]:
        return tuple(c for c in self.candidates if not c.unmet)

    @property
    def unmet(self) -> tuple[Candidate, ...]:
        return tuple(c for c in self.candidates if c.unmet)

    def to_dict(self) -> dict[str, object]:
        """The ``kvbudget size --json`` document; ``table``: the answer as the report and the page write it."""
        from kvbudget.plan.sizing_table import sizing_table

        return {
            "schema_version": SCHEMA_VERSION,
            "context": self.context,
            "sessions": self.sessions,
            "rate_per_s": self.rate_per_s,
            "targets": {"ttft_s": self.ttft_s, "itl_s": self.itl_s, "percentile": self.shape.percentile},
            "shape": {
                "isl": self.shape.isl,
                "cached": self.shape.cached,
                "osl": self.shape.osl,
                "basis": self.shape.basis,
            },
            "deployments": [c.to_dict() for c in self.met],
            "unmet": [c.to_dict() for c in self.unmet],
            "refusal_tolerance": self.refusal_rate,
            "refused_at_cap": self.refusals.to_dict() if self.refusals else None,
            "smallest_cap_within_tolerance": self.cap_within.to_dict() if self.cap_within else None,
            "recommendation": self.recommendation,
            "speed_from": self.speed_from,
            "simulate_check": self.simulate_check or None,
            "table": sizing_table(self).to_dict(),
        }


def _choices(request: SizeRequest) -> list[Choice]:
    from kvbudget.plan.comparison import choices_of
    from kvbudget.requests.base import narrowed
    from kvbudget.requests.compare import CompareRequest

    return choices_of(narrowed(CompareRequest, request, context=(request.context,)))


def _prices(request: SizeRequest) -> dict[str, float]:
    from kvbudget.plan.comparison import prices_of
    from kvbudget.requests.base import narrowed
    from kvbudget.requests.compare import CompareRequest

    return prices_of(narrowed(CompareRequest, request, context=(request.context,), rate=None, workload=None))


def _workload(request: SizeRequest) -> Workload | None:
    if not request.workload:
        return None
    from kvbudget.workload.loader import load_workload

    return load_workload(request.workload)


def size_deployments(request: SizeRequest) -> Sizing:
    """Every combination sized for the load (``kvbudget size``); ``.to_dict()`` is ``size --json``."""
    from kvbudget.plan.recommend import recommendation
    from kvbudget.plan.sizing_load import given_shape

    if (request.sessions is None) == (request.rate is None):
        field = "--sessions" if request.sessions is None else "--rate"  # the one missing, or the second given
        raise InputError(
            f"{field}: give the load as --sessions N (peak concurrent, whole deployment) or --rate R (new sessions per "
            "second: with --workload its sessions, else one --isl/--osl request each)"
        )
    workload = _workload(request)
    lengths = SessionLengths(workload) if workload else None
    shape = (
        held_shape(workload, lengths, request.context)
        if workload and lengths
        else given_shape(request.isl, request.osl, request.context)
    )
    prices = _prices(request)
    choices = _choices(request)
    measured = _measured(request, choices)
    sized = [
        candidate(request, choice, shape, workload, prices.get(choice.gpu), measured.get(choice)) for choice in choices
    ]
    tolerance = _tolerance(request)
    refusals = within = None
    if lengths is not None:
        refusals = lengths.at(request.context)
        within = smallest_cap(lengths, list(CAP_CANDIDATES), tolerance)
        sized = [_refused(c, lengths, tolerance, within) for c in sized]
    sized, skipped = _checked(request, sized, workload)
    ordered = sorted(sized, key=_rank)
    answer = Sizing(
        request.context,
        request.sessions,
        request.rate,
        request.ttft,
        request.itl,
        shape,
        tuple(ordered),
        "",
        next(iter(measured.values())).source if measured else None,
        tolerance,
        refusals,
        within,
    )
    if measured:
        answer = replace(answer, speed_origin=next(iter(measured.values())).origin)
    answer = replace(answer, simulate_check=skipped)
    return replace(answer, recommendation=recommendation(answer))


def _checked(request: SizeRequest, rows: list[Candidate], workload: Workload | None) -> tuple[list[Candidate], str]:
    """The rows with the latency-bound counts worth checking refined by simulation (plan/sizing_check.py), and
    why none was when some could have been (``--no-simulate``)."""
    from kvbudget.plan.sizing_check import apply, check_rows, to_check

    rows = [replace(c, computed_replicas=c.replicas) for c in rows]
    if workload is None or not to_check(rows, workload):
        return rows, ""
    if request.no_simulate:
        return rows, "--no-simulate: the latency-bound counts are speed's arithmetic, an upper bound"
    checked = check_rows(request, rows, workload)
    return [apply(c, checked[i], request.ttft, request.itl) if i in checked else c for i, c in enumerate(rows)], ""


def held_shape(workload: Workload, lengths: SessionLengths, cap: int) -> Shape:
    """The workload's mean step, with the steps of simulate's default run to rank for the p99 step (the targets
    are p99 per step, as simulate's: plan/sizing_load.py)."""
    from kvbudget.plan.sizing_load import STEP_SESSIONS, drawn_steps, workload_shape

    mean = workload_shape(workload, cap)
    steps = drawn_steps(lengths, cap)
    held = (
        f"; --ttft/--itl held at the p99 step (nearest rank by its own prefill time on each row's speeds) of the "
        f"{len(steps):,} steps of the first {STEP_SESSIONS:,} sessions simulate draws (seed 0), the others' "
        "prefills and the decode at the mean step"
    )
    return replace(mean, basis=mean.basis + held, steps=steps)


def _tolerance(request: SizeRequest) -> float:
    from kvbudget.simulate.policies import DEFAULT_REFUSAL_RATE

    return DEFAULT_REFUSAL_RATE if request.target_refusal_rate is None else request.target_refusal_rate


def _refused(c: Candidate, lengths: SessionLengths, tolerance: float, within: CapRefusals | None) -> Candidate:
    """The row with the sessions its cap refuses; unmet when they exceed the tolerance, saying what would meet
    it (a larger cap, or a looser tolerance)."""
    shared = None
    cap = c.choice.context
    if c.plan is not None:
        from kvbudget.simulate.build import memory_from_plan

        cap = c.plan.inputs.context
        shared = memory_from_plan(c.plan).shared_prefix(lengths.workload.prefix_tokens)
    refusals = lengths.at(cap, shared)
    if c.unmet or refusals.within(tolerance):
        return replace(c, refusals=refusals)
    larger = (
        f"{_article_cap(within.cap)} cap keeps them within it ({pct(within.share)})"
        if within is not None
        else f"no cap up to {format_tokens(CAP_CANDIDATES[-1])} keeps them within it"
    )
    why = (
        f"{pct(refusals.share)} of the workload's sessions outgrow the {format_tokens(cap)} cap and are refused "
        f"there ({refusals.refused:,} of {refusals.sessions:,} drawn as simulate draws them), above the "
        f"{pct(tolerance)} tolerated (--target-refusal-rate): {larger}, or --target-refusal-rate "
        f"{pct(refusals.share)} accepts them"
    )
    return replace(c, unmet=why, refusals=refusals)


def _article_cap(tokens: int) -> str:
    return a_or_an(format_tokens(tokens))


def _rank(c: Candidate) -> tuple[object, ...]:
    """Met first; priced by cost per hour, then by GPUs, then the most headroom."""
    if c.unmet:
        return (2, 0.0, 0, 0)
    cost = c.cost_per_hour
    return (0 if cost is not None else 1, cost or 0.0, c.gpus, -c.headroom)


def _measured(request: SizeRequest, choices: list[Choice]) -> dict[Choice, MeasuredSpeeds]:
    """The load test's speeds for each row of the model and engine it measured (module doc); {} without one."""
    if not request.speed_from:
        return {}
    from kvbudget.engines import parse_engine
    from kvbudget.model.sources import resolve
    from kvbudget.simulate.measured import measured_speeds, one_deployment

    measured = measured_speeds(request.speed_from)
    lists = {"GPU": request.gpu, "tp": request.tp, "weights": request.weights, "KV dtype": request.kv_dtype}
    one_deployment(measured, lists, len(set(request.engine)), len(set(request.model)))
    fitting: dict[Choice, MeasuredSpeeds] = {}
    for choice in choices:
        try:
            spec = resolve(choice.model)
        except KvBudgetError:  # the row says why itself
            continue
        if measured.fits(parse_engine(choice.engine).name, spec, choice.model):
            fitting[choice] = measured
    if not fitting:
        raise InputError(
            f"--speed-from {measured.source}: the load test measured {measured.served or 'a model'} on "
            f"{measured.engine or 'an unnamed engine'}, none of the listed models on the listed engines; give the "
            "load test's --engine and model, or a load test of one of them"
        )
    return fitting
