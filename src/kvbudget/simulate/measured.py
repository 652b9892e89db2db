"""Speeds measured by a load test (``--speed-from RESULT.json``): what a real server did, for the simulator.

A ``kvbudget loadtest --json`` result holds, per concurrency level it held (docs/loadtest.md), the median
decode tokens/s per request (1 / the inter-token latency p50 the client's stream saw; the server's own
``timings`` without a stream) and the median prefill tokens/s (new prompt tokens over TTFT less one inter-token
gap: the prefill the simulator charges before a step's first iteration). From them:

* prefill: the median over the levels of each level's median prefill tokens/s, one prompt at a time;
* a decode iteration of ``running`` sessions takes ``1 / decode tokens/s`` of the level whose concurrency is
  ``running``, linear between the levels measured, the first level's below it, and past the last the last two
  levels' slope (never falling). A level's concurrency is its sessions: with short tool pauses each session has
  a request running most of the time.

A load test measured one deployment: the server's model and engine (``server`` in the result) must be the ones
planned (``check``, as measure/belong.py holds a log to its deployment); the result does not record the GPU,
the tensor-parallel size, the weights precision or the cache dtype, so those are the user's to keep the same
(``one_deployment`` refuses a sweep listing several of them). ``fits`` says whether a sweep's row is the
measured model and engine: ``size`` and ``compare --simulate`` use the measured speeds there and the roofline
elsewhere, saying so per row.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from kvbudget.errors import InputError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.model.spec import ModelSpec

KNOWN_ENGINES = ("vllm", "sglang", "llamacpp", "ollama", "trtllm")  # a server kvbudget can plan for


@dataclass(frozen=True)
class MeasuredSpeeds:
    """Prefill tokens/s and (concurrency, decode tokens/s per session) points from one load test."""

    source: str
    prefill_tokens_per_s: float
    points: tuple[tuple[int, float], ...]  # ascending concurrency
    engine: str | None = None  # the server's engine as the load test identified it (None: not one kvbudget plans)
    served: str | None = None  # the model name the server reported

    def check(self, engine: str, spec: ModelSpec, model: str) -> None:
        """InputError when the load test ran another engine, or served a model the catalog knows whose geometry
        is not ``spec``'s (measure/belong.py)."""
        from kvbudget.measure import belong

        if self.engine is not None:
            belong.check_engine(self.engine, engine, self.source, "--speed-from")
        belong.check_served_model(self.served, spec, model, self.source, "--speed-from")

    def fits(self, engine: str, spec: ModelSpec, model: str) -> bool:
        """Whether the load test measured ``model`` on ``engine`` (``check`` passes)."""
        try:
            self.check(engine, spec, model)
        except InputError:
            return False
        return True

    @property
    def label(self) -> str:
        return f"measured ({self.source})"

    @property
    def levels(self) -> tuple[int, ...]:
        return tuple(n for n, _ in self.points)

    @property
    def prefill_basis(self) -> str:
        return f"load test {self.source}: median prefill {self.prefill_tokens_per_s:,.0f} tokens/s over its levels"

    @property
    def decode_basis(self) -> str:
        rates = ", ".join(f"{rate:,.1f} at {n}" for n, rate in self.points)
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

    def step(self, running: int, kv_bytes: int) -> float:
        """The simulator's hook: the iteration of ``running`` sessions (cache bytes are in the measurement)."""
        return self.iteration_s(max(1, running))


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


MAX_LEVELS = 1000  # a load test's ramp steps one level at a time; more is not one of its results
LOWEST, HIGHEST = 1e-3, 1e9  # tokens/s a level can have measured: outside, the figure is not a measurement


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


def speeds_of(doc: object, source: str) -> MeasuredSpeeds:
    """The measured speeds of a load-test document (``kvbudget loadtest --json``)."""
    levels = doc.get("levels") if isinstance(doc, dict) else None
    if not isinstance(levels, list):
        raise InputError(f"--speed-from {source}: not a kvbudget loadtest --json result (no levels)")
    if len(levels) > MAX_LEVELS:
        raise InputError(
            f"--speed-from {source}: {len(levels):,} levels, more than a load test's ramp holds ({MAX_LEVELS:,}); "
            "give the kvbudget loadtest --json result as written"
        )
    points: dict[int, float] = {}
    prefill: list[float] = []
    for level in levels:
        sessions = level.get("sessions") if isinstance(level, dict) else None
        if not isinstance(level, dict) or not isinstance(sessions, int) or isinstance(sessions, bool):
            continue
        if not 1 <= sessions <= 10**7:  # a level of no session measured nothing
            continue
        decode = _p50(level, "decode_tokens_per_s", source)
        if decode is not None:
            points[sessions] = decode
        rate = _p50(level, "prefill_tokens_per_s", source)
        if rate is not None:
            prefill.append(rate)
    if not points or not prefill:
        raise InputError(
            f"--speed-from {source}: the load test measured no decode or prefill speed per level "
            "(a result of kvbudget loadtest from this version, with completed requests, is needed)"
        )
    server = doc.get("server") if isinstance(doc, dict) else None
    server = server if isinstance(server, dict) else {}
    engine, served = server.get("engine"), server.get("model")
    return MeasuredSpeeds(
        source,
        _median(prefill),
        tuple(sorted(points.items())),
        engine if engine in KNOWN_ENGINES else None,
        served.strip() if isinstance(served, str) and served.strip() else None,
    )


def measured_speeds(path: str) -> MeasuredSpeeds:
    """The measured speeds in the load-test result at ``path``."""
    from kvbudget.safeio import loads_json, read_text

    text = read_text(Path(path), "--speed-from")
    return speeds_of(loads_json(text, path, "--speed-from"), Path(path).name)


def one_deployment(measured: MeasuredSpeeds, lists: dict[str, tuple[object, ...]], engines: int, models: int) -> None:
    """Refuse a sweep the load test cannot stand for: several GPUs, tp sizes, weights or cache dtypes (the result
    records none of them), or several engines / models when the result does not say which one it measured."""
    several = [name for name, values in lists.items() if len(set(values)) > 1]
    if several:
        raise InputError(
            f"--speed-from {measured.source}: a load test measured one deployment, and its result does not record "
            f"the {', '.join(several)}; list one of each, or drop --speed-from to size the sweep on the roofline"
        )
    if measured.engine is None and engines > 1:
        raise InputError(
            f"--speed-from {measured.source}: the result does not name a server engine kvbudget plans for, so it "
            "cannot say which of the engines listed it measured; list that one --engine"
        )
    if measured.served is None and models > 1:
        raise InputError(
            f"--speed-from {measured.source}: the result does not name the served model, so it cannot say which "
            "of the models listed it measured; list that one model"
        )
