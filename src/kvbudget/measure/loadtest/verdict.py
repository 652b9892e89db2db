"""Sessions sustained only on a plausible run: otherwise the doubts, and no verdict.

A run is doubted when what the server reported cannot be: output tokens faster than any GPU decodes
(MAX_TOKENS_PER_S, far above the fastest published aggregate decode rates of one server), a run that held
sessions with no output token, or counts that are no count (negative, past 2^40, NaN, a string: each is
dropped and counted by the client).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvbudget.measure.loadtest.result import Outcome

MAX_TOKENS_PER_S = 10**6  # output tokens per second of one server: 20x past any published aggregate decode rate


def doubts(o: Outcome, unreadable: int) -> list[str]:
    """Why the run's figures cannot be trusted; empty for a plausible run."""
    out: list[str] = []
    rec = o.recorder
    if rec is None:
        return out
    output = rec.tokens["output"]
    if o.duration_s > 0 and output / o.duration_s > MAX_TOKENS_PER_S:
        out.append(
            f"the server reported {output:,} output tokens in {o.duration_s:,.1f} s, "
            f"{output / o.duration_s:,.0f} a second: past any GPU (10^6)"
        )
    if rec.requests and output == 0 and any(level.passed for level in rec.levels):
        out.append(f"{rec.requests:,} requests produced no output token")
    if unreadable:
        out.append(f"the server reported {unreadable:,} token counts that are no count (negative, past 2^40, NaN)")
    return out


def judge(o: Outcome, unreadable: int) -> None:
    """Withdraw the sessions-sustained verdict of a doubtful run, listing why (in its basis and warnings)."""
    found = doubts(o, unreadable)
    if not found:
        return
    o.warnings += found
    if o.sustained is not None:
        o.sustained = None
        o.sustained_basis = "no verdict: the run is not plausible (" + "; ".join(found) + ")"
