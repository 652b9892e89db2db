"""Sessions sustained under a target: a short search over the arrival rate.

**Definition** (docs/simulate.md): the sustained sessions of a deployment under a workload are the
largest mean concurrency per replica (time-averaged sessions in service, warm-up cut off) of a run
that meets the target, over runs of the same sessions with their arrival times compressed by a
factor ``k`` (arrival rate x ``k``; each session's own steps and pauses are unchanged).

The search: a run at ``k = 1``; then doubling ``k`` while the target holds (or halving until it
does), then bisection in log ``k`` between the last scale that held and the first that failed, for
``probes`` runs in all. Each probe replays the first ``probe_sessions`` sessions of the source.
The trail of every probe is kept, so the answer shows its evidence.

**The stop** (``Stop``): a session is refused at the cap when its own context would pass the cap, which its
workload and the cap decide, not the load (the arrival scale changes when sessions arrive, not their steps;
simulate/scheduler.py ``_cap``). Such a session is refused at every scale: at the cap, or earlier at admission
when the pool is full, so every probe refuses at least the sessions one probe refused at the cap. Once a probe's
refusals at the cap alone pass the target's refusal tolerance, no scale can meet the target, and the search
stops there (``cap_bound``): no sessions are sustained, whatever the probes left.

With ``jobs`` processes (or on a Ray cluster) the probes the serial search may need next are run together
(``ahead``); the trail is the serial one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

from kvbudget.simulate.parallel import default_jobs, run_all
from kvbudget.simulate.policies import Target
from kvbudget.simulate.runner import Progress, SimConfig, SimResult, simulate
from kvbudget.workload.record import SessionPlan

MAX_DOUBLINGS = 12


@dataclass(frozen=True)
class Probe:
    scale: float
    mean_concurrency: float  # all replicas
    p99_delay_s: float
    preemptions: int
    refused: int
    holds: bool
    unstable: bool = False  # the queue grew through this probe's run
    ttft_p99_s: float = 0.0
    itl_p99_s: float = 0.0
    missed: tuple[str, ...] = ()  # what of the target the probe missed, in words

    def to_json(self) -> dict[str, object]:
        return {
            "arrival_scale": round(self.scale, 6),
            "mean_concurrency": round(self.mean_concurrency, 4),
            "p99_queue_delay_s": self.p99_delay_s,
            "preemptions": self.preemptions,
            "refused": self.refused,
            "p99_ttft_s": self.ttft_p99_s,
            "p99_itl_s": self.itl_p99_s,
            "queue_grows": self.unstable,
            "target_met": self.holds,
            "misses": list(self.missed),
        }


@dataclass(frozen=True)
class Stop:
    """Why the search stopped before its probes were spent: ``cap_bound``, the probe at ``scale`` refused
    ``refused_at_cap`` of its ``sessions`` at the cap in force (``cap_tokens``: the serving cap, or a workload's
    ``[cap] tokens`` below it) alone, above the target's ``tolerance`` (a rate)."""

    scale: float
    refused_at_cap: int
    sessions: int
    tolerance: float
    cap_tokens: int
    reason: str = "cap_bound"

    @property
    def rate(self) -> float:
        return self.refused_at_cap / self.sessions if self.sessions else 0.0

    @property
    def text(self) -> str:
        """The stop as a plain sentence, with what to change."""
        return (
            f"the search stopped after the probe at arrival rate x{self.scale:.3g}: {self.refused_at_cap:,} of "
            f"{self.sessions:,} sessions ({_share(self.refused_at_cap, self.sessions)}) were refused at the "
            f"{self.cap_tokens:,}-token cap, above the {_pct(self.tolerance)} the target tolerates; a session whose "
            "context passes the cap is refused at any load, so no number of sessions meets this target: raise the "
            "cap (--context, or the workload's [cap] tokens when lower) or the refusal tolerance "
            "(--target-refusal-rate)"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "reason": self.reason,
            "arrival_scale": round(self.scale, 6),
            "refused_at_cap": self.refused_at_cap,
            "sessions": self.sessions,
            "cap_tokens": self.cap_tokens,
            "refused_at_cap_rate": round(self.rate, 6),
            "refusal_rate_tolerance": self.tolerance,
            "text": self.text,
        }


