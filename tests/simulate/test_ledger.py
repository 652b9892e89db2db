"""The batch's block boundaries in aggregate (simulate/ledger.py): the closed-form count and its inverse
against counting every boundary one by one, and whole runs with the ledger against runs where every
boundary is an event of its own (the model the per-iteration reference checked)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.simulate import MemoryModel, MemoryPolicy, SimConfig, SimResult, TimeModel, simulate
from kvbudget.simulate.costs import CostTable
from kvbudget.simulate.ledger import INF, Ledger, block_linear
from kvbudget.simulate.pool import Pool
from kvbudget.simulate.session import Session
from kvbudget.workload.record import SessionPlan
from tests.simulate.builders import agent_sessions


def _ledger(anchors: list[tuple[int, float]]) -> Ledger:
    """A ledger holding sessions at these anchors ``(m, phi)``, its cursor past every anchor (as it always is)."""
    pool = Pool(10**12)
    costs = CostTable.for_memory(MemoryModel.linear(10**12, 1_000, 1 << 20, block_size=16))
    ledger = Ledger(16, 1_000 * 16, 0, pool, costs)
    for i, (m, phi) in enumerate(anchors):
        s = Session(i, 0.0, iter(()), (0, 0, 0.0, None))
        s.rm, s.rphase, s.rorder, s.rn = m, phi, i + 1, 10**6
        ledger.keys.append((phi, i + 1))
        ledger.members.append(s)
        ledger.sm += m
    order = sorted(range(len(anchors)), key=lambda i: ledger.keys[i])
    ledger.keys = [ledger.keys[i] for i in order]
    ledger.members = [ledger.members[i] for i in order]
    ledger.cq, ledger.cphi, ledger.cord = max(m for m, _ in anchors) + 1, 0.0, INF
    ledger.done = ledger.count(ledger.cq, 0.0, INF)
    return ledger


def _positions(anchors: list[tuple[int, float]]) -> list[tuple[int, float, int]]:
    """Every boundary, one by one: session i's k-th at period ``m + k``, phase ``phi`` (k >= 1)."""
    return sorted((m + k, phi, i + 1) for i, (m, phi) in enumerate(anchors) for k in range(1, 400))


anchors_st = st.lists(
    st.tuples(st.integers(0, 40), st.sampled_from([0.0, 0.5, 3.25, 7.0, 15.75])), min_size=1, max_size=12
)


@settings(max_examples=200, deadline=None)
@given(anchors_st, st.integers(0, 60), st.floats(0.0, 15.99))
def test_the_count_is_every_boundary_counted(anchors: list[tuple[int, float]], dq: int, r: float) -> None:
    ledger = _ledger(anchors)
    q = ledger.cq + dq
    crossed = [p for p in _positions(anchors) if (ledger.cq, 0.0, INF) < p <= (q, r, INF)]
    assert ledger.count(q, r, INF) - ledger.done == len(crossed)


@settings(max_examples=200, deadline=None)
@given(anchors_st, st.integers(1, 250))
def test_the_k_th_boundary_is_found_by_inverting_the_count(anchors: list[tuple[int, float]], k: int) -> None:
    """``at(k)``: the k-th boundary in (time, order of entry), as sorting every boundary gives it."""
    ledger = _ledger(anchors)
    ahead = [p for p in _positions(anchors) if p > (ledger.cq, 0.0, INF)]
    q, rank = ledger.at(ledger.done + k)
    assert (q, *ledger.keys[rank]) == ahead[k - 1]


