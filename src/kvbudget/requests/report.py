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
    measured on the deployment; ``units`` of the rendered figures."""

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
