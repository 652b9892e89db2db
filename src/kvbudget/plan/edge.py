"""A plan near the edge: the KV pool within the runtime-memory model's error of zero, or of a session boundary.

The runtime overhead a plan reserves without a measurement is a model (engines/overhead.py, vllm_profile.py); its
error on held-out real logs is in docs/measure.md (up to ~10% of the overhead). Where the pool's margin is smaller
than that error, the plan's verdict (boots or not, N sessions or N +- 1) is not safe to trust: the user should
boot once and measure (``kvbudget calibrate``, or ``plan --from-log``). Where the error is worth one session or more,
the count is flagged when the sessions it is worth are 10% or more of those planned (a few long sessions), not when
they are a small share of many short ones.
"""

from __future__ import annotations

from kvbudget.engines.overhead import Overhead
from kvbudget.units import format_bytes

ERROR_SHARE = 15  # percent of the modelled overhead: the held-out target bound (docs/measure.md)
COUNT_SHARE = 10  # percent of the planned sessions that the error may move before the count is not to be trusted


def edge_warning(pool: int, per_session: int, sessions: int, overhead: Overhead) -> str | None:
    """The warning for a pool within the overhead model's error of zero or of one session more or fewer."""
    if overhead.provenance != "heuristic":
        return None
    error = max(overhead.high - overhead.low, overhead.bytes * ERROR_SHARE // 100)
    advice = "boot it once and run `kvbudget calibrate` (or plan --from-log) before relying on it"
    if pool <= error:
        return (
            f"near the edge: the KV pool {format_bytes(pool)} is within the runtime-memory model's error "
            f"({format_bytes(error)}) of zero, so the engine may refuse to start; {advice}"
        )
    if per_session <= error:
        # the error is worth whole sessions: many short sessions lose a small share of their count (no warning), a
        # few long ones a large share (Qwen3-235B at TP 4 on H100s, vLLM 0.9.2: 5 planned where vLLM's pool held 4;
        # the 2.1 GiB the model missed is under its 3.6 GiB error, which is worth one of the 5 sessions)
        worth = error // per_session
        if sessions and worth * 100 >= sessions * COUNT_SHARE:
            return (
                f"near the edge: the runtime-memory model's error ({format_bytes(error)}) is worth {worth} "
                f"session{'s' if worth > 1 else ''} at the cap, {100 * worth // sessions}% of the {sessions} planned; "
                f"{advice}"
            )
        return None
    spare = pool - sessions * per_session
    more, fewer = per_session - spare <= error, bool(sessions) and spare <= error
    if spare >= 0 and (more or fewer):
        side = "one more or one fewer" if more and fewer else "one more" if more else "one fewer"
        return (
            f"near the edge: the KV pool is within the runtime-memory model's error ({format_bytes(error)}) of "
            f"{side} session at the cap; {advice}"
        )
    return None
