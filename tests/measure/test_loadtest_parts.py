"""The loadtest's pieces that need no server: the criterion, the verdict, the prediction, the sessions."""

from __future__ import annotations

import asyncio
import random
import time
import types
from pathlib import Path

import pytest

from kvbudget.measure.loadtest import ramp as ramp_module
from kvbudget.measure.loadtest.metrics import Snapshot
from kvbudget.measure.loadtest.predict import closed_loop_sessions, llamacpp_plan, reconcile, slot_memory
from kvbudget.measure.loadtest.prompts import ALPHABETS, Conversation, TextUnits
from kvbudget.measure.loadtest.ramp import CEILING_S, Ramp, make_schedule, sustained
from kvbudget.measure.loadtest.record import FATAL_STREAK, Level, Recorder, percentile
from kvbudget.measure.loadtest.reply import Reply
from kvbudget.measure.loadtest.session import from_trace, from_workload
from kvbudget.simulate import MemoryPolicy, SimConfig, TimeModel
from kvbudget.workload.generate import session_steps
from kvbudget.workload.loader import load_workload

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "coding-agent.toml"
TRACE = ROOT / "tests" / "data" / "traces" / "tracelab_example"


def _recorder(engine: str) -> Recorder:
    return Recorder(engine, None)


def _ok(ttft: float, prompt: int = 100, output: int = 8) -> Reply:
    return Reply(200, 0.0, ttft_s=ttft, latency_s=ttft + 0.1, prompt_tokens=prompt, completion_tokens=output,
                 finish_reason="length")  # fmt: skip


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0 and percentile(values, 99) == 99.0 and percentile(values, 100) == 100.0
    assert percentile([3.0], 99) == 3.0 and percentile([], 50) is None


def test_llamacpp_defers_on_any_scrape_vllm_only_when_it_lasts() -> None:
    llama = _recorder("llamacpp")
    level = llama.begin_level(5, 0.0)
    llama.observe(Snapshot(t=1.0, waiting=1.0, preemptions=0.0))
    assert level.failure is not None and "deferred" in level.failure and level.deferred_peak == 1.0
    vllm = _recorder("vllm")
    level = vllm.begin_level(5, 0.0)
    vllm.observe(Snapshot(t=1.0, waiting=1.0))  # one request between two scheduler steps: normal
    vllm.observe(Snapshot(t=1.25, waiting=0.0))
    vllm.observe(Snapshot(t=1.5, waiting=2.0))
    vllm.observe(Snapshot(t=2.0, waiting=1.0))
    assert level.failure is None and level.deferred_scrapes == 3
    vllm.observe(Snapshot(t=2.5, waiting=1.0))  # waiting for a whole second: deferred
    assert level.failure is not None and "deferred" in level.failure


def test_preemptions_count_from_the_level_start() -> None:
    rec = _recorder("vllm")
    rec.observe(Snapshot(t=0.0, preemptions=10.0))  # the baseline before any load
    level = rec.begin_level(8, 0.0)
    rec.observe(Snapshot(t=1.0, preemptions=10.0))
    assert level.failure is None
    rec.observe(Snapshot(t=2.0, preemptions=13.0))
    assert level.preempted == 3 and level.failure == "3 preemptions counted by the server"
    assert rec.preempted == 3


def test_requests_refused_truncated_and_a_fatal_streak() -> None:
    rec = _recorder("llamacpp")
    level = rec.begin_level(2, 0.0)
    rec.request_done(level, _ok(0.2), 100, 8)
    cut = _ok(0.2, output=3)  # the context ran out: llama.cpp answers 200 with fewer tokens
    rec.request_done(level, cut, 250, 8)
    assert level.refusals == {"truncated": 1} and "cut at 3 of 8" in str(level.failure)
    assert rec.tokens["prompt"] == 200 and rec.tokens["output"] == 11
    refused = Reply(400, 0.0, error="HTTP 400: too long", error_kind="context")
    for _ in range(FATAL_STREAK - 2):
        rec.request_done(level, refused, 300, 8)
    assert rec.fatal is None
    rec.request_done(level, Reply(0, 0.0, error="connection failed", error_kind="transport"), 300, 8)
    assert rec.fatal is None and rec.errors == 1
    rec.request_done(level, refused, 300, 8)
    assert rec.fatal == f"{FATAL_STREAK} requests in a row failed; the last: HTTP 400: too long"
    assert level.ttfts == [0.2, 0.2] and rec.requests == FATAL_STREAK + 2


