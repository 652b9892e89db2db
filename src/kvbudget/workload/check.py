"""``kvbudget workload check``: a workload's means, its Little's-law concurrency and what retries add."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvbudget.workload.little import (
    LittlesLaw,
    RetryInflation,
    ServiceRates,
    SessionTime,
    arrival_rate,
    littles_law,
    retry_inflation,
    session_time,
)
from kvbudget.workload.model import Workload

# The share of attempts assumed to time out when showing what retries would add (labelled as
# assumed wherever it is printed; only a simulation or a measurement knows the real one).
DEFAULT_TIMEOUT_SHARE = 0.05


@dataclass(frozen=True, slots=True)
class WorkloadCheck:
    workload: Workload
    rates: ServiceRates
    arrival_rate_per_s: float
    arrival_basis: str
    session: SessionTime
    little: LittlesLaw
    final_context_tokens: float  # mean context at a session's end before any cap event
    final_context_line: str
    retry: RetryInflation | None

    def to_json(self) -> dict[str, Any]:
        w, s = self.workload, self.session
        out: dict[str, Any] = {
            "schema_version": 1,
            "name": w.name,
            "source": w.source,
            "arrival": {
                "kind": "poisson" if w.arrival.rate_per_s is not None else "replay",
                "rate_per_s": self.arrival_rate_per_s,
                "basis": self.arrival_basis,
            },
            "prefix_tokens": w.prefix_tokens,
            "distributions": {
                name: {**dist.to_dict(), "mean": dist.mean()} for name, dist in w.distributions().items()
            },
            "cap": w.to_dict()["cap"],
            "mean_steps": s.mean_steps,
            "mean_final_context_tokens": self.final_context_tokens,
            "rates": {
                "prefill_tokens_per_s": self.rates.prefill_tokens_per_s,
                "decode_tokens_per_s": self.rates.decode_tokens_per_s,
                "prefix_cached": self.rates.prefix_cached,
            },
            "session_time_s": {
                "prefill": s.prefill_s,
                "decode": s.decode_s,
                "paused": s.paused_s,
                "mean": s.mean_s,
                "paused_share": s.paused_s / s.mean_s if s.mean_s else 0.0,
                "arithmetic": list(s.lines),
            },
            "littles_law": {
                "arrival_rate_per_s": self.little.arrival_rate_per_s,
                "mean_session_s": self.little.mean_session_s,
                "concurrency": self.little.concurrency,
                "arithmetic": list(self.little.lines),
            },
            "retries": None,
        }
        if self.retry is not None:
            r = self.retry
            out["retries"] = {
                **w.to_dict()["retries"],
                "timeout_share_assumed": r.timeout_share,
                "expected_retries": r.expected_retries,
                "request_rate_per_s": r.request_rate_per_s,
                "effective_request_rate_per_s": r.effective_request_rate_per_s,
                "mean_session_s": r.mean_session_s,
                "sessions_in_flight": r.sessions_in_flight,
                "orphan_sequences": r.orphan_sequences,
                "sequences_in_flight": r.sequences_in_flight,
                "arithmetic": list(r.lines),
            }
        return out


def check_workload(
    workload: Workload, rates: ServiceRates | None = None, timeout_share: float = DEFAULT_TIMEOUT_SHARE
) -> WorkloadCheck:
    """Means, the unloaded session time, L = λ E[T], and (with ``[retries]``) the retry inflation."""
    r = rates or ServiceRates()
    w = workload
    rate, basis = arrival_rate(w)
    session = session_time(w, r)
    little = littles_law(rate, session.mean_s)
    n = session.mean_steps
    first, append, output = w.first_prompt_tokens.mean(), w.append_tokens.mean(), w.output_tokens.mean()
    # Every token a session appends or generates stays in its context: prefix + first + (N-1) appends + N outputs.
    final = w.prefix_tokens + first + (n - 1) * append + n * output
    final_line = (
        f"{w.prefix_tokens:,} prefix + {first:,.4g} first + ({n:.4g} - 1) x {append:,.4g} appended "
        f"+ {n:.4g} x {output:,.4g} output = {final:,.0f} tokens"
    )
    retry = None
    if w.retries is not None:
        retry = retry_inflation(
            arrival_rate_per_s=rate,
            mean_session_s=session.mean_s,
            mean_steps=n,
            step_service_s=session.step_service_s,
            retries=w.retries,
            timeout_share=timeout_share,
        )
    return WorkloadCheck(w, r, rate, basis, session, little, final, final_line, retry)
