"""Trace statistics in bounded memory: exact percentiles up to the exact limit, a log histogram with a
stated relative error past it, per-session state dropped at a session's final step, and the block-hash
check of the readers."""

from __future__ import annotations

import random
from array import array
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.workload.record import BadRow, StepRecord
from kvbudget.workload.stats import EXACT_LIMIT, RELATIVE_ERROR, Distribution, Quantiles, trace_stats
from kvbudget.workload.traces._common import RowError, hashes


def _fill(q: Quantiles, values: list[int] | list[float]) -> Distribution:
    for i, v in enumerate(values, start=1):
        q.values.append(v)
        if i % 7 == 0:
            q.settle()
    return q.distribution()


def _close(got: float | None, want: float | None, *, integer: bool) -> bool:
    assert got is not None and want is not None
    return abs(got - want) <= RELATIVE_ERROR * abs(want) + (0.5 if integer else 1e-12)


def test_the_exact_limit_is_stated() -> None:
    assert EXACT_LIMIT == 262_144 and RELATIVE_ERROR == 0.005


def test_below_the_limit_every_figure_is_exact() -> None:
    values = [random.Random(3).randint(-5000, 200_000) for _ in range(1000)]
    q = Quantiles("q", limit=1000)
    assert _fill(q, values) == Distribution.of(values) and q.exact


def test_past_the_limit_the_histogram_is_within_its_relative_error() -> None:
    rng = random.Random(11)
    values = [int(rng.lognormvariate(9, 1.5)) for _ in range(20_000)] + [0] * 50 + [-3, -700, -90_000]
    q = Quantiles("q", limit=1000)
    got = _fill(q, values)
    want = Distribution.of(values)
    assert not q.exact and len(q.values) == 0 and q.buckets is not None and len(q.buckets) < 2000
    assert (got.count, got.min, got.max) == (want.count, want.min, want.max) == (20_053, -90_000, want.max)
    assert got.mean == pytest.approx(want.mean, rel=1e-12)
    for p in ("p50", "p90", "p99"):
        assert _close(getattr(got, p), getattr(want, p), integer=True), p
        assert float(getattr(got, p)).is_integer()


def test_small_integers_stay_exact_in_the_histogram() -> None:
    values = [v % 90 for v in range(10_000)]  # below 1 / (2 x 0.005) = 100 a bucket holds one integer
    got = _fill(Quantiles("q", limit=10), values)
    want = Distribution.of(values)
    assert (got.p50, got.p90, got.p99) == (want.p50, want.p90, want.p99) == (44, 80, 89)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=1, max_size=400))
def test_float_percentiles_are_within_the_error(values: list[float]) -> None:
    got = _fill(Quantiles("d", limit=5), values)
    want = Distribution.of(values)
    for p in ("p50", "p90", "p99"):
        w = getattr(want, p)
        g = getattr(got, p)
        assert abs(g - w) <= RELATIVE_ERROR * abs(w) + 1e-9 * 2, (p, g, w)  # magnitudes below 1e-9 share a bucket


def test_memory_does_not_follow_the_values() -> None:
    q = Quantiles("q", limit=100)
    for chunk in range(50):
        q.values.extend(array("q", range(chunk * 10_000, (chunk + 1) * 10_000)))
        q.settle()
    assert q.count == 500_000 and len(q.values) == 0
    assert q.buckets is not None and len(q.buckets) < 3000  # 1.01^3000: every magnitude to 2^40 fits


def _step(session: str, step: int, prompt: int, *, final: bool = False, parent: str | None = None) -> StepRecord:
    return StepRecord(session, step, float(step), prompt, 10, parent=parent, final=final, block_hashes=(1, 2, step))


def test_final_steps_close_sessions_with_the_same_figures() -> None:
    stream = [
        _step("a", 0, 100),
        _step("one", 0, 40, final=True),
        _step("a", 1, 300),
        _step("sub", 0, 7, parent="a", final=True),
        _step("a", 2, 250, final=True),
        _step("b", 0, 60),
    ]
    plain = [
        StepRecord(r.session, r.step, r.start_s, r.prompt_tokens, 10, parent=r.parent, block_hashes=r.block_hashes)
        for r in stream
    ]
    closed, kept = trace_stats(stream, 0), trace_stats(plain, 0)
    assert closed == kept
    assert (closed.sessions, closed.subagents, closed.steps) == (3, 1, 6)
    assert closed.steps_per_session == Distribution.of([3, 1, 1, 1])
    assert closed.session_peak_tokens == Distribution.of([310, 50, 17, 70])
    assert closed.prefix_reuse == Distribution.of([2 / 3, 2 / 3])


def test_a_large_stream_reports_its_error() -> None:
    stream = (StepRecord(f"s{i}", 0, 0.0, 1000 + i % 5000, i % 300, final=True) for i in range(3000))
    stats = trace_stats(stream, 0, exact_limit=500)
    data = stats.to_json()
    assert not stats.exact and data["percentile_relative_error"] == RELATIVE_ERROR
    assert stats.sessions == stats.steps == 3000 and stats.context_tokens.count == 3000
    exact = trace_stats((StepRecord(f"s{i}", 0, 0.0, 1000 + i % 5000, i % 300) for i in range(3000)), 0)
    assert exact.exact and exact.to_json()["percentile_relative_error"] == 0
    assert exact.context_tokens.p50 == 2648
    assert stats.context_tokens.p50 is not None and abs(stats.context_tokens.p50 - 2648) <= 0.005 * 2648 + 0.5


@pytest.mark.parametrize("bad", [[1, True], [1, 2.0], [1, "2"], [None]])
def test_block_hashes_must_be_integers(bad: list[object]) -> None:
    with pytest.raises(RowError, match="must hold integers"):
        hashes({"hash_ids": bad})


def test_block_hashes_of_integers() -> None:
    assert hashes({"hash_ids": [0, 1, 2**70]}) == (0, 1, 2**70) and hashes({}) == () and hashes({"hash_ids": []}) == ()


def test_plain_mooncake_rows_fast_and_checked_paths_agree(tmp_path: Path) -> None:
    from kvbudget.workload.traces import read_records

    rows = [
        '{"timestamp": 5, "input_length": 700, "output_length": 3, "hash_ids": [0, 1]}',
        "",
        '{"timestamp": 6.5, "input_length": 700.0, "output_length": 3, "hash_ids": [0, 1]}',  # checked path
        '{"timestamp": 7, "input_length": 10, "output_length": 1}',
        '{"timestamp": 8, "input_length": 10, "output_length": 1, "hash_ids": [0, true]}',
        '{"timestamp": -1, "input_length": 10, "output_length": 1}',
        '{"timestamp": 9, "input_length": -4, "output_length": 1}',
    ]
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(rows) + "\n")
    bad: list[BadRow] = []
    got = list(read_records([path], bad_rows=bad))
    assert [(r.session, r.start_s, r.prompt_tokens, r.block_hashes, r.block_size, r.final) for r in got] == [
        ("m.jsonl:1", 0.005, 700, (0, 1), 512, True),
        ("m.jsonl:3", 0.0065, 700, (0, 1), 512, True),
        ("m.jsonl:4", 0.007, 10, (), None, True),
    ]
    assert [(b.line, b.reason) for b in bad] == [
        (5, "'hash_ids' must hold integers, got True"),
        (6, "'timestamp' must be at least 0, got -1"),
        (7, "'input_length' must be at least 0, got -4"),
    ]