def test_prefix_hit_rate_prefers_the_server() -> None:
    rec = _recorder("llamacpp")
    rec.observe(Snapshot(t=0.0, prefix_hits=100.0, prefix_queries=400.0))
    rec.begin_level(1, 0.0)
    reply = _ok(0.1)
    reply.cached_tokens = 90
    rec.request_done(rec.level, reply, 100, 8)
    assert rec.prefix_hit_rate() == (0.9, "replies (cached tokens)")  # the server's counters did not move
    rec.observe(Snapshot(t=1.0, prefix_hits=400.0, prefix_queries=800.0))
    assert rec.prefix_hit_rate() == (0.75, "server metrics")


def test_max_requests_permits() -> None:
    async def permits() -> list[bool]:
        rec = Recorder("vllm", 3)
        return [rec.permit() for _ in range(5)] + [rec.budget_spent, rec.wake.is_set()]

    assert asyncio.run(permits()) == [True, True, True, False, False, True, True]


def _level(n: int, passed: bool | None, reasons: list[str] | None = None) -> Level:
    return Level(n, 0.0, passed=passed, reasons=reasons or [])


def test_schedule_and_bounds() -> None:
    ramp = make_schedule(hold=None, start=2, step=3, max_sessions=11, level_time_s=5, target_ttft_s=1,
                         duration_s=None, max_requests=None)  # fmt: skip
    assert ramp.levels == (2, 5, 8, 11) and ramp.deadline_s == CEILING_S and ramp.deadline_name == "ceiling"
    bounded = make_schedule(hold=None, start=1, step=1, max_sessions=4, level_time_s=5, target_ttft_s=1,
                            duration_s=None, max_requests=100)  # fmt: skip
    assert bounded.deadline_s is None  # --max-requests bounds it
    hold = make_schedule(hold=6, start=1, step=1, max_sessions=64, level_time_s=30, target_ttft_s=1,
                         duration_s=12, max_requests=None)  # fmt: skip
    assert hold.levels == (6,) and hold.level_time_s == 12 and hold.deadline_s is None


def test_sustained_verdicts() -> None:
    ramp = make_schedule(hold=None, start=1, step=1, max_sessions=8, level_time_s=5, target_ttft_s=2,
                         duration_s=None, max_requests=None)  # fmt: skip
    levels = [_level(1, True), _level(2, True), _level(3, False, ["1 request deferred"])]
    n, why = sustained(levels, ramp, "criterion")
    assert n == 2 and "3 sessions failed: 1 request deferred" in why
    assert sustained([_level(1, False, ["refused"])], ramp, "criterion")[0] == 0
    late = make_schedule(hold=None, start=4, step=1, max_sessions=8, level_time_s=5, target_ttft_s=2,
                         duration_s=None, max_requests=None)  # fmt: skip
    n, why = sustained([_level(4, False, ["deferred"])], late, "criterion")
    assert n is None and "lower --start" in why
    n, why = sustained([_level(1, True), _level(2, None, ["cut short"])], ramp, "interrupted")
    assert n == 1 and "stopped (interrupted)" in why
    assert sustained([_level(8, True)], ramp, "max-sessions")[1].endswith("raise --max-sessions")


def test_llamacpp_plan_is_the_slots_that_hold_the_cap() -> None:
    assert llamacpp_plan(4, 256, 256, False)[0] == 4
    assert llamacpp_plan(4, 512, 300, False)[0] == 4  # -c 1200 -np 4 pads each slot to 512 cells
    sessions, basis = llamacpp_plan(4, 256, 300, False)
    assert sessions == 0 and "does not hold" in basis
    assert llamacpp_plan(4, 1024, 256, True)[0] == 4
    assert llamacpp_plan(4, 1024, 300, True)[0] == 3  # one shared stream of 1,024 cells


def test_simulator_on_slots_agrees_with_the_slot_count() -> None:
    source = from_workload(str(EXAMPLE), seed=3, prefix=None)
    cap = 40_000
    config = SimConfig(
        memory=slot_memory(6, cap, cap, False),
        policy=MemoryPolicy(policy="reserve", admission="queue", cap=source.cap(cap)),
        time=TimeModel(decode_tokens_per_s=50.0),
    )
    n, trail = closed_loop_sessions(source, 0.0, config, 6)
    assert n == 6
    by_n = {row["sessions"]: row for row in trail}
    assert by_n[6]["held"] is True and by_n[7]["held"] is False and float(str(by_n[7]["queue_delay_p99_s"])) > 0


