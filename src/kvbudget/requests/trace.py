"""The trace question: ``kvbudget trace stats``, session statistics of real traces and, for a deployment, what a cap
does to them."""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.requests.base import option, required
from kvbudget.requests.plan import Deployment

# options that only make sense with a model (a plan); their presence without one is a mistake
PLAN_ONLY = ("gpu", "gpu_memory", "context", "weights", "weights_size", "overhead", "utilization", "sessions")


@dataclass(frozen=True, kw_only=True)
class TraceStatsRequest(Deployment):
    """Statistics of the steps in ``files`` (formats detected unless ``format``); with ``model`` and a GPU, the
    recommended cap and the sessions at it (and at ``context``, the cap in use)."""

    command = "trace stats"
    files: tuple[str, ...] = required("text", many=True, name="FILE")
    format: str | None = option(None, "text")
    strict: bool = option(False, "switch")
    sessions_span_files: bool = option(False, "switch")
    model: str | None = option(None, "model")
    context: int | None = option(None, "tokens")
    sessions: int | None = option(None, "sessions")
