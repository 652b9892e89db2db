"""Measured speeds that mean what the simulator charges (measure/loadtest/flow.py, speeds.py, simulate/measured.py).

The live check against a real llama-server is tests/live/speed_check.py (tests/live/test_speed_prediction_live.py,
docs/speed.md); here the parts are held to hand-worked cases: which stream gaps are clean, which prompts were
batched together, that the fits recover the coefficients of data made from them (pooled results: once over the
union of their samples), and that the simulator charges what they say.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from kvbudget.errors import InputError
from kvbudget.measure.loadtest.flow import SAMPLE_CAP, Flow, Reservoir
from kvbudget.measure.loadtest.speeds import (
    MIN_GAPS,
    SAMPLE_ROWS,
    batched_work,
    decode_fit,
    decode_iterations,
    prefill_fit,
    speeds_json,
)
from kvbudget.schemas import schema
from kvbudget.simulate import MemoryModel, MemoryPolicy, SimConfig, TimeModel, measured_sample, simulate
from kvbudget.simulate.measured import measured_speeds
from kvbudget.simulate.measured_loadtest import speeds_of, speeds_of_all
from kvbudget.simulate.speeds import measured_time_model
from kvbudget.workload.record import SessionPlan, Step


def test_a_gap_is_clean_only_with_no_prompt_in_flight_and_the_same_sessions_decoding() -> None:
    flow = Flow()
    a = flow.send(10)
    a.token()  # a's first token: a decodes, holding 11 tokens
    a.token()
    assert a.gaps[-1][:2] == (1, 12), "one session decoding, 10 prompt + 2 generated tokens held"
    b = flow.send(5)  # b's prompt is in flight: a's next gap holds it
    a.token()
    assert len(a.gaps) == 1
    b.token()  # b starts decoding: the flow changed during a's gap
    a.token()
    assert len(a.gaps) == 1
    a.token()
    b.token()
    assert a.gaps[-1][:2] == (2, 14 + 7) and b.gaps[-1][:2] == (2, 15 + 7)
    b.end()
    b.end()  # idempotent
    assert (flow.decoding, flow.prefilling, flow.context) == (1, 0, 15)
    a.end()
    assert (flow.decoding, flow.context) == (0, 0)
    failed = flow.send(3)
    failed.end()  # never got a token
    assert (flow.prefilling, flow.decoding) == (0, 0) and failed.gaps == []


def test_reservoir_keeps_a_bounded_sample_of_everything_offered() -> None:
    r = Reservoir()
    for i in range(SAMPLE_CAP + 5000):
        r.add((i, float(i)))
    assert r.seen == SAMPLE_CAP + 5000 and len(r.values) == SAMPLE_CAP
    assert max(v[0] for v in r.values) >= SAMPLE_CAP, "later values replace earlier ones"


def test_prompts_of_one_batch_are_summed_and_a_prompt_sent_during_a_batch_joins_the_next() -> None:
    # (sent, ttft, new, cached, decoding): the first two waited together and got their first token together; the
    # third was sent while their batch ran and got its own later; the fourth comes after all of them
    prefills = [
        (0.0, 1.0, 10, 0, 0, 0.0, -1.0),
        (0.5, 0.5, 20, 100, 1, 0.0, -1.0),
        (0.8, 0.9, 8, 0, 1, 0.0, -1.0),
        (2.0, 0.5, 5, 50, 2, 0.0, -1.0),
    ]
    work = batched_work(prefills)
    own = [(10.0, 10 * 5.0), (20.0, 20 * 110.0), (8.0, 8 * 4.0), (5.0, 5 * 52.5)]  # tokens, x mean context read
    assert work[0] == (own[0][0] + own[1][0], own[0][1] + own[1][1])
    assert work[1] == work[0]
    assert work[2] == own[2], "its prefill overlapped theirs, but it joined the next batch"
    assert work[3] == own[3]


def _gaps(c0: float, c1: float, c2: float) -> dict[int, Reservoir]:
    gaps: dict[int, Reservoir] = {}
    for k in (1, 2, 3, 4):
        r = gaps.setdefault(k, Reservoir())
        for held in range(50 * k, 50 * k + 40):
            r.add((held, c0 + c1 * k + c2 * held))
    return gaps


def test_the_decode_fit_recovers_the_iteration_it_was_made_from() -> None:
    gaps = _gaps(0.004, 0.010, 1e-4)
    fit = decode_fit(gaps)
    assert fit is not None
    assert fit == pytest.approx((0.004, 0.010, 1e-4), rel=1e-6, abs=1e-9)
    points = decode_iterations(gaps)
    assert [k for k, _, _ in points] == [1, 2, 3, 4]
    assert points[0][1] == pytest.approx(0.004 + 0.010 + 1e-4 * (50 + 19.5 - 0.5 * 0.4), rel=0.01)  # trimmed mean
    few = Reservoir()
    for _ in range(MIN_GAPS - 1):
        few.add((1, 0.01))
    assert decode_iterations({1: few}) == [] and decode_fit({1: few}) is None


def test_the_prefill_fit_recovers_the_costs_it_was_made_from() -> None:
    c, a, b = 0.05, 0.002, 1e-4
    iterations = [(1, 0.02, 100), (2, 0.03, 100), (3, 0.04, 100)]
    prefills = []
    for i in range(40):  # one request at a time, 10 s apart: none overlaps another
        new, cached, beside = 5 + 3 * (i % 7), 40 * (i % 5), i % 3
        seconds = c + a * new + b * new * (cached + new / 2) + (0.02 + 0.01 * beside)  # + the iteration of k + 1
        prefills.append((10.0 * i, seconds, new, cached, beside, 0.0, -1.0))
    fit = prefill_fit(prefills, iterations)
    assert fit is not None
    assert fit[:3] == pytest.approx((c, a, b), rel=1e-6, abs=1e-9)
    gaps = _gaps(0.004, 0.010, 1e-4)
    doc = speeds_json(gaps, prefills)
    again = prefill_fit(prefills, decode_iterations(gaps))  # the document's fit is over its own decode curve
    assert again is not None and doc["prefill_requests"] == 40
    assert (doc["first_token_overhead_s"], doc["prefill_s_per_token"]) == (again[0], again[1])
    assert prefill_fit(prefills[:3], iterations) is None, "too few requests to fit"


def _doc(iteration: dict[int, float], gaps: int = 100) -> dict[str, object]:
    return {
        "levels": [],
        "speeds": {
            "decode_iterations": [{"running": k, "iteration_s": t, "gaps": gaps} for k, t in iteration.items()],
            "decode_fit": {"s_per_iteration": 0.004, "s_per_session": 0.01, "s_per_token_held": 1e-4},
            "prefill_tokens_per_s": 100.0,
            "prefill_s_per_token": 0.002,
            "prefill_s_per_token_context": 1e-4,
            "first_token_overhead_s": 0.05,
            "prefill_requests": 10,
            "basis": "",
        },
    }


def test_measured_speeds_read_the_clean_figures_and_pool_several_results(tmp_path: Path) -> None:
    one = speeds_of(_doc({2: 0.05}), "a.json")
    assert one.clean and one.points == ((2, 20.0),) and one.first_token_s == 0.05
    assert one.prefill_s(10, 100) == pytest.approx(10 * (0.002 + 1e-4 * 105))
    assert one.step(3, 300) == pytest.approx(1 / 20.0), "without bytes per token: the curve by sessions"
    counted = type(one)(**{**one.__dict__, "bytes_per_token": 2.0})
    assert counted.step(3, 600) == pytest.approx(0.004 + 0.03 + 1e-4 * 300)
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps(_doc({2: 0.05}, gaps=100)), encoding="utf-8")
    second.write_text(json.dumps(_doc({2: 0.08, 4: 0.1}, gaps=300)), encoding="utf-8")
    pooled = measured_speeds(f"{first},{second}")
    assert pooled.source == "a.json, b.json"
    assert dict(pooled.points)[2] == pytest.approx(1 / ((0.05 * 100 + 0.08 * 300) / 400))
    assert dict(pooled.points)[4] == pytest.approx(10.0)
    old = {"levels": [{"sessions": 2, "decode_tokens_per_s": {"p50": 20.0}, "prefill_tokens_per_s": {"p50": 50.0}}]}
    legacy = speeds_of(old, "old.json")
    assert not legacy.clean and legacy.points == ((2, 20.0),) and legacy.prefill_s(100, 0) == 2.0
    with pytest.raises(InputError, match="--speed-from"):
        measured_speeds(",")


def _one_step(index: int, prompt: int, output: int) -> SessionPlan:
    return SessionPlan(f"s{index}", 0.0, iter([Step(prompt, output, 0.0)]))


def _config(time: TimeModel, closed: int | None = None) -> SimConfig:
    return SimConfig(
        memory=MemoryModel.linear(10_000, 1, 1000, share_prefix=False),
        policy=MemoryPolicy(policy="reserve", admission="queue"),
        time=time,
        closed_loop=closed,
    )


def test_a_closed_loop_starts_a_session_when_one_ends_and_keeps_none_waiting() -> None:
    time = TimeModel(prefill_tokens_per_s=100.0, decode_tokens_per_s=10.0)
    result = simulate((_one_step(i, 100, 11) for i in range(3)), _config(time, closed=1))
    # one at a time: 1 s of prefill, then 11 tokens at 0.1 s each (the first with the prefill's iteration)
    assert result.peak_concurrency == 1 and result.finished == 3
    assert result.sim_time_s == pytest.approx(3 * (1.0 + 1.1))
    assert result.ttft_s["p99"] == pytest.approx(1.1, rel=0.011), "no session waited for the loop"
    assert result.queue_delay_s["p99"] == 0


def test_prompts_waiting_together_get_their_first_token_together() -> None:
    apart = TimeModel(prefill_tokens_per_s=100.0, decode_tokens_per_s=10.0)
    together = TimeModel(prefill_tokens_per_s=100.0, decode_tokens_per_s=10.0, group_prompts=True)
    a = simulate((_one_step(i, 100, 11) for i in range(2)), _config(apart))
    b = simulate((_one_step(i, 100, 11) for i in range(2)), _config(together))
    assert a.ttft_s["p50"] == pytest.approx(1.1, rel=0.011) and a.ttft_s["p99"] == pytest.approx(2.1, rel=0.011)
    assert b.ttft_s["p50"] == pytest.approx(2.1, rel=0.011) and b.ttft_s["p99"] == pytest.approx(2.1, rel=0.011)


def test_the_first_token_overhead_delays_the_step_and_counts_in_its_ttft() -> None:
    base = TimeModel(prefill_tokens_per_s=100.0, decode_tokens_per_s=10.0)
    late = TimeModel(prefill_tokens_per_s=100.0, decode_tokens_per_s=10.0, first_token_s=0.5)
    sessions = [SessionPlan("s", 0.0, iter([Step(100, 11, 1.0), Step(100, 11, 0.0)]))]
    a = simulate(iter(sessions), _config(base, closed=1))
    sessions = [SessionPlan("s", 0.0, iter([Step(100, 11, 1.0), Step(100, 11, 0.0)]))]
    b = simulate(iter(sessions), _config(late, closed=1))
    assert b.ttft_s["p99"] == pytest.approx(a.ttft_s["p99"] + 0.5, rel=0.011)
    assert b.sim_time_s == pytest.approx(a.sim_time_s + 2 * 0.5)


def test_measured_time_model_carries_the_mechanism() -> None:
    speeds = speeds_of(_doc({2: 0.05}), "a.json")
    time = measured_time_model(speeds)
    assert time.group_prompts and time.first_token_s == 0.05 and time.prefill_s is not None
    assert time.prefill_s(10, 100) == speeds.prefill_s(10, 100)


def _narrow(k: int, c: tuple[float, float, float], prefill: tuple[float, float, float]) -> dict[str, object]:
    """A result of one hold at ``k`` sessions: its clean gaps cover a narrow range of tokens held."""
    gaps = {k: Reservoir()}
    for held in range(40 * k, 40 * k + 30):
        gaps[k].add((held, c[0] + c[1] * k + c[2] * held))
    # pooled, the decode curve's first point is the mean gap at 2 sessions, the iteration of one (beside 0) that
    # the prefill fit takes out of each request's time to first token
    iteration = c[0] + 2 * c[1] + c[2] * (80 + 29 / 2)
    prefills = []
    for i in range(30):  # one prompt at a time, 10 s apart, none decoding beside it
        new, cached = 5 + 3 * (i % 7), 40 * (i % 5) + 10 * k
        seconds = prefill[0] + prefill[1] * new + prefill[2] * new * (cached + new / 2) + iteration
        prefills.append((10.0 * i, seconds, new, cached, 0, 0.0, -1.0))
    return {"levels": [], "server": {"engine": "llamacpp", "model": "tiny"}, "speeds": speeds_json(gaps, prefills)}


def test_pooled_results_are_fitted_once_over_the_union_of_their_samples(tmp_path: Path) -> None:
    c, prefill = (0.004, 0.010, 1e-4), (0.05, 0.002, 1e-5)
    docs = [_narrow(2, c, prefill), _narrow(4, c, prefill)]
    for doc in docs:
        jsonschema.validate(doc["speeds"], schema("loadtest")["properties"]["speeds"])
        sample = doc["speeds"]["sample"]  # type: ignore[index]
        assert len(sample["gaps"]) == 30 and len(sample["prefills"]) == 30
    # each hold alone cannot tell a session from a token held (both move together in one hold): its own line
    # misses the iteration at the other hold's concurrency
    alone = speeds_of(docs[0], "a.json")
    assert alone.decode_fit is not None
    at4 = c[0] + 4 * c[1] + 170 * c[2]
    assert abs(sum(x * y for x, y in zip(alone.decode_fit, (1, 4, 170), strict=True)) / at4 - 1) > 0.05
    paths = []
    for i, doc in enumerate(docs):
        paths.append(tmp_path / f"{i}.json")
        paths[-1].write_text(json.dumps(doc), encoding="utf-8")
    pooled = measured_speeds(",".join(map(str, paths)))
    assert pooled.decode_fit == pytest.approx(c, rel=1e-6, abs=1e-9), "one fit over both holds' gaps"
    assert pooled.levels == (2, 4)
    assert (pooled.first_token_s, pooled.prefill_per_token, pooled.prefill_per_context) == pytest.approx(
        prefill, rel=1e-6, abs=1e-9
    ), "one prefill fit over both holds' requests"
    # without their samples (results from before them) the two lines are averaged, as before
    for doc in docs:
        del doc["speeds"]["sample"]  # type: ignore[attr-defined]
    averaged = speeds_of_all([(docs[0], "a.json"), (docs[1], "b.json")])
    assert averaged.decode_fit is not None and averaged.decode_fit != pytest.approx(c, rel=0.05)


def test_a_sample_larger_than_a_load_test_keeps_or_malformed_is_refused() -> None:
    assert SAMPLE_ROWS == measured_sample.SAMPLE_ROWS, "the reader's bound is the writer's"
    doc = _narrow(2, (0.004, 0.010, 1e-4), (0.05, 0.002, 1e-5))
    speeds = doc["speeds"]
    assert isinstance(speeds, dict)
    speeds["sample"] = {"gaps": [[2, 10, 0.01]] * (SAMPLE_ROWS + 1), "prefills": []}
    with pytest.raises(InputError, match="more than a load test keeps"):
        speeds_of(doc, "big.json")
    speeds["sample"] = {"gaps": [[2, 10]], "prefills": []}
    with pytest.raises(InputError, match=r"speeds\.sample\.gaps rows"):
        speeds_of(doc, "bad.json")
    speeds["sample"] = {"gaps": [[2, 10, -1.0]], "prefills": []}
    with pytest.raises(InputError, match="not a measured time"):
        speeds_of(doc, "bad.json")


def test_a_sample_is_bounded_and_keeps_every_concurrency_in_proportion() -> None:
    gaps: dict[int, Reservoir] = {}
    for k, n in ((1, 3000), (2, 3000)):
        r = gaps.setdefault(k, Reservoir())
        for held in range(n):
            r.add((held, 0.01 * k))
    sample = speeds_json(gaps, [])["sample"]
    assert isinstance(sample, dict) and len(sample["gaps"]) == SAMPLE_ROWS
    share = sum(1 for row in sample["gaps"] if row[0] == 1) / SAMPLE_ROWS
    assert 0.45 < share < 0.55, "a uniform subsample of both concurrencies"


def test_a_prefill_that_does_not_grow_with_the_prompt_is_a_fixed_cost_not_a_refusal(tmp_path: Path) -> None:
    # requests whose time to first token, less the iteration, is the same 40 ms whatever their prompt (a small
    # negative trend: the non-negative fit's a = b = 0, as a pooled live sample gave, docs/speed.md run 3)
    iterations = [(1, 0.02, 100), (2, 0.03, 100), (3, 0.04, 100)]
    prefills = []
    for i in range(40):
        new, cached = 5 + 3 * (i % 7), 40 * (i % 5)
        prefills.append((10.0 * i, 0.040 - 1e-5 * new + 0.02, new, cached, 0, 0.0, -1.0))
    fit = prefill_fit(prefills, iterations)
    assert fit is not None, "a fixed cost is a fit"
    c, a, b, rate = fit
    assert (a, b) == (0.0, 0.0) and c == pytest.approx(0.040 - 1e-5 * 14, abs=2e-4)
    assert rate == pytest.approx(14 / c), "the median request's tokens (14) over its fixed cost"
    doc = {"levels": [], "speeds": speeds_json(_gaps(0.004, 0.010, 1e-4), prefills)}
    jsonschema.validate(doc["speeds"], schema("loadtest")["properties"]["speeds"])
    assert doc["speeds"]["prefill_model"] == "fixed"  # type: ignore[index]
    path = tmp_path / "fixed.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    speeds = measured_speeds(str(path))
    assert speeds.prefill_per_token == 0.0 and speeds.first_token_s == doc["speeds"]["first_token_overhead_s"]  # type: ignore[index]
    assert "a fixed" in speeds.prefill_basis and "stalls no decode" in speeds.prefill_basis
    time = measured_time_model(speeds)
    assert time.prefill_s is not None and time.prefill_s(100, 500) == 0.0, "no decode stall"
    # the simulator charges it: a session's TTFT is the fixed cost and one iteration
    one = SessionPlan("s", 0.0, iter([Step(50, 11, 0.0)]))
    result = simulate(iter([one]), _config(time, closed=1))
    assert result.ttft_s["p50"] == pytest.approx(speeds.first_token_s + speeds.step(1, 0), rel=0.011)
    # an older reader's view of a grown fit is unchanged: a + b > 0 is "tokens"
    grown = [(10.0 * i, 0.05 + 0.002 * p[2] + 0.02, p[2], p[3], 0, 0.0, -1.0) for i, p in enumerate(prefills)]
    assert speeds_json(_gaps(0.004, 0.010, 1e-4), grown)["prefill_model"] == "tokens"


def test_a_request_sent_while_others_decode_keeps_its_wait_for_the_running_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [0.0]
    monkeypatch.setattr("kvbudget.measure.loadtest.flow.time.monotonic", lambda: clock[0])
    flow = Flow()
    a = flow.send(10)
    a.token()  # a decodes
    assert a.waited_s == 0.0, "no one decoded when it was sent"
    clock[0] = 1.0
    b = flow.send(5)  # sent while a's iteration runs
    clock[0] = 1.03
    a.token()  # that batch ended: b's prompt goes into the next one
    clock[0] = 1.20
    b.token()
    assert b.waited_s == pytest.approx(0.03)
    clock[0] = 2.0
    c = flow.send(5)  # sent between two batches: its prompt joined the next batch at once
    clock[0] = 2.2
    a.token()
    clock[0] = 2.205  # its first token came with the others' tokens of that batch (within TOGETHER_S)
    c.token()
    assert c.waited_s == 0.0 and flow.awaiting == []
    d = flow.send(5)
    d.end()  # failed before any token: no longer awaited
    assert flow.awaiting == [] and d.waited_s == 0.0


def test_a_prompt_that_comes_while_decode_runs_waits_for_the_iteration_in_progress() -> None:
    def run(wait: bool) -> float:
        time = TimeModel(prefill_tokens_per_s=100.0, decode_tokens_per_s=10.0, wait_iteration=wait)
        # s0: 1 s of prefill, then 50 iterations of 0.1 s from 1.0 s; s1 comes at 2.05 s, mid-iteration
        plans = [SessionPlan("s0", 0.0, iter([Step(100, 50, 0.0)])), SessionPlan("s1", 2.05, iter([Step(100, 5, 0.0)]))]
        result = simulate(iter(plans), _config(time))
        return result.ttft_s["p99"]

    assert run(False) == pytest.approx(1.1, rel=0.011), "its prefill at once, then one iteration"
    assert run(True) == pytest.approx(0.05 + 1.1, rel=0.011), "the iteration running to 2.1 s first"


def test_the_servers_own_prompt_time_is_the_stall_and_the_clients_delay_beyond_it_stalls_nothing() -> None:
    # the server computed each prompt in a x new (its timings.prompt_ms, the first token's iteration included); the
    # client saw each first token later still (its HTTP request, its event loop on a busy machine: longer for the
    # larger answers), which stalls no other session's decode
    a = 0.004
    iterations = [(1, 0.02, 100), (2, 0.03, 100), (3, 0.04, 100)]
    prefills, delays = [], []
    for i in range(40):
        new, beside = 5 + 3 * (i % 7), i % 3
        server = a * new + (0.02 + 0.01 * beside)  # the batch: the prompt's work and the iteration of k + 1
        delays.append(0.08 + 0.002 * new)
        prefills.append((10.0 * i, server + delays[-1], new, 0, beside, 0.0, server))
    fit = prefill_fit(prefills, iterations)
    assert fit is not None
    mean_delay = sum(delays) / len(delays)
    assert fit[:3] == pytest.approx((mean_delay, a, 0.0), rel=1e-6, abs=1e-9), "the stall is the server's"
    unknown = [(*p[:6], -1.0) for p in prefills]  # a server without timings: the time to first token, as before
    fit = prefill_fit(unknown, iterations)
    assert fit is not None and fit[:3] == pytest.approx((0.08, a + 0.002, 0.0), rel=1e-6, abs=1e-9)
