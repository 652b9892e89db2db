"""Session lengths from real traces for the report: what ``kvbudget trace stats FILE... --model M --json``
prints (the session-peak percentiles and the cap analysis), and the CDF of session peaks behind them.

A session's **peak** is its largest context (prompt + output of a step), as ``workload.stats`` defines it;
sub-agents are sessions of their own. The CDF's points are (tokens, share of sessions whose peak is at
or below them), one per distinct peak, thinned to at most ``MAX_POINTS`` by nearest rank.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from kvbudget.errors import TraceError
from kvbudget.plan.caps import cap_analysis
from kvbudget.plan.plan import PlanInputs
from kvbudget.report.data import TraceSessions
from kvbudget.workload.record import BadRow, StepRecord
from kvbudget.workload.stats import trace_stats

MAX_POINTS = 240


def session_peaks(records: Iterable[StepRecord]) -> list[int]:
    """Each session's largest context, with the same session rules as ``trace_stats`` (a record marked
    ``final`` closes its session; a later record with the same id starts a new one)."""
    open_peaks: dict[str, int] = {}
    peaks: list[int] = []
    for r in records:
        context = r.prompt_tokens + r.output_tokens
        peak = max(open_peaks.pop(r.session, 0), context)
        if r.final:
            peaks.append(peak)
        else:
            open_peaks[r.session] = peak
    peaks.extend(open_peaks.values())
    return peaks


def cdf_points(peaks: Sequence[int], max_points: int = MAX_POINTS) -> tuple[tuple[int, float], ...]:
    """(tokens, share at or below) at each distinct peak; past ``max_points`` distinct values, the values at
    evenly spaced nearest ranks (the last point is always the maximum, share 1)."""
    ordered = sorted(peaks)
    n = len(ordered)
    if not n:
        return ()
    last: dict[int, int] = {}
    for rank, value in enumerate(ordered, 1):
        last[value] = rank  # the highest rank of each value: the CDF's height just past it
    if len(last) > max_points:
        ranks = sorted({max(1, math.ceil(k * n / max_points)) for k in range(1, max_points + 1)})
        last = {ordered[r - 1]: last[ordered[r - 1]] for r in ranks}
    return tuple((value, round(rank / n, 6)) for value, rank in sorted(last.items()))


def trace_sessions(
    files: Sequence[str],
    inputs: PlanInputs,
    *,
    fmt: str | None = None,
    strict: bool = False,
    span_files: bool = False,
) -> TraceSessions:
    """The traces' session lengths read against the deployment ``inputs`` (its cap is the one in use)."""
    from kvbudget.workload.traces import read_records

    bad: list[BadRow] = []
    records = list(read_records(files, fmt=fmt, strict=strict, bad_rows=bad, span_files=span_files))
    stats = trace_stats(records, len(bad))
    p99 = stats.session_peak_tokens.p99
    if stats.steps == 0 or p99 is None:
        raise TraceError(f"--trace: no usable steps in {', '.join(files)}; there is no session length to read")
    analysis = cap_analysis(int(p99), inputs, inputs.context, stats.session_peak_tokens.count)
    peaks = session_peaks(records)
    return TraceSessions(
        files=tuple(files),
        steps=stats.steps,
        bad_rows=len(bad),
        peaks=stats.session_peak_tokens.to_json(),
        cap=analysis.to_json(),
        p99_tokens=int(p99),
        recommended_cap=analysis.recommended,
        cdf=cdf_points(peaks),
        sessions=len(peaks),
        over_cap=sum(1 for p in peaks if p > inputs.context),
        window=analysis.window,
    )
