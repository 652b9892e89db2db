"""A load-test result's speeds (``kvbudget loadtest --json``) as ``MeasuredSpeeds`` (simulate/measured.py's doc says
what they hold and how the simulator charges them): the clean ``speeds`` of a result of this version, several
results fitted once over the union of their samples (else their figures averaged), or an older result's levels."""

from __future__ import annotations

import math
from dataclasses import replace

from kvbudget.errors import InputError
from kvbudget.simulate.measured import HIGHEST, KNOWN_ENGINES, LOWEST, MAX_LEVELS, MeasuredSpeeds
from kvbudget.simulate.measured_sample import Sample, read_sample


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _p50(level: dict[str, object], key: str, source: str) -> float | None:
    figure = level.get(key)
    value = figure.get("p50") if isinstance(figure, dict) else None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        return None
    if not LOWEST <= value <= HIGHEST:
        raise InputError(
            f"--speed-from {source}: a level's {key} p50 of {value:.3g} is not a measured speed "
            f"({LOWEST:g}-{HIGHEST:g} tokens/s); give the kvbudget loadtest --json result as written"
        )
    return float(value)


# ({running: (iteration s, gaps)}, prefill tokens/s, requests, (a, b, c) of the prefill fit or None, the decode fit,
# the result's sample (its clean gaps and prefill rows, kvbudget.measure.loadtest.speeds) or None, whether its
# prefill fit took each request's wait for the running batch out: ``batch_wait``)
Figures = tuple[
    dict[int, tuple[float, int]],
    float,
    int,
    tuple[float, float, float] | None,
    tuple[float, float, float] | None,
    Sample | None,
    bool,
]


