"""``--speed-from LOG``: the speeds a serving engine printed in its own log (measure/logs/serving.py,
simulate/measured_log.py), on real excerpts (tests/data/logs/SOURCES.md, "serving/"). Every expected figure is
computed here from the numbers the lines print, by the rules the docs state (docs/speed.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.errors import InputError
from kvbudget.measure.logs.serving import read_serving
from kvbudget.simulate.measured import measured_speeds
from tests.helpers import refused_in_one_line, run_cli

DATA = Path(__file__).resolve().parents[1] / "data" / "logs"
SERVING = DATA / "serving"
VLLM_V1 = SERVING / "vllm-v1-mtp-running18-h.log"
VLLM_V0 = SERVING / "vllm-v0-metrics-running16.log"
SGLANG_8 = SERVING / "sglang-0.4-decode-running8.log"
SGLANG_IDLE = SERVING / "sglang-0.5-single-request-idle.log"
LLAMA = SERVING / "llama-server-np2-tiny-llama31.log"


def test_vllm_v1_clean_interval_gives_decode_and_mixed_intervals_give_prefill() -> None:
    """Line 1 has no line before it; line 2 (prompt 0, 18 running before and after) is clean: 1226.3 / 18 tokens/s
    a session. Lines 3 and 4 prefilled with requests running: decode took G / (k r(k)) of each, prefill the rest.
    Line 5 prefilled nothing but its running count changed (21 -> 20): not clean."""
    m = measured_speeds(str(VLLM_V1))
    r18 = 1226.3 / 18
    assert m.levels == (18,) and m.points[0][1] == pytest.approx(r18)
    # line 3: 18 running at both ends; line 4: 18 -> 21, a mean of 20 (past 18: the one point's iteration)
    line3 = 12068.8 / (1 - 734.9 / (18 * r18))
    line4 = 18032.5 / (1 - 589.8 / (20 * r18))
    assert m.prefill_tokens_per_s == pytest.approx((line3 + line4) / 2)  # the median of two
    assert round(m.prefill_tokens_per_s) == 30957
    assert (m.engine, m.served, m.origin) == ("vllm", None, "log")
    assert "lines 3, 4" in m.prefill_basis and "(line 2)" in m.decode_basis and "68.1 at 18" in m.decode_basis


def test_vllm_v0_decode_intervals_read_and_no_prefill_is_refused() -> None:
    log = read_serving(VLLM_V0)
    assert log.engine == "vllm" and log.stats_lines == 5
    assert [(d.running, d.tokens_per_s, d.line) for d in log.decode] == [
        (16, 16.7 / 16, 2),
        (16, 16.7 / 16, 3),
        (16, 16.7 / 16, 4),
        (16, 16.6 / 16, 5),
    ]
    with pytest.raises(InputError, match=r"no interval of the log both prefilled and decoded"):
        measured_speeds(str(VLLM_V0))


def test_sglang_decode_lines_at_a_steady_count_are_clean() -> None:
    log = read_serving(SGLANG_8)
    gen = [183.59, 183.58, 182.35, 183.12, 182.91, 183.26, 180.98, 182.11]  # lines 2-9 (line 1: none before)
    assert [(d.running, d.line) for d in log.decode] == [(8, n) for n in range(2, 10)]
    assert [d.tokens_per_s for d in log.decode] == pytest.approx([g / 8 for g in gen])
    assert log.mixed == []


def test_sglang_windows_holding_idle_time_are_neither_decode_nor_prefill() -> None:
    """Each prefill ran with nothing running (the server idle before it): the decode line after it (1.06, 3.17
    tokens/s: the idle time in its window) is not clean, nor a prefill measurement; 84.20 and 81.97 are."""
    log = read_serving(SGLANG_IDLE)
    assert [(d.running, d.tokens_per_s, d.line) for d in log.decode] == [(1, 84.20, 3), (1, 81.97, 7)]
    assert log.mixed == []
    with pytest.raises(InputError, match=r"sglang-0.5-single-request-idle.log: no interval .* prefill speed"):
        measured_speeds(str(SGLANG_IDLE))


def test_llama_server_requests_alone_give_prefill_and_decode_and_overlapped_ones_are_left_out() -> None:
    """Tasks 0 and 66 ran alone: decode (12 - 1) tokens in 615.15 and 1093.04 ms (the clock starts at the first
    token), prefill 97 + 129 tokens in 1386.05 + 2926.35 ms. Task 13 had task 39 launched beside it (its decode time
    holds 39's prompt): left out; task 39 (2 slots busy, steady) generated 1 token: no decode gap."""
    log = read_serving(LLAMA)
    assert [(d.running, d.line) for d in log.decode] == [(1, 13), (1, 80)]
    assert [(p.tokens, p.alone) for p in log.prompts] == [(97, True), (193, False), (81, False), (129, True)]
    m = measured_speeds(str(LLAMA))
    iteration = (0.61515 / 11 + 1.09304 / 11) / 2
    assert m.levels == (1,) and m.points[0][1] == pytest.approx(1 / iteration)
    assert m.prefill_tokens_per_s == pytest.approx((97 + 129) / (1.38605 + 2.92635))
    assert m.engine == "llamacpp" and "2 requests alone in the server (lines 12, 79)" in m.prefill_basis


def _startup_and_serving(tmp_path: Path) -> Path:
    """A start-up naming meta-llama/Llama-3.2-1B-Instruct followed by serving lines: two real excerpts, one file."""
    log = tmp_path / "vllm.log"
    startup = (DATA / "vllm" / "v1-2026-nondefault-args-apiserver.log").read_text(encoding="utf-8")
    log.write_text(startup + VLLM_V1.read_text(encoding="utf-8"), encoding="utf-8")
    return log


def test_a_log_belongs_to_its_engine_and_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = str(_startup_and_serving(tmp_path))
    assert measured_speeds(log).served == "meta-llama/Llama-3.2-1B-Instruct"
    plan = ["--gpu", "h100-sxm", "--context", "32k", "--speed-from", log]
    code, _, err = run_cli(capsys, "plan", "llama-3.1-8b", "--engine", "vllm", *plan)
    assert code == 1 and "served meta-llama/Llama-3.2-1B-Instruct" in err and "Traceback" not in err
    code, _, err = run_cli(capsys, "plan", "llama-3.2-1b", "--engine", "sglang", *plan)
    assert code == 1 and "measured on vllm, but the plan is for sglang" in err
    code, out, err = run_cli(capsys, "plan", "llama-3.2-1b", "--engine", "vllm", *plan, "--json")
    assert code == 0, err
    speeds = json.loads(out)["speeds"]
    assert speeds["provenance"] == "measured" and speeds["source"] == "vllm.log"
    assert speeds["decode"]["levels"] == [{"sessions": 18, "tokens_per_s_per_session": round(1226.3 / 18, 3)}]
    assert speeds["prefill"]["tokens_per_s"] == pytest.approx(30956.821, abs=0.01)
    code, out, _ = run_cli(capsys, "plan", "llama-3.2-1b", "--engine", "vllm", *plan)
    assert "Speeds (measured, log vllm.log)" in out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"no serving stats lines"),
        ("INFO hello\n", r"no serving stats lines"),
        (
            "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: 9999999 reqs, "
            "Waiting: 0 reqs\n",
            r"a running count of 9,999,999 is no figure",
        ),
        (
            "Avg prompt throughput: 5.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: 2 reqs, "
            "Waiting: 0 reqs\n" * 3,
            r"none a clean decode stretch",
        ),
    ],
)
def test_bad_logs_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    log = tmp_path / "server.log"
    plan = ["plan", "llama-3.1-8b", "--gpu", "h100-sxm", "--speed-from", str(log)]
    refused_in_one_line(capsys, log, text, lambda p: measured_speeds(str(p)), message, *plan)