def test_a_layout_with_a_window_is_not_block_linear() -> None:
    """A sliding window stops growth: the ledger is not used and every boundary stays an event."""
    linear = MemoryModel.linear(10**12, 1_000, 32_768, block_size=16, state_bytes=77)
    assert block_linear(linear.sequence_bytes, 16, 32_768) == (16_000, 77)
    window = 4_096

    def windowed(t: int) -> int:
        return -(-min(t, window + 16) // 16) * 16_000

    assert block_linear(windowed, 16, 32_768) is None
    assert block_linear(linear.sequence_bytes, 12, 32_768) is None  # 12-token blocks: no common period


def _run(plans: Iterator[SessionPlan], policy: MemoryPolicy, block: int) -> SimResult:
    memory = MemoryModel.linear(180 * 16 * 1_000, 1_000, 16_384, block_size=block)
    config = SimConfig(
        memory=memory,
        policy=policy,
        time=TimeModel(weights_bytes=16 * 10**9, bandwidth_bytes_per_s=3.35e12),
        check=True,
    )
    return simulate(plans, config)


@pytest.mark.parametrize("block", [1, 16, 32])
@pytest.mark.parametrize(
    "policy",
    [
        MemoryPolicy(policy="paged", pause="hold"),
        MemoryPolicy(policy="paged", pause="hold", victim="fewest-decoded"),
        MemoryPolicy(policy="paged", pause="hold", preempt="swap"),
    ],
    ids=["vllm", "sglang", "swap"],
)
def test_aggregated_boundaries_give_what_one_event_per_boundary_gave(
    policy: MemoryPolicy, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same preemptions, steps, prefill, peaks and delays with and without the ledger; only the count of
    eviction passes falls (one per event instead of one per block)."""
    aggregated = _run(agent_sessions(60, rate=0.4), policy, block)
    monkeypatch.setattr("kvbudget.simulate.scheduler.block_linear", lambda *_: None)  # no ledger: each an event
    each = _run(agent_sessions(60, rate=0.4), policy, block)
    assert each.preemptions > 0  # the pool runs short: the short boundary is exercised
    floats = {"sim_time_s", "mean_concurrency", "concurrency_window_s", "samples", "evictions"}
    exact = [f.name for f in dataclasses.fields(SimResult) if f.name not in floats]
    assert [getattr(aggregated, f) for f in exact] == [getattr(each, f) for f in exact]
    # the clock is snapped at fewer events, so times agree to float rounding; the samples' bytes exactly
    assert aggregated.sim_time_s == pytest.approx(each.sim_time_s, rel=1e-12)
    assert aggregated.mean_concurrency == pytest.approx(each.mean_concurrency, rel=1e-12)
    assert [(x.used_bytes, x.cached_bytes, x.running) for x in aggregated.samples] == [
        (x.used_bytes, x.cached_bytes, x.running) for x in each.samples
    ]
    assert aggregated.evictions <= each.evictions


def test_every_event_leaves_the_next_decode_event_computed_from_its_final_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The runner settles each batch once an event is over (batch.py ``settle``): the next decode time and the first
    boundary the pool cannot give are then what a fresh computation from the final state gives, at every event.
    Before, each change recomputed them at once and a last check caught only a change of the pool's referenced
    bytes: an event whose last ledger change left those bytes where they were at the last recomputation kept a
    stale short boundary (3 events of the 10,000-request trace on bench/vidur_compare.py's A100: 1,696 preemptions
    where the recomputed run has 1,681). The iteration time too: it is recomputed only when the batch's sessions or
    their bytes changed, and a short boundary found is kept while the ledger's own charges move the pool."""
    from bench.fidelity import sessions
    from bench.vidur_compare import A100, sim_config

    from kvbudget.simulate.batch import DecodeBatch

    settle = DecodeBatch.settle
    events = stale = 0

    def checked(self: DecodeBatch) -> None:
        nonlocal events, stale
        settle(self)
        before = (self.next_t, self.short_v, self.t_iter)
        self.t_iter = self._iteration()  # kept only while the running sessions and their bytes stay (``timed``)
        self.refresh()
        events += 1
        stale += before != (self.next_t, self.short_v, self.t_iter)

    monkeypatch.setattr(DecodeBatch, "settle", checked)
    result = simulate(sessions("chat", 600), sim_config(A100))
    assert result.preemptions > 100  # the pool runs short often: the short boundary moves at many events
    assert events > 1_000 and stale == 0
