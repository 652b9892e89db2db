"""The simulator against a SimPy model of the same system (bench/simpy_reference.py): on the same
session stream, reserve policy, every count agrees exactly and the end time to float rounding."""

from __future__ import annotations

import pytest
from bench.simpy_reference import (
    CAP_TOKENS,
    DECODE_TOKENS_PER_S,
    SLOTS,
    simpy_reserve,
    simulator_config,
    workload_sessions,
)

from kvbudget.simulate import SimConfig, simulate


@pytest.mark.parametrize("seed", [1, 7])
def test_simulator_and_simpy_agree_on_the_same_sessions(seed: int) -> None:
    pytest.importorskip("simpy")  # the dev extra
    config = simulator_config()
    assert isinstance(config, SimConfig)
    ours = simulate(workload_sessions(300, seed), config)
    ref = simpy_reserve(
        workload_sessions(300, seed),
        pool_bytes=SLOTS * CAP_TOKENS,
        slot_bytes=CAP_TOKENS,
        decode_tokens_per_s=DECODE_TOKENS_PER_S,
    )
    assert (ours.arrived, ours.finished, ours.steps, ours.prompt_tokens, ours.decode_tokens) == (
        ref.arrived,
        ref.finished,
        ref.steps,
        ref.prompt_tokens,
        ref.decode_tokens,
    )
    assert ours.peak_concurrency == ref.peak_concurrency == SLOTS  # the pool was full: some sessions queued
    assert ours.sim_time_s == pytest.approx(ref.end_s, rel=1e-12)
    assert ours.refused == ours.preemptions == ours.compactions == 0
    assert ours.queue_delay_s["p99"] > 0


def test_the_reference_run_is_pinned() -> None:
    ours = simulate(workload_sessions(300, 1), simulator_config())  # type: ignore[arg-type]
    assert (ours.arrived, ours.finished, ours.steps, ours.peak_concurrency) == (300, 300, 5586, 40)
    assert (ours.prompt_tokens, ours.decode_tokens) == (62_888_001, 658_107)
    assert ours.sim_time_s == pytest.approx(955.0246589795617, rel=1e-12)
    assert ours.queue_delay_s == {"p50": 0.0, "p99": 29.331475}