def cap_bound(result: SimResult, config: SimConfig, target: Target, scale: float) -> Stop | None:
    """The stop after the probe at ``scale`` when its refusals at the cap alone pass the target's refusal
    tolerance (module doc); None when they do not."""
    if result.refused_at_cap > target.refusal_rate * result.arrived:
        cap = config.policy.cap.limit(config.memory.cap_tokens)  # the cap in force (scheduler.py ``limit``)
        return Stop(scale, result.refused_at_cap, result.arrived, target.refusal_rate, cap)
    return None


@dataclass(frozen=True)
class Sustained:
    sessions_per_replica: float | None  # None when no probe met the target
    scale: float | None  # arrival-rate factor of the probe that gave it
    probe_sessions: int
    trail: tuple[Probe, ...]
    stopped: Stop | None = None  # the search stopped early: no scale can meet the target

    @property
    def bounded(self) -> bool:
        """Whether a probe at a higher arrival rate than the answer's missed the target: the answer is then a
        capacity (the load past which the target fails, to the search's resolution), not only a load that held."""
        return self.scale is not None and any(not p.holds and p.scale > self.scale for p in self.trail)

    @property
    def failed_above(self) -> Probe | None:
        """The lowest-rate probe above the answer that missed the target (what it missed bounds the answer)."""
        above = [p for p in self.trail if not p.holds and (self.scale is None or p.scale > self.scale)]
        return min(above, key=lambda p: p.scale) if above else None


def misses(result: SimResult, target: Target) -> list[str]:
    """What of the target a run misses, in words (empty: it meets it). Refusals of every kind count against the
    target's refusal rate, preemptions against its rate per step; a growing queue is named as unstable."""
    out: list[str] = []
    if result.queue_grows:
        out.append("the waiting queue grows through the run (arrivals outpace service)")
    if result.refused > target.refusal_rate * result.arrived:
        out.append(
            f"{result.refused:,} of {result.arrived:,} sessions refused ({_share(result.refused, result.arrived)}; "
            f"{result.refused_at_cap:,} at the cap), above {_pct(target.refusal_rate)}"
        )
    if not target.allow_preemption and result.preemptions > target.preemption_rate * result.steps:
        out.append(
            f"{result.preemptions:,} preemptions in {result.steps:,} steps "
            f"({_share(result.preemptions, result.steps)}), above {_pct(target.preemption_rate)}"
        )
    if result.queue_delay_s["p99"] > target.p99_delay_s:
        out.append(f"p99 queue delay {result.queue_delay_s['p99']:.3g} s, above {target.p99_delay_s:g} s")
    out += latency_misses(result, target)
    return out


def latency_misses(result: SimResult, target: Target) -> list[str]:
    """The latency targets a run misses, in words: its p99 time to first token or inter-token latency per step."""
    out: list[str] = []
    if target.ttft_p99_s is not None and result.ttft_s["p99"] > target.ttft_p99_s:
        out.append(f"p99 TTFT {_time(result.ttft_s['p99'])}, above {_time(target.ttft_p99_s)}")
    if target.itl_p99_s is not None and result.itl_s["p99"] > target.itl_p99_s:
        out.append(f"p99 ITL {_time(result.itl_s['p99'])}, above {_time(target.itl_p99_s)}")
    return out


def _time(seconds: float) -> str:
    return f"{seconds * 1000:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def meets(result: SimResult, target: Target) -> bool:
    """Whether a run meets the target (``misses`` says what it misses)."""
    return not misses(result, target)


def _pct(rate: float) -> str:
    return f"{100 * rate:.3g}%"


def _share(count: int, total: int) -> str:
    return _pct(count / total) if total else "0%"


def scaled(sessions: Iterable[SessionPlan], scale: float) -> Iterator[SessionPlan]:
    """The same sessions arriving ``scale`` times as fast."""
    for plan in sessions:
        yield replace(plan, arrival_s=plan.arrival_s / scale)


def _scales(probes: int) -> Generator[float, bool, None]:
    """The search's scales in order; each ``send`` is whether the last one met the target."""
    good: float | None = None
    bad: float | None = None
    scale = 1.0
    done = 0
    for _ in range(min(probes, MAX_DOUBLINGS)):
        holds = yield scale
        done += 1
        if holds:
            good = scale
            if bad is not None:
                break
            scale *= 2
        else:
            bad = scale
            if good is not None:
                break
            scale /= 2
    while done < probes and good is not None and bad is not None:
        mid = math.sqrt(good * bad)
        holds = yield mid
        done += 1
        if holds:
            good = mid
        else:
            bad = mid


