"""The simulator against SimPy models of the same systems (bench/simpy_reference.py for reserve,
bench/simpy_paged.py for paged, whose decode takes a 16-token block as it crosses each boundary): on the
same session stream every count agrees exactly and the end time to float rounding; the seed-1 reference
runs are pinned."""

from __future__ import annotations

import pytest
from bench.simpy_paged import PagedOutcome
from bench.simpy_reference import agree, counts, draw_only, run_simpy, simulator_config, workload_sessions

from kvbudget.simulate import simulate

SESSIONS = 500


@pytest.mark.parametrize("seed", [1, 7])
def test_simulator_and_simpy_agree_on_reserve(seed: int) -> None:
    pytest.importorskip("simpy")  # the dev extra
    ours = simulate(workload_sessions(SESSIONS, seed), simulator_config("reserve"))
    ref = run_simpy("reserve", workload_sessions(SESSIONS, seed))
    assert counts(ours) == counts(ref)
    assert ours.peak_concurrency == ref.peak_concurrency == 40  # the pool was full: some sessions queued
    assert ours.sim_time_s == pytest.approx(ref.end_s, rel=1e-12)
    assert ours.refused == ours.preemptions == ours.compactions == 0
    assert ours.queue_delay_s["p99"] > 0
    assert agree(ours, ref)


@pytest.mark.parametrize("seed", [1, 7])
def test_simulator_and_simpy_agree_on_paged(seed: int) -> None:
    """Paged with recompute preemption: preemptions, recomputed and reused tokens agree exactly too."""
    pytest.importorskip("simpy")
    ours = simulate(workload_sessions(SESSIONS, seed), simulator_config("paged"))
    ref = run_simpy("paged", workload_sessions(SESSIONS, seed))
    assert isinstance(ref, PagedOutcome)
    assert counts(ours) == counts(ref)
    assert (ours.preemptions, ours.recomputed_tokens, ours.hit_tokens) == (
        ref.preemptions,
        ref.recomputed_tokens,
        ref.hit_tokens,
    )
    assert ours.preemptions > 10 and ours.recomputed_tokens > 0  # the pool was short: the rules were exercised
    assert ours.peak_concurrency == ref.peak_concurrency and ours.refused_too_big == ref.too_big
    assert ours.sim_time_s == pytest.approx(ref.end_s, rel=1e-9)
    assert agree(ours, ref)


def test_the_reference_runs_are_pinned() -> None:
    ours = simulate(workload_sessions(SESSIONS, 1), simulator_config("reserve"))
    assert (ours.arrived, ours.finished, ours.steps, ours.peak_concurrency) == (500, 500, 10_116, 40)
    assert (ours.prompt_tokens, ours.decode_tokens) == (136_753_466, 1_194_061)
    assert ours.sim_time_s == pytest.approx(1576.5776450393448, rel=1e-12)
    assert ours.queue_delay_s == {"p50": 0.0, "p99": 1.557861}
    paged = simulate(workload_sessions(SESSIONS, 1), simulator_config("paged"))
    assert (paged.steps, paged.peak_concurrency, paged.preemptions, paged.recomputed_tokens) == (
        10_213,
        47,
        128,
        545_242,
    )
    # every decode token counted once, a preempted step's included (1,194,061 as under reserve)
    assert (paged.prompt_tokens, paged.hit_tokens, paged.decode_tokens) == (137_288_762, 131_555_558, 1_194_061)
    assert paged.sim_time_s == pytest.approx(1576.577645039097, rel=1e-12)
    assert paged.queue_delay_s == {"p50": 0.0, "p99": 66.326418}


def test_drawing_alone_consumes_the_stream_the_models_read() -> None:
    """The benchmark's ceiling times ``draw_only``: it must read every step the simulator reads."""
    ours = simulate(workload_sessions(SESSIONS, 1), simulator_config("reserve"))
    assert draw_only(workload_sessions(SESSIONS, 1)) == ours.steps == 10_116
