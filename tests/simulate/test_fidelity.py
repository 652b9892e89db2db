"""The simulator agrees with the per-iteration vLLM V1 model (bench/iteration_reference.py) on the same
sessions: chat-like one-call traffic, agent sessions with tool pauses, and a real trace (Azure LLM inference
2023, conversation part). The agreement is bench/fidelity.py's (docs/simulate.md states it); both sides'
counts are pinned, so a change to either model shows here."""

from __future__ import annotations

import pytest
from bench.fidelity import REF, agreement, sessions, sim_config
from bench.iteration_reference import RefConfig, run_reference

from kvbudget.simulate import simulate

CASES = {
    # traffic, sessions: (preemptions, peak running, finished) of the simulator, then of the reference
    ("chat", 300): ((0, 46, 300), (0, 46, 300)),
    ("agent", 1000): ((119, 25, 945), (129, 23, 945)),
    ("trace", 300): ((12, 41, 300), (12, 41, 300)),
}


@pytest.mark.parametrize(("traffic", "count"), list(CASES))
def test_the_simulator_agrees_with_the_per_iteration_model(traffic: str, count: int) -> None:
    ours = simulate(sessions(traffic, count), sim_config())
    ref = run_reference(sessions(traffic, count), REF)
    assert agreement(ours, ref) == dict.fromkeys(agreement(ours, ref), True)
    assert (
        (ours.preemptions, ours.peak_running, ours.finished),
        (ref.preemptions, ref.peak_running, ref.finished),
    ) == (CASES[traffic, count])
    assert ours.decode_tokens == ref.decode_tokens  # every generated token, a preempted step's included


def test_a_pool_that_holds_every_step_whole_preempts_in_neither_model() -> None:
    """The 2,799-block pool preempts on this trace in both models (12 each, above); with 20,000 blocks no step
    ever waits for a block, and neither model preempts (peak running within one: admission at iteration
    boundaries against the instant memory frees)."""
    roomy = RefConfig(**{**REF.__dict__, "pool_blocks": 20_000})
    ref = run_reference(sessions("trace", 300), roomy)
    ours = simulate(sessions("trace", 300), sim_config(roomy))
    assert ref.preemptions == ours.preemptions == 0
    assert abs(ref.peak_running - ours.peak_running) <= 1
    assert ours.finished == ref.finished == 300
