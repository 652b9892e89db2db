"""Simulator invariants on hand-built sessions: capacity, conservation, policies, prefix sharing,
pause behaviour, determinism."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from typing import Any

import pytest

from kvbudget.simulate import SimResult, simulate
from kvbudget.simulate.runner import SimConfig
from kvbudget.workload.record import SessionPlan
from tests.simulate.builders import BPT, agent_sessions, config, session

POLICIES: list[dict[str, Any]] = [
    {"policy": "paged", "pause": "hold"},
    {"policy": "paged", "pause": "evictable"},
    {"policy": "paged", "pause": "hold", "preempt": "swap"},
    {"policy": "watermark", "pause": "evictable"},
    {"policy": "reserve", "pause": "hold"},
]


def run(cfg: SimConfig, n: int = 300, **kw: Any) -> SimResult:
    return simulate(agent_sessions(n, **kw), cfg)


def conserved(r: SimResult) -> bool:
    return r.arrived == r.finished + r.refused + r.live_at_end


@pytest.mark.parametrize("knobs", POLICIES, ids=lambda k: "-".join(k.values()))
def test_pool_never_exceeds_capacity_and_sessions_are_conserved(knobs: dict[str, Any]) -> None:
    # A pool of ~6 sessions at the cap under a load that keeps it full: check=True asserts
    # used + cached <= capacity at every allocation; the sampled series must agree.
    cfg = config(6 * 32_768, **knobs)
    r = run(cfg, rate=1.0)
    assert r.peak_resident_bytes <= r.pool_bytes
    assert r.peak_pool_bytes <= r.pool_bytes
    assert all(s.used_bytes + s.cached_bytes <= r.pool_bytes for s in r.samples)
    assert r.peak_pool_bytes > 0.9 * r.pool_bytes  # the pool really was under pressure
    assert conserved(r)
    assert r.live_at_end == 0 and r.finished + r.refused == 300


def test_conservation_with_live_sessions_at_the_end() -> None:
    r = run(config(8 * 32_768, duration_s=300.0), rate=1.0)
    assert r.live_at_end > 0
    assert conserved(r)
    r = run(config(4 * 32_768, policy="reserve", admission="refuse"), rate=1.0)
    assert r.refused_admission > 0
    assert conserved(r)


def test_reserve_at_cap_never_preempts() -> None:
    for pause, rate in itertools.product(("hold", "evictable"), (0.2, 1.0, 5.0)):
        r = run(config(5 * 32_768, policy="reserve", pause=pause), rate=rate)
        assert r.preemptions == 0 and r.recomputed_tokens == 0
        # every admitted session holds its cap reservation: at most 5 in service
        assert r.peak_concurrency <= 5


def test_paged_serves_at_least_as_many_sessions_as_reserve() -> None:
    for pool in (3, 6, 12):
        cfgs = {p: config(pool * 32_768, policy=p, admission="refuse") for p in ("reserve", "paged", "watermark")}
        served = {p: (r := run(c, rate=1.0)).arrived - r.refused_admission for p, c in cfgs.items()}
        assert served["paged"] >= served["reserve"]
        assert served["watermark"] >= served["reserve"]
        assert served["paged"] > served["reserve"]  # sessions rarely reach the cap: paging wins


def test_a_shared_prefix_lowers_memory_by_exactly_the_shared_blocks() -> None:
    # 10 sessions live at once in an unbounded pool, each starting with the same 4,000-token prefix
    # (4,000 = 250 whole 16-token blocks): sharing holds it once instead of ten times.
    def sessions() -> list[SessionPlan]:
        return [session(i, 0.001 * i, [(1_000, 100, 50.0), (500, 100, 0.0)], prefix=4_000) for i in range(10)]

    shared = simulate(sessions(), config(10**7))
    private = simulate(sessions(), config(10**7, share_prefix=False))
    assert private.peak_pool_bytes - shared.peak_pool_bytes == 9 * 4_000 * BPT
    assert shared.prefix_hit_rate > private.prefix_hit_rate


def test_prefix_sharing_is_block_aligned() -> None:
    one = [session(i, 0.0, [(0, 10, 0.0)], prefix=1_000) for i in range(4)]
    r = simulate(one, config(10**6, decode_rate=1.0))
    # 1,000 tokens = 62 whole blocks shared (992 tokens) + 8 tokens in each session's own block
    assert r.hit_tokens == 3 * 992


def test_holding_blocks_through_pauses_hits_more_than_evictable() -> None:
    # Long tool pauses, a pool that holds ~8 sessions: new arrivals evict paused sessions' blocks
    # under "evictable" (recomputed later); "hold" keeps them resident.
    kw: dict[str, Any] = {"rate": 0.3, "pause": (20.0, 60.0)}
    hold = run(config(8 * 32_768, pause="hold"), **kw)
    evict = run(config(8 * 32_768, pause="evictable"), **kw)
    assert hold.prefix_hit_rate > evict.prefix_hit_rate
    assert evict.recomputed_tokens > hold.recomputed_tokens
    # with room for everyone, nothing is evicted and the two agree
    hold_big = run(config(10**8, pause="hold"), **kw)
    evict_big = run(config(10**8, pause="evictable"), **kw)
    assert hold_big.prefix_hit_rate == pytest.approx(evict_big.prefix_hit_rate)
    assert evict_big.recomputed_tokens == 0


def test_swap_preemption_costs_time_not_recomputation() -> None:
    recompute = run(config(6 * 32_768), rate=1.0)
    swap = run(config(6 * 32_768, preempt="swap"), rate=1.0)
    assert swap.swaps == swap.preemptions > 0
    assert swap.swap_bytes > 0
    assert swap.recomputed_tokens < recompute.recomputed_tokens


def test_deterministic_for_a_seed() -> None:
    def once(seed: int) -> str:
        r = run(config(6 * 32_768, pause="evictable"), seed=seed, rate=1.0)
        return json.dumps({k: v for k, v in r.__dict__.items() if k != "samples"}, sort_keys=True)

    assert once(3) == once(3)
    assert once(3) != once(4)


def test_cap_refuse_and_compact() -> None:
    from kvbudget.simulate import CapPolicy, MemoryPolicy

    steps = [(3_000, 100, 1.0)] * 20  # reaches a 16K cap at step 6
    refuse = simulate([session(0, 0.0, steps)], config(10**6, cap=16_384))
    assert refuse.refused_at_cap == 1 and refuse.finished == 0 and refuse.steps == 5
    cfg = config(10**6, cap=16_384)
    cfg = replace(cfg, policy=MemoryPolicy(cap=CapPolicy("compact", target_tokens=4_000)))
    compact = simulate([session(0, 0.0, steps)], cfg)
    assert compact.finished == 1 and compact.steps == 20 and compact.compactions >= 3
    cfg = replace(cfg, policy=MemoryPolicy(cap=CapPolicy("summarize", target_tokens=4_000, summary_tokens=500)))
    summary = simulate([session(0, 0.0, steps)], cfg)
    assert summary.decode_tokens == compact.decode_tokens + 500 * summary.compactions


def test_a_session_larger_than_the_pool_is_refused_not_stuck() -> None:
    big = session(0, 0.0, [(50_000, 10, 0.0)])
    small = session(1, 1.0, [(100, 10, 0.0)])
    r = simulate([big, small], config(20_000, cap=65_536))
    assert r.refused_too_big == 1 and r.finished == 1 and r.live_at_end == 0


def test_replicas_share_the_load() -> None:
    one = run(config(6 * 32_768), rate=1.0)
    two = run(config(6 * 32_768, replicas=2), rate=1.0)
    rr = run(config(6 * 32_768, replicas=2, router="round-robin"), rate=1.0)
    assert two.preemptions < one.preemptions and rr.preemptions < one.preemptions
    assert conserved(two) and conserved(rr)


def test_a_replayed_client_compaction_cuts_the_context() -> None:
    from kvbudget.workload.record import Step

    steps = [Step(8_000, 200, 1.0), Step(2_000, 100, 1.0), Step(500, 100, 0.0, compact_to=3_000)]
    plan = SessionPlan("t0", 0.0, iter(steps))
    r = simulate([plan], config(10**6))
    assert r.compactions == 1 and r.finished == 1
    # prompts: 8,000; 8,200 + 2,000; then the compacted 3,000 + 500 (prefilled anew: no hits)
    assert r.prompt_tokens == 8_000 + 10_200 + 3_500
    assert r.hit_tokens == 8_200
    assert r.recomputed_tokens == 0


@pytest.mark.parametrize("knobs", POLICIES, ids=lambda k: "-".join(k.values()))
def test_invariants_on_generated_agent_sessions(knobs: dict[str, Any]) -> None:
    from kvbudget.simulate import cap_from_workload
    from kvbudget.simulate.policies import MemoryPolicy
    from kvbudget.workload.generate import generate_sessions
    from kvbudget.workload.loader import workload_from_dict

    workload = workload_from_dict(
        {
            "arrival": {"rate_per_s": 0.5},
            "prefix": {"system_prompt_tokens": 1_000, "tool_catalog_tokens": 3_000},
            "steps": {"dist": "geometric", "mean": 12},
            "first_prompt_tokens": {"dist": "lognormal", "mean": 2_000, "p99": 10_000},
            "append_tokens": {"dist": "lognormal", "mean": 1_500, "p99": 12_000},
            "output_tokens": {"dist": "lognormal", "mean": 300, "p99": 2_000},
            "tool_latency_s": {"dist": "lognormal", "mean": 6, "p99": 60},
            "cap": {"at_cap": "summarize", "target_fraction": 0.4, "summary_tokens": 1_000},
        }
    )
    base = config(6 * 32_768, **knobs)
    cfg = replace(base, policy=replace(base.policy, cap=cap_from_workload(workload.cap, 32_768)))
    assert isinstance(cfg.policy, MemoryPolicy)
    r = simulate(generate_sessions(workload, seed=11, count=300), cfg)
    assert conserved(r) and r.live_at_end == 0
    assert r.peak_resident_bytes <= r.pool_bytes
    assert r.compactions > 0
    if knobs["policy"] == "reserve":
        assert r.preemptions == 0
    assert r.prefix_hit_rate > 0