def test_reconciliation_rows() -> None:
    from kvbudget.measure.loadtest.predict import Prediction

    rows = reconcile(3, Prediction(plan_sessions=4, simulated_sessions=3), "4 sessions failed: deferred")
    assert [(r["figure"], r["difference"]) for r in rows] == [("plan_sessions", -1), ("simulated_sessions", 0)]
    assert "1 fewer than predicted: 4 sessions failed: deferred" in str(rows[0]["note"])
    assert rows[1]["note"] == "the measurement agrees"
    assert reconcile(None, Prediction(), "") == []


def test_workload_sessions_are_the_simulators() -> None:
    source = from_workload(str(EXAMPLE), seed=7, prefix=None)
    workload = load_workload(EXAMPLE)
    assert source.prefix_tokens == workload.prefix_tokens == 2765 + 11899
    assert list(source.steps(5)) == list(session_steps(workload, 7, 5))
    plan = source.plan(5, 0.5)
    steps = list(plan.steps)
    assert [s.pause_s for s in steps] == [s.pause_s * 0.5 for s in session_steps(workload, 7, 5)]
    assert plan.prefix_tokens == source.prefix_tokens and plan.arrival_s == 0.0
    assert source.cap(32_768).mode == workload.cap.action
    assert from_workload(str(EXAMPLE), seed=7, prefix=100).prefix_tokens == 100


def test_trace_sessions_cycle_and_share_a_prefix() -> None:
    files = sorted(str(p) for p in TRACE.glob("*.jsonl"))
    if not files:
        pytest.skip("no TraceLab example in tests/data/traces")
    plain = from_trace(files, None, False, None)
    shared = from_trace(files, None, False, 500)
    first = list(plain.steps(0))
    again = list(plain.steps(0))
    assert first == again and first
    count = int(plain.describe.split("(")[1].split()[0])
    assert list(plain.steps(count)) == first  # cycled
    assert next(iter(shared.steps(0))).append_tokens == max(0, first[0].append_tokens - 500)
    assert shared.prefix_tokens == 500 and plain.cap(1000).mode == "refuse"


def test_text_units_and_conversations() -> None:
    letters = TextUnits("letters", ALPHABETS[1][1], 1.0, 1, True, "/tokenize")
    text = letters.text(random.Random(1), 37)
    assert len(text) == 37 and set(text) <= set(ALPHABETS[1][1])
    spaced = TextUnits("space-led letters", ALPHABETS[0][1], 4.0, 1, False, "usage.prompt_tokens")
    assert len(spaced.text(random.Random(1), 40)) == 2 * 10  # ten units of four tokens each
    completions = Conversation("completions", "PRE")
    completions.add_user("ab")
    completions.add_output("cd")
    assert completions.prompt() == "PREabcd"
    chat = Conversation("chat", "PRE")
    chat.add_user("ab")
    chat.add_output("cd")
    chat.reset("PRE", "xy")
    chat.add_user("ef")  # one user turn after a compaction, not two in a row
    assert chat.prompt() == [{"role": "system", "content": "PRE"}, {"role": "user", "content": "xyef"}]


def test_a_session_whose_first_step_passes_the_cap_sends_nothing() -> None:
    from kvbudget.measure.loadtest.client import Client
    from kvbudget.measure.loadtest.session import Drive, run_session

    source = from_workload(str(EXAMPLE), seed=0, prefix=None)  # a 14,664-token shared prefix
    units = TextUnits("letters", ALPHABETS[1][1], 1.0, 1, True, "/tokenize")

    async def one() -> tuple[str, Recorder]:
        rec = Recorder("llamacpp", None)
        rec.begin_level(1, 0.0)
        client = Client("http://127.0.0.1:9")  # never opened: nothing may be sent
        drive = Drive(client, units, "", source, 8192, "filler", 0.0, 0, rec)
        return await run_session(drive, 0), rec

    ended, rec = asyncio.run(one())
    assert ended.startswith("too big: its first step needs ") and ended.endswith("over the 8,192-token cap")
    assert rec.sent == 0 and rec.sessions == {"started": 1, "capped": 1}


