"""Measurements must belong (issue 22): one start-up per log, no impossible figure, and a log or load test of
the planned model, engine and GPU; each refusal is one line naming the mismatch and the fix.

Every log here is a real one of tests/data/logs (SOURCES.md), joined or edited the way a careless user's
file is: two start-ups appended, a figure typed over."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.measure.loadtest.result import Outcome, to_json
from tests.helpers import run_cli

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
L40S_8B = LOGS / "vllm/v1-pr17122-llama31-8b-l40s.log"  # Llama-3.1-8B, V1, 04-24 16:33
QWEN14B = LOGS / "vllm/v1-lmcache-qwen3-14b.log"  # (EngineCore_DP0 ..) prefixes, 10-03 16:22
RTX3090_V0 = LOGS / "vllm/v0-0.6.4fmt-llama31-8b-rtx3090-20k.log"  # 0.6.4 profile: total 23.58 GiB
GPT_OSS = LOGS / "vllm/v1-0.10-gpt-oss-120b-h100-negative-kv-refusal.log"  # names openai/gpt-oss-120b
FP8_100K = LOGS / "vllm/v1-fp8-kv-100k.log"  # 10.55 GiB of KV memory, 230,528 tokens


def joined(tmp_path: Path, *parts: Path | str) -> str:
    out = tmp_path / "joined.log"
    out.write_text("".join(p if isinstance(p, str) else p.read_text(encoding="utf-8") for p in parts), "utf-8")
    return str(out)


def error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 1, out
    assert err.startswith("Error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_a_log_with_the_same_start_up_twice_is_refused_naming_both_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = error(capsys, "calibrate", joined(tmp_path, L40S_8B, L40S_8B), "--model", "llama-3.1-8b")
    # 'GPU KV cache size' is printed once per engine core (vLLM v1/core/kv_cache_utils.py); the file has 7 lines
    assert "holds 2 start-ups ('GPU KV cache size' printed at line 6 and again at line 13)" in err
    assert "cut the file before line 13" in err


def test_a_v0_run_and_a_v1_run_in_one_file_are_two_start_ups(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = error(capsys, "calibrate", joined(tmp_path, RTX3090_V0, L40S_8B))
    assert "holds 2 start-ups ('Maximum concurrency for' printed at line 4 and again at line 11)" in err


def test_two_releases_weights_lines_are_two_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = "(VllmWorkerProcess pid=1) INFO 04-24 16:30:00 model_runner.py] Loading model weights took 14.99 GB\n"
    new = "(VllmWorker rank=0 pid=2) INFO 04-24 16:31:00 gpu_model_runner.py] Model loading took 14.99 GiB\n"
    tail = "INFO 04-24 16:33:13 [kv_cache_utils.py:634] GPU KV cache size: 158,656 tokens\n"
    err = error(capsys, "calibrate", joined(tmp_path, old, new, tail))
    assert "two vLLM runs of different releases" in err and "line 1" in err and "line 2" in err


def test_a_line_with_and_one_without_its_worker_prefix_are_two_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = error(capsys, "calibrate", joined(tmp_path, L40S_8B, QWEN14B))
    assert "one with a worker prefix, one without" in err


def test_time_going_back_is_two_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the Qwen3 log is dated 10-03, the Llama log 04-24: appended after it, the time goes back
    err = error(capsys, "calibrate", joined(tmp_path, QWEN14B, L40S_8B))
    assert "line 11 is dated 04-24 16:33:12, before line 3 (10-03 16:22:17)" in err or "is dated 04-24" in err
    assert "joins logs of several runs" in err


def test_one_start_up_across_new_year_is_not_time_going_back(tmp_path: Path) -> None:
    from kvbudget.measure.logs import read_log

    text = (
        "INFO 12-31 23:59:50 [kv_cache_utils.py:634] Available KV cache memory: 6.51 GiB\n"
        "INFO 01-01 00:00:03 [kv_cache_utils.py:634] GPU KV cache size: 42,656 tokens\n"
    )
    assert read_log(joined(tmp_path, text)).figure("kv_tokens").value == 42_656  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("Model loading took -14.99 GiB and 3.1 seconds", "a negative weights"),
        ("Available KV cache memory: 99999999.00 GiB", "more memory than any device holds"),
        ("GPU KV cache size: 99,999,999,999,999 tokens", "tokens outside 0..2^40"),
    ],
)
def test_impossible_figures_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, said: str
) -> None:
    err = error(capsys, "calibrate", joined(tmp_path, f"INFO 04-24 16:33:13 [gpu_worker.py] {line}\n"))
    assert said in err and "line 1 prints" in err


def test_more_tokens_than_the_pool_holds_at_a_byte_each_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "Available KV cache memory: 0.01 GiB\nGPU KV cache size: 230,528,000 tokens\n"
    err = error(capsys, "calibrate", joined(tmp_path, text))
    assert "more than the 0.01 GiB of KV memory of line 1 could hold at one byte each" in err


def test_an_8b_log_for_a_70b_plan_is_refused_by_its_weights(capsys: pytest.CaptureFixture[str]) -> None:
    # 14.9889 GiB loaded = 1.82 bits for each of Llama-3.1-70B's 70.55 B parameters: no format vLLM loads
    err = error(capsys, "plan", "llama-3.1-70b", "--from-log", str(L40S_8B), "--context", "8k", "--gpu", "l40s")
    assert "1.82 bits for each of llama-3.1-70b's 70,553,706,496 parameters" in err
    assert "the log is of another model" in err


def test_a_log_whose_pool_holds_another_models_tokens_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # 230,528 tokens in 10.55 GiB: 49 KB a token; Llama-3.1-70B at bf16 stores 320 KiB (6.67x)
    err = error(capsys, "plan", "llama-3.1-70b", "--from-log", str(FP8_100K), "--context", "8k", "--gpu", "h100")
    assert "holds 230,528 tokens (line 2); Llama-3.1-70B at bf16, tp 1 needs 70.35 GiB for them (6.67x)" in err


def test_a_log_naming_another_catalog_model_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    err = error(capsys, "plan", "gpt-oss-20b", "--from-log", str(GPT_OSS), "--context", "8k", "--gpu", "h100")
    assert "the log is of openai/gpt-oss-120b (gpt-oss-120b: 36 layers), not of gpt-oss-20b (24 layers)" in err
    err = error(capsys, "calibrate", str(GPT_OSS), "--model", "gpt-oss-20b")
    assert "give --model openai/gpt-oss-120b" in err


def test_a_log_from_another_gpu_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    err = error(capsys, "plan", "llama-3.1-8b", "--from-log", str(RTX3090_V0), "--context", "8k", "--gpu", "h100")
    assert "the engine saw a device of 23.58 GiB (line 2); --gpu h100-sxm holds 79.6 GiB" in err
    code, _, err = run_cli(
        capsys, "plan", "llama-3.1-8b", "--from-log", str(RTX3090_V0), "--context", "8k", "--gpu", "rtx3090"
    )
    assert code == 0, err  # the card it ran on: 23.58 of 24 GiB


def test_the_logs_own_model_still_plans(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys, "plan", "llama-3.1-8b", "--from-log", str(L40S_8B), "--context", "8k", "--gpu", "l40s", "--json"
    )
    assert code == 0, err
    assert json.loads(out)["from_log"]["reproduced"] is not None


def test_report_refuses_a_log_of_another_engine(capsys: pytest.CaptureFixture[str]) -> None:
    sglang = LOGS / "sglang/max-total-num-tokens-256k.log"
    err = error(
        capsys,
        "report",
        "llama-3.1-8b",
        "--gpu",
        "l40s",
        "--engine",
        "vllm",
        "--context",
        "32k",
        "--log",
        str(sglang),
        "--json",
    )
    assert "measured on sglang, but the plan is for vllm" in err and "give --engine sglang" in err


def _result(tmp_path: Path, **changes: object) -> str:
    outcome = Outcome(url="http://127.0.0.1:8000", settings={"context": 32768}, stopped_by="max-sessions", sustained=3)
    doc = to_json(outcome)
    doc.update(levels=[{"sessions": 3, "duration_s": 30.0, "passed": True}], duration_s=31.0)
    doc["tokens"]["output"] = 12_000  # type: ignore[index]
    doc.update(changes)
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return str(path)


REPORT = ("report", "llama-3.1-8b", "--gpu", "l40s", "--engine", "vllm", "--context", "32k", "--json")


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"server": {"engine": "sglang", "model": None}}, "measured on sglang, but the plan is for vllm"),
        ({"server": {"engine": "vllm", "model": "openai/gpt-oss-120b"}}, "served openai/gpt-oss-120b"),
        ({"duration_s": -5}, "go backwards"),
        ({"levels": [{"sessions": 3, "duration_s": 90.0, "passed": True}]}, "longer than the whole run"),
        ({"levels": [{"sessions": 2, "duration_s": 30.0, "passed": True}]}, "is no level that passed"),
        ({"requests": 2**41}, "is not a count"),
        ({"tokens": {"prompt": 10, "output": 0}}, "no output token"),
    ],
)
def test_report_refuses_a_load_test_that_does_not_belong_or_cannot_be(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, object], said: str
) -> None:
    err = error(capsys, *REPORT, "--loadtest", _result(tmp_path, **changes))
    assert said in err


def test_a_load_test_of_the_planned_model_is_measured(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _result(tmp_path, server={"engine": "vllm", "model": "meta-llama/Llama-3.1-8B-Instruct"})
    code, out, err = run_cli(capsys, *REPORT, "--loadtest", path)
    assert code == 0, err
    assert json.loads(out)["sessions"]["measured"][0]["sessions"] == 3
