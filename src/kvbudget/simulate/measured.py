"""Speeds measured by a load test (``--speed-from RESULT.json``): what a real server did, for the simulator.

A result of this version holds ``speeds`` (kvbudget.measure.loadtest.speeds): the decode iteration seconds per
number of sessions decoding, from the stream gaps that held one decode iteration and nothing else, and the
prefill tokens/s of the prompts that ran alone, less the iteration that gives their first token. Those are what
the simulator charges (a prefill backlog during which decode stands still, then iterations of the sessions
running), so another load test's interleaved prompts are charged once, by the simulator, not folded into the
decode speed as well. The iteration of ``running`` sessions is interpolated between the measured counts as below.
Several results of this version are fitted once over the union of the samples they carry (their clean gaps and
prefill rows, ``sample``), so the fits span all their sessions and contexts; results without a sample (older ones)
are pooled by averaging their figures, weighted by the gaps and requests behind them.

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

A load test measured one deployment: the server's model and engine (``server`` in the result) must be the ones
planned (``check``, as measure/belong.py holds a log to its deployment); the result does not record the GPU,
the tensor-parallel size, the weights precision or the cache dtype, so those are the user's to keep the same
(``one_deployment`` refuses a sweep listing several of them). ``fits`` says whether a sweep's row is the
measured model and engine: ``size`` and ``compare --simulate`` use the measured speeds there and the roofline
elsewhere, saying so per row.

This module holds the record and reads the files (``measured_speeds``); a load-test result's document is read in
simulate/measured_loadtest.py, an engine's log in simulate/measured_log.py, a calibrate document in
simulate/measured_calibration.py.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from kvbudget.errors import InputError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.model.spec import ModelSpec

KNOWN_ENGINES = ("vllm", "sglang", "llamacpp", "ollama", "trtllm")  # a server kvbudget can plan for
MAX_FILES = 16  # results pooled by one --speed-from
READINGS_KEPT = 8  # --speed-from sources kept read (measured_speeds): a long-lived server answers from a few
MAX_LEVELS = 1000  # a load test's ramp steps one level at a time; more is not one of its results
LOWEST, HIGHEST = 1e-3, 1e9  # tokens/s a level can have measured: outside, the figure is not a measurement


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
    engine: str | None = None  # the server's engine as the load test identified it (None: not one kvbudget plans)
    served: str | None = None  # the model name the server reported
    origin: str = "load test"  # what measured it: a load test, an engine's log or a calibration of one
    bases: tuple[str, str] | None = None  # (prefill, decode) bases when not a load test's
    # the prefill fit took each request's wait for the batch running when it was sent out of its time to first
    # token (measure/loadtest/flow.py ``waited_s``): the simulator charges it (TimeModel.wait_iteration)
    batch_wait: bool = False

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
    def prefill_fixed(self) -> bool:
        """The prefill fit found no growth with the prompt's tokens: a fixed cost a request (``first_token_s``)."""
        return self.prefill_per_token is not None and self.prefill_per_token + self.prefill_per_context <= 0

    @property
    def label(self) -> str:
        return f"measured ({self.source})"

    @property
    def levels(self) -> tuple[int, ...]:
        return tuple(n for n, _ in self.points)

    @property
    def prefill_basis(self) -> str:
        if self.bases is not None:
            return self.bases[0]
        if self.prefill_fixed:
            return (
                f"load test {self.source}: prefill a fixed {self.first_token_s * 1e3:.3g} ms a request, which stalls "
                "no decode: the prompts' tokens explained none of the time to first token less one decode iteration "
                f"beyond it (fitted a = b = 0; {self.prefill_tokens_per_s:,.0f} tokens/s at its median request)"
            )
        if self.prefill_per_token is not None:
            return (
                f"load test {self.source}: prefill {self.prefill_per_token * 1e3:.3g} ms a token + "
                f"{self.prefill_per_context * 1e6:.3g} us a token per token of context "
                f"({self.prefill_tokens_per_s:,.0f} tokens/s at its median request) and {self.first_token_s * 1e3:.3g} "
                "ms a request, fitted to time to first token less "
                + ("its wait for the running batch (charged as it came) and " if self.batch_wait else "")
                + "one decode iteration"
            )
        return f"load test {self.source}: median prefill {self.prefill_tokens_per_s:,.0f} tokens/s over its levels"

    @property
    def decode_basis(self) -> str:
        if self.bases is not None:
            return self.bases[1]
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


def measured_speeds(path: str) -> MeasuredSpeeds:
    """The measured speeds in the load-test result at ``path`` (several, comma-separated: pooled), in one
    serving engine's log (simulate/measured_log.py), or in one ``calibrate --json`` document of such a log
    (simulate/measured_calibration.py).

    Read and fitted once per file contents: one answer asks from several of its parts (report: the plan, the sizing
    answer and the simulation; size and compare: per row), and each part gets the first reading while the files
    keep their size and modification time (``_fingerprint``). A file that cannot be stat'ed is read, so its error
    is the reader's. ``MeasuredSpeeds`` is frozen: the parts share one."""
    key = _fingerprint(path)
    return _read_once(path, key) if key is not None else read_measured(path)


def _fingerprint(path: str) -> tuple[tuple[str, int, int], ...] | None:
    """Each named file's (absolute path, bytes, modification time in ns); None when one cannot be stat'ed."""
    key = []
    for one in (Path(p.strip()) for p in path.split(",") if p.strip()):
        try:
            st = one.stat()
        except (OSError, ValueError):
            return None
        key.append((str(one.absolute()), st.st_size, st.st_mtime_ns))
    return tuple(key)


@functools.lru_cache(maxsize=READINGS_KEPT)
def _read_once(path: str, key: tuple[tuple[str, int, int], ...]) -> MeasuredSpeeds:
    """``read_measured`` memoised by the files' fingerprint (``key``); an InputError is raised again, not kept."""
    del key  # the cache's key alone: the reading is of the path as given
    return read_measured(path)


def read_measured(path: str) -> MeasuredSpeeds:
    """``measured_speeds`` without the memo: the files read and fitted now (tests count these readings)."""
    from kvbudget.safeio import loads_json, read_text
    from kvbudget.simulate.measured_log import is_log, log_speeds

    names = [p.strip() for p in path.split(",") if p.strip()]
    if not names:
        raise InputError("--speed-from: name a kvbudget loadtest --json result (several: comma-separated)")
    if len(names) > MAX_FILES:
        raise InputError(f"--speed-from: {len(names)} results; pool at most {MAX_FILES} load tests of one deployment")
    logs = [one for one in names if is_log(Path(one))]
    if logs and len(names) > 1:
        raise InputError(
            f"--speed-from: {Path(logs[0]).name} is an engine log, and a log is not pooled; give that one log alone, "
            "or load-test results only"
        )
    if logs:
        return log_speeds(Path(logs[0]))
    docs = [(loads_json(read_text(Path(one), "--speed-from"), one, "--speed-from"), Path(one).name) for one in names]
    from kvbudget.simulate.measured_calibration import is_calibration, speeds_of_calibration
    from kvbudget.simulate.measured_loadtest import speeds_of_all

    calibrations = [name for doc, name in docs if is_calibration(doc)]
    if calibrations and len(docs) > 1:
        raise InputError(
            f"--speed-from: {calibrations[0]} is a calibrate document, and its log's speeds are not pooled; give "
            "that one document alone, or load-test results only"
        )
    if calibrations:
        return speeds_of_calibration(docs[0][0], docs[0][1])
    return speeds_of_all(docs)


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
