"""A SimPy model of the simulator's reserve policy, the reference ``kvbudget simulate`` is checked and
timed against (issue 10, goal 1; tests/simulate/test_simpy_reference.py; ``python -m
bench.simpy_reference`` prints the speed ratio).

The system, written the plain SimPy way (one process per session, the KV pool a ``Container``):

* sessions arrive at their ``arrival_s``; a session takes ``slot_bytes`` (its bytes at the cap) from
  the pool before its first step, first come first served with head-of-line blocking, and gives
  them back when its last step ends (reserve-at-cap, never preempted);
* each step's prompt is the context so far plus its appended tokens (the first also carries the
  shared prefix's tokens); it decodes its output at a fixed ``decode_tokens_per_s`` per session
  (``TimeModel.decode_tokens_per_s``) with instantaneous prefill, then pauses ``pause_s`` before the
  next step (not after the last).

The simulator runs the same system with ``MemoryModel.linear(pool, 1, cap, share_prefix=False)``,
``MemoryPolicy(policy="reserve")`` and ``TimeModel(prefill_tokens_per_s=0, decode_tokens_per_s=R)``
(``simulator_config``). Counts agree exactly; times to float rounding (the simulator keeps a fluid
virtual decode clock, SimPy one timeout per step).

SimPy is a dev dependency (``pip install -e .[dev]``); nothing in the package imports it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass

from kvbudget.workload.record import SessionPlan

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
DECODE_TOKENS_PER_S = 50.0


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
        steps = iter(plan.steps)
        step = next(steps, None)
        if step is None:
            out.finished += 1
            return
        arrived = env.now
        yield pool.get(slot_bytes)
        out.queue_delay_total_s += env.now - arrived
        out.live += 1
        out.peak_concurrency = max(out.peak_concurrency, out.live)
        context, append = 0, step.append_tokens + plan.prefix_tokens
        while True:
            prompt = context + append
            out.steps += 1
            out.prompt_tokens += prompt
            yield env.timeout(step.output_tokens * per_token)
            out.decode_tokens += step.output_tokens
            context = prompt + step.output_tokens
            following = next(steps, None)
            if following is None:
                break
            yield env.timeout(step.pause_s)
            step, append = following, following.append_tokens
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


def simulator_config() -> object:
    from kvbudget.simulate import MemoryPolicy, SimConfig
    from kvbudget.simulate.costs import MemoryModel
    from kvbudget.simulate.policies import TimeModel

    return SimConfig(
        memory=MemoryModel.linear(SLOTS * CAP_TOKENS, 1, CAP_TOKENS, share_prefix=False),
        policy=MemoryPolicy(policy="reserve"),
        time=TimeModel(prefill_tokens_per_s=0.0, decode_tokens_per_s=DECODE_TOKENS_PER_S),
    )


def run_both(count: int, seed: int = 1) -> dict[str, object]:
    from kvbudget.simulate import simulate

    config = simulator_config()
    plans = list(workload_sessions(count, seed))  # arrivals listed first; steps are drawn lazily in each run
    start = time.perf_counter()
    result = simulate(plans, config)  # type: ignore[arg-type]
    ours = time.perf_counter() - start
    start = time.perf_counter()
    ref = simpy_reserve(
        list(workload_sessions(count, seed)),
        pool_bytes=SLOTS * CAP_TOKENS,
        slot_bytes=CAP_TOKENS,
        decode_tokens_per_s=DECODE_TOKENS_PER_S,
    )
    theirs = time.perf_counter() - start
    same = (result.arrived, result.finished, result.steps, result.prompt_tokens, result.decode_tokens) == (
        ref.arrived,
        ref.finished,
        ref.steps,
        ref.prompt_tokens,
        ref.decode_tokens,
    ) and result.peak_concurrency == ref.peak_concurrency
    return {
        "sessions": count,
        "steps": result.steps,
        "simulator_s": round(ours, 3),
        "simpy_s": round(theirs, 3),
        "speedup": round(theirs / ours, 2),
        "agree": same and abs(result.sim_time_s - ref.end_s) <= 1e-9 * max(1.0, ref.end_s),
        "peak_concurrency": result.peak_concurrency,
        "queue_delay_p99_s": result.queue_delay_s["p99"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="500 sessions only")
    parser.add_argument("--sessions", type=int, nargs="*", default=None)
    args = parser.parse_args()
    counts = args.sessions or ([500] if args.smoke else [2_000, 20_000])
    rows = [run_both(n) for n in counts]
    print(json.dumps({"benchmark": "simulate_vs_simpy", "policy": "reserve", "runs": rows}))
    return 0 if all(r["agree"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
