"""The sample a load-test result carries for pooling (``speeds.sample``, kvbudget.measure.loadtest.speeds): its
clean decode gaps and its requests' prefill rows, read and bounded for ``--speed-from`` (kvbudget.simulate.measured
fits several results once over the union of their samples)."""

from __future__ import annotations

import math

from kvbudget.errors import InputError

SAMPLE_ROWS = 4000  # rows of each kind a result's sample holds (kvbudget.measure.loadtest.speeds.SAMPLE_ROWS)
MAX_S = 1000.0  # a gap or a time to first token longer than this is not a measurement (simulate/measured.py)

Sample = tuple[list[tuple[int, int, float]], list[tuple[int, int, float, float, float, int, float, float]]]


def _time(value: object, what: str, source: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and 0 < value <= MAX_S:
        return float(value)
    raise InputError(
        f"--speed-from {source}: speeds.sample.{what} of {value!r} is not a measured time (0-{MAX_S:g} s); "
        "give the kvbudget loadtest --json result as written"
    )


def _count(value: object, what: str, source: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 10**9:
        raise InputError(
            f"--speed-from {source}: speeds.sample.{what} of {value!r} is not a count (0-10^9); give the kvbudget "
            "loadtest --json result as written"
        )
    return value


def read_sample(sample: object, source: str) -> Sample | None:
    """The result's clean gaps ``[sessions, tokens held, s]`` and prefill rows ``[new, cached, batch tokens, batch
    work, TTFT s, decoding, s waited for the running batch]`` (kvbudget.measure.loadtest.speeds ``sample``); None
    in a result from before them. A row of six (a result from before the wait was measured) waited 0: its wait
    stays in the fit's constant, as it was."""
    if not isinstance(sample, dict):
        return None
    gaps, prefills = sample.get("gaps"), sample.get("prefills")
    if not isinstance(gaps, list) or not isinstance(prefills, list):
        return None
    if max(len(gaps), len(prefills)) > SAMPLE_ROWS:
        raise InputError(
            f"--speed-from {source}: a sample of {max(len(gaps), len(prefills)):,} rows, more than a load test "
            f"keeps ({SAMPLE_ROWS:,}); give the kvbudget loadtest --json result as written"
        )
    out_gaps: list[tuple[int, int, float]] = []
    for row in gaps:
        if not isinstance(row, list) or len(row) != 3:
            raise InputError(f"--speed-from {source}: speeds.sample.gaps rows are [sessions, tokens held, seconds]")
        seconds = _time(row[2], "gaps seconds", source)
        running = _count(row[0], "gaps sessions", source)
        if running >= 1:
            out_gaps.append((running, _count(row[1], "gaps tokens held", source), seconds))
    out_prefills: list[tuple[int, int, float, float, float, int, float, float]] = []
    for row in prefills:
        if not isinstance(row, list) or len(row) not in (6, 7, 8):
            raise InputError(
                f"--speed-from {source}: speeds.sample.prefills rows are [new, cached, batch tokens, batch work, "
                "time to first token s, sessions decoding, s waited for the running batch, server's prompt s or -1]"
            )
        ttft = _time(row[4], "prefills time to first token", source)
        waited = 0.0
        if len(row) >= 7:
            waited = float(row[6]) if isinstance(row[6], (int, float)) and not isinstance(row[6], bool) else -1.0
            if not 0 <= waited <= ttft:
                raise InputError(
                    f"--speed-from {source}: speeds.sample.prefills wait of {row[6]!r} is not a wait within its "
                    "time to first token; give the kvbudget loadtest --json result as written"
                )
        served = -1.0  # the server's own prompt time: -1 not given (a row of 6 or 7, or a server without timings)
        if len(row) == 8:
            served = float(row[7]) if isinstance(row[7], (int, float)) and not isinstance(row[7], bool) else -2.0
            if not (served == -1 or 0 <= served <= ttft - waited + 1e-5):  # rounded to the microsecond
                raise InputError(
                    f"--speed-from {source}: speeds.sample.prefills server time of {row[7]!r} is not -1 or a time "
                    "within its time to first token; give the kvbudget loadtest --json result as written"
                )
        work = [_number(v, "prefills work", source) for v in row[2:4]]
        new, cached = _count(row[0], "prefills new", source), _count(row[1], "prefills cached", source)
        if new >= 1:
            decoding = _count(row[5], "prefills decoding", source)
            out_prefills.append((new, cached, work[0], work[1], ttft, decoding, waited, served))
    return out_gaps, out_prefills


def _number(value: object, what: str, source: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 1e15:
        raise InputError(
            f"--speed-from {source}: speeds.sample.{what} of {value!r} is not a prompt's work (0-10^15 tokens^2); "
            "give the kvbudget loadtest --json result as written"
        )
    return float(value)
