"""What a context cap does, read against the sessions a trace really had.

The recommended cap is the p99 **session peak** context (prompt + output at a session's largest
step; the same as the session end unless the context was compacted, and the figure a cap must
hold) plus a 10% margin, rounded up to a multiple of 1,024 tokens. About 1% of the trace's sessions
would reach it. It is what the traces need, whatever the model: where it passes the model's trained
window (``max_position_embeddings``) it stays the recommendation, marked ``past_window``, with what
serving it takes on the engine (``EngineRules.past_window``: the override switches and rope scaling)
and the catalog models whose window holds it; the window is never put in its place. The deployment
is planned once (``make_plan`` at the recommended cap); sessions at
the cap in use (``--context``, when given) and at the model's advertised window
(``max_position_embeddings``) are evaluated on that plan (``Plan.at_cap``): the pool does not depend
on the cap. The p99 comes in as a number (``workload.stats`` reads it from traces), so the
workload package does not depend on the planner.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from kvbudget.plan.plan import CapSessions, Plan, PlanInputs, make_plan
from kvbudget.units import counted, format_tokens

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
    plan: Plan  # the deployment, planned at the recommended cap
    at_current: CapSessions | None
    at_window: CapSessions | None
    reading: str
    past_window: str | None = None  # what serving the recommendation past the trained window takes (engine switches)
    holding_models: tuple[str, ...] = ()  # catalog models whose window holds the recommendation (when past it)

    @property
    def recommended_past_window(self) -> bool:
        return self.window is not None and self.recommended > self.window

    def to_json(self) -> dict[str, object]:
        def sessions(at: CapSessions | None) -> int | None:
            return None if at is None else at.total_sessions

        i = self.plan.inputs
        return {
            "model": i.spec.name,
            "engine": i.engine.to_json(),
            "gpu": i.gpu_label,
            "gpus": i.gpus,
            "p99_session_peak_tokens": self.p99_tokens,
            "recommended_cap_tokens": self.recommended,
            "recommended_past_window": self.recommended_past_window,
            "serving_past_window": self.past_window,
            "catalog_models_whose_window_holds_it": list(self.holding_models),
            "margin": MARGIN_TEXT,
            "sessions_at_recommended_cap": self.plan.total_sessions,
            "current_cap_tokens": self.current,
            "sessions_at_current_cap": sessions(self.at_current),
            "advertised_window_tokens": self.window,
            "sessions_at_advertised_window": sessions(self.at_window),
            "per_session_bytes_at_recommended_cap": self.plan.per_session_bytes,
            "kv_pool_bytes": self.plan.kv_pool_bytes,
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
            + (f"; a cap of {rec} serves {counted(at_rec, 'session')}" if recommended != cap else "")
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


def cap_analysis(p99: int, inputs: PlanInputs, current: int | None = None, sessions: int | None = None) -> CapAnalysis:
    """The recommended cap for a p99 session peak of ``p99`` tokens, and sessions at it, at ``current`` and at
    the advertised window.

    The deployment (GPU, weights, engine, cache dtype) is the user's plan, planned once at the recommended
    cap; the other caps are evaluated on it.
    """
    window = inputs.spec.max_position_embeddings
    recommended = recommended_cap(p99)
    plan = make_plan(replace(inputs, context=recommended))
    at_current = plan.at_cap(current) if current is not None else None
    at_window = plan.at_cap(window) if window else None
    cap, at_cap = (current, at_current) if current is not None else (window, at_window)
    if cap is None:
        reading = f"the p99 session is {format_tokens(p99)} tokens; a cap of {format_tokens(recommended)} serves " + (
            f"{plan.total_sessions:,} sessions (the model states no advertised window to compare with)"
        )
    else:
        name = "cap in use" if current is not None else "advertised window"
        reading = _reading(
            p99, cap, name, recommended, plan.total_sessions, at_cap.total_sessions if at_cap is not None else None
        )
    past: str | None = None
    holding: tuple[str, ...] = ()
    if window and recommended > window:  # what the traces need is past the trained window: say what serving it takes
        past = inputs.engine.rules.past_window(recommended, window)
        # the plan's own "--context N is beyond the window" warning says it again, about an option not given here
        said = f"--context {recommended:,} is beyond"
        plan = replace(plan, warnings=tuple(w for w in plan.warnings if not w.startswith(said)))
        holding = models_holding(recommended)
        reading += (
            f"; the recommended {format_tokens(recommended)} cap is past the model's {window:,}-token trained "
            f"window: {past}"
        )
        if holding:
            reading += f"; catalog models whose window holds it: {_listing(holding)}"
    if sessions is not None and 0 < sessions < 100:  # nearest rank: the p99 of fewer than 100 is the maximum
        reading += f"; with only {counted(sessions, 'session')} that p99 is the largest session, not a tail"
    return CapAnalysis(
        p99_tokens=p99,
        recommended=recommended,
        window=window,
        current=current,
        plan=plan,
        at_current=at_current,
        at_window=at_window,
        reading=reading[0].upper() + reading[1:] + ".",
        past_window=past,
        holding_models=holding,
    )


SHOWN_MODELS = 6


def models_holding(tokens: int) -> tuple[str, ...]:
    """Catalog models whose advertised window (``max_position_embeddings``) is at least ``tokens``, smallest
    (fewest parameters) first."""
    from kvbudget.model import catalog

    holding = [e for e in catalog.entries() if int(e.config.get("max_position_embeddings") or 0) >= tokens]
    holding.sort(key=lambda e: (e.params_total is None, e.params_total or 0))
    return tuple(e.name for e in holding)


def _listing(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:SHOWN_MODELS])
    return shown + (f" and {len(names) - SHOWN_MODELS} more (kvbudget models)" if len(names) > SHOWN_MODELS else "")
