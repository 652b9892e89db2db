"""What ``kvbudget size`` holds a deployment to: the request shape its sessions send, the latency one replica gives
at each number of sessions it runs, and the concurrency an arrival rate brings (Little's law).

The latency at ``B`` sessions per replica is ``kvbudget speed``'s at concurrency ``B`` on one replica (the same
roofline and fitted efficiencies, speed/answer.py ``run_shape``): time to first token = the prompt's own prefill
+ one decode iteration at batch ``B``; inter-token latency = the cycle of ``B`` prefills and ``osl`` decode
iterations / ``osl`` (others' prefills included). Every one of the ``B`` sessions is counted as generating at
once (tool pauses not subtracted): the worst case of the concurrency, as the memory plan reserves the worst case
of the cap. Both grow with ``B``, so the largest ``B`` meeting the targets is found by bisection.

The targets mean what ``simulate``'s mean (simulate/targets.py: p99 TTFT and ITL per step). Without a workload
every request is the ``--isl``/``--osl`` shape, so its latency is every percentile's. With one, the steps differ
(a first prompt with the prefix, a large tool result), and the mean step says nothing of the p99: the steps of the
first ``STEP_SESSIONS`` sessions ``simulate`` draws (seed 0, its default run) are ranked by their own prefill time
on the row's speeds, and the step at the 99th percentile (nearest rank) is the one held to the targets: its TTFT
= its own prefill + one decode iteration + speed's wait for the others' prefills (speed/answer.py
``prefill_wait``, scaled by its own prefill as speed scales it); its ITL = the cycle with one of the ``B``
prefills that step's / ``osl``. The others' prefills and the decode iterations stay the mean step's.

With a load test's measured speeds (``--speed-from``, simulate/measured.py) the same arithmetic runs on what the
server did instead of the roofline: a prefill takes what the simulator charges for it
(``MeasuredSpeeds.prefill_s``: the load test's fit over new and cached tokens, else ``new / the measured prefill
tokens/s``), a decode iteration at ``B`` sessions ``1 / the measured decode tokens/s per session`` at concurrency
``B`` (interpolated between the levels, extended past the last by its slope).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from kvbudget.units import a_or_an

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.plan.cap_refusals import SessionLengths
    from kvbudget.simulate.measured import MeasuredSpeeds
    from kvbudget.speed.roofline import Roofline
    from kvbudget.workload.little import SessionTime
    from kvbudget.workload.model import Workload

QUANTILE = 0.99  # simulate's latency targets are p99 per step (simulate/targets.py, policies.Target.ttft_p99_s)
STEP_SESSIONS = 2000  # simulate's default --sessions: the steps of its default run (seed 0) are the sample


@dataclass(frozen=True)
class Shape:
    """One request as the latency model sees it: ``isl`` prompt tokens of which ``cached`` hit the prefix cache,
    ``osl`` output tokens; ``basis`` says where they come from."""

    isl: int
    cached: int
    osl: int
    basis: str
    # with a workload: every sampled step's (new, cached) tokens, ranked per row for the p99 step (module doc)
    steps: tuple[tuple[int, int], ...] = field(default=(), repr=False, compare=False)
    peak: tuple[int, int] | None = None  # the p99 step's (new, cached) on a row's speeds; None: the shape's own

    @property
    def new(self) -> int:
        return self.isl - self.cached

    @property
    def percentile(self) -> str:
        """What the targets hold: the p99 step, or every request (one shape: the mean is the p99)."""
        return "p99" if self.steps else "every request"


def given_shape(isl: int, osl: int, cap: int) -> Shape:
    """``--isl``/``--osl`` as given (no prefix cache), the prompt kept under the cap."""
    prompt = max(1, min(isl, cap - min(osl, cap - 1)))
    return Shape(prompt, 0, osl, f"--isl {isl:,} / --osl {osl:,} per request, no prefix-cache hits")


def workload_shape(workload: Workload, cap: int) -> Shape:
    """A workload's mean step: the mean prompt over a session's steps (shared prefix + first prompt + half the
    session's growth, kept under the cap), the mean tokens each step prefills (the first prompt once, then what
    each step appends; the shared prefix and a session's own history are prefix-cache hits) and its output."""
    n = workload.steps.mean()
    prefix = workload.prefix_tokens
    first, append, out = (
        workload.first_prompt_tokens.mean(),
        workload.append_tokens.mean(),
        workload.output_tokens.mean(),
    )
    osl = max(1, min(round(out), cap - 1))
    prompt = max(1, min(round(prefix + first + (n - 1) / 2 * (append + out)), cap - osl))
    new = max(1, min(prompt, round((first + (n - 1) * append) / n)))
    basis = (
        f"workload {workload.name}: mean step prefills {new:,} new tokens of {a_or_an(f'{prompt:,}')}-token prompt "
        f"(prefix {prefix:,} + first {first:,.0f} + half of {n:,.4g} steps x ({append:,.0f} appended + "
        f"{out:,.0f} out)), generates {osl:,}"
    )
    return Shape(prompt, prompt - new, osl, basis)


def drawn_steps(lengths: SessionLengths, cap: int, sessions: int = STEP_SESSIONS) -> tuple[tuple[int, int], ...]:
    """Every step of the first ``sessions`` sessions ``simulate`` draws, as (new tokens prefilled, tokens cached):
    the first prompt after the shared prefix (a prefix-cache hit), then each append after the session's history
    (simulate keeps a session's cache between its steps); the cached context is kept under the cap."""
    prefix = lengths.workload.prefix_tokens
    steps: list[tuple[int, int]] = []
    for appends, outputs in lengths.steps[:sessions]:
        context = prefix
        for appended, out in zip(appends, outputs, strict=True):
            steps.append((appended, max(0, min(context, cap - appended - out))))
            context += appended + out
    return tuple(steps)


def own_prefill_s(roof: Roofline | MeasuredSpeeds, new: int, cached: int) -> float:
    """One prompt's own prefill: on the roofline, or on a load test's measured prefill (the simulator's own
    ``MeasuredSpeeds.prefill_s``: its fit over new and cached tokens when the load test has one, else its rate)."""
    from kvbudget.simulate.measured import MeasuredSpeeds

    if isinstance(roof, MeasuredSpeeds):
        return roof.prefill_s(new, cached)
    return roof.prefill_seconds(new, cached, 1)


def at_percentile(roof: Roofline | MeasuredSpeeds, shape: Shape) -> Shape:
    """``shape`` with its p99 step on these speeds (nearest rank of the steps' own prefill seconds); unchanged
    without sampled steps (one shape)."""
    if not shape.steps:
        return shape
    ranked = sorted(shape.steps, key=lambda step: own_prefill_s(roof, *step))
    return replace(shape, peak=ranked[max(0, math.ceil(QUANTILE * len(ranked)) - 1)])


@dataclass(frozen=True)
class Latency:
    """One replica running ``sessions`` sessions of the shape: time to first token and inter-token latency."""

    sessions: int
    ttft_s: float
    itl_s: float
    decode_bound: str  # what bounds a decode iteration: memory bandwidth or compute ("measured": a load test's)
    provenance: str = "computed"  # computed (the roofline), measured (a load test) or simulated (JSON: computed)
    percentile: str = "every request"  # p99 (a workload's p99 step) or every request (one shape)
    step: tuple[int, int] | None = None  # the p99 step's (new, cached) tokens; None: the shape's own

    def misses(self, ttft: float | None, itl: float | None) -> str:
        """The constraint the latency misses ("prefill": TTFT, "decode": ITL), or "" when both are met."""
        if ttft is not None and self.ttft_s > ttft:
            return "prefill"
        if itl is not None and self.itl_s > itl:
            return "decode"
        return ""

    def to_dict(self) -> dict[str, object]:
        return {
            "sessions_per_replica": self.sessions,
            "ttft_s": round(self.ttft_s, 6),
            "itl_s": round(self.itl_s, 6),
            "decode_tokens_per_s_per_session": round(1 / self.itl_s, 3) if self.itl_s else None,
            "decode_bound": self.decode_bound,
            "provenance": "computed" if self.provenance == "simulated" else self.provenance,
            "method": {"computed": "roofline", "measured": "measured speeds"}.get(self.provenance, self.provenance),
            "percentile": self.percentile,
            "step": None if self.step is None else {"new_tokens": self.step[0], "cached_tokens": self.step[1]},
        }


def latency_at(roof: Roofline | MeasuredSpeeds, shape: Shape, sessions: int) -> Latency:
    """``kvbudget speed``'s TTFT and inter-token latency at ``sessions`` in flight on one replica (the roofline's,
    or a load test's measured speeds), of the shape's p99 step when it has one (module doc)."""
    from kvbudget.simulate.measured import MeasuredSpeeds
    from kvbudget.speed.answer import prefill_wait, run_shape

    own = own_prefill_s(roof, shape.new, shape.cached)
    peak = own if shape.peak is None else own_prefill_s(roof, *shape.peak)
    held = (shape.percentile, shape.peak)
    if isinstance(roof, MeasuredSpeeds):
        iteration_s = roof.iteration_s(sessions)
        cycle = sessions * own + shape.osl * iteration_s + peak - own  # one of the prefills the p99 step's
        return Latency(sessions, peak + iteration_s, cycle / shape.osl, "measured", "measured", *held)

    prefill_s, step, cycle = run_shape(roof, shape.isl, shape.osl, shape.cached, sessions)
    # kvbudget speed's steady-state wait for the other sessions' prefills (docs/speed.md, fitted on NIM's TTFT),
    # scaled by the held step's own prefill as speed scales it by its request's
    # and the engine's fixed cost a request (Efficiency.request_s: the API server's, fitted for vLLM and SGLang)
    wait = prefill_wait(peak, prefill_s / cycle, sessions, roof.efficiency.prefill_queue)
    ttft = roof.efficiency.request_s + peak + step.seconds + wait
    return Latency(sessions, ttft, (cycle + peak - own) / shape.osl, step.bound, "computed", *held)


def most_sessions(
    roof: Roofline | MeasuredSpeeds, shape: Shape, top: int, ttft: float | None, itl: float | None
) -> int:
    """The most sessions (up to ``top``) one replica runs within the targets; 0 when one session alone misses."""
    if ttft is None and itl is None:
        return top
    lo, hi = 0, top
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if latency_at(roof, shape, mid).misses(ttft, itl):
            hi = mid - 1
        else:
            lo = mid
    return lo


@dataclass(frozen=True)
class Load:
    """The peak concurrent sessions to hold over the whole deployment, and where the number comes from."""

    sessions: int
    basis: str
    rate_per_s: float | None = None
    mean_session_s: float | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "sessions": self.sessions,
            "basis": self.basis,
            "rate_per_s": self.rate_per_s,
            "mean_session_s": None if self.mean_session_s is None else round(self.mean_session_s, 3),
        }