def test_a_log_is_not_pooled_with_results(tmp_path: Path) -> None:
    result = Path(__file__).resolve().parents[1] / "data" / "loadtest" / "speeds-llama31-8b-vllm.json"
    with pytest.raises(InputError, match=r"vllm-v1-mtp-running18-h.log is an engine log, and a log is not pooled"):
        measured_speeds(f"{result},{VLLM_V1}")


def test_over_long_lines_are_skipped_and_samples_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvbudget.measure.logs import serving

    line = "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 80.0 tokens/s, Running: 4 reqs, "
    line += "Waiting: 0 reqs"
    log = tmp_path / "long.log"
    log.write_text(f"{line}\n{line}{' ' * serving.MAX_LINE}\n" + f"{line}\n" * 5, encoding="utf-8")
    monkeypatch.setattr(serving, "MAX_SAMPLES", 3)
    read = read_serving(log)
    assert read.stats_lines == 6  # the over-long line is not read
    assert len(read.decode) == 3 and read.dropped == 2 and read.decode[0].tokens_per_s == 20.0


def test_size_says_the_log_measured_its_rows(capsys: pytest.CaptureFixture[str]) -> None:
    """The log names no model: size lists one, and the vLLM row takes the log's speeds, the SGLang row the
    roofline; the text says a log measured them, not a load test."""
    size = ["llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm,sglang", "--sessions", "60", "--context", "32k"]
    code, out, err = run_cli(capsys, "size", *size, "--itl", "25ms", "--speed-from", str(VLLM_V1))
    assert code == 0, err
    assert "speeds: measured by log vllm-v1-mtp-running18-h.log for Llama-3.1-8B vllm" in out
    assert "from the speeds log vllm-v1-mtp-running18-h.log measured on this model and engine" in out