def next_scale(history: Sequence[tuple[float, bool]], probes: int) -> float | None:
    """The next scale the serial search probes after ``history`` ((scale, met) pairs), None when it is done."""
    plan = _scales(probes)
    try:
        scale = next(plan)
        for _, holds in history:
            scale = plan.send(holds)
    except StopIteration:
        return None
    return scale


def ahead(history: list[tuple[float, bool]], probes: int, known: Mapping[float, bool], jobs: int) -> list[float]:
    """Up to ``jobs`` scales the serial search may probe next, nearest first: the next one, then those after
    either outcome of each unknown probe (breadth first). Run together, they are speculation; only the scales
    on the serial path enter the trail, so the answer is the serial one."""
    out: list[float] = []
    frontier = [history]
    while frontier and len(out) < jobs:
        hist = frontier.pop(0)
        scale = next_scale(hist, probes)
        if scale is None:
            continue
        if scale in known:
            frontier.append([*hist, (scale, known[scale])])
            continue
        if scale not in out:
            out.append(scale)
        frontier.extend(([*hist, (scale, True)], [*hist, (scale, False)]))
    return out


def _probe(source: Callable[[], Iterable[SessionPlan]], config: SimConfig, scale: float) -> SimResult:
    return simulate(scaled(source(), scale), config, None)


def find_sustained(
    source: Callable[[], Iterable[SessionPlan]],
    config: SimConfig,
    target: Target,
    *,
    probe_sessions: int,
    probes: int = 8,
    progress: Callable[[int], Progress | None] | None = None,
    first: SimResult | None = None,
    jobs: int | None = 1,
    cache: dict[float, SimResult] | None = None,
    ray: str | None = None,
) -> Sustained:
    """Search the arrival scale for the largest mean concurrency that meets ``target``. ``first``:
    an identical run at scale 1 already made (it is used instead of running it again). ``jobs``: processes
    for probes run ahead of the serial search (None: every core; 1: serial); the trail and answer are the
    serial ones either way; the search stops after a probe whose refusals at the cap alone pass the target's
    refusal tolerance (``Sustained.stopped``: no scale can meet it; module doc). ``cache``: the probes' runs by
    scale, shared between searches of the same sessions under different targets (a scale probed once is not run
    again; the simulator is deterministic). ``ray``: a Ray cluster's address; the probes run ahead as tasks there,
    as many at once as ``jobs`` (None: the cluster's CPUs)."""
    run_config = replace(config, max_sessions=probe_sessions, duration_s=None)
    results: dict[float, SimResult] = {} if cache is None else cache
    if first is not None:
        results.setdefault(1.0, first)
    if ray is not None:
        from kvbudget.simulate.cluster import cluster_cpus

        workers = cluster_cpus(ray) if jobs is None else jobs
    else:
        workers = default_jobs() if jobs is None else jobs
    # what a parallel probe runs: no progress hook, nothing but the sessions and the configuration to carry
    task = partial(_probe, source, run_config)

    def probe(scale: float) -> SimResult:
        hook = progress(len(trail) + 1) if progress else None
        return simulate(scaled(source(), scale), run_config, hook)

    trail: list[Probe] = []
    history: list[tuple[float, bool]] = []
    while (scale := next_scale(history, probes)) is not None:
        if scale not in results:
            known = {s: meets(r, target) for s, r in results.items()}
            batch = ahead(history, probes, known, max(1, workers))
            if workers <= 1 and ray is None:
                results[scale] = probe(scale)
            else:
                results.update(zip(batch, run_all(task, batch, workers, ray), strict=True))
        result = results[scale]
        holds = meets(result, target)
        history.append((scale, holds))
        trail.append(
            Probe(
                scale,
                result.mean_concurrency,
                result.queue_delay_s["p99"],
                result.preemptions,
                result.refused,
                holds,
                result.queue_grows,
                result.ttft_s["p99"],
                result.itl_s["p99"],
                tuple(misses(result, target)),
            )
        )
        if (stopped := cap_bound(result, config, target, scale)) is not None:
            return Sustained(None, None, probe_sessions, tuple(trail), stopped)
    held = [p for p in trail if p.holds]
    if not held:
        return Sustained(None, None, probe_sessions, tuple(trail))
    best = max(held, key=lambda p: (p.mean_concurrency, p.scale))
    return Sustained(best.mean_concurrency / config.replicas, best.scale, probe_sessions, tuple(trail))
