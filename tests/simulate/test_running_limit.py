"""The engine's running limit in the simulator (SimConfig.running_limit; scheduler.py, module doc).

Hand-computed runs: a fixed decode rate of 50 tokens/s per session (an iteration is 20 ms whatever the batch) and
instant prefill, so a step of 100 output tokens runs 2 s and its TTFT is its wait plus one 20 ms iteration. The
figures below follow from that by hand; the limit binds where vLLM's scheduler breaks its waiting loop at
max_num_seqs (vllm/v1/core/sched/scheduler.py) and SGLang's stops at max_running_requests.
"""

from __future__ import annotations

import json
from dataclasses import replace
from itertools import pairwise
from typing import Any

import pytest

from kvbudget.simulate import simulate
from kvbudget.simulate.runner import SimResult
from tests.helpers import run_cli
from tests.simulate.builders import agent_sessions, config, session

ITERATION = 0.02  # s: 1 / 50 tokens/s


def _five_at_once(limit: int | None, pause: str = "hold") -> SimResult:
    """Five one-step sessions of 100 output tokens, all arriving at t = 0."""
    sessions = [session(i, 0.0, [(100, 100, 0.0)]) for i in range(5)]
    return simulate(sessions, config(100_000, prefill_rate=0.0, pause=pause, running_limit=limit))


@pytest.mark.parametrize("pause", ["hold", "evictable"])
def test_a_limit_of_two_runs_five_requests_in_three_waves(pause: str) -> None:
    r = _five_at_once(2, pause)
    # two run 0-2 s, two 2-4 s, the last 4-6 s: TTFTs 0.02, 0.02, 2.02, 2.02, 4.02
    assert r.sim_time_s == pytest.approx(6.0)
    assert r.peak_running == 2
    assert r.ttft_s["p99"] == pytest.approx(4.0 + ITERATION)  # the largest TTFT: the histogram caps at the max
    assert r.ttft_s["p50"] == pytest.approx(2.0 + ITERATION, rel=0.01)  # the third of five (1% buckets)
    # three steps waited for a slot: 2, 2 and 4 s
    assert r.limit_waits == 3
    assert r.limit_wait_s["p99"] == pytest.approx(4.0)
    assert r.limit_wait_s["p50"] == pytest.approx(2.0, rel=0.01)
    assert r.queue_delay_s["p99"] == pytest.approx(4.0)
    assert r.decode_tokens == 500 and r.finished == 5
    assert r.itl_s["p99"] == pytest.approx(ITERATION)  # waiting is not decoding: the inter-token latency is unchanged


def test_without_a_limit_the_five_run_together() -> None:
    r = _five_at_once(None)
    assert r.sim_time_s == pytest.approx(2.0)
    assert r.peak_running == 5
    assert r.ttft_s["p99"] == pytest.approx(ITERATION)
    assert r.limit_waits == 0 and r.running_limit is None


def test_a_limit_above_the_load_changes_nothing() -> None:
    assert replace(_five_at_once(5), running_limit=None) == _five_at_once(None)
    assert _five_at_once(5).limit_waits == 0


def test_a_session_between_steps_frees_its_slot_and_its_next_step_waits_for_one() -> None:
    """Under ``hold`` the paused session keeps its blocks, not its slot. A: 100 tokens at 0-2 s, a 1 s tool call,
    100 more; B arrives at 0.5 s. Limit 1: B waits for A's first step (starts at 2 s, TTFT 1.52 s); A's second step,
    ready at 3 s, waits for B (starts at 4 s, TTFT 1.02 s) and ends at 6 s."""
    a = session(0, 0.0, [(100, 100, 1.0), (50, 100, 0.0)])
    b = session(1, 0.5, [(100, 100, 0.0)])
    r = simulate([a, b], config(100_000, prefill_rate=0.0, pause="hold", running_limit=1))
    assert r.sim_time_s == pytest.approx(6.0)
    assert r.ttft_s["p99"] == pytest.approx(1.5 + ITERATION)
    assert r.limit_waits == 2
    assert r.limit_wait_s["p99"] == pytest.approx(1.5)
    assert r.step_wait_s["p99"] == pytest.approx(1.0)  # A's second step: ready at 3 s, started at 4 s
    assert r.peak_running == 1 and r.preemptions == 0
    # without the limit both steps of A and B overlap: B ends at 2.5 s, A's second step runs 3-5 s
    free = simulate(
        [session(0, 0.0, [(100, 100, 1.0), (50, 100, 0.0)]), session(1, 0.5, [(100, 100, 0.0)])],
        config(100_000, prefill_rate=0.0, pause="hold"),
    )
    assert free.sim_time_s == pytest.approx(5.0) and free.limit_waits == 0


