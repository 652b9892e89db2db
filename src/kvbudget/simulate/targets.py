"""Sessions sustained at the memory limit and at the latency targets, and which one binds (``simulate --ttft
--itl``; docs/simulate.md).

With latency targets, the sustained-sessions search (search.py) runs twice over the same sessions: once holding
the memory target alone (preemptions, refusals, queue delay for room, a stable queue: ``Target.memory_only``) and
once holding it with the latency targets (p99 time to first token and inter-token latency per step). The two
searches share their runs: a scale the first probed is not run again (the simulator is deterministic), so the
work is at most twice the search's probes, and usually a few more than once. The latency figure can only be at
most the memory one where the searches probe the same scales; the one that is lower binds, and the missed
latency target of the first probe above it (TTFT, ITL or both) is named.

A figure is worded as a capacity only when it is one: when a probe at a higher arrival rate missed the target
(``Sustained.bounded``). Otherwise it is "at least" the highest load probed, or, without a search, the load of
the run, which held.
"""

from __future__ import annotations

from dataclasses import dataclass

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.simulate.policies import Target
    from kvbudget.simulate.runner import SimResult
    from kvbudget.simulate.search import Sustained


@dataclass(frozen=True)
class Figure:
    """Sessions per replica a target holds: ``sessions`` (None: nothing held), and whether it is a capacity."""

    sessions: float | None
    capacity: bool  # a higher load missed the target (False: the most that was tried, or the run's own load)
    basis: str
    stopped: bool = False  # the search stopped: refusals at the cap alone miss the target at any load

    def words(self) -> str:
        if self.sessions is None:
            return "none"
        return f"{self.sessions:,.1f}" if self.capacity else f"at least {self.sessions:,.1f}"

    def to_json(self) -> dict[str, object]:
        return {
            "sessions_per_replica": None if self.sessions is None else round(self.sessions, 2),
            "is_capacity": self.capacity,
            "basis": self.basis,
        }


def figure(sustained: Sustained | None, result: SimResult, target: Target, replicas: int) -> Figure:
    """What ``target`` holds: the search's answer, or without a search the run's own load when it met it."""
    from kvbudget.simulate.search import meets

    if sustained is None:
        if meets(result, target):
            return Figure(result.mean_concurrency / replicas, False, "this run's load, which met it (no search)")
        return Figure(None, False, "this run missed it and no search was run")
    if sustained.stopped is not None:
        return Figure(None, False, sustained.stopped.text, stopped=True)
    if sustained.scale is None:
        return Figure(None, False, f"no probe of {sustained.probe_sessions:,} sessions met it")
    capped = "a higher rate missed it" if sustained.bounded else "every probe met it: the highest load probed"
    return Figure(
        sustained.sessions_per_replica,
        sustained.bounded,
        f"largest mean concurrency per replica over {len(sustained.trail)} probes (arrival rate x "
        f"{sustained.scale:.3g}; {capped})",
    )


@dataclass(frozen=True)
class AtTargets:
    """The memory figure, the latency figure and which binds (``binds``: memory, ttft, itl, ttft+itl, or none when
    every load probed met both)."""

    target: Target
    memory: Figure
    latency: Figure
    binds: str

    @property
    def text(self) -> str:
        """'memory allows 31.2 sessions per replica; at p99 TTFT <= 2 s and p99 ITL <= 50 ms the simulation
        holds 24.0: latency (TTFT) binds'."""
        m, lat, when = self.memory, self.latency, self.target.describe_latency()
        head = f"memory allows {m.words()} sessions per replica" if m.sessions else "memory allows no load probed"
        if m.stopped:
            head = "memory allows none (at any load, more sessions pass the cap than the target tolerates)"
        held = f"holds {lat.words()}" if lat.sessions else "holds none of the loads probed"
        which = {
            "memory": "memory binds",
            "ttft": "latency (TTFT) binds",
            "itl": "latency (ITL) binds",
            "none": "neither binds within the loads probed (more --search-probes reach higher loads)",
        }
        return f"{head}; at {when} the simulation {held}: {which.get(self.binds, 'latency (TTFT and ITL) binds')}"

    def to_json(self) -> dict[str, object]:
        return {
            "ttft_p99_s": self.target.ttft_p99_s,
            "itl_p99_s": self.target.itl_p99_s,
            "memory": self.memory.to_json(),
            "latency": self.latency.to_json(),
            "binds": self.binds,
            "text": self.text,
        }


def at_targets(
    target: Target,
    result: SimResult,
    replicas: int,
    memory: Sustained | None,
    latency: Sustained | None,
) -> AtTargets:
    """Both figures and which binds: latency when its figure is below memory's (or memory holds a load latency
    does not), naming the latency target the first probe above the latency figure missed."""
    from kvbudget.simulate.search import latency_misses

    mem = figure(memory, result, target.memory_only(), replicas)
    lat = figure(latency, result, target, replicas)
    lower = mem.sessions is not None and (lat.sessions is None or lat.sessions < mem.sessions - 1e-9)
    if not lower:
        # the same load: memory binds when a higher load missed the memory target, else nothing bound yet
        return AtTargets(target, mem, lat, "memory" if mem.capacity or mem.sessions is None else "none")
    missed: list[str] = []
    if latency is not None and latency.failed_above is not None:
        missed = [m for m in latency.failed_above.missed if m.startswith(("p99 TTFT", "p99 ITL"))]
    elif latency is None:
        missed = latency_misses(result, target)
    kinds = [k for k, word in (("ttft", "p99 TTFT"), ("itl", "p99 ITL")) if any(m.startswith(word) for m in missed)]
    return AtTargets(target, mem, lat, "+".join(kinds) or "ttft+itl")
