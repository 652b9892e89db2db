"""SimPy models of the simulator's reserve and paged policies, the references ``kvbudget simulate`` is
checked and timed against (issue 10, goal 1; tests/simulate/test_simpy_reference.py checks that
each agrees with the simulator on the same session stream; ``python -m bench.simpy_reference``
prints the paired speed ratios for both policies at 2,000, 20,000 and 100,000 sessions, and the
``ceiling``: SimPy's time over the time of drawing the session stream alone, which bounds the
speed-up of any simulator that reads the same stream).

The reserve system, written the plain SimPy way (one process per session, the KV pool a ``Container``):

* sessions arrive at their ``arrival_s``; a session takes ``slot_bytes`` (its bytes at the cap) from
  the pool before its first step, first come first served with head-of-line blocking, and gives
  them back when its last step ends (reserve-at-cap, never preempted);
* each step's prompt is the context so far plus its appended tokens (the first also carries the
  shared prefix's tokens); it decodes its output at a fixed ``decode_tokens_per_s`` per session
  (``TimeModel.decode_tokens_per_s``) with instantaneous prefill, then pauses ``pause_s`` before the
  next step (not after the last).

The paged system is in bench/simpy_paged.py (blocks on demand, recompute preemption, the prefix
cache of preempted and finished sessions' blocks). The simulator runs the same systems with
``MemoryModel.linear(pool, 1, cap, share_prefix=False)``, ``MemoryPolicy(policy=...)`` and
``TimeModel(prefill_tokens_per_s=0, decode_tokens_per_s=R)`` (``simulator_config``). Counts agree
exactly; times to float rounding (the simulator keeps a fluid virtual decode clock, SimPy one
timeout per step). Both read a session's steps the same way (``step_rows``: plain tuples).

SimPy is a dev dependency (``pip install -e .[dev]``); nothing in the package imports it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bench.simpy_paged import PagedOutcome, simpy_paged
from kvbudget.workload.record import SessionPlan, step_rows

if TYPE_CHECKING:
    from kvbudget.simulate import SimConfig, SimResult

WORKLOAD = {
    "arrival": {"rate_per_s": 0.4},
    "prefix": {"system_prompt_tokens": 2000, "tool_catalog_tokens": 1000},
    "steps": {"dist": "geometric", "mean": 20},
    "first_prompt_tokens": {"dist": "lognormal", "mean": 1500, "p99": 6000},
    "append_tokens": {"dist": "lognormal", "mean": 300, "p99": 3000},
    "output_tokens": {"dist": "lognormal", "mean": 120, "p99": 800},
    "tool_latency_s": {"dist": "exponential", "mean": 2.0},
}
CAP_TOKENS = 1 << 20  # one byte a token: no session reaches it, so no step meets the cap
SLOTS = 40  # sessions the pool holds at the cap: arrivals outpace it at times, so some queue
PAGED_POOL_TOKENS = 500_000  # paged: the live sessions' demand passes it at times, so some are preempted
POLICIES = ("reserve", "paged")
DECODE_TOKENS_PER_S = 50.0
PAGED_BLOCK = 16  # paged: decode takes a block every 16 tokens (one event each in both models)


@dataclass
class Outcome:
    arrived: int = 0
    finished: int = 0
    steps: int = 0
    prompt_tokens: int = 0
    decode_tokens: int = 0
    live: int = 0
    peak_concurrency: int = 0
    queue_delay_total_s: float = 0.0
    end_s: float = 0.0


def simpy_reserve(
    sessions: Iterable[SessionPlan], *, pool_bytes: int, slot_bytes: int, decode_tokens_per_s: float
) -> Outcome:
    import simpy  # dev dependency

    env = simpy.Environment()
    pool = simpy.Container(env, capacity=pool_bytes, init=pool_bytes)
    out = Outcome()
    per_token = 1.0 / decode_tokens_per_s

    def session(plan: SessionPlan) -> Generator[simpy.Event, object, None]:
        out.arrived += 1
        steps = step_rows(plan.steps)  # the steps as the simulator reads them: plain tuples
        step = next(steps, None)
        if step is None:
            out.finished += 1
            return
        arrived = env.now
        yield pool.get(slot_bytes)
        out.queue_delay_total_s += env.now - arrived
        out.live += 1
        out.peak_concurrency = max(out.peak_concurrency, out.live)
        context, append = 0, step[0] + plan.prefix_tokens
        while True:
            prompt = context + append
            output = step[1]
            out.steps += 1
            out.prompt_tokens += prompt
            yield env.timeout(output * per_token)
            out.decode_tokens += output
            context = prompt + output
            following = next(steps, None)
            if following is None:
                break
            yield env.timeout(step[2])
            step, append = following, following[0]
        out.finished += 1
        out.live -= 1
        yield pool.put(slot_bytes)

    def source(plans: Iterator[SessionPlan]) -> Generator[simpy.Event, object, None]:
        for plan in plans:
            if plan.arrival_s > env.now:
                yield env.timeout(plan.arrival_s - env.now)
            env.process(session(plan))

    env.process(source(iter(sessions)))
    env.run()
    out.end_s = env.now
    return out


def workload_sessions(count: int, seed: int = 1) -> Iterator[SessionPlan]:
    from kvbudget.workload.generate import generate_sessions
    from kvbudget.workload.loader import workload_from_dict

    return generate_sessions(workload_from_dict(WORKLOAD, where="bench"), seed=seed, count=count)


def simulator_config(policy: str = "reserve") -> SimConfig:
    """The simulator set up as the SimPy model of ``policy`` (reserve here, paged in simpy_paged.py)."""
    from kvbudget.simulate import MemoryPolicy, SimConfig
    from kvbudget.simulate.costs import MemoryModel
    from kvbudget.simulate.policies import TimeModel

    pool = SLOTS * CAP_TOKENS if policy == "reserve" else PAGED_POOL_TOKENS
    return SimConfig(
        memory=MemoryModel.linear(
            pool, 1, CAP_TOKENS, block_size=1 if policy == "reserve" else PAGED_BLOCK, share_prefix=False
        ),
        policy=MemoryPolicy(policy="reserve" if policy == "reserve" else "paged"),
        time=TimeModel(prefill_tokens_per_s=0.0, decode_tokens_per_s=DECODE_TOKENS_PER_S),
    )


def run_simpy(policy: str, sessions: Iterable[SessionPlan]) -> Outcome | PagedOutcome:
    if policy == "reserve":
        return simpy_reserve(
            sessions, pool_bytes=SLOTS * CAP_TOKENS, slot_bytes=CAP_TOKENS, decode_tokens_per_s=DECODE_TOKENS_PER_S
        )
    return simpy_paged(
        sessions, pool_tokens=PAGED_POOL_TOKENS, decode_tokens_per_s=DECODE_TOKENS_PER_S, block=PAGED_BLOCK
    )


def counts(run: SimResult | Outcome | PagedOutcome) -> tuple[int, int, int, int, int]:
    """The counts every model of the same system must agree on: sessions arrived and finished, steps,
    prompt and decode tokens."""
    return (run.arrived, run.finished, run.steps, run.prompt_tokens, run.decode_tokens)


def agree(result: SimResult, ref: Outcome | PagedOutcome) -> bool:
    """Every count equal, the end time to float rounding (1e-9 relative)."""
    same = counts(result) == counts(ref) and result.peak_concurrency == ref.peak_concurrency
    if isinstance(ref, PagedOutcome):
        same = same and (result.preemptions, result.recomputed_tokens, result.hit_tokens, result.refused_too_big) == (
            ref.preemptions,
            ref.recomputed_tokens,
            ref.hit_tokens,
            ref.too_big,
        )
    return same and abs(result.sim_time_s - ref.end_s) <= 1e-9 * max(1.0, ref.end_s)


def draw_only(sessions: Iterable[SessionPlan]) -> int:
    """Consume the session stream as both models do and do nothing else: the time a simulator that
    cost nothing would take (the stream is drawn inside each side's timing)."""
    steps = 0
    for plan in sessions:
        for _ in step_rows(plan.steps):
            steps += 1
    return steps


def run_both(policy: str, count: int, seed: int = 1, rounds: int = 3) -> dict[str, object]:
    """Paired timings: each round times the simulator and the SimPy model on the same session stream,
    each drawing it from ``generate_sessions`` inside its own timing (sessions are generated lazily, as
    ``simulate`` consumes them); the two go in alternating order. The ratio is the median round's.

    Each round also times drawing the stream alone (``draw_only``): SimPy's time over that is the
    ``ceiling``, the speed-up a simulator that cost nothing beyond its input would reach."""
    from kvbudget.simulate import simulate

    config = simulator_config(policy)
    simulate(workload_sessions(50, seed), config)  # warm up both (imports, numpy's first draws)
    run_simpy(policy, workload_sessions(50, seed))
    ours: list[float] = []
    theirs: list[float] = []
    drawing: list[float] = []
    result: SimResult | None = None
    ref: Outcome | PagedOutcome | None = None
    for r in range(rounds):
        for side in ("ours", "theirs", "draw") if r % 2 == 0 else ("theirs", "ours", "draw"):
            start = time.perf_counter()
            if side == "ours":
                result = simulate(workload_sessions(count, seed), config)
                ours.append(time.perf_counter() - start)
            elif side == "theirs":
                ref = run_simpy(policy, workload_sessions(count, seed))
                theirs.append(time.perf_counter() - start)
            else:
                draw_only(workload_sessions(count, seed))
                drawing.append(time.perf_counter() - start)
    assert result is not None and ref is not None
    ratios = sorted(t / o for t, o in zip(theirs, ours, strict=True))
    ceilings = sorted(t / d for t, d in zip(theirs, drawing, strict=True))
    return {
        "policy": policy,
        "sessions": count,
        "steps": result.steps,
        "rounds": rounds,
        "simulator_s": round(statistics.median(ours), 3),
        "simpy_s": round(statistics.median(theirs), 3),
        "draw_only_s": round(statistics.median(drawing), 3),
        "speedup": round(statistics.median(ratios), 2),
        "speedup_range": [round(ratios[0], 2), round(ratios[-1], 2)],
        "ceiling": round(statistics.median(ceilings), 2),
        "agree": agree(result, ref),
        "peak_concurrency": result.peak_concurrency,
        "preemptions": result.preemptions,
        "recomputed_tokens": result.recomputed_tokens,
        "queue_delay_p99_s": result.queue_delay_s["p99"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="500 sessions, one round")
    parser.add_argument("--sessions", type=int, nargs="*", default=None)
    parser.add_argument("--policy", choices=POLICIES, nargs="*", default=None)
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    counts = args.sessions or ([500] if args.smoke else [2_000, 20_000, 100_000])
    rounds = args.rounds or (1 if args.smoke else 3)
    rows = [run_both(policy, n, rounds=rounds) for policy in args.policy or POLICIES for n in counts]
    print(json.dumps({"benchmark": "simulate_vs_simpy", "runs": rows}))
    return 0 if all(r["agree"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
