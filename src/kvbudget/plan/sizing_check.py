"""``kvbudget size``'s latency-bound counts checked by simulation.

Speed's arithmetic (plan/sizing_load.py) counts every session a replica holds as generating at once, tool pauses
not subtracted: an upper bound on the replicas the latency targets need. An agent's sessions spend most of their
time in tool calls (the WEKA-fitted workload pauses 93% of it), so the bound can be twice the count the load
really needs. The count is refined here by the simulator itself (simulate/deployment.py, the run ``kvbudget
simulate`` makes): a search of the replicas between memory's count (the floor: the worst case reserved, as
``plan``) and speed's (the bound), each probe one run of the workload's first ``PROBE_SESSIONS`` sessions (seed
0), with their pauses, at the same targets (``simulate``'s: p99 TTFT and inter-token latency per step, and its
preemption, refusal and queue-delay tolerances). The answer is the fewest replicas that meet the targets, one
fewer missing them (or the floor itself meeting them): verified, not modelled. When speed's count itself misses
in simulation (its p99 is not the mean load's arithmetic), counts above it
are tried, doubling up to ``ABOVE`` times it, then searched the same way; none meeting is said so.

The order of the probes (docs/size.md, "The search"): the floor first (when it meets, memory binds: one run);
then a bisection above it, each midpoint followed by its neighbour on the answer's side, which ends the search
when the verdict turns there; speed's count first when the calibration run there already missed. The README
question: 4 probes (vLLM 5, 10, 11; SGLang 9), where a plain bisection made 7, with the same answer.

The load as a rate: ``--rate`` as given. ``--sessions N`` (peak concurrent) as the arrival rate that keeps N
sessions in flight on average in the run: Little's law with the workload's session time at the row's speeds
(workload/little.py ``session_time``) gives a first rate; the run's mean concurrency is measured on its window,
where the longest sessions are not all done, so one run at the bound measures it and the rate is scaled once by
N / that (the README question: 51.7 at the first rate, 59.2 after the scaling).

Every probe is a pure function of its inputs (docs/simulate.md, "Determinism"), so the answer does not depend on
the number of processes: the rows to check run side by side (simulate/parallel.py ``run_all``, ``--jobs``).
Checked are the met rows that latency binds, with a workload whose sessions pause, whose memory floor costs less
than the cheapest computed answer (a row whose floor costs more cannot become the pick).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.plan.sizing_candidate import Candidate
    from kvbudget.requests.simulate import SimulateRequest
    from kvbudget.requests.size import SizeRequest
    from kvbudget.workload.model import Workload

PROBE_SESSIONS = 1000  # sessions per probe: the README question's p99 TTFT over ~25,000 steps
PROBE_SEED = 0  # simulate's default seed: the sessions a default simulate run starts with
ABOVE = 4  # when speed's count misses in simulation, counts up to 4x it are tried before the check gives up


@dataclass(frozen=True)
class Probe:
    """One simulate run of the row at ``replicas``."""

    replicas: int
    mean_concurrency: float  # all replicas
    ttft_p99_s: float
    itl_p99_s: float
    met: bool
    misses: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {
            "replicas": self.replicas,
            "mean_concurrency": round(self.mean_concurrency, 3),
            "ttft_p99_s": round(self.ttft_p99_s, 6),
            "itl_p99_s": round(self.itl_p99_s, 6),
            "target_met": self.met,
            "misses": list(self.misses),
        }


@dataclass(frozen=True)
class Simulated:
    """A row's count checked by simulation: the fewest replicas that meet the targets, and the runs that show it."""

    rate_per_s: float  # the arrival rate the probes ran at (whole deployment)
    rate_basis: str
    floor: int  # memory's count
    computed: int  # speed's count, the bound
    replicas: int | None  # the fewest that meet the targets; None: not even the bound
    probes: tuple[Probe, ...]  # in the order run
    sessions: int = PROBE_SESSIONS
    seed: int = PROBE_SEED

    def at(self, replicas: int) -> Probe | None:
        return next((p for p in self.probes if p.replicas == replicas), None)

    @property
    def met_probe(self) -> Probe | None:
        return None if self.replicas is None else self.at(self.replicas)

    @property
    def missed_probe(self) -> Probe | None:
        """The run one replica fewer than the answer (None: the answer is the floor)."""
        return None if self.replicas is None else self.at(self.replicas - 1)

    def to_dict(self) -> dict[str, object]:
        return {
            "replicas_met": self.replicas,
            "replicas_floor": self.floor,
            "replicas_computed": self.computed,
            "rate_per_s": round(self.rate_per_s, 9),
            "rate_basis": self.rate_basis,
            "sessions": self.sessions,
            "seed": self.seed,
            "probes": [p.to_dict() for p in self.probes],
        }


