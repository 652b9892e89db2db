"""How many of a workload's sessions a context cap refuses (``kvbudget size``, docs/size.md).

The sessions are the ones ``kvbudget simulate`` runs: the first ``SAMPLE_SESSIONS`` sessions of seed 0, drawn by
workload/generate.py (the same blocks, so session *i* is the simulator's session *i*). Each is walked through the
cap exactly as the simulator's scheduler applies it (simulate/scheduler.py ``_step_ready`` and ``_cap``): a step
whose context + appended + generated tokens passes the limit (``min([cap].tokens, cap)``) is refused and ends
the session under ``at_cap = "refuse"``; under ``compact`` / ``summarize`` the context is first cut to the
target (+ the summary's tokens), and the session is refused only when even that does not fit. The share is a
count over the sample, not a fitted tail: labelled ``computed`` from ``sessions`` drawn sessions, with its
binomial standard error. One draw answers every cap (the sessions' uncapped final contexts are kept sorted).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass

from kvbudget.workload.generate import BLOCK

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.workload.model import Workload

SAMPLE_SESSIONS = 16 * BLOCK  # 16,384 sessions: a 2.5% share has a standard error of 0.12 points
_done = {"compact": "compacted", "summarize": "summarized"}
SEED = 0  # simulate's default --seed: the sample is the sessions a default simulate run starts with


@dataclass(frozen=True)
class CapRefusals:
    """Of ``sessions`` sessions, ``reached`` pass the ``limit`` at some step and ``refused`` end there."""

    cap: int  # the serving cap asked
    limit: int  # the cap in force: min(the workload's [cap].tokens, cap)
    mode: str  # the workload's at_cap: refuse, compact or summarize
    sessions: int
    reached: int
    refused: int

    @property
    def share(self) -> float:
        return self.refused / self.sessions if self.sessions else 0.0

    @property
    def standard_error(self) -> float:
        """The binomial standard error of ``share`` as an estimate of the workload's own share."""
        p = self.share
        return math.sqrt(p * (1 - p) / self.sessions) if self.sessions else 0.0

    def within(self, tolerance: float) -> bool:
        return self.refused <= tolerance * self.sessions

    def to_dict(self) -> dict[str, object]:
        return {
            "cap": self.cap,
            "limit": self.limit,
            "at_cap": self.mode,
            "sessions_drawn": self.sessions,
            "sessions_reaching_cap": self.reached,
            "sessions_refused": self.refused,
            "refused_share": round(self.share, 6),
            "standard_error": round(self.standard_error, 6),
            "provenance": "computed",
            "basis": self.basis,
        }

    @property
    def basis(self) -> str:
        return (
            f"{self.refused:,} of the first {self.sessions:,} sessions simulate draws (seed {SEED}) pass the "
            f"{self.limit:,}-token cap and are refused"
            + (f" ({self.reached:,} reach it; the rest are {_done[self.mode]})" if self.mode != "refuse" else "")
        )


class SessionLengths:
    """The sample's sessions, to count what any cap refuses; ``sessions`` defaults to ``SAMPLE_SESSIONS``."""

    def __init__(self, workload: Workload, sessions: int = SAMPLE_SESSIONS) -> None:
        import numpy as np

        from kvbudget.workload.generate import _draw_block

        self.workload = workload
        self.count = sessions
        self.steps: list[tuple[list[int], list[int]]] = []  # per session: (appends, outputs)
        finals: list[int] = []
        prefix = workload.prefix_tokens
        for block in range(math.ceil(sessions / BLOCK)):
            drawn = _draw_block(workload, SEED, block)
            take = min(BLOCK, sessions - block * BLOCK)
            tokens = np.concatenate(([0], np.cumsum(np.asarray(drawn.appends) + np.asarray(drawn.outputs))))
            grown = tokens[drawn.ends[:take]] - tokens[drawn.starts[:take]]
            finals.extend((grown + prefix).tolist())
            for k in range(take):
                a, b = drawn.starts[k], drawn.ends[k]
                self.steps.append((drawn.appends[a:b], drawn.outputs[a:b]))
        self.finals = finals  # per session: its context after its last step, no cap applied
        self.ordered = sorted(finals)

    def at(self, cap: int, shared: int | None = None) -> CapRefusals:
        """What a serving cap of ``cap`` tokens refuses of the sample; ``shared``: the prefix tokens the engine
        shares (block-aligned, simulate/build.py; default the whole prefix), which compaction never cuts."""
        from kvbudget.simulate.build import cap_from_workload

        policy = cap_from_workload(self.workload.cap, cap)
        limit = policy.limit(cap)
        reached = len(self.ordered) - bisect_right(self.ordered, limit)
        if policy.mode == "refuse":
            return CapRefusals(cap, limit, policy.mode, self.count, reached, reached)
        # the scheduler's target: max(shared prefix, min(target, context)), the shared prefix kept
        keep = self.workload.prefix_tokens if shared is None else shared
        target = policy.target(cap)
        refused = sum(
            1
            for final, (appends, outputs) in zip(self.finals, self.steps, strict=True)
            if final > limit
            and _refused(appends, outputs, self.workload.prefix_tokens, limit, (target, keep), policy.summary_tokens)
        )
        return CapRefusals(cap, limit, policy.mode, self.count, reached, refused)


def _refused(
    appends: list[int], outputs: list[int], prefix: int, limit: int, cut_to: tuple[int, int], summary: int
) -> bool:
    """Whether a session is refused under compaction: the scheduler's walk (the first prompt starts with the
    shared prefix; a step past the limit is cut to min(target, context) + its tokens + the summary)."""
    target, keep = cut_to
    context = 0
    for i, (appended, o) in enumerate(zip(appends, outputs, strict=True)):
        a = appended + (prefix if i == 0 else 0)
        if context + a + o > limit:
            cut = max(keep, min(target, context))
            if cut + a + o + summary > limit:
                return True
            context = cut + a + o + summary
        else:
            context += a + o
    return False


def pct(share: float) -> str:
    """A share in percent, to three significant figures (0.0224 -> '2.24%')."""
    return f"{100 * share:.3g}%"


def smallest_cap(
    lengths: SessionLengths, caps: list[int], tolerance: float, shared: int | None = None
) -> CapRefusals | None:
    """The smallest of ``caps`` whose refusals stay within ``tolerance`` (None: none of them)."""
    for cap in sorted(caps):
        answer = lengths.at(cap, shared)
        if answer.within(tolerance):
            return answer
    return None
