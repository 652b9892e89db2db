"""Fitting the speed model's efficiencies to published measurements, and its error on held-out ones.

A figure file (tests/data/speed/*.json) holds measured figures, each a request shape (model, GPU, tp, engine,
weights, KV dtype, isl, osl, concurrency), the metric measured, its value and its split (``train`` or
``held_out``). ``prepare`` plans each shape once (the exact part: batch, FLOPs, bytes); ``predict`` then costs
only arithmetic, so ``fit`` can search the efficiencies: coordinate descent on a log grid minimizing the mean
squared log error over the training figures.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from kvbudget.speed.efficiency import Efficiency

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.hardware import Gpu
    from kvbudget.plan.plan import Plan
    from kvbudget.requests.speed import SpeedRequest
    from kvbudget.speed.roofline import Roofline

PARAMETERS = ("prefill", "decode_compute", "bandwidth", "step_overhead_s", "allreduce_latency_s")
BOUNDS = {
    "prefill": (0.05, 1.0),
    "decode_compute": (0.05, 1.0),
    "bandwidth": (0.2, 1.0),
    "step_overhead_s": (1e-4, 0.05),
    "allreduce_latency_s": (1e-6, 1e-3),
}


@dataclass(frozen=True)
class Figure:
    """One published measurement and the request shape it measured."""

    request: SpeedRequest
    metric: str
    value: float
    split: str
    label: str


@dataclass(frozen=True)
class Prepared:
    figure: Figure
    plan: Plan
    gpu: Gpu
    roof: Roofline
    precision: str
    why: str


def load(path: str | Path) -> tuple[list[Figure], dict[str, object]]:
    """The figures of one file and its source record."""
    from kvbudget.requests.speed import SpeedRequest

    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    figures = []
    for row in doc["figures"]:
        request = SpeedRequest(
            model=row["model"],
            gpu=row["gpu"],
            gpus=row["tp"],
            tp=row["tp"],
            engine=row["engine"],
            weights=row["weights"],
            kv_dtype=row["kv_dtype"],
            isl=row["isl"],
            osl=row["osl"],
            concurrency=str(row["concurrency"]),
        )
        label = f"{row['model']} {row['gpu']} tp{row['tp']} {row['isl']}/{row['osl']}"
        figures.append(Figure(request, row["metric"], float(row["value"]), row["split"], label))
    return figures, doc["source"]


def prepare(figures: list[Figure]) -> list[Prepared]:
    """Plan each figure's deployment once (the exact part of the model)."""
    from kvbudget.plan.build import plan_deployment
    from kvbudget.requests.base import narrowed
    from kvbudget.requests.plan import PlanRequest
    from kvbudget.speed.answer import roofline_of, speed_gpu
    from kvbudget.speed.efficiency import FITTED

    out = []
    for f in figures:
        r = f.request
        plan = plan_deployment(narrowed(PlanRequest, r, context=r.isl + r.osl, prefix=None))
        gpu = speed_gpu(r)
        out.append(Prepared(f, plan, gpu, *roofline_of(r, plan, gpu, FITTED)))
    return out


def predict(p: Prepared, efficiency: Efficiency) -> float:
    """The model's value of ``p``'s metric with ``efficiency``."""
    from kvbudget.speed.answer import _answer, read_concurrency

    r = p.figure.request
    roof = replace(p.roof, efficiency=efficiency)
    answer = _answer(r, p.plan, p.gpu, roof, p.precision, p.why, read_concurrency(r.concurrency))
    value: float = getattr(answer, p.figure.metric)
    return value


def errors(prepared: list[Prepared], efficiency: Efficiency) -> list[float]:
    """Relative errors (predicted / measured - 1), one per figure."""
    return [predict(p, efficiency) / p.figure.value - 1 for p in prepared]


def _loss(prepared: list[Prepared], efficiency: Efficiency) -> float:
    return statistics.fmean(math.log(predict(p, efficiency) / p.figure.value) ** 2 for p in prepared)


def fit(prepared: list[Prepared], start: Efficiency, rounds: int = 6, steps: int = 24) -> Efficiency:
    """Efficiencies minimizing the mean squared log error on ``prepared`` (coordinate descent, log grids)."""
    best, best_loss = start, _loss(prepared, start)
    for _ in range(rounds):
        for name in PARAMETERS:
            low, high = BOUNDS[name]
            for i in range(steps + 1):
                value = low * (high / low) ** (i / steps)
                trial = replace(best, **{name: value})
                loss = _loss(prepared, trial)
                if loss < best_loss:
                    best, best_loss = trial, loss
    return best


@dataclass(frozen=True)
class Summary:
    """Error statistics over some figures: median absolute relative error and share within 30%."""

    count: int
    median_abs: float
    within_30: float

    @classmethod
    def of(cls, errs: list[float]) -> Summary:
        if not errs:
            return cls(0, 0.0, 0.0)
        return cls(len(errs), statistics.median(abs(e) for e in errs), sum(abs(e) <= 0.30 for e in errs) / len(errs))