def pauses(workload: Workload | None) -> bool:
    """Whether the workload's sessions pause between steps (tool calls, think time)."""
    if workload is None or workload.steps.mean() <= 1:
        return False
    return workload.tool_latency_s.mean() + workload.think_time_s.mean() > 0


def checkable(c: Candidate, workload: Workload | None) -> bool:
    """A met row latency binds, of a workload whose sessions pause and whose arrivals a rate can set."""
    return (
        not c.unmet
        and c.binding in ("prefill", "decode")
        and c.load is not None
        and c.latency is not None
        and pauses(workload)
        and workload is not None
        and not workload.arrival.replay
    )


def _key(c: Candidate, replicas: int) -> tuple[int, float]:
    """What a row costs at ``replicas``: priced rows by $/h, the rest after them by GPUs."""
    price = c.price_per_gpu_hour
    gpus = replicas * c.choice.tp
    return (0, price * gpus) if price is not None else (1, float(gpus))


def floor_of(c: Candidate) -> int:
    assert c.load is not None
    return max(1, math.ceil(c.load.sessions / c.memory_sessions))


def to_check(rows: list[Candidate], workload: Workload | None) -> list[Candidate]:
    """The rows worth checking: latency-bound rows (``checkable``) whose memory floor costs less than the
    cheapest computed answer of any met row."""
    met = [c for c in rows if not c.unmet]
    if not met:
        return []
    best = min(_key(c, c.replicas) for c in met)
    return [c for c in met if checkable(c, workload) and _key(c, floor_of(c)) < best]


def check_rows(request: SizeRequest, rows: list[Candidate], workload: Workload) -> dict[int, Simulated]:
    """The simulated count of each row ``to_check`` picks, by its index in ``rows``; the rows run side by side."""
    from kvbudget.simulate.parallel import run_all

    picked = [i for i, c in enumerate(rows) if c in to_check(rows, workload)]

    def one(i: int) -> Simulated:  # the rows stay here (forked workers inherit them); indices cross, not plans
        return _check_one(request, workload, rows[i])

    done = run_all(one, picked, request.jobs)
    return dict(zip(picked, done, strict=True))


def _simulate_request(request: SizeRequest, c: Candidate, replicas: int, rate: float) -> SimulateRequest:
    from kvbudget.requests.base import narrowed
    from kvbudget.requests.simulate import SimulateRequest

    return narrowed(
        SimulateRequest,
        request,
        **c.choice.options(),
        replicas=replicas,
        rate=rate,
        sessions=PROBE_SESSIONS,
        seed=PROBE_SEED,
        search_sessions=0,
        jobs=1,
    )


def _run(request: SizeRequest, c: Candidate, replicas: int, rate: float) -> Probe:
    from kvbudget.simulate.deployment import simulate_deployment

    study = simulate_deployment(_simulate_request(request, c, replicas, rate))
    r = study.result
    return Probe(
        replicas,
        r.mean_concurrency,
        r.ttft_s.get("p99") or 0.0,
        r.itl_s.get("p99") or 0.0,
        study.target_met,
        tuple(study.misses),
    )


