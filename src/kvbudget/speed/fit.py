"""Fitting the speed model's efficiencies to published measurements, and its error on held-out ones.

A figure file (tests/data/speed/*.json) holds measured figures, each a request shape (model, GPU, tp, engine,
weights, KV dtype, isl, osl, concurrency), the metric measured (``output_tokens_per_s``, ``ttft_ms`` or
``itl_ms``: ``METRICS``), its value and its split (``train`` or ``held_out``); a model given as a ``.json`` path
is a config.json beside the file. ``prepare`` plans each shape once (the exact part: batch, FLOPs, bytes);
``predict`` then costs only arithmetic, so ``fit`` can search the efficiencies: coordinate descent on a log grid
minimizing the mean squared log error of each kind of figure (throughput, TTFT, ITL), the kinds weighed alike.
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

# metric in a figure file -> (kind, attribute of the Speed answer, factor from the answer's unit to the figure's)
METRICS = {
    "output_tokens_per_s": ("throughput", "output_tokens_per_s", 1.0),
    "ttft_ms": ("ttft", "ttft_s", 1000.0),
    "itl_ms": ("itl", "itl_s", 1000.0),
}
KINDS = ("throughput", "ttft", "itl")

PARAMETERS = (
    "prefill",
    "prefill_bf16",
    "prefill_attention",
    "decode_compute",
    "bandwidth",
    "step_overhead_s",
    "allreduce_latency_s",
    "prefill_queue",
    "sequence_s",
    "request_s",
    "moe_layer_overhead_s",
    "prefill_a100",
)
THROUGHPUT_PARAMETERS = (
    "prefill",
    "decode_compute",
    "bandwidth",
    "step_overhead_s",
    "allreduce_latency_s",
)  # the first fit
# then, the five held, on the same throughput figures (their 5,000-token prompts weigh attention; fitted with the
# five it runs to its bound, 1.0: four figures cannot tell it from the GEMM share)
ATTENTION_PARAMETERS = ("prefill_attention",)
LATENCY_PARAMETERS = ("prefill_bf16", "prefill_queue")  # fitted on TTFT / ITL with the others held
BOUNDS = {
    "prefill": (0.05, 1.0),
    "prefill_bf16": (0.05, 1.0),
    "prefill_attention": (0.05, 1.0),
    "prefill_queue": (0.01, 4.0),
    "decode_compute": (0.05, 1.0),
    "bandwidth": (0.2, 1.0),
    "step_overhead_s": (1e-4, 0.05),
    "allreduce_latency_s": (1e-6, 1e-3),
    "sequence_s": (1e-7, 1e-3),
    "request_s": (1e-3, 0.2),
    "moe_layer_overhead_s": (1e-7, 1e-3),
    "prefill_a100": (0.5, 3.0),
}
# the efficiencies each engine's own figures fit (bench/speed.py --fit-all); the rest it borrows from TensorRT-LLM
ENGINE_PARAMETERS = {
    "vllm": (
        "prefill",
        "prefill_bf16",
        "prefill_attention",
        "step_overhead_s",
        "sequence_s",
        "request_s",
        "moe_layer_overhead_s",
        "prefill_a100",
    ),
    # SGLang's one long-prompt training figure (Qwen3-14B-FP8 at 3,996 tokens) cannot tell attention from the fp8
    # GEMM share (fitted, it runs to 0.12 from TensorRT-LLM's values, to its bound 1.0 from SGLang's, the loss all
    # but the same): it borrows TensorRT-LLM's
    "sglang": ("prefill", "prefill_bf16", "step_overhead_s", "sequence_s", "request_s"),
}


@dataclass(frozen=True)
class Figure:
    """One published measurement and the request shape it measured."""

    request: SpeedRequest
    metric: str
    value: float
    split: str
    label: str
    source: str = ""

    @property
    def kind(self) -> str:
        return METRICS[self.metric][0]


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

    path = Path(path)
    doc = json.loads(path.read_text(encoding="utf-8"))
    figures = []
    for row in doc["figures"]:
        if row["metric"] not in METRICS:
            raise ValueError(f"{path.name}: metric {row['metric']!r} is not one of {', '.join(METRICS)}")
        model = str(path.parent / row["model"]) if row["model"].endswith(".json") else row["model"]
        request = SpeedRequest(
            model=model,
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
        name = Path(row["model"]).stem if row["model"].endswith(".json") else row["model"]
        label = f"{name} {row['gpu']} tp{row['tp']} {row['isl']}/{row['osl']} c={row['concurrency']}"
        figures.append(Figure(request, row["metric"], float(row["value"]), row["split"], label, path.stem))
    return figures, doc["source"]


def load_all(folder: str | Path) -> list[Figure]:
    """The figures of every file in ``folder`` (sorted by file name)."""
    return [f for path in sorted(Path(folder).glob("*.json")) for f in load(path)[0]]


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
    _, attribute, factor = METRICS[p.figure.metric]
    value: float = getattr(answer, attribute) * factor
    return value


def errors(prepared: list[Prepared], efficiency: Efficiency | None = None) -> list[float]:
    """Relative errors (predicted / measured - 1), one per figure: with ``efficiency``, or (None) each figure's
    engine's shipped one (kvbudget.speed.efficiency.efficiency_for)."""
    from kvbudget.speed.efficiency import efficiency_for

    return [predict(p, efficiency or efficiency_for(p.figure.request.engine)) / p.figure.value - 1 for p in prepared]


def _loss(prepared: list[Prepared], efficiency: Efficiency) -> float:
    """Mean over the kinds present of each kind's mean squared log error (a kind with few figures counts as much
    as one with many)."""
    by_kind: dict[str, list[float]] = {}
    for p in prepared:
        by_kind.setdefault(p.figure.kind, []).append(math.log(predict(p, efficiency) / p.figure.value) ** 2)
    return statistics.fmean(statistics.fmean(v) for v in by_kind.values())


def fit(
    prepared: list[Prepared],
    start: Efficiency,
    rounds: int = 6,
    steps: int = 24,
    names: tuple[str, ...] = PARAMETERS,
) -> Efficiency:
    """Efficiencies minimizing the mean squared log error on ``prepared`` (coordinate descent, log grids), searching
    the parameters ``names`` (the others kept as in ``start``)."""
    best, best_loss = start, _loss(prepared, start)
    for _ in range(rounds):
        for name in names:
            low, high = BOUNDS[name]
            for i in range(steps + 1):
                value = low * (high / low) ** (i / steps)
                trial = replace(best, **{name: value})
                loss = _loss(prepared, trial)
                if loss < best_loss:
                    best, best_loss = trial, loss
    return best


def fit_from(
    prepared: list[Prepared], starts: list[Efficiency], rounds: int = 4, names: tuple[str, ...] = PARAMETERS
) -> Efficiency:
    """``fit`` from each of ``starts``, the one of least loss: coordinate descent stops at the optimum nearest its
    start (SGLang's five from TensorRT-LLM's values stopped at a bf16 share of 0.47, from its own at 0.69, a
    lower loss)."""
    fits = [fit(prepared, start, rounds=rounds, names=names) for start in starts]
    return min(fits, key=lambda e: _loss(prepared, e))


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
