"""Session generation (determinism, independence from consumption order, laziness, converging
means) and trace replay (appends, compactions, pauses, sub-agents, order)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from itertools import islice
from pathlib import Path

import pytest

from kvbudget.errors import InputError
from kvbudget.workload.distributions import Constant, Exponential, Geometric, LogNormal, Poisson, Uniform
from kvbudget.workload.generate import BLOCK, generate_sessions, replay_sessions, session_steps
from kvbudget.workload.little import arrival_rate
from kvbudget.workload.loader import load_workload
from kvbudget.workload.model import Arrival, Prefix, Workload
from kvbudget.workload.record import SessionPlan, Step, StepRecord, StepRows

EXAMPLES = Path(__file__).parents[2] / "examples"


def _agent(rate: float = 2.0) -> Workload:
    return Workload(
        arrival=Arrival(rate_per_s=rate),
        steps=Geometric(6),
        first_prompt_tokens=LogNormal.from_mean_p99(1500, 12000),
        append_tokens=LogNormal.from_mean_p99(800, 6000),
        output_tokens=Poisson(120),
        tool_latency_s=Exponential(3.0),
        think_time_s=Uniform(0, 2),
        prefix=Prefix(system_prompt_tokens=700, tool_catalog_tokens=300),
    )


def _materialize(plans: list[SessionPlan]) -> list[tuple[str, float, int, list[Step]]]:
    return [(p.session_id, p.arrival_s, p.prefix_tokens, list(p.steps)) for p in plans]


def test_same_seed_same_sessions_other_seed_other_sessions() -> None:
    w = _agent()
    a = _materialize(list(generate_sessions(w, seed=11, count=200)))
    b = _materialize(list(generate_sessions(w, seed=11, count=200)))
    c = _materialize(list(generate_sessions(w, seed=12, count=200)))
    assert a == b
    assert a != c
    assert [s[0] for s in a[:3]] == ["s0", "s1", "s2"]
    assert all(s[2] == 1000 for s in a)


def test_session_content_does_not_depend_on_consumption_order() -> None:
    w = _agent()
    forward = _materialize(list(generate_sessions(w, seed=5, count=50)))
    plans = list(generate_sessions(w, seed=5, count=50))
    backward = {p.session_id: list(p.steps) for p in reversed(plans)}  # last session's steps drawn first
    assert [backward[s[0]] for s in forward] == [s[3] for s in forward]
    # interleaved, one step at a time across all sessions
    plans = list(generate_sessions(w, seed=5, count=50))
    got: dict[str, list[Step]] = {p.session_id: [] for p in plans}
    live = {p.session_id: p.steps for p in plans}
    while live:
        for sid in list(live):
            step = next(live[sid], None)
            if step is None:
                del live[sid]
            else:
                got[sid].append(step)
    assert [got[s[0]] for s in forward] == [s[3] for s in forward]
    # and session i alone, regenerated
    assert list(session_steps(w, 5, 17)) == forward[17][3]


def test_generation_is_lazy_and_in_arrival_order() -> None:
    w = _agent()
    stream = generate_sessions(w, seed=1)  # no count, no duration: Poisson never stops
    first = list(islice(stream, 3000))  # three blocks of sessions, drawn as the stream reaches them
    assert len(first) == 3000
    assert all(isinstance(p.steps, StepRows) and len(p.steps) >= 1 for p in first)  # none consumed yet
    times = [p.arrival_s for p in first]
    assert times == sorted(times) and times[0] > 0


def test_a_session_depends_on_its_seed_and_index_only() -> None:
    """Sessions are drawn a block at a time; session i is the same whatever count, duration or block
    boundary: a short stream is a prefix of a long one, and session_steps(i) alone gives the same."""
    w = _agent()
    long = _materialize(list(generate_sessions(w, seed=5, count=BLOCK + 10)))
    short = _materialize(list(generate_sessions(w, seed=5, count=3)))
    assert short == long[:3]
    by_time = _materialize(list(generate_sessions(w, seed=5, duration_s=long[2][1])))
    assert by_time == long[:3]
    for i in (0, BLOCK - 1, BLOCK, BLOCK + 9):
        assert list(session_steps(w, 5, i)) == long[i][3]
    assert long[BLOCK - 1][3] != long[BLOCK][3]


def test_count_and_duration_bound_the_stream() -> None:
    w = _agent(rate=2.0)
    assert len(list(generate_sessions(w, seed=3, count=0))) == 0
    assert len(list(generate_sessions(w, seed=3, count=7))) == 7
    plans = list(generate_sessions(w, seed=3, duration_s=500.0))
    assert plans and all(p.arrival_s <= 500.0 for p in plans)
    # 1,000 expected arrivals (Poisson: standard deviation sqrt(1000) = 31.6); within 5 of those
    assert abs(len(plans) - 1000) < 5 * math.sqrt(1000)
    assert len(list(generate_sessions(w, seed=3, count=10, duration_s=500.0))) == 10
    with pytest.raises(InputError):
        generate_sessions(w, seed=3, count=-1)  # checked at the call, not at the first session
    with pytest.raises(InputError):
        generate_sessions(w, seed=3, duration_s=0)


def _within(values: Sequence[float], mean: float, k: float = 5.0) -> bool:
    """Sample mean within k standard errors (sample sd / sqrt(n)) of the analytic mean."""
    n = len(values)
    m = sum(values) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in values) / (n - 1))
    return abs(m - mean) <= k * sd / math.sqrt(n)


def test_generated_means_converge_to_the_analytic_means() -> None:
    """20,000 sessions: each sample mean within 5 standard errors of the workload's exact mean
    (a false failure has probability below 1e-6 per quantity; the seed fixes the draws)."""
    w = _agent(rate=1.0)
    steps, first, appends, outputs, pauses, gaps = [], [], [], [], [], []
    last = 0.0
    for plan in generate_sessions(w, seed=2024, count=20_000):
        gaps.append(plan.arrival_s - last)
        last = plan.arrival_s
        rows = list(plan.steps)
        steps.append(len(rows))
        first.append(rows[0].append_tokens)
        appends += [r.append_tokens for r in rows[1:]]
        outputs += [r.output_tokens for r in rows]
        pauses += [r.pause_s for r in rows[:-1]]
        assert rows[-1].pause_s == 0.0
    assert _within(steps, 6.0)
    assert _within(first, 1500.0)
    assert _within(appends, 800.0)
    assert _within(outputs, 120.0)
    assert _within(pauses, 3.0 + 1.0)
    assert _within(gaps, 1.0)  # exponential gaps of mean 1/rate


def test_replayed_arrivals_need_the_trace(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    rows = [
        {"session": "a", "step": 0, "start_s": 100.0, "prompt_tokens": 10, "output_tokens": 1},
        {"session": "b", "step": 0, "start_s": 110.0, "prompt_tokens": 10, "output_tokens": 1},
        {"session": "c", "step": 0, "start_s": 130.0, "prompt_tokens": 10, "output_tokens": 1},
    ]
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    traces = pytest.importorskip("kvbudget.workload.traces")
    if not hasattr(traces, "read_records"):
        pytest.skip("trace readers not available")
    w = _agent()
    w = Workload(**{**{f: getattr(w, f) for f in w.__dataclass_fields__}, "arrival": Arrival(replay=str(trace))})
    plans = list(generate_sessions(w, seed=1))
    assert [p.arrival_s for p in plans] == [0.0, 10.0, 30.0]
    rate, basis = arrival_rate(w)
    assert rate == 2 / 30 and basis.startswith("3 session starts over 30 s in ")
    assert len(list(generate_sessions(w, seed=1, duration_s=15.0))) == 2


def _rec(session: str, step: int, start: float, prompt: int, out: int, **kw: object) -> StepRecord:
    return StepRecord(session=session, step=step, start_s=start, prompt_tokens=prompt, output_tokens=out, **kw)  # type: ignore[arg-type]


def test_replay_appends_compactions_and_pauses() -> None:
    records = [
        # session b arrives first; records interleaved and out of order on purpose
        _rec("a", 1, 112.0, 150, 5, pause_s=1.5),  # grows 150 - (100 + 10) = 40
        _rec("b", 0, 100.0, 100, 10, new_tokens=100),
        _rec("a", 0, 105.0, 100, 10, pause_s=2.0),
        _rec("a", 2, 120.0, 80, 5),  # shrinks below 155: a compaction to the whole new prompt
        _rec("b", 1, 103.0, 130, 10, new_tokens=20),  # kept 110 = 100 + 10: plain append of 20
        _rec("b", 2, 109.0, 90, 7, new_tokens=30),  # kept 60 < 140: compact to 60, append 30
        _rec("b", 3, 111.0, 200, 1, new_tokens=10),  # kept 190 > 97: new_tokens undercounts; growth 103 wins
        _rec("sub", 0, 107.0, 50, 5, parent="a"),
    ]
    plans = list(replay_sessions(records))
    assert [(p.session_id, p.arrival_s, p.parent) for p in plans] == [
        ("b", 0.0, None),
        ("a", 5.0, None),
        ("sub", 7.0, "a"),
    ]
    b, a, sub = (list(p.steps) for p in plans)
    assert a == [
        Step(100, 10, 2.0),
        Step(40, 5, 1.5),
        Step(0, 5, 0.0, compact_to=80),
    ]
    assert b == [
        Step(100, 10, 3.0),  # no pause_s: the gap to the next start (an upper bound)
        Step(20, 10, 6.0),
        Step(30, 7, 2.0, compact_to=60),
        Step(103, 1, 0.0),
    ]
    assert sub == [Step(50, 5, 0.0)]
    assert all(p.prefix_tokens == 0 for p in plans)


def test_replay_dropped_output_is_not_a_compaction() -> None:
    """A prompt that still holds the previous prompt but not all of its output (thinking blocks
    stripped from history) is no compaction: the context runs 100 tokens ahead of the trace, and
    the next append gives them back, so the replayed context meets the trace's prompt again."""
    records = [
        _rec("c", 0, 0.0, 1000, 300),
        _rec("c", 1, 1.0, 1200, 50),  # growth 1200 - 1300 = -100, but 1200 >= the previous prompt 1000
        _rec("c", 2, 2.0, 1700, 20),  # growth 1700 - 1250 = 450, less the 100 ahead
    ]
    steps = list(next(replay_sessions(records)).steps)
    assert steps == [Step(1000, 300, 1.0), Step(0, 50, 1.0), Step(350, 20, 0.0)]
    assert all(s.compact_to is None for s in steps)
    context = 0
    for step, rec in zip(steps, records, strict=True):
        context += step.append_tokens
        if rec.step == 2:
            assert context == rec.prompt_tokens
        context += step.output_tokens