def _rate(request: SizeRequest, c: Candidate, workload: Workload) -> tuple[float, str, Probe | None]:
    """The arrival rate the probes run at, its basis (module doc), and the calibration run (None: ``--rate``)."""
    from kvbudget.workload.little import ServiceRates, session_time

    if request.rate is not None:
        return request.rate, f"--rate {request.rate:g}/s as given", None
    assert c.load is not None and c.latency is not None
    sessions = c.load.sessions
    rates = ServiceRates(prefill_tokens_per_s=_prefill_rate(c), decode_tokens_per_s=1 / c.latency.itl_s)
    first = sessions / session_time(workload, rates).mean_s
    calibration = _run(request, c, c.replicas, first)
    rate = first * sessions / max(calibration.mean_concurrency, 1e-9)
    basis = (
        f"{sessions:,} sessions in flight: Little's law gives {first:.6g}/s (E[T] at the row's speeds), a run at "
        f"{c.replicas:,} replicas held {calibration.mean_concurrency:.1f} on average, so x {sessions:,} / "
        f"{calibration.mean_concurrency:.1f}"
    )
    return rate, basis, calibration


def _prefill_rate(c: Candidate) -> float:
    """Prefill tokens/s of one prompt at the row's computed load: the held step's new tokens over its TTFT."""
    assert c.latency is not None
    step = c.latency.step
    new = step[0] if step is not None else 1
    return max(new, 1) / max(c.latency.ttft_s, 1e-9)


def _check_one(request: SizeRequest, workload: Workload, c: Candidate) -> Simulated:
    """The fewest replicas from memory's floor up that simulate finds within the targets (module doc, "The
    order of the probes")."""
    rate, basis, calibration = _rate(request, c, workload)
    floor, bound = floor_of(c), c.replicas
    probes: list[Probe] = []

    def meets(n: int) -> bool:
        probe = next((p for p in probes if p.replicas == n), None) or _run(request, c, n, rate)
        if probe not in probes:
            probes.append(probe)
        return probe.met

    def fewest(lo: int, hi: int) -> int:
        """The first count in [lo, hi] that meets (hi assumed to; lo - 1 missed, or lo is the floor): lo itself
        first, then bisection, each midpoint followed by its neighbour on the side the answer lies."""
        if lo >= hi or meets(lo):
            return lo
        lo += 1
        while lo < hi:
            mid = (lo + hi) // 2
            if meets(mid):
                hi, near = mid, mid - 1
            else:
                lo, near = mid + 1, mid + 1
            if lo <= near < hi:  # the neighbour: when it settles the search, one probe instead of log2 of them
                if meets(near):
                    hi = near
                else:
                    lo = near + 1
        return lo

    # the calibration run (speed's count, at a rate below the final one) already missing: speed's count first
    found: int | None = bound
    if calibration is None or calibration.met or meets(bound):
        found = fewest(floor, bound)
    # not even speed's count: above it, doubling up to ABOVE x it, then bisection
    if found == bound and not meets(bound):
        missed, n = bound, bound
        while n < ABOVE * bound:
            n = min(2 * n, ABOVE * bound)
            if meets(n):
                found = fewest(missed + 1, n)
                break
            missed = n
        else:
            found = None
    return Simulated(rate, basis, floor, bound, found, tuple(probes))


def apply(c: Candidate, sim: Simulated, ttft: float | None, itl: float | None) -> Candidate:
    """The row at its simulated count: replicas, sessions per replica, what binds and the latency simulate
    measured there; unchanged but for the evidence when not even the bound met the targets."""
    from kvbudget.plan.sizing_load import Latency

    if sim.replicas is None or c.load is None or c.latency is None:
        return replace(c, simulated=sim)
    replicas = sim.replicas
    per = math.ceil(c.load.sessions / replicas)
    met = sim.met_probe
    missed = sim.missed_probe
    if missed is None:
        binding = "memory"  # the floor itself meets the targets
    elif ttft is not None and missed.ttft_p99_s > ttft:
        binding = "prefill"
    elif itl is not None and missed.itl_p99_s > itl:
        binding = "decode"
    else:
        binding = "memory"  # preemptions, refusals or the queue for a slot: the pool
    latency = c.latency
    if met is not None:
        latency = Latency(per, met.ttft_p99_s, met.itl_p99_s, c.latency.decode_bound, "simulated", "p99", None)
    return replace(c, replicas=replicas, latency_sessions=per, binding=binding, latency=latency, simulated=sim)