def test_a_new_session_that_finds_the_limit_reached_is_refused_under_refuse_admission() -> None:
    r = simulate(
        [session(i, 0.0, [(100, 100, 0.0)]) for i in range(3)],
        config(100_000, prefill_rate=0.0, admission="refuse", running_limit=2),
    )
    assert r.refused_admission == 1 and r.finished == 2


LIMITS = (1, 2, 3, 4, 8, 16, 32, None)
LIVE, DURATION, MAX_OUTPUT = 24, 120.0, 300


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_higher_limit_never_lowers_throughput(seed: int) -> None:
    """The same sessions in a closed loop of 24 (a session starts when one ends: the replica stays loaded) for
    120 s, decode on the memory roofline (an iteration's time grows with the batch), under limits 1, 2, 3, 4, 8,
    16, 32 and none: output tokens per second never fall as the limit rises, beyond what the cut at 120 s leaves
    uncounted (a step's tokens count when it completes: at most the batch's steps of at most 300 tokens); the
    batch never passes the limit; and a limit the 24 never reach changes nothing."""
    results = []
    for limit in LIMITS:
        base = config(
            2_000_000, decode_rate=None, running_limit=limit, pause="evictable", closed_loop=LIVE, duration_s=DURATION
        )
        r = simulate(agent_sessions(3_000, seed=seed, rate=100.0, steps=(1, 6), pause=(0.1, 2.0)), base)
        assert r.preemptions == 0 and r.refused == 0
        assert r.peak_running <= (limit or LIVE)
        results.append(r)
    rates = [r.decode_tokens / r.sim_time_s for r in results]
    for lower, higher, r in zip(rates, rates[1:], results[1:], strict=False):
        assert higher >= lower - r.peak_running * MAX_OUTPUT / DURATION
    for lower, higher in pairwise(rates[:5]):  # 1 to 8: the limit binds, well past the cut
        assert higher > 1.1 * lower
    assert replace(results[-2], running_limit=None) == results[-1]  # 32 is never reached: the same run


def test_a_limit_below_one_is_refused() -> None:
    from kvbudget.errors import InputError

    with pytest.raises(InputError, match="running limit"):
        simulate([], config(1_000, running_limit=0))


@pytest.mark.parametrize("pause", ["hold", "evictable"])
@pytest.mark.parametrize("preempt", ["recompute", "swap"])
@pytest.mark.parametrize("victim", ["newest", "fewest-decoded"])
def test_the_limit_holds_under_preemption_and_swapping(pause: str, preempt: str, victim: str) -> None:
    """A pool short enough to preempt (and swap), a limit of 3: the batch never runs 4, every session ends (none
    is left waiting: under ``hold`` a step waiting for a slot keeps the blocks a session ahead of it in the memory
    queue may wait for, so it must not queue behind it), and the pool's invariants hold at every allocation."""
    from kvbudget.simulate import MemoryPolicy

    base = config(20_000, pause=pause, preempt=preempt, running_limit=3)
    policy = MemoryPolicy(pause=pause, preempt=preempt, victim=victim)  # type: ignore[arg-type]
    r = simulate(agent_sessions(80, seed=5, rate=1.0), replace(base, policy=policy))
    assert r.peak_running == 3 and r.limit_waits > 0
    assert r.preemptions > 0
    assert r.live_at_end == 0 and r.finished + r.refused == r.arrived == 80
    assert r.finished == 38  # as without the limit: the same sessions end (the rest are larger than the pool)