def test_replay_of_a_kvbudget_jsonl_file_read_here(tmp_path: Path) -> None:
    """The documented per-step JSONL (StepRecord.to_json) read back by the test itself."""
    original = [
        _rec("x", 0, 0.0, 1000, 100, pause_s=4.0),
        _rec("x", 1, 10.0, 1500, 50, new_tokens=400, pause_s=1.0),
        _rec("y", 0, 3.0, 2000, 10),
    ]
    path = tmp_path / "steps.jsonl"
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in original), encoding="utf-8")
    read = [StepRecord(**json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines()]
    plans = {p.session_id: list(p.steps) for p in replay_sessions(read)}
    assert plans == {"x": [Step(1000, 100, 4.0), Step(400, 50, 0.0)], "y": [Step(2000, 10, 0.0)]}


def test_example_workloads_generate() -> None:
    for example in ("coding-agent.toml", "chat.toml"):
        w = load_workload(EXAMPLES / example)
        plans = list(generate_sessions(w, seed=0, count=20))
        assert all(len(list(p.steps)) >= 1 for p in plans)
        assert plans[0].prefix_tokens == w.prefix_tokens


def test_constant_workload_is_exact() -> None:
    w = Workload(
        arrival=Arrival(rate_per_s=1.0),
        steps=Constant(3),
        first_prompt_tokens=Constant(10),
        append_tokens=Constant(2.5),  # stochastic rounding: 2 or 3, mean 2.5
        output_tokens=Constant(4),
        tool_latency_s=Constant(1.5),
    )
    rows = list(next(generate_sessions(w, seed=9, count=1)).steps)
    assert [r.output_tokens for r in rows] == [4, 4, 4] and rows[0].append_tokens == 10
    assert all(r.append_tokens in (2, 3) for r in rows[1:])
    assert [r.pause_s for r in rows] == [1.5, 1.5, 0.0]
