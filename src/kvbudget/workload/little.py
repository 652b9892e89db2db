"""Little's law for agent sessions, how client retries inflate it, and the Erlang-B loss formula.

Little's law (J. D. C. Little, "A proof for the queuing formula L = λW", Operations Research 9,
1961): in steady state the mean number in a system is the arrival rate times the mean time spent
in it, L = λ × E[T], whatever the distributions. For a KV cache, "in the system" is a live session:
it holds its cache from arrival to its last token, tool pauses included. The seed's example:
λ = 1 request/s and 20 s each gives 20 in flight.

E[T] here is the unloaded session time: prefill and decode at fixed per-sequence token rates, plus
the pauses between steps; queueing is what the simulator adds. Each result carries its arithmetic
as text lines, so a renderer prints the why next to the number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvbudget.errors import InputError
from kvbudget.units import counted
from kvbudget.workload.distributions import fmt_number
from kvbudget.workload.model import Retries, Workload

# Placeholder per-sequence speeds, order of magnitude of a 70B-class model on one H100 at moderate
# batch; pass measured rates (`--prefill-rate`, `--decode-rate`) for real answers.
DEFAULT_PREFILL_TOKENS_PER_S = 10_000.0
DEFAULT_DECODE_TOKENS_PER_S = 50.0


_g = fmt_number


@dataclass(frozen=True, slots=True)
class ServiceRates:
    """Per-sequence token rates for the unloaded session time. ``prefix_cached``: the shared prefix
    is already in the prefix cache when a session arrives (it is prefilled once, not per session)."""

    prefill_tokens_per_s: float = DEFAULT_PREFILL_TOKENS_PER_S
    decode_tokens_per_s: float = DEFAULT_DECODE_TOKENS_PER_S
    prefix_cached: bool = True

    def __post_init__(self) -> None:
        for name, value in (("prefill rate", self.prefill_tokens_per_s), ("decode rate", self.decode_tokens_per_s)):
            if not (math.isfinite(value) and value > 0):
                raise InputError(f"{name} must be a positive number of tokens per second, got {value}")


@dataclass(frozen=True, slots=True)
class SessionTime:
    """E[T] of one session with its parts (seconds, tokens per session)."""

    mean_steps: float
    prefill_tokens: float  # per session
    decode_tokens: float
    prefill_s: float
    decode_s: float
    paused_s: float
    mean_s: float
    step_service_s: float  # mean prefill + decode time of one step
    lines: tuple[str, ...]


def session_time(workload: Workload, rates: ServiceRates | None = None) -> SessionTime:
    """Mean session time: prefill + decode of every step, plus the pauses between steps.

    By Wald's identity (the step count is drawn independently of each step's sizes), the expected
    sum over a session is E[steps] x the per-step mean: prefill = (uncached prefix + E[first]
    + (E[N] - 1) E[append]) / prefill rate; decode = E[N] E[output] / decode rate; pauses =
    (E[N] - 1)(E[tool] + E[think]) (no pause after the last step). A session holds its own cache
    between steps, so each step prefills only what it appends. Cap events (compaction, summaries)
    are not counted: they are rare by design and the simulator handles them.
    """
    r = rates or ServiceRates()
    w = workload
    n = w.steps.mean()
    prefix = 0 if r.prefix_cached else w.prefix_tokens
    first, append, output = w.first_prompt_tokens.mean(), w.append_tokens.mean(), w.output_tokens.mean()
    pause = w.tool_latency_s.mean() + w.think_time_s.mean()
    prefill_tokens = prefix + first + (n - 1) * append
    decode_tokens = n * output
    prefill_s = prefill_tokens / r.prefill_tokens_per_s
    decode_s = decode_tokens / r.decode_tokens_per_s
    paused_s = (n - 1) * pause
    mean_s = prefill_s + decode_s + paused_s
    prefix_term = "" if r.prefix_cached else f"{_g(prefix)} prefix + "
    lines = (
        f"E[steps] = {_g(n)}",
        f"prefill = ({prefix_term}{_g(first)} first + ({_g(n)} - 1) x {_g(append)} appended) tokens "
        f"/ {_g(r.prefill_tokens_per_s)} tok/s = {_g(prefill_s)} s"
        + (" (shared prefix already cached)" if r.prefix_cached and w.prefix_tokens else ""),
        f"decode = {_g(n)} x {_g(output)} output tokens / {_g(r.decode_tokens_per_s)} tok/s = {_g(decode_s)} s",
        f"pauses = ({_g(n)} - 1) x ({_g(w.tool_latency_s.mean())} s tool + {_g(w.think_time_s.mean())} s think) "
        f"= {_g(paused_s)} s",
        f"E[T] = {_g(prefill_s)} + {_g(decode_s)} + {_g(paused_s)} = {_g(mean_s)} s per session "
        f"({_g(100 * paused_s / mean_s if mean_s else 0.0)}% paused)",
    )
    return SessionTime(
        mean_steps=n,
        prefill_tokens=prefill_tokens,
        decode_tokens=decode_tokens,
        prefill_s=prefill_s,
        decode_s=decode_s,
        paused_s=paused_s,
        mean_s=mean_s,
        step_service_s=(prefill_s + decode_s) / n,
        lines=lines,
    )


@dataclass(frozen=True, slots=True)
class LittlesLaw:
    arrival_rate_per_s: float
    mean_session_s: float
    concurrency: float  # mean sessions in flight, each holding its cache
    lines: tuple[str, ...]


def littles_law(arrival_rate_per_s: float, mean_session_s: float) -> LittlesLaw:
    """L = λ × E[T] (Little, 1961): the mean number of sessions in flight in steady state."""
    for name, value in (("arrival rate", arrival_rate_per_s), ("mean session time", mean_session_s)):
        if not (math.isfinite(value) and value >= 0):
            raise InputError(f"{name} must be a non-negative number, got {value}")
    concurrency = arrival_rate_per_s * mean_session_s
    line = (
        f"L = λ x E[T] = {_g(arrival_rate_per_s)} sessions/s x {_g(mean_session_s)} s "
        f"= {_g(concurrency)} sessions in flight"
    )
    return LittlesLaw(arrival_rate_per_s, mean_session_s, concurrency, (line,))


@dataclass(frozen=True, slots=True)
class RetryInflation:
    """What client retries add, for a given share of attempts that time out (all means)."""

    timeout_share: float
    expected_retries: float  # per request: E[r] = p + p^2 + ... + p^R
    request_rate_per_s: float  # λ × E[steps]
    effective_request_rate_per_s: float  # λ' = λ_req × (1 + E[r])
    extra_session_s: float  # E[steps] × Σ p^k (timeout + backoff_k)
    mean_session_s: float  # E[T'] = E[T] + extra
    sessions_in_flight: float  # λ × E[T']
    orphan_sequences: float  # abandoned attempts the server keeps serving
    sequences_in_flight: float  # sessions + orphans: what holds KV cache
    base_concurrency: float  # λ × E[T] without retries
    lines: tuple[str, ...]


def retry_inflation(
    *,
    arrival_rate_per_s: float,
    mean_session_s: float,
    mean_steps: float,
    step_service_s: float,
    retries: Retries,
    timeout_share: float,
) -> RetryInflation:
    """Concurrency with client retries, when a share p of attempts time out (independently).

    A step's request is retried after a timeout, at most R times; the k-th retry happens only if
    the first k attempts all timed out (probability p^k), so (geometric series):
    * expected retries per request E[r] = Σ_{k=1..R} p^k, and the request arrival rate becomes
      λ' = λ_req × (1 + E[r]) with λ_req = λ × E[steps];
    * the client waits the timeout τ and then the backoff b_k before the k-th retry, so each step
      takes Σ_{k=1..R} p^k (τ + b_k) longer on average and E[T'] = E[T] + E[steps] × that; by
      Little's law the sessions in flight (each holding its cache) become λ × E[T'];
    * an abandoned attempt keeps running on a server that does not cancel it: Σ_{k=1..R+1} p^k
      = p (1 + E[r]) abandoned attempts per request, each holding one more sequence for at least a
      step's service time E[S] after its client left (queueing not counted, so a floor):
      orphans = λ_req × p (1 + E[r]) × E[S]; none when the server cancels.
    The approximation: a session whose R+1 attempts all time out is counted as carrying on (an
    error of order p^(R+1)), and attempt durations are taken as independent of timing out.
    """
    p, big_r = timeout_share, retries.max_retries
    if not (0 <= p < 1):
        raise InputError(f"timeout share must be at least 0 and below 1, got {p}")
    expected = math.fsum(p**k for k in range(1, big_r + 1))
    waited = math.fsum(p**k * (retries.timeout_s + retries.backoff(k)) for k in range(1, big_r + 1))
    request_rate = arrival_rate_per_s * mean_steps
    effective = request_rate * (1 + expected)
    extra = mean_steps * waited
    inflated = mean_session_s + extra
    sessions = arrival_rate_per_s * inflated
    abandoned = p * (1 + expected)
    orphans = 0.0 if retries.server_cancels else request_rate * abandoned * step_service_s
    base = arrival_rate_per_s * mean_session_s
    backoffs = ", ".join(f"b{k} = {_g(retries.backoff(k))} s" for k in range(1, big_r + 1)) or "none"
    lines = [
        f"assumed: {_g(100 * p)}% of attempts time out after {_g(retries.timeout_s)} s; up to {big_r} retries "
        f"({backoffs})",
        f"E[retries] per request = Σ p^k, k = 1..{big_r} = {_g(expected)}",
        f"λ' = λ x E[steps] x (1 + E[retries]) = {_g(arrival_rate_per_s)} x {_g(mean_steps)} x "
        f"{_g(1 + expected)} = {_g(effective)} requests/s (was {_g(request_rate)})",
        f"client wait per step = Σ p^k (τ + b_k) = {_g(waited)} s; E[T'] = {_g(mean_session_s)} + "
        f"{_g(mean_steps)} x {_g(waited)} = {_g(inflated)} s",
        f"sessions in flight = λ x E[T'] = {_g(arrival_rate_per_s)} x {_g(inflated)} = {_g(sessions)} (was {_g(base)})",
    ]
    if retries.server_cancels:
        lines.append("the server cancels abandoned attempts: no orphaned sequences")
    else:
        lines.append(
            f"orphaned attempts = λ x E[steps] x p(1 + E[retries]) x E[S] = {_g(request_rate)} x {_g(abandoned)} "
            f"x {_g(step_service_s)} s = {_g(orphans)} sequences (a floor: their queueing is not counted)"
        )
    lines.append(
        f"sequences holding KV cache = {_g(sessions)} + {_g(orphans)} = {_g(sessions + orphans)} "
        f"({_g((sessions + orphans) / base if base else 1.0)}x the no-retry {_g(base)})"
    )
    return RetryInflation(
        timeout_share=p,
        expected_retries=expected,
        request_rate_per_s=request_rate,
        effective_request_rate_per_s=effective,
        extra_session_s=extra,
        mean_session_s=inflated,
        sessions_in_flight=sessions,
        orphan_sequences=orphans,
        sequences_in_flight=sessions + orphans,
        base_concurrency=base,
        lines=tuple(lines),
    )


def arrival_rate(workload: Workload) -> tuple[float, str]:
    """λ in sessions per second, and where it came from: the Poisson rate, or a replayed trace's
    session starts, (n - 1) / (last start - first start) (the n - 1 gaps between n starts)."""
    arrival = workload.arrival
    if arrival.rate_per_s is not None:
        return arrival.rate_per_s, "[arrival].rate_per_s (Poisson)"
    from kvbudget.workload.generate import replay_arrival_times

    times = replay_arrival_times(arrival)
    if len(times) < 2 or times[-1] <= 0:
        raise InputError(
            f"{arrival.replay}: cannot measure an arrival rate from {counted(len(times), 'session start')} "
            "at one instant; "
            "give [arrival].rate_per_s instead"
        )
    rate = (len(times) - 1) / times[-1]
    return rate, f"{len(times)} session starts over {_g(times[-1])} s in {arrival.replay}"
