"""The report question: ``kvbudget report``, one deployment's plan, levers, traces, simulation and measurements."""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.requests.base import option
from kvbudget.requests.cost import UNITS
from kvbudget.requests.plan import PlanRequest


@dataclass(frozen=True, kw_only=True)
class ReportRequest(PlanRequest):
    """Everything ``plan`` takes, and: ``trace`` files for the session lengths (``trace stats``), a ``workload``
    to simulate (``simulate``'s defaults otherwise), ``loadtest`` results and engine start-up ``log`` files
    measured on the deployment; ``units`` of the rendered figures.

    ``isl``/``osl``: the request shape of the latency at the planned sessions (``kvbudget speed``'s defaults, or the
    ``workload``'s mean step). ``size``: also the sizing answer (``kvbudget size``) for the load ``sessions`` (peak,
    whole deployment) or ``rate`` (with ``workload``) within ``ttft``/``itl``, priced by ``price``/``prices``, over
    the report's own deployment on ``size_gpu`` and ``size_engine`` (default: its own GPU and engine)."""

    command = "report"
    trace: tuple[str, ...] | None = option(None, "text", many=True)
    trace_format: str | None = option(None, "text")
    strict: bool = option(False, "switch")
    sessions_span_files: bool = option(False, "switch")
    workload: str | None = option(None, "text")
    seed: int = option(0, "index")
    simulate_sessions: int | None = option(None, "sessions")
    search_sessions: int = option(2000, "index")
    bandwidth: float | None = option(None, "bandwidth")
    decode_rate: float | None = option(None, "positive")
    prefill_rate: float | None = option(None, "positive")
    loadtest: tuple[str, ...] | None = option(None, "text", many=True)
    log: tuple[str, ...] | None = option(None, "text", many=True)
    units: str = option("iec", "text", choices=UNITS)
    isl: int | None = option(None, "tokens")
    osl: int | None = option(None, "tokens")
    size: bool = option(False, "switch")
    size_gpu: tuple[str, ...] | None = option(None, "gpu", many=True)
    size_engine: tuple[str, ...] | None = option(None, "engine", many=True)
    rate: float | None = option(None, "per_second")
    ttft: float | None = option(None, "seconds")
    itl: float | None = option(None, "seconds")
    price: tuple[str, ...] | None = option(None, "text", many=True)
    prices: str | None = option(None, "text")