def test_what_measured_the_speeds_in_words() -> None:
    from kvbudget.simulate.measured_log import measured_by

    result = Path(__file__).resolve().parents[1] / "data" / "loadtest" / "speeds-llama31-8b-vllm.json"
    assert measured_by(str(VLLM_V1)) == "log vllm-v1-mtp-running18-h.log"
    assert measured_by(f"{result},{result}") == "load test speeds-llama31-8b-vllm.json, speeds-llama31-8b-vllm.json"


INTERVAL = st.tuples(
    st.sampled_from([0.0, 0.0, 250.5, 4000.0]),  # prompt tokens/s (0: no prefill in the interval)
    st.floats(min_value=1.0, max_value=5000.0).map(lambda g: round(g, 1)),  # generation tokens/s
    st.integers(min_value=0, max_value=40),  # running at the line
)


@settings(max_examples=60, deadline=None)
@given(st.lists(INTERVAL, min_size=2, max_size=30))
def test_vllm_lines_invariants(tmp_path_factory: pytest.TempPathFactory, lines: list[tuple[float, float, int]]) -> None:
    """Whatever the lines: a decode sample is an interval with no prefill at the count of the line before it,
    G / N each; a prefill figure is never below the prompt tokens/s of the intervals it came from (decode's share
    is only ever taken off their time), and the error, when there is one, is one line."""
    log = tmp_path_factory.mktemp("prop") / "vllm.log"
    log.write_text(
        "".join(
            f"Avg prompt throughput: {p} tokens/s, Avg generation throughput: {g} tokens/s, Running: {n} reqs, "
            "Waiting: 0 reqs\n"
            for p, g, n in lines
        ),
        encoding="utf-8",
    )
    read = read_serving(log)
    for d in read.decode:
        p, g, n = lines[d.line - 1]
        assert p == 0 and n == lines[d.line - 2][2] > 0 and d.running == n and d.tokens_per_s == g / n
    try:
        m = measured_speeds(str(log))
    except InputError as e:
        assert "\n" not in str(e)
        return
    assert m.prefill_tokens_per_s >= min(x.prompt_tokens_per_s for x in read.mixed)
    assert m.levels == tuple(sorted({d.running for d in read.decode}))


def test_intervals_whose_prompts_cost_nothing_measurable_give_a_lower_bound_not_a_refusal() -> None:
    """vLLM: 2 sessions at 50 tokens/s each when clean; an interval that also computed 100 prompt tokens/s generated
    99 tokens/s, so decode took 99 / (2 x 50) = 99% of it and the prompts under 5%: their rate is at least
    100 / 5% = 2,000 tokens/s."""
    from kvbudget.measure.logs.serving import Decode, Mixed, ServingLog
    from kvbudget.simulate.measured_log import speeds_of_log

    log = ServingLog("x.log", engine="vllm", decode=[Decode(2, 50.0, 1)], mixed=[Mixed(2, 100.0, 99.0, 2)])
    speeds = speeds_of_log(log, "x.log")
    assert speeds.prefill_tokens_per_s == pytest.approx(2000.0)
    assert "at least 2,000 tokens/s" in speeds.prefill_basis and "a lower bound" in speeds.prefill_basis
    with pytest.raises(InputError, match="no interval of the log both prefilled and decoded"):
        speeds_of_log(ServingLog("y.log", engine="vllm", decode=[Decode(2, 50.0, 1)]), "y.log")
