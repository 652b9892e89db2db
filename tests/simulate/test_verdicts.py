"""Verdicts with tolerances: preemptions and refusals as rates, refusals at the cap counted, a growing queue
named unstable; ``simulate --rate``."""

from __future__ import annotations

import json

import pytest

from kvbudget.errors import InputError
from kvbudget.requests.simulate import SimulateRequest
from kvbudget.requests.values import read_tolerance
from kvbudget.simulate import Target, run_study, simulate
from kvbudget.simulate.deployment import target_of
from kvbudget.simulate.metrics import QueueTrend, queue_grows
from kvbudget.simulate.search import meets, misses
from tests.helpers import run_cli
from tests.simulate.builders import agent_sessions, config, session


def test_queue_grows_only_when_the_late_queue_is_long_and_rising() -> None:
    assert queue_grows([0] * 8 + [1, 2, 3, 4, 5, 6, 7, 8], replicas=1)
    assert not queue_grows([3] * 16, replicas=1)  # long but steady: bursts, not growth
    assert not queue_grows([0] * 12 + [1, 0, 1, 0], replicas=1)  # under one waiting per replica
    assert not queue_grows([0] * 12 + [1, 1, 1, 1], replicas=2)
    assert not queue_grows([0, 5, 9], replicas=1)  # too few checkpoints to say
    trend = QueueTrend()
    for i in range(1, 1001):
        trend.arrival(i, i // 10)
    assert len(trend.checkpoints) <= 64 and trend.checkpoints[-1] == (992, 99) and trend.grows(1)


def test_an_overloaded_replica_is_unstable_not_a_capacity() -> None:
    cfg = config(8 * 4096, decode_rate=20.0)
    overloaded = simulate(agent_sessions(300, rate=5.0), cfg)
    assert overloaded.queue_grows
    assert misses(overloaded, Target())[0].startswith("the waiting queue grows")
    study = run_study(lambda: agent_sessions(300, rate=5.0), cfg, Target(), static_plan_sessions=8, search_sessions=0)
    assert study.verdict == "unstable" and study.sustained_sessions is None
    light = simulate(agent_sessions(100, rate=0.002), config(64 * 32_768, decode_rate=20.0))
    assert not light.queue_grows and meets(light, Target(refusal_rate=0.5))  # sessions past the cap end there


def test_refusals_at_the_cap_count_against_the_target() -> None:
    # one session of three passes a 4,096-token cap (refuse at the cap): 1 of 3 refused
    sessions = [
        session(0, 0.0, [(1000, 100, 1.0), (1000, 100, 0.0)]),
        session(1, 1.0, [(3000, 100, 1.0), (2000, 100, 0.0)]),
        session(2, 2.0, [(500, 100, 0.0)]),
    ]
    result = simulate(iter(sessions), config(64 * 1024, cap=4096))
    assert result.refused_at_cap == 1 and result.refused_admission == 0
    missed = misses(result, Target())
    assert len(missed) == 1 and "1 of 3 sessions refused (33.3%; 1 at the cap), above 0.1%" in missed[0]
    assert meets(result, Target(refusal_rate=0.5))


def test_preemptions_are_a_rate_per_step() -> None:
    result = simulate(agent_sessions(200, rate=0.02), config(128 * 1024))
    assert result.preemptions > 0 and not result.queue_grows
    rate = result.preemptions / result.steps
    assert not meets(result, Target(p99_delay_s=1e9, preemption_rate=rate * 0.99))
    assert meets(result, Target(p99_delay_s=1e9, preemption_rate=rate, refusal_rate=0.99))
    assert meets(result, Target(p99_delay_s=1e9, allow_preemption=True, refusal_rate=0.99))


def test_target_options() -> None:
    base = {"model": "llama-3.1-8b", "context": 4096, "workload": "w.toml"}
    assert target_of(SimulateRequest.from_options(base)) == Target()
    delay = target_of(SimulateRequest.from_options({**base, "target_p99_delay": 5.0}))
    assert delay.allow_preemption and delay.p99_delay_s == 5.0
    both = target_of(SimulateRequest.from_options({**base, "target_p99_delay": 5.0, "target_preemption_rate": "0"}))
    assert not both.allow_preemption and both.preemption_rate == 0.0
    assert read_tolerance("0.1%", "--x") == pytest.approx(0.001) and read_tolerance("0", "--x") == 0.0
    with pytest.raises(InputError, match="must be below 1"):
        read_tolerance("1", "--target-refusal-rate")


def test_rate_sets_the_arrival_rate(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "16k",
            "--workload", "examples/chat.toml", "--sessions", "200", "--search-sessions", "0", "--json")  # fmt: skip

    def sim_time(rate: str) -> float:
        code, out, err = run_cli(capsys, "simulate", *argv, "--rate", rate)
        assert code == 0, err
        value: float = json.loads(out)["concurrency_window_s"][1]  # the last arrival
        return value

    slow, fast = sim_time("0.25"), sim_time("30/min")
    assert fast / slow == pytest.approx(0.5, rel=0.01)  # the same sessions, arriving twice as fast
    code, _, err = run_cli(capsys, "simulate", *argv[:6], "--context", "16k", "--trace", "t.json", "--rate", "1")
    assert code == 1 and "--rate" in err
