"""Speeds measured by a load test (``--speed-from RESULT.json``): what a real server did, for the simulator.

A result of this version holds ``speeds`` (kvbudget.measure.loadtest.speeds): the decode iteration seconds per
number of sessions decoding, from the stream gaps that held one decode iteration and nothing else, and the
prefill tokens/s of the prompts that ran alone, less the iteration that gives their first token. Those are what
the simulator charges (a prefill backlog during which decode stands still, then iterations of the sessions
running), so another load test's interleaved prompts are charged once, by the simulator, not folded into the
decode speed as well. The iteration of ``running`` sessions is interpolated between the measured counts as below.

An older result (or one with no clean gap: a server that streams several tokens per chunk) holds, per concurrency
level it held (docs/loadtest.md), the median decode tokens/s per request (1 / the inter-token latency p50 the
client's stream saw; the server's own ``timings`` without a stream) and the median prefill tokens/s (new prompt
tokens over TTFT less one inter-token gap: the prefill the simulator charges before a step's first iteration). From
them:

* prefill: the median over the levels of each level's median prefill tokens/s, one prompt at a time;
* a decode iteration of ``running`` sessions takes ``1 / decode tokens/s`` of the level whose concurrency is
  ``running``, linear between the levels measured, the first level's below it, and past the last the last two
  levels' slope (never falling). A level's concurrency is its sessions: with short tool pauses each session has
  a request running most of the time.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from kvbudget.errors import InputError


@dataclass(frozen=True)
class MeasuredSpeeds:
    """Prefill tokens/s and (concurrency, decode tokens/s per session) points from one load test."""

    source: str
    prefill_tokens_per_s: float
    points: tuple[tuple[int, float], ...]  # ascending concurrency
    clean: bool = False  # from the clean gaps and the prefill fit (``speeds``), not the levels' client figures
    prefill_per_token: float | None = None  # the fit's a: seconds a prompt token (measure/loadtest/speeds.py)
    prefill_per_context: float = 0.0  # its b: seconds a prompt token per token of context it reads on average
    first_token_s: float = 0.0  # its c: what a request waits that holds no batch (added to TTFT, stalls nothing)
    # (c0, c1, c2): a decode iteration of k sessions holding t tokens takes c0 + c1 k + c2 t seconds, used by
    # ``step`` when ``bytes_per_token`` says how the simulator's cache bytes count tokens
    decode_fit: tuple[float, float, float] | None = None
    bytes_per_token: float | None = None

    @property
    def levels(self) -> tuple[int, ...]:
        return tuple(n for n, _ in self.points)

    @property
    def prefill_basis(self) -> str:
        if self.prefill_per_token is not None:
            return (
                f"load test {self.source}: prefill {self.prefill_per_token * 1e3:.3g} ms a token + "
                f"{self.prefill_per_context * 1e6:.3g} us a token per token of context "
                f"({self.prefill_tokens_per_s:,.0f} tokens/s at its median request) and {self.first_token_s * 1e3:.3g} "
                "ms a request, fitted to time to first token less one decode iteration"
            )
        return f"load test {self.source}: median prefill {self.prefill_tokens_per_s:,.0f} tokens/s over its levels"

    @property
    def decode_basis(self) -> str:
        rates = ", ".join(f"{rate:,.1f} at {n}" for n, rate in self.points)
        if self.clean:
            return (
                f"load test {self.source}: decode tokens/s per session by sessions decoding, from clean stream gaps "
                f"({rates}), interpolated"
            )
        return f"load test {self.source}: decode tokens/s per session at each concurrency ({rates}), interpolated"

    def iteration_s(self, running: int) -> float:
        """Seconds of one decode iteration with ``running`` sessions decoding (module doc)."""
        pts = [(n, 1 / rate) for n, rate in self.points]
        if running <= pts[0][0] or len(pts) == 1:
            return pts[0][1] if running <= pts[0][0] else max(p[1] for p in pts)
        for (n0, t0), (n1, t1) in pairwise(pts):
            if running <= n1:
                return t0 + (t1 - t0) * (running - n0) / (n1 - n0)
        (n0, t0), (n1, t1) = pts[-2], pts[-1]
        slope = max(0.0, (t1 - t0) / (n1 - n0))
        return t1 + slope * (running - n1)

    def prefill_s(self, new: int, cached: int) -> float:
        """Seconds to prefill ``new`` tokens after ``cached`` ones: the fit when there is one, else the rate."""
        if self.prefill_per_token is None:
            return new / self.prefill_tokens_per_s
        return new * (self.prefill_per_token + self.prefill_per_context * (cached + new / 2))

    def step(self, running: int, kv_bytes: int) -> float:
        """The simulator's hook: the iteration of ``running`` sessions whose caches hold ``kv_bytes``: the fit over
        sessions and tokens held when the bytes can be counted in tokens, else the curve by sessions alone."""
        fit, per_token = self.decode_fit, self.bytes_per_token
        if fit is not None and per_token:
            return fit[0] + fit[1] * max(1, running) + fit[2] * kv_bytes / per_token
        return self.iteration_s(max(1, running))


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _p50(level: dict[str, object], key: str) -> float | None:
    figure = level.get(key)
    value = figure.get("p50") if isinstance(figure, dict) else None
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


# ({running: (iteration s, gaps)}, prefill tokens/s, requests, (a, b, c) of the prefill fit or None, the decode fit)
Figures = tuple[
    dict[int, tuple[float, int]], float, int, tuple[float, float, float] | None, tuple[float, float, float] | None
]


def _clean(doc: object) -> Figures | None:
    """The result's ``speeds`` (module doc), or None when it has none usable (then the levels' figures)."""
    speeds = doc.get("speeds") if isinstance(doc, dict) else None
    if not isinstance(speeds, dict):
        return None
    rate, requests = speeds.get("prefill_tokens_per_s"), speeds.get("prefill_requests")
    rows = speeds.get("decode_iterations")
    points: dict[int, tuple[float, int]] = {}
    for row in rows if isinstance(rows, list) else ():
        if not isinstance(row, dict):
            continue
        running, seconds, gaps = row.get("running"), row.get("iteration_s"), row.get("gaps")
        if isinstance(running, int) and running > 0 and isinstance(seconds, (int, float)) and seconds > 0:
            points[running] = (float(seconds), gaps if isinstance(gaps, int) and gaps > 0 else 1)
    if not points or not isinstance(rate, (int, float)) or not rate > 0:
        return None
    a, b = speeds.get("prefill_s_per_token"), speeds.get("prefill_s_per_token_context")
    c = speeds.get("first_token_overhead_s")
    c = float(c) if isinstance(c, (int, float)) and c >= 0 else 0.0
    fit = None
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a >= 0 and b >= 0 and a + b > 0:
        fit = (float(a), float(b), c)
    decode = speeds.get("decode_fit")
    names = ("s_per_iteration", "s_per_session", "s_per_token_held")
    terms = [decode.get(k) for k in names] if isinstance(decode, dict) else []
    line = None
    if len(terms) == 3 and all(isinstance(t, (int, float)) and t >= 0 for t in terms):
        line = (float(terms[0]), float(terms[1]), float(terms[2]))  # type: ignore[arg-type]
    return points, float(rate), requests if isinstance(requests, int) and requests > 0 else 1, fit, line


def _pooled(figures: list[Figures], source: str) -> MeasuredSpeeds:
    """Several results' speeds as one: each concurrency's iteration the mean of the results' means weighted by
    their clean gaps, the fits weighted by the requests (prefill) or the clean gaps (decode) they were fitted over."""
    seconds: dict[int, float] = {}
    weights: dict[int, int] = {}
    for rows, _, _, _, _ in figures:
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
    )


def speeds_of(doc: object, source: str) -> MeasuredSpeeds:
    """The measured speeds of a load-test document (``kvbudget loadtest --json``)."""
    return speeds_of_all([(doc, source)])


def speeds_of_all(docs: list[tuple[object, str]]) -> MeasuredSpeeds:
    """The measured speeds of one or more load-test documents (``(document, name)``), pooled."""
    source = ", ".join(name for _, name in docs)
    figures = [_clean(doc) for doc, _ in docs]
    if all(f is not None for f in figures):
        return _pooled([f for f in figures if f is not None], source)
    points: dict[int, float] = {}
    prefill: list[float] = []
    for doc, name in docs:
        levels = doc.get("levels") if isinstance(doc, dict) else None
        if not isinstance(levels, list):
            raise InputError(f"--speed-from {name}: not a kvbudget loadtest --json result (no levels)")
        for level in levels:
            if not isinstance(level, dict) or not isinstance(level.get("sessions"), int):
                continue
            decode = _p50(level, "decode_tokens_per_s")
            if decode is not None:
                points[int(level["sessions"])] = decode
            rate = _p50(level, "prefill_tokens_per_s")
            if rate is not None:
                prefill.append(rate)
    if not points or not prefill:
        raise InputError(
            f"--speed-from {source}: the load test measured no decode or prefill speed per level "
            "(a result of kvbudget loadtest from this version, with completed requests, is needed)"
        )
    return MeasuredSpeeds(source, _median(prefill), tuple(sorted(points.items())))


def measured_speeds(path: str) -> MeasuredSpeeds:
    """The measured speeds in the load-test result at ``path`` (several, comma-separated: pooled)."""
    from kvbudget.safeio import loads_json, read_text

    docs: list[tuple[object, str]] = []
    for one in (p.strip() for p in path.split(",")):
        if one:
            docs.append((loads_json(read_text(Path(one), "--speed-from"), one, "--speed-from"), Path(one).name))
    if not docs:
        raise InputError("--speed-from: name a kvbudget loadtest --json result (several: comma-separated)")
    return speeds_of_all(docs)
