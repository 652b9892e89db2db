"""From a trace-stats request to its answer: the traces' session statistics, the rows that could not be read, and
(for a deployment) what a cap does to those sessions (``kvbudget trace stats``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvbudget.errors import InputError, TraceError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.plan.caps import CapAnalysis
    from kvbudget.requests.trace import TraceStatsRequest
    from kvbudget.workload.record import BadRow
    from kvbudget.workload.stats import TraceStats

BAD_ROW_EXAMPLES = 20


@dataclass(frozen=True)
class TraceReport:
    """The statistics of some trace files, the bad rows skipped, and the cap analysis when a model was given."""

    stats: TraceStats
    bad_rows: tuple[BadRow, ...]
    files: int
    cap: CapAnalysis | None

    def to_dict(self) -> dict[str, object]:
        """The ``kvbudget trace stats --json`` document."""
        data = self.stats.to_json()
        data["bad_row_examples"] = [str(row) for row in self.bad_rows[:BAD_ROW_EXAMPLES]]
        if self.cap is not None:
            data["cap"] = self.cap.to_json()
        return data


def trace_report(request: TraceStatsRequest) -> TraceReport:
    """Read the request's traces into statistics, with the cap analysis when it names a model."""
    from kvbudget.requests.trace import PLAN_ONLY
    from kvbudget.workload.stats import trace_stats
    from kvbudget.workload.traces import read_records

    r = request
    if r.model is None:
        given = [f"--{name.replace('_', '-')}" for name in PLAN_ONLY if getattr(r, name) is not None]
        if given:
            raise InputError(f"{', '.join(given)} describe a deployment for the cap analysis; add --model M")
    bad: list[BadRow] = []
    records = read_records(list(r.files), fmt=r.format, strict=r.strict, bad_rows=bad, span_files=r.sessions_span_files)
    stats = trace_stats(records, 0)
    stats = replace(stats, bad_rows=len(bad))  # the bad rows are known once the records are consumed
    cap = _cap(r, stats) if r.model is not None else None
    return TraceReport(stats, tuple(bad), len(r.files), cap)


def _cap(r: TraceStatsRequest, stats: TraceStats) -> CapAnalysis:
    from kvbudget.plan.build import plan_inputs
    from kvbudget.plan.caps import cap_analysis
    from kvbudget.requests.base import narrowed
    from kvbudget.requests.plan import PlanRequest

    peak = stats.session_peak_tokens.p99
    if stats.steps == 0 or peak is None:
        raise TraceError("the traces have no usable steps; there is no session length to read a cap from")
    # plan_inputs needs some cap; cap_analysis replaces it with each cap it plans
    inputs, _ = plan_inputs(narrowed(PlanRequest, r, context=r.context or 1))
    return cap_analysis(int(peak), inputs, r.context, stats.session_peak_tokens.count)
