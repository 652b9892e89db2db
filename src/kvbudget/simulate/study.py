"""A simulation study: the run at the given load, the sustained-sessions search, and the JSON contract.

``simulate --json`` (schema_version 1) carries at least: ``schema_version``, ``sessions_arrived``,
``sessions_finished``, ``refused``, ``preemptions``, ``compactions``, ``pool_bytes``,
``peak_pool_bytes``, ``queue_delay_s`` (``{p50, p99}``), ``prefix_hit_rate``,
``recomputed_tokens``, ``mean_concurrency``, ``sustained_sessions``, ``static_plan_sessions``.
Conservation: ``sessions_arrived = sessions_finished + refused + live_at_end``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kvbudget.simulate.policies import Target
from kvbudget.simulate.runner import Progress, SimConfig, SimResult, simulate
from kvbudget.simulate.search import Stop, Sustained, find_sustained, meets, misses
from kvbudget.simulate.targets import AtTargets, at_targets
from kvbudget.workload.record import SessionPlan

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Study:
    result: SimResult
    config: SimConfig
    target: Target
    static_plan_sessions: int
    sustained: Sustained | None = None
    static_prefix_sessions: int | None = None
    about: dict[str, object] = field(default_factory=dict)
    sustained_memory: Sustained | None = None  # the search under the memory target alone (latency targets given)

    @property
    def at_targets(self) -> AtTargets | None:
        """With latency targets: the sessions memory allows, those the latency targets hold, which binds."""
        if not self.target.has_latency:
            return None
        return at_targets(self.target, self.result, self.config.replicas, self.sustained_memory, self.sustained)

    @property
    def stopped(self) -> Stop | None:
        """Why a search stopped before its probes were spent (the memory search's first, with latency targets):
        refusals at the cap alone miss the target at any load; None when no search stopped."""
        found = (s.stopped for s in (self.sustained_memory, self.sustained) if s is not None)
        return next((stop for stop in found if stop is not None), None)

    @property
    def target_met(self) -> bool:
        return meets(self.result, self.target)

    @property
    def misses(self) -> list[str]:
        """What of the target this run misses, in words (empty when met)."""
        return misses(self.result, self.target)

    @property
    def verdict(self) -> str:
        """``met``, ``unstable`` (the queue grows: no capacity figure holds at this load) or ``missed``."""
        if self.target_met:
            return "met"
        return "unstable" if self.result.queue_grows else "missed"

    def to_dict(self, *, time_series: bool = False) -> dict[str, object]:
        """The ``kvbudget simulate --json`` document (with the sampled time series on request)."""
        return study_json(self, time_series=time_series)

    @property
    def sustained_sessions(self) -> float | None:
        """Per replica: the search's answer, or without a search the run's own mean concurrency
        when the run met the target (None when it did not)."""
        if self.sustained is not None:
            return self.sustained.sessions_per_replica
        return self.result.mean_concurrency / self.result.replicas if self.target_met else None


def run_study(
    source: Callable[[], Iterable[SessionPlan]],
    config: SimConfig,
    target: Target,
    *,
    static_plan_sessions: int,
    static_prefix_sessions: int | None = None,
    search_sessions: int = 0,
    search_probes: int = 8,
    progress: Callable[[str], Progress | None] | None = None,
    about: dict[str, object] | None = None,
    jobs: int | None = 1,
    ray: str | None = None,
) -> Study:
    """Run ``config`` on the sessions ``source()`` yields, then (``search_sessions`` > 0) the search."""
    result = simulate(source(), config, progress("run") if progress else None)
    sustained = memory = None
    if search_sessions > 0:
        # The probe at scale 1 is the run itself when the run took the same sessions, unscaled.
        n, cut = result.arrived, config.max_sessions
        same = config.duration_s is None and (
            n == search_sessions or (n < search_sessions and (cut is None or n < cut))
        )
        cache: dict[float, SimResult] = {}  # the runs by arrival scale, shared by the two searches

        def search(held: Target, label: str) -> Sustained:
            return find_sustained(
                source,
                config,
                held,
                probe_sessions=search_sessions,
                probes=search_probes,
                progress=(lambda i: progress(f"search{label} probe {i}/{search_probes}")) if progress else None,
                first=result if same else None,
                jobs=jobs,
                cache=cache,
                ray=ray,
            )

        if target.has_latency:
            memory = search(target.memory_only(), " (memory)")
        sustained = search(target, " (latency)" if target.has_latency else "")
    return Study(result, config, target, static_plan_sessions, sustained, static_prefix_sessions, about or {}, memory)


def _r(value: float, digits: int = 4) -> float:
    return round(value, digits)


def study_json(study: Study, *, time_series: bool = False) -> dict[str, object]:
    """The ``kvbudget simulate --json`` document; the sampled time series (the plot's data, about 150 KB)
    only with ``time_series`` (``--time-series``)."""
    r, c, p = study.result, study.config, study.config.policy
    sustained = study.sustained_sessions
    out: dict[str, object] = {"schema_version": SCHEMA_VERSION, **study.about}
    out.update(
        {
            "policy": p.policy,
            "preempt": p.preempt,
            "pause": p.pause,
            "admission": p.admission,
            "watermark": p.watermark if p.policy == "watermark" else None,
            "cap": {"at_cap": p.cap.mode, "target_tokens": p.cap.target_tokens, "summary_tokens": p.cap.summary_tokens},
            "replicas": c.replicas,
            "router": c.router,
            "sessions_arrived": r.arrived,
            "sessions_finished": r.finished,
            "refused": r.refused,
            "refused_admission": r.refused_admission,
            "refused_at_cap": r.refused_at_cap,
            "refused_too_big": r.refused_too_big,
            "live_at_end": r.live_at_end,
            "preemptions": r.preemptions,
            "swaps": r.swaps,
            "swap_bytes": r.swap_bytes,
            "compactions": r.compactions,
            "evictions": r.evictions,
            "pool_bytes": r.pool_bytes,
            "peak_pool_bytes": r.peak_pool_bytes,
            "peak_resident_bytes": r.peak_resident_bytes,
            "queue_delay_s": r.queue_delay_s,
            "step_wait_s": r.step_wait_s,
            "latency": latency_json(r),
            "prefix_hit_rate": _r(r.prefix_hit_rate, 6),
            "recomputed_tokens": r.recomputed_tokens,
            "steps": r.steps,
            "prompt_tokens": r.prompt_tokens,
            "prefill_tokens": r.prefill_tokens,
            "decode_tokens": r.decode_tokens,
            "mean_concurrency": _r(r.mean_concurrency),
            "peak_concurrency": r.peak_concurrency,
            "concurrency_window_s": [_r(r.concurrency_window_s[0], 3), _r(r.concurrency_window_s[1], 3)],
            "sim_time_s": _r(r.sim_time_s, 3),
            "target": {
                "p99_queue_delay_s": study.target.p99_delay_s,
                "allow_preemption": study.target.allow_preemption,
                "preemption_rate": study.target.preemption_rate,
                "refusal_rate": study.target.refusal_rate,
                "ttft_p99_s": study.target.ttft_p99_s,
                "itl_p99_s": study.target.itl_p99_s,
                "text": study.target.describe(),
                "met_by_run": study.target_met,
                "verdict": study.verdict,
                "misses": study.misses,
            },
            "queue_grows": r.queue_grows,
            "sustained_sessions": None if sustained is None else _r(sustained, 2),
            "sustained_sessions_total": None if sustained is None else _r(sustained * c.replicas, 2),
            "sustained_basis": sustained_basis(study),
            "at_targets": None if study.at_targets is None else study.at_targets.to_json(),
            "static_plan_sessions": study.static_plan_sessions,
            "static_plan_sessions_with_prefix": study.static_prefix_sessions,
            "search": _search_json(study.sustained),
            "search_memory": _search_json(study.sustained_memory),
        }
    )
    if c.running_limit is not None or "running_limit" in study.about:
        out["running_limit"] = running_limit_json(study)
    if time_series:
        out["time_series"] = {
            "fields": ["t", "used_bytes", "cached_bytes", "running", "waiting", "paused"],
            "samples": [s.to_json() for s in r.samples],
        }
    return out


def running_limit_json(study: Study) -> dict[str, object] | None:
    """The running limit the run admitted by (per replica, its basis and provenance) and whether it bound: the
    steps that waited while it held their queue, and their wait from ready to admission; None: the engine has none
    modelled."""
    r = study.result
    if r.running_limit is None:
        return None
    given = study.about.get("running_limit")
    about = given if isinstance(given, dict) else {}
    return {
        "per_replica": r.running_limit,
        "basis": about.get("basis", "SimConfig.running_limit as set"),
        "provenance": about.get("provenance", "given"),
        "bound": r.limit_waits > 0,
        "steps_held": r.limit_waits,
        "wait_s": r.limit_wait_s,
        "peak_running": r.peak_running,
    }


def _search_json(sustained: Sustained | None) -> dict[str, object] | None:
    if sustained is None:
        return None
    return {
        "probe_sessions": sustained.probe_sessions,
        "arrival_scale": sustained.scale,
        "bounded": sustained.bounded,
        "stopped": None if sustained.stopped is None else sustained.stopped.to_json(),
        "probes": [probe.to_json() for probe in sustained.trail],
    }


def latency_json(r: SimResult) -> dict[str, object]:
    """Time to first token and inter-token latency (per step, p50 / p99), the output speed a session sees, and
    the run's achieved rates."""
    itl = r.itl_s

    def speed(seconds: float) -> float | None:
        return _r(1 / seconds, 3) if seconds > 0 else None

    return {
        "ttft_s": r.ttft_s,
        "itl_s": itl,
        "output_tokens_per_s_per_session": {"p50": speed(itl["p50"]), "slowest_1pct": speed(itl["p99"])},
        "output_tokens_per_s": _r(r.decode_tokens / r.sim_time_s, 3) if r.sim_time_s > 0 else None,
        "prefill_tokens_per_s_achieved": _r(r.prefill_tokens / r.prefill_busy_s, 3) if r.prefill_busy_s else None,
    }


def sustained_basis(study: Study) -> str:
    """How the sustained sessions were found, in words (the JSON's ``sustained_basis``)."""
    if study.sustained is not None:
        s = study.sustained
        if s.stopped is not None:
            return f"no probe met the target ({study.target.describe()}); {s.stopped.text}"
        if s.scale is None:
            tipped = " (the queue grows: unstable even at the lowest rate probed)" if s.trail[-1].unstable else ""
            return f"no probe of {s.probe_sessions} sessions met the target ({study.target.describe()}){tipped}"
        return (
            f"largest mean concurrency per replica meeting the target over {len(s.trail)} probes of "
            f"{s.probe_sessions:,} sessions (arrival rate x {s.scale:.3g})"
        )
    if study.target_met:
        return "mean concurrency per replica of this run, which met the target (no search)"
    return "this run missed the target and no search was run"