def _seconds(value: object, what: str, source: str, *, zero: bool = False) -> float | None:
    """A measured time in seconds, or None when absent; a figure no load test measures is an error."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    if not math.isfinite(value) or not (value >= 0 if zero else value > 0) or value > 1 / LOWEST:
        raise InputError(
            f"--speed-from {source}: speeds.{what} of {value!r} is not a measured time (0-{1 / LOWEST:g} s); "
            "give the kvbudget loadtest --json result as written"
        )
    return float(value)


def _clean(doc: object, source: str) -> Figures | None:
    """The result's ``speeds`` (simulate/measured.py's doc), or None when it has none usable (then the levels'
    figures)."""
    speeds = doc.get("speeds") if isinstance(doc, dict) else None
    if not isinstance(speeds, dict):
        return None
    return _figures(speeds, source)


def _figures(speeds: dict[str, object], source: str) -> Figures | None:
    rate, requests = speeds.get("prefill_tokens_per_s"), speeds.get("prefill_requests")
    rows = speeds.get("decode_iterations")
    rows = rows if isinstance(rows, list) else []
    if len(rows) > MAX_LEVELS:
        raise InputError(
            f"--speed-from {source}: {len(rows):,} decode rows, more than a load test measures ({MAX_LEVELS:,}); "
            "give the kvbudget loadtest --json result as written"
        )
    points: dict[int, tuple[float, int]] = {}
    for row in rows:
        if not isinstance(row, dict):
            continue
        running, gaps = row.get("running"), row.get("gaps")
        seconds = _seconds(row.get("iteration_s"), "decode_iterations.iteration_s", source)
        if isinstance(running, int) and not isinstance(running, bool) and 1 <= running <= 10**7 and seconds:
            points[running] = (seconds, gaps if isinstance(gaps, int) and 0 < gaps <= 10**9 else 1)
    if not points or not isinstance(rate, (int, float)) or isinstance(rate, bool) or not rate > 0:
        return None
    if not LOWEST <= rate <= HIGHEST:
        raise InputError(
            f"--speed-from {source}: speeds.prefill_tokens_per_s of {rate:.3g} is not a measured speed "
            f"({LOWEST:g}-{HIGHEST:g} tokens/s); give the kvbudget loadtest --json result as written"
        )
    a = _seconds(speeds.get("prefill_s_per_token"), "prefill_s_per_token", source, zero=True)
    b = _seconds(speeds.get("prefill_s_per_token_context"), "prefill_s_per_token_context", source, zero=True)
    c = _seconds(speeds.get("first_token_overhead_s"), "first_token_overhead_s", source, zero=True) or 0.0
    # a = b = 0 is a fit too: the prefill a fixed cost c a request (measure/loadtest/speeds.py, ``prefill_model``)
    fit = (a, b, c) if a is not None and b is not None else None
    decode = speeds.get("decode_fit")
    names = ("s_per_iteration", "s_per_session", "s_per_token_held")
    terms = (
        [_seconds(decode.get(k), f"decode_fit.{k}", source, zero=True) for k in names]
        if isinstance(decode, dict)
        else []
    )
    c0, c1, c2 = terms if len(terms) == 3 else (None, None, None)
    line = (c0, c1, c2) if c0 is not None and c1 is not None and c2 is not None else None
    count = requests if isinstance(requests, int) and not isinstance(requests, bool) and 0 < requests <= 10**9 else 1
    waited = speeds.get("batch_wait") is True
    return points, float(rate), count, fit, line, read_sample(speeds.get("sample"), source), waited


def _pooled(figures: list[Figures], source: str) -> MeasuredSpeeds:
    """Several results' speeds as one: each concurrency's iteration the mean of the results' means weighted by
    their clean gaps, the fits weighted by the requests (prefill) or the clean gaps (decode) they were fitted over."""
    seconds: dict[int, float] = {}
    weights: dict[int, int] = {}
    for rows, *_ in figures:
        for running, (t, n) in rows.items():
            seconds[running] = seconds.get(running, 0.0) + t * n
            weights[running] = weights.get(running, 0) + n
    requests = sum(f[2] for f in figures)
    rate = sum(f[1] * f[2] for f in figures) / requests
    points = tuple((k, weights[k] / seconds[k]) for k in sorted(seconds))
    fits = [(f[3], f[2]) for f in figures if f[3] is not None]
    a: float | None = None
    b = c = 0.0
    if len(fits) == len(figures):  # every result has the prefill fit (else the rate alone, for all)
        a, b, c = (sum(fit[i] * n for fit, n in fits) / requests for i in range(3))
    lines = [(f[4], sum(n for _, n in f[0].values())) for f in figures if f[4] is not None]
    decode = None
    if len(lines) == len(figures):  # every result has the fit: weighted by their clean gaps
        total = sum(n for _, n in lines)
        c0, c1, c2 = (sum(line[i] * n for line, n in lines) / total for i in range(3))
        decode = (c0, c1, c2)
    return MeasuredSpeeds(
        source,
        rate,
        points,
        clean=True,
        prefill_per_token=a,
        prefill_per_context=b,
        first_token_s=c,
        decode_fit=decode,
        batch_wait=all(f[6] for f in figures),
    )


def speeds_of(doc: object, source: str) -> MeasuredSpeeds:
    """The measured speeds of a load-test document (``kvbudget loadtest --json``)."""
    return speeds_of_all([(doc, source)])


def speeds_of_all(docs: list[tuple[object, str]]) -> MeasuredSpeeds:
    """The measured speeds of one or more load-test documents (``(document, name)``), pooled. Pooled results must
    name the same server engine and served model (they measured one deployment)."""
    source = ", ".join(name for _, name in docs)
    servers = {_server(doc) for doc, _ in docs}
    if len(servers) > 1:
        raise InputError(
            f"--speed-from {source}: the results measured different servers ({', '.join(sorted(map(str, servers)))}); "
            "pool only load tests of one deployment"
        )
    engine, served = servers.pop()
    figures = [_clean(doc, name) for doc, name in docs]
    clean = [f for f in figures if f is not None]
    if len(clean) == len(figures):
        samples = [f[5] for f in clean if f[5] is not None]
        if len(clean) > 1 and len(samples) == len(clean):  # one fit over the union (speeds.py, ``sample``)
            from kvbudget.measure.loadtest.speeds import refit

            waited = all(f[6] for f in clean)  # rows of results from before the wait hold 0: then none is taken
            union = refit([g for s in samples for g in s[0]], [p for s in samples for p in s[1]], batch_wait=waited)
            once = _figures(union, source)
            clean = [once] if once is not None else clean
        return replace(_pooled(clean, source), engine=engine, served=served)
    points: dict[int, float] = {}
    prefill: list[float] = []
    for doc, name in docs:
        levels = doc.get("levels") if isinstance(doc, dict) else None
        if not isinstance(levels, list):
            raise InputError(f"--speed-from {name}: not a kvbudget loadtest --json result (no levels)")
        if len(levels) > MAX_LEVELS:
            raise InputError(
                f"--speed-from {name}: {len(levels):,} levels, more than a load test's ramp holds ({MAX_LEVELS:,}); "
                "give the kvbudget loadtest --json result as written"
            )
        for level in levels:
            sessions = level.get("sessions") if isinstance(level, dict) else None
            if not isinstance(level, dict) or not isinstance(sessions, int) or isinstance(sessions, bool):
                continue
            if not 1 <= sessions <= 10**7:  # a level of no session measured nothing
                continue
            decode = _p50(level, "decode_tokens_per_s", name)
            if decode is not None:
                points[sessions] = decode
            rate = _p50(level, "prefill_tokens_per_s", name)
            if rate is not None:
                prefill.append(rate)
    if not points or not prefill:
        raise InputError(
            f"--speed-from {source}: the load test measured no decode or prefill speed per level "
            "(a result of kvbudget loadtest from this version, with completed requests, is needed)"
        )
    return MeasuredSpeeds(source, _median(prefill), tuple(sorted(points.items())), engine=engine, served=served)


def _server(doc: object) -> tuple[str | None, str | None]:
    """(engine, served model) the result names: an engine kvbudget plans for, else None; the model as reported."""
    server = doc.get("server") if isinstance(doc, dict) else None
    server = server if isinstance(server, dict) else {}
    engine, served = server.get("engine"), server.get("model")
    return (
        engine if engine in KNOWN_ENGINES else None,
        served.strip() if isinstance(served, str) and served.strip() else None,
    )