@pytest.mark.parametrize("reported", [float("inf"), float("nan"), -1, 10**20, 1e300, "12", [1], {"a": 1}, True, None])
def test_a_servers_absurd_counts_are_no_figure(reported: object) -> None:
    from kvbudget.measure.loadtest.reply import _timings, _usage

    reply = Reply(status=200, sent_s=0.0)
    _usage(reply, {"prompt_tokens": reported, "completion_tokens": reported,
                   "prompt_tokens_details": {"cached_tokens": reported}})  # fmt: skip
    _timings(reply, {"prompt_ms": reported, "predicted_per_second": reported, "prompt_per_second": reported})
    assert (reply.prompt_tokens, reply.completion_tokens, reply.cached_tokens) == (None, None, None)
    assert (reply.prompt_ms, reply.predicted_per_s, reply.prompt_per_s) == (None, None, None)


def test_a_servers_plausible_counts_are_kept() -> None:
    from kvbudget.measure.loadtest.reply import _timings, _usage

    reply = Reply(status=200, sent_s=0.0)
    _usage(reply, {"prompt_tokens": 12, "completion_tokens": 3.0, "prompt_tokens_details": {"cached_tokens": 8}})
    _timings(reply, {"prompt_ms": 4.5, "predicted_per_second": 80.0, "prompt_per_second": 900})
    assert (reply.prompt_tokens, reply.completion_tokens, reply.cached_tokens) == (12, 3, 8)
    assert (reply.prompt_ms, reply.predicted_per_s, reply.prompt_per_s) == (4.5, 80.0, 900.0)


def _ramp_with_sessions(
    monkeypatch: pytest.MonkeyPatch, answer_after_s: float, level_time_s: float, hold: int | None = None
) -> Level:
    """Run a real Ramp (one level of 2) whose sessions each complete a request every ``answer_after_s``."""

    async def session(drive: types.SimpleNamespace, index: int) -> str:
        rec = drive.recorder
        level = rec.level
        level.sessions_started += 1
        while True:
            await asyncio.sleep(answer_after_s)
            reply = Reply(200, time.monotonic(), ttft_s=0.001, latency_s=0.002, completion_tokens=1)
            rec.request_done(level, reply, 10, 1)

    async def scrape() -> None:
        return None

    async def go() -> list[Level]:
        rec = Recorder("llamacpp", None)
        schedule = make_schedule(hold=hold, start=2, step=1, max_sessions=2, level_time_s=level_time_s,
                                 target_ttft_s=1, duration_s=None, max_requests=None)  # fmt: skip
        await Ramp(types.SimpleNamespace(recorder=rec), schedule, scrape, 10.0, lambda r, n: None).run()  # type: ignore[arg-type]
        return rec.levels

    monkeypatch.setattr(ramp_module, "run_session", session)
    (level,) = asyncio.run(go())
    assert level.ended_s is not None
    return level


def test_a_level_runs_on_until_each_session_has_completed_a_request(monkeypatch: pytest.MonkeyPatch) -> None:
    # --level-time 0.1 s, requests taking 1 s: the level runs on past its time, to at most 4 x 0.1 s;
    # still short of a request per session, it fails for want of evidence rather than passing on none.
    short = _ramp_with_sessions(monkeypatch, 1.0, 0.1)
    assert short.passed is False and short.requests == 0 and short.ended_s is not None
    assert short.reasons == ["no request completed for 2 sessions in 0 s (lengthen --level-time)"]
    assert 0.39 < short.ended_s - short.started_s < 0.95
    # --level-time 0.1 s, requests taking 0.25 s: the level stretches to 0.25 s, when both sessions
    # have answered, and passes on one request per session.
    ok = _ramp_with_sessions(monkeypatch, 0.25, 0.1)
    assert ok.passed is True and ok.requests == 2 and ok.reasons == [] and ok.ended_s is not None
    assert 0.24 < ok.ended_s - ok.started_s < 0.39
    # A held level keeps to its time (--duration bounds the run): no stretch; it says to lengthen --duration.
    held = _ramp_with_sessions(monkeypatch, 1.0, 0.1, hold=2)
    assert held.passed is False and held.ended_s is not None and held.ended_s - held.started_s < 0.39
    assert held.reasons == ["no request completed for 2 sessions in 0 s (lengthen --duration)"]