def one_request(shape: Shape) -> Workload:
    """A session of one request of ``shape`` (``--rate`` without a workload: a benchmark's request rate): one
    step, the prompt all new, no pauses."""
    from kvbudget.workload.distributions import Constant
    from kvbudget.workload.model import Arrival, Workload

    return Workload(
        arrival=Arrival(),
        steps=Constant(1),
        first_prompt_tokens=Constant(shape.new),
        append_tokens=Constant(0),
        output_tokens=Constant(shape.osl),
        name="one request",
        source="--isl/--osl",
    )


def load_from_rate(rate_per_s: float, session: SessionTime, speeds: str) -> Load:
    """Little's law: L = rate x E[T] sessions in flight, rounded up (a fraction of a session still holds a cache)."""
    from kvbudget.workload.little import littles_law

    little = littles_law(rate_per_s, session.mean_s)
    sessions = max(1, math.ceil(little.concurrency - 1e-9))
    return Load(sessions, f"{little.lines[0]}; E[T] {speeds}", rate_per_s, session.mean_s)


def rate_load(rate: float, workload: Workload | None, shape: Shape, slowest: Latency, provenance: str) -> Load:
    """The concurrency a rate brings, with E[T] at the slowest speed a replica may run (its latency-limited load):
    an upper bound, since fewer sessions per replica only run faster. Without a workload a session is one request
    of the shape (a benchmark's request rate): E[T] = its prefill (the TTFT) + ``osl`` tokens at the inter-token
    latency, as workload/little.py ``session_time`` counts one step."""
    from kvbudget.workload.little import ServiceRates, session_time

    prefill_s = max(slowest.ttft_s, 1e-9)
    rates = ServiceRates(prefill_tokens_per_s=shape.new / prefill_s, decode_tokens_per_s=1 / slowest.itl_s)
    session = session_time(workload if workload is not None else one_request(shape), rates)
    speeds = (
        ("of one --isl/--osl request " if workload is None else "")
        + f"at {slowest.sessions:,} sessions per replica: prefill {rates.prefill_tokens_per_s:,.0f} tokens/s, "
        f"decode {rates.decode_tokens_per_s:,.1f} tokens/s per session ("
        + ("measured, load test" if provenance == "measured" else "computed, roofline")
        + ")"
    )
    return load_from_rate(rate, session, speeds)
