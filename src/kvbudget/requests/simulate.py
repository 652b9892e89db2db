"""The simulation question: ``kvbudget simulate``, one deployment under a workload's sessions or a replayed trace."""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.requests.base import option, required
from kvbudget.requests.plan import Deployment

DEFAULT_SESSIONS = 2000  # generated sessions when neither sessions nor duration is given


@dataclass(frozen=True, kw_only=True)
class SimulateRequest(Deployment):
    """An event-driven simulation of the deployment under ``workload`` (a file) or ``trace`` (files to replay).

    ``sessions`` / ``duration``: how many sessions to generate, or for how long (default 2,000 sessions);
    ``rate``: sessions arriving per second over the whole deployment (default: the workload's ``[arrival]``);
    ``policy`` / ``pause``: the memory policy and what a tool pause holds (default: the engine's own behaviour);
    ``prefill_rate`` tokens/s per replica, ``decode_rate`` a fixed decode tokens/s per session instead of the
    speed model's roofline, ``speed_from`` a load-test result whose measured speeds replace it;
    ``search_sessions`` sessions per probe of the sustained-sessions search (0: no search); ``target_*``: the
    target's tolerances (simulate/policies.py ``Target``); ``ttft`` / ``itl``: latency targets on the p99 time to
    first token and inter-token latency (the search then also reports what memory alone allows, and which binds).
    """

    command = "simulate"
    model: str = required("model", name="model")
    context: int = required("tokens")
    workload: str | None = option(None, "text")
    trace: tuple[str, ...] | None = option(None, "text", many=True)
    format: str | None = option(None, "text")
    strict: bool = option(False, "switch")
    sessions_span_files: bool = option(False, "switch")
    seed: int = option(0, "index")
    sessions: int | None = option(None, "sessions")
    duration: float | None = option(None, "seconds")
    rate: float | None = option(None, "per_second")
    policy: str | None = option(None, "text", choices=("reserve", "paged", "watermark"))
    preempt: str = option("recompute", "text", choices=("recompute", "swap"))
    pause: str | None = option(None, "text", choices=("hold", "evictable"))
    admission: str = option("queue", "text", choices=("queue", "refuse"))
    watermark: float = option(0.05, "share")
    replicas: int | None = option(None, "gpus")
    router: str = option("least-loaded", "text", choices=("least-loaded", "round-robin"))
    prefill_rate: float | None = option(None, "positive")
    decode_rate: float | None = option(None, "positive")
    bandwidth: float | None = option(None, "bandwidth")
    speed_from: str | None = option(None, "text")
    target_p99_delay: float | None = option(None, "positive")
    target_preemption_rate: float | None = option(None, "tolerance")
    target_refusal_rate: float | None = option(None, "tolerance")
    ttft: float | None = option(None, "seconds")
    itl: float | None = option(None, "seconds")
    search_sessions: int = option(2000, "index")
    search_probes: int = option(8, "count")
    check: bool = option(False, "switch")
    jobs: int | None = option(None, "jobs")  # processes for the search's probes (None: every core)
    ray: str | None = option(None, "address")  # a Ray cluster the search's probes run on instead, as tasks
    allow_long: bool = option(False, "switch")