# --- through the faces: the engine's own limit reaches the simulation ------------------------------------------

CHAT = ("--context", "32k", "--workload", "examples/chat.toml", "--rate", "2", "--sessions", "200")
SIM = ("simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", *CHAT, "--search-sessions", "0")


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def test_simulate_max_num_seqs_binds_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    limited = _json(capsys, *SIM, "--engine", "vllm", "--max-num-seqs", "4")
    assert limited["running_limit"] == {
        "per_replica": 4,
        "basis": "--max-num-seqs 4 as set",
        "provenance": "given",
        "bound": True,
        "steps_held": limited["running_limit"]["steps_held"],
        "wait_s": limited["running_limit"]["wait_s"],
        "peak_running": 4,
    }
    assert limited["running_limit"]["steps_held"] > 0 and limited["running_limit"]["wait_s"]["p99"] > 60
    # the decode speeds quoted stop at the batch the limit allows, as kvbudget speed's batch does
    assert [q["running"] for q in limited["speeds"]["decode"]["tokens_per_s_per_session"]] == [1, 2, 4]
    default = _json(capsys, *SIM, "--engine", "vllm")
    limit = default["running_limit"]
    # vLLM V1's default on an H100 (80 GiB, not A100): 1,024 (EngineArgs.get_batch_defaults); far above this load
    assert (limit["per_replica"], limit["provenance"], limit["bound"], limit["steps_held"]) == (1024, "exact", False, 0)
    assert default["latency"]["ttft_s"]["p99"] < 1 < limited["latency"]["ttft_s"]["p99"]
    code, text, _ = run_cli(capsys, *SIM, "--engine", "vllm", "--max-num-seqs", "4")
    assert code == 0 and "The running limit of 4 per replica bound: " in text and "steps waited" in text


def test_sglang_max_running_requests_binds(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, *SIM, "--engine", "sglang", "--max-running-requests", "4")
    limit = data["running_limit"]
    assert (limit["per_replica"], limit["provenance"], limit["bound"], limit["peak_running"]) == (4, "given", True, 4)
    derived = _json(capsys, *SIM, "--engine", "sglang")["running_limit"]
    # SGLang 0.5.23 resolve_max_num_reqs: tokens / context x 512 clamped to [2,048, 4,096], at most half the tokens
    assert derived["provenance"] == "computed" and 2048 <= derived["per_replica"] <= 4096 and not derived["bound"]


def test_an_engine_without_a_limit_says_none(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, *SIM, "--engine", "llamacpp")
    assert data["running_limit"] is None


def test_the_limit_is_the_plans_and_speeds(capsys: pytest.CaptureFixture[str]) -> None:
    """One rule (Plan.running_limit): the batch kvbudget speed runs at --concurrency max is the one the simulator
    admits to, for a limit below the pool's sessions."""
    from kvbudget.api import PlanRequest, plan_deployment
    from kvbudget.speed.answer import running_limit

    plan = plan_deployment(
        PlanRequest.from_options(
            {"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": "vllm", "context": "8k", "max_num_seqs": "3"}
        )
    )
    limit = plan.running_limit()
    assert limit is not None and (limit.requests, limit.provenance) == (3, "given")
    assert plan.sessions == 3 and running_limit(plan)[0] == 3  # vLLM's plan: 3 running, the rest wait
    speed = _json(
        capsys,
        "speed",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--engine",
        "vllm",
        "--isl",
        "6k",
        "--osl",
        "2k",
        "--max-num-seqs",
        "3",
    )
    assert speed["batch_per_replica"] == 3


def test_compare_simulate_runs_under_the_limit(capsys: pytest.CaptureFixture[str]) -> None:
    search = ("--simulate", "--search-sessions", "100", "--search-probes", "2", "--jobs", "1")
    argv = ("compare", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", *CHAT[:4], *search)
    free = _json(capsys, *argv)["rows"][0]["simulated"]
    limited = _json(capsys, *argv, "--max-num-seqs", "2")["rows"][0]["simulated"]
    assert limited["ttft_s"]["p99"] > 10 * free["ttft_s"]["p99"]
