"""What a context cap does, read against the sessions a trace really had.

The recommended cap is the p99 **session peak** context (prompt + output at a session's largest
step; the same as the session end unless the context was compacted, and the figure a cap must
hold) plus a 10% margin, rounded up to a multiple of 1,024 tokens. About 1% of the trace's sessions
would reach it. Sessions per deployment come from the capacity plan (``make_plan``) at that cap,
at the cap in use (``--context``, when given) and at the model's advertised window
(``max_position_embeddings``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from kvbudget.plan.plan import Plan, PlanInputs, make_plan
from kvbudget.units import format_tokens
from kvbudget.workload.stats import TraceStats

MARGIN = 0.10  # 10% above p99
ROUND_TO = 1024  # tokens; caps are quoted in K (1K = 1,024 tokens)
MARGIN_TEXT = "p99 session peak + 10%, rounded up to a multiple of 1,024 tokens"


def recommended_cap(p99: int) -> int:
    return max(ROUND_TO, math.ceil(p99 * (1 + MARGIN) / ROUND_TO) * ROUND_TO)


@dataclass(frozen=True)
class CapAnalysis:
    p99_tokens: int
    recommended: int
    window: int | None  # the model's advertised context (max_position_embeddings)
    current: int | None  # the cap the user runs now (--context), if given
    plan_recommended: Plan
    plan_current: Plan | None
    plan_window: Plan | None
    reading: str

    @property
    def reference(self) -> int | None:
        """The cap the trace is read against: the one in use, else the advertised window."""
        return self.current if self.current is not None else self.window

    def to_json(self) -> dict[str, object]:
        def sessions(plan: Plan | None) -> int | None:
            return None if plan is None else plan.total_sessions

        spec = self.plan_recommended.inputs.spec
        return {
            "model": spec.name,
            "engine": self.plan_recommended.inputs.engine.label,
            "gpu": self.plan_recommended.inputs.gpu_label,
            "gpus": self.plan_recommended.inputs.gpus,
            "p99_session_peak_tokens": self.p99_tokens,
            "recommended_cap_tokens": self.recommended,
            "margin": MARGIN_TEXT,
            "sessions_at_recommended_cap": sessions(self.plan_recommended),
            "current_cap_tokens": self.current,
            "sessions_at_current_cap": sessions(self.plan_current),
            "advertised_window_tokens": self.window,
            "sessions_at_advertised_window": sessions(self.plan_window),
            "per_session_bytes_at_recommended_cap": self.plan_recommended.per_session_bytes,
            "kv_pool_bytes": self.plan_recommended.kv_pool_bytes,
            "reading": self.reading,
        }


def _fraction(ratio: float) -> str:
    """'a tenth', 'a quarter', 'half', or '1/N' for a ratio below one half."""
    n = round(1 / ratio)
    words = {2: "half", 3: "a third", 4: "a quarter", 5: "a fifth", 10: "a tenth"}
    return words.get(n, f"about 1/{n}")


def _reading(p99: int, cap: int, cap_name: str, recommended: int, at_rec: int, at_cap: int | None) -> str:
    ratio = p99 / cap
    tokens, rec = format_tokens(p99), format_tokens(recommended)
    serve = (
        f"; lower the cap to {rec} and serve {at_rec:,} sessions instead of {at_cap:,}" if at_cap is not None else ""
    )
    if ratio > 1:
        return (
            f"the p99 session ({tokens} tokens) is beyond the {cap_name} ({format_tokens(cap)}): at least 1% of "
            "sessions would hit it and be refused, cut or compacted"
            + (f"; a cap of {rec} serves {at_rec:,} sessions" if recommended != cap else "")
        )
    if ratio >= 0.8:
        return (
            f"the p99 session ({tokens} tokens) is near the {cap_name} ({format_tokens(cap)}): the cap is doing work; "
            "lowering it would cut real sessions"
        )
    if ratio <= 0.5:
        return (
            f"the p99 session ({tokens} tokens) is {_fraction(ratio)} of the {cap_name} ({format_tokens(cap)}): "
            f"you reserve memory for sessions that never happen{serve}"
        )
    return f"the p99 session ({tokens} tokens) is {ratio:.0%} of the {cap_name} ({format_tokens(cap)}){serve}"


def cap_analysis(stats: TraceStats, inputs: PlanInputs, current: int | None = None) -> CapAnalysis:
    """The recommended cap and sessions at it, at ``current`` and at the advertised window.

    ``inputs.context`` is replaced by each cap in turn; everything else (GPU, weights, engine,
    cache dtype) is the user's plan. Raises ValueError when the trace has no sessions.
    """
    peak = stats.session_peak_tokens.p99
    if peak is None:
        raise ValueError("the trace has no sessions to read a cap from")
    p99 = int(peak)
    window = inputs.spec.max_position_embeddings
    recommended = recommended_cap(p99)
    if window and recommended > window:
        recommended = window  # the model cannot serve more; the reading says p99 is past it
    at_rec = make_plan(replace(inputs, context=recommended))
    at_current = make_plan(replace(inputs, context=current)) if current is not None else None
    at_window = make_plan(replace(inputs, context=window)) if window else None
    cap, cap_plan = (current, at_current) if current is not None else (window, at_window)
    if cap is None:
        reading = f"the p99 session is {format_tokens(p99)} tokens; a cap of {format_tokens(recommended)} serves " + (
            f"{at_rec.total_sessions:,} sessions (the model states no advertised window to compare with)"
        )
    else:
        name = "cap in use" if current is not None else "advertised window"
        at_cap = cap_plan.total_sessions if cap_plan is not None else None
        reading = _reading(p99, cap, name, recommended, at_rec.total_sessions, at_cap)
    return CapAnalysis(
        p99_tokens=p99,
        recommended=recommended,
        window=window,
        current=current,
        plan_recommended=at_rec,
        plan_current=at_current,
        plan_window=at_window,
        reading=reading[0].upper() + reading[1:] + ".",
    )
