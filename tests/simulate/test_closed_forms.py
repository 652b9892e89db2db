"""Closed forms the simulator must reproduce on generated Poisson traffic.

* Little's law (Little 1961): with memory for everyone, the time-averaged sessions in service is
  λ x E[T]. E[T] is exact here: fixed decode speed, instant prefill, so a session of N steps of
  ``o`` output tokens at ``r`` tokens/s with mean pause ``p`` lasts N o / r + (N - 1) p.
  Tolerance 3% relative: the time average over ~20,000 sessions of an M/G/inf count with mean 34
  has a standard error under 1%.
* Erlang B: reserve-at-cap with refusal is an M/G/c/c loss system with c = pool // reservation;
  its refusal rate is B(c, λ E[T]) whatever the pause distribution (insensitivity). Tolerance
  0.015 absolute (about 12% of B = 0.12): the blocking estimate over 20,000 arrivals has a
  standard error of about 0.004 once the correlation of successive blockings is counted.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvbudget.simulate import MemoryModel, MemoryPolicy, SimConfig, TimeModel, simulate
from kvbudget.workload.generate import generate_sessions
from kvbudget.workload.loader import workload_from_dict
from tests.closed_forms import erlang_b

STEPS, OUTPUT, RATE, PAUSE = 4, 100, 50.0, 20.0
MEAN_T = STEPS * OUTPUT / RATE + (STEPS - 1) * PAUSE  # 68 s


def workload(rate: float) -> Any:
    return workload_from_dict(
        {
            "arrival": {"rate_per_s": rate},
            "steps": STEPS,
            "first_prompt_tokens": 1_000,
            "append_tokens": 500,
            "output_tokens": OUTPUT,
            "tool_latency_s": {"dist": "exponential", "mean": PAUSE},
        }
    )


def timing() -> TimeModel:
    return TimeModel(prefill_tokens_per_s=0.0, decode_tokens_per_s=RATE)


@pytest.mark.parametrize("seed", [1, 2])
def test_littles_law_with_unbounded_memory(seed: int) -> None:
    lam = 0.5
    memory = MemoryModel.linear(10**15, 1_000, 32_768, 16)
    r = simulate(generate_sessions(workload(lam), seed=seed, count=20_000), SimConfig(memory, time=timing()))
    assert r.refused == 0 and r.preemptions == 0
    assert r.queue_delay_s["p99"] == 0.0
    assert r.mean_concurrency == pytest.approx(lam * MEAN_T, rel=0.03)


@pytest.mark.parametrize(("servers", "load", "seed"), [(10, 8.0, 1), (5, 5.0, 2), (20, 14.0, 3)])
def test_erlang_b_refusals_under_reserve_at_cap(servers: int, load: float, seed: int) -> None:
    cap = 8_192
    memory = MemoryModel.linear(servers * cap * 1_000, 1_000, cap, 16)
    config = SimConfig(memory, policy=MemoryPolicy(policy="reserve", admission="refuse"), time=timing(), check=True)
    r = simulate(generate_sessions(workload(load / MEAN_T), seed=seed, count=20_000), config)
    assert r.peak_concurrency == servers
    assert (r.refused_admission / r.arrived) == pytest.approx(erlang_b(servers, load), abs=0.015)
    # Little's law holds for the carried load too: L = λ (1 - B) E[T]
    carried = load * (1 - (r.refused_admission / r.arrived))
    assert r.mean_concurrency == pytest.approx(carried, rel=0.05)
