"""Trace statistics on hand-made records: the percentile definition, sessions and sub-agents, growth
and compaction, pauses and the paused share, prefix reuse, cached share; and the cap reading."""

from __future__ import annotations

import math
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvbudget.plan.caps import recommended_cap
from kvbudget.workload.record import StepRecord
from kvbudget.workload.stats import Distribution, percentile, trace_stats


def _step(session: str, step: int, start: float, prompt: int, output: int = 0, **kw: object) -> StepRecord:
    return StepRecord(session=session, step=step, start_s=start, prompt_tokens=prompt, output_tokens=output, **kw)  # type: ignore[arg-type]


def test_nearest_rank_percentiles() -> None:
    values = list(range(1, 101))  # 1..100
    assert [percentile(values, p) for p in (50, 90, 99, 100)] == [50, 90, 99, 100]
    assert percentile([7], 99) == 7
    assert percentile([1, 2, 3, 4], 50) == 2 and percentile([1, 2, 3, 4], 51) == 3
    with pytest.raises(ValueError):
        percentile([], 50)


@given(st.lists(st.integers(-(10**6), 10**6), min_size=1, max_size=200), st.floats(0.5, 100))
def test_a_percentile_is_a_value_that_occurred(values: list[int], p: float) -> None:
    ordered = sorted(values)
    got = percentile(ordered, p)
    assert got in values
    assert sum(v <= got for v in values) >= math.ceil(p / 100 * len(values))


def test_empty_trace() -> None:
    stats = trace_stats([], 3)
    data = stats.to_json()
    assert (data["sessions"], data["steps"], data["bad_rows"]) == (0, 0, 3)
    assert data["context_tokens"] == Distribution(0).to_json()
    assert data["paused_share"] is None and data["prefix_reuse_blocks_share"] is None


def test_sessions_subagents_growth_and_compaction() -> None:
    records = [
        _step("a", 0, 0.0, 1000, 100, pause_s=10.0),
        _step("a/sub", 0, 5.0, 300, 30, parent="a", pause_s=1.0),
        _step("a", 1, 20.0, 1600, 200, pause_s=30.0, new_tokens=500),
        _step("a/sub", 1, 7.0, 400, 10, parent="a"),
        _step("a", 2, 60.0, 900, 50, new_tokens=-900),  # compacted
        _step("b", 0, 0.0, 50, 5),
    ]
    stats = trace_stats(records, 0)
    assert (stats.sessions, stats.subagents, stats.steps) == (2, 1, 6)
    assert stats.context_tokens.max == 1800
    assert stats.session_end_tokens == Distribution.of([950, 410, 55])
    assert stats.session_peak_tokens == Distribution.of([1800, 410, 55])
    assert stats.growth_tokens_per_step == Distribution.of([1800 - 1100, 950 - 1800, 410 - 330])
    assert stats.compacting_steps == 1
    assert stats.new_tokens_per_step == Distribution.of([500, -900])
    assert stats.steps_per_session == Distribution.of([3, 2, 1])
    assert stats.pause_seconds == Distribution.of([10.0, 1.0, 30.0])
    # a: 10 s of a 20 s interval, 30 of 40; sub: 1 of 2
    assert stats.paused_share == pytest.approx((10 + 30 + 1) / (20 + 40 + 2))


def test_prefix_reuse_and_cached_share() -> None:
    records = [
        _step("a", 0, 0.0, 256, block_hashes=(1, 2, 3, 4), block_size=64, cached_tokens=0),
        _step("a", 1, 1.0, 384, block_hashes=(1, 2, 3, 4, 5, 6), block_size=64, cached_tokens=256),
        _step("a", 2, 2.0, 256, block_hashes=(1, 2, 9, 10), block_size=64, cached_tokens=128),
        _step("a", 3, 3.0, 64),  # no hashes: no reuse figure
        _step("a", 4, 4.0, 64, block_hashes=(1,), block_size=64),  # the previous step has none
    ]
    stats = trace_stats(records, 0)
    assert stats.prefix_reuse == Distribution.of([4 / 6, 2 / 4])
    assert stats.prefix_reuse_blocks_share == pytest.approx(6 / 10)
    assert stats.cached_share == pytest.approx(384 / (256 + 384 + 256))


def test_an_interval_shorter_than_its_pause_counts_as_the_pause() -> None:
    # start times that ignore service time (AIPerf turns start at the previous start + delay)
    records = [_step("a", 0, 0.0, 10, pause_s=5.0), _step("a", 1, 3.0, 20)]
    assert trace_stats(records, 0).paused_share == 1.0


def test_json_contract_fields() -> None:
    data = trace_stats([_step("a", 0, 0.0, 10, 2)], 0).to_json()
    for key in ("schema_version", "sessions", "subagents", "steps", "bad_rows", "paused_share"):
        assert key in data
    for key in ("context_tokens", "session_end_tokens"):
        assert {"p50", "p90", "p99", "max"} <= set(cast(dict[str, object], data[key]))
    assert {"p50", "p90", "p99"} <= set(cast(dict[str, object], data["pause_seconds"]))
    assert "growth_tokens_per_step" in data and data["schema_version"] == 1


@pytest.mark.parametrize(
    ("p99", "cap"), [(1, 1024), (930, 1024), (931, 2048), (7445, 8192), (85858, 95232), (157056, 173056)]
)
def test_recommended_cap_is_p99_plus_ten_percent_rounded_up_to_1k(p99: int, cap: int) -> None:
    assert recommended_cap(p99) == cap
    assert cap % 1024 == 0 and cap >= p99 * 1.1 and cap - 1024 < max(p99 * 1.1, 1)
