"""`kvbudget trace stats` and `trace convert` through the real entry point: the JSON contract, the
text report, the cap analysis against `kvbudget plan`, and one-line errors with exit code 1."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import cast

import pytest

from tests.helpers import run_cli
from tests.workload.raw_traces import AZURE, OTEL, WEKA, nearest_rank, weka_sessions


def _fails(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 1 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    return lines[0]


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    data: dict[str, object] = json.loads(out)
    return data


def test_stats_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, "trace", "stats", *map(str, WEKA))
    assert data["schema_version"] == 1
    assert (data["sessions"], data["subagents"], data["steps"], data["bad_rows"]) == (13, 6, 481, 0)
    for key in ("context_tokens", "session_end_tokens"):
        assert set(cast(dict[str, object], data[key])) >= {"p50", "p90", "p99", "max"}
    assert set(cast(dict[str, object], data["pause_seconds"])) >= {"p50", "p90", "p99"}
    assert isinstance(data["paused_share"], float) and 0 < data["paused_share"] < 1
    assert "growth_tokens_per_step" in data and data["percentiles"] == "nearest-rank"
    assert "cap" not in data


def test_stats_text_report(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "trace", "stats", *map(str, WEKA), *map(str, OTEL))
    assert code == 0
    assert "15 files, 14 with steps (weka 13, otel 1)" in out
    assert "17 sessions + 6 sub-agents" in out
    assert "nearest-rank" in out and "session end (tokens)" in out and "pause after a step (s)" in out
    assert "bad rows (12; skipped" in out and "multi_agent_research.json:6: spans[0]: no token usage" in out


def test_strict_stops_at_the_first_bad_row(capsys: pytest.CaptureFixture[str]) -> None:
    path = next(p for p in OTEL if p.stem == "multi_agent_research")
    line = _fails(capsys, "trace", "stats", str(path), "--strict")
    assert line.startswith(f"Error: {path}:6: spans[0]: no token usage")


def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    odd = tmp_path / "notes.txt"
    odd.write_text("hello\n", encoding="utf-8")
    assert "cannot tell the trace format" in _fails(capsys, "trace", "stats", str(odd))
    assert "no such file (trace)" in _fails(capsys, "trace", "stats", str(tmp_path / "missing.json"))
    assert "--format: 'csv' is not a choice" in _fails(capsys, "trace", "stats", str(odd), "--format", "csv")
    assert "add --model" in _fails(capsys, "trace", "stats", str(WEKA[0]), "--gpu", "h100-sxm")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": -1, "output_length": 1}\n', encoding="utf-8")
    line = _fails(capsys, "trace", "stats", str(bad), "--format", "mooncake", "--strict")
    assert line == f"Error: {bad}:1: 'input_length' must be at least 0, got -1"
    line = _fails(capsys, "trace", "convert", str(bad), "--out", str(bad))
    assert "one of the input files" in line
    assert "--gpu-memory" in _fails(capsys, "trace", "stats", str(WEKA[0]), "--model", "llama-3.1-8b")


def test_cap_analysis_matches_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    files = list(map(str, AZURE))
    deploy = ("--model", "llama-3.1-8b", "--gpu", "h100-sxm")
    data = _json(capsys, "trace", "stats", *files, *deploy)
    cap = data["cap"]
    assert isinstance(cap, dict)
    peaks = []
    for path in AZURE:
        text = path.read_text(encoding="utf-8").splitlines()[1:]
        peaks += [int(r.split(",")[1]) + int(r.split(",")[2]) for r in text if r.strip()]
    p99 = nearest_rank(peaks, 99)
    assert cap["p99_session_peak_tokens"] == p99
    assert cap["recommended_cap_tokens"] == math.ceil(p99 * 1.1 / 1024) * 1024
    for tokens, key in (
        (cap["recommended_cap_tokens"], "sessions_at_recommended_cap"),
        (131072, "sessions_at_advertised_window"),
    ):
        plan = _json(capsys, "plan", *deploy[1:2], *deploy[2:], "--context", str(tokens))
        assert cap[key] == plan["total_sessions"], key
    assert cast(int, cap["sessions_at_recommended_cap"]) > cast(int, cap["sessions_at_advertised_window"])
    assert "you reserve memory for sessions that never happen" in str(cap["reading"])
    assert f"serve {cap['sessions_at_recommended_cap']:,} sessions instead of" in str(cap["reading"])


def test_cap_analysis_text_with_the_cap_in_use(capsys: pytest.CaptureFixture[str]) -> None:
    sessions = {name: reqs for p in WEKA for name, reqs in weka_sessions(p).items() if reqs}
    p99 = nearest_rank([max(q["in"] + q["out"] for q in reqs) for reqs in sessions.values()], 99)
    code, out, err = run_cli(
        capsys, "trace", "stats", *map(str, WEKA), "--model", "llama-3.1-8b", "--gpu-memory", "80GB", "--context", "64k"
    )
    assert code == 0, err
    assert "What a cap does" in out and "in use (--context)" in out and "advertised window" in out
    assert f"(p99 = {p99:,})" in out
    assert "is beyond the cap in use (64K)" in out


def test_convert_reports_bad_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o.jsonl"
    code, text, _ = run_cli(capsys, "trace", "convert", *map(str, OTEL), "--out", str(out))
    assert code == 0
    assert "wrote 7 steps of 4 sessions" in text and "12 bad rows skipped" in text
    assert len(out.read_text(encoding="utf-8").splitlines()) == 7


def test_few_sessions_say_their_p99_is_the_maximum(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.workload.raw_traces import TRACELAB

    argv = ("trace", "stats", str(TRACELAB), "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm")
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0
    assert "with 2 sessions the p99 is the largest session" in out
    assert "with only 2 sessions that p99 is the largest session, not a tail" in out


@pytest.mark.parametrize(
    ("engine", "needs"),
    [
        ("vllm", "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"),
        ("llamacpp", "--rope-scaling yarn --rope-scale 2.4 --yarn-orig-ctx 40960"),
        ("ollama", "Ollama 0.32.15 cannot: it clamps num_ctx to the training context 40,960"),
    ],
)
def test_a_recommended_cap_past_the_window_says_what_serving_it_takes(
    capsys: pytest.CaptureFixture[str], engine: str, needs: str
) -> None:
    """Mooncake's conversation trace wants 93K (p99 85,858 + 10%) where Qwen3-32B was trained to 40,960: the cap
    stays what the traces need, and the reading names the engine's switches for it."""
    trace = Path(__file__).parent.parent / "data" / "traces" / "mooncake_fast25" / "conversation_trace.jsonl"
    code, out, _ = run_cli(
        capsys, "trace", "stats", str(trace), "--model", "qwen3-32b", "--gpu", "h200", "--engine", engine
    )
    assert code == 0
    (reading,) = [line for line in out.splitlines() if line.startswith("The p99 session")]
    assert "recommended cap: 95,232 tokens (93K)" in out
    assert "past the model's trained window (40,960 tokens)" in out
    assert "the recommended 93K cap is past the model's 40,960-token trained window: " in reading and needs in reading


def test_weka_recommendation_is_what_the_traces_need_not_the_window(capsys: pytest.CaptureFixture[str]) -> None:
    """The shipped WEKA traces peak at 157,056 tokens (p99 of 19 sessions = the largest); Qwen3-32B's window is
    40,960. The recommendation is 157,056 x 1.1 rounded up to 1,024 = 173,056 (169K), never the window."""
    deploy = ("--model", "qwen3-32b", "--gpu", "h200", "--engine", "vllm")
    cap = _json(capsys, "trace", "stats", *map(str, WEKA), *deploy)["cap"]
    assert isinstance(cap, dict)
    assert cap["p99_session_peak_tokens"] == 157056
    assert cap["recommended_cap_tokens"] == 173056
    assert cap["advertised_window_tokens"] == 40960
    assert cap["recommended_past_window"] is True
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in str(cap["serving_past_window"])
    holding = cast(list[str], cap["catalog_models_whose_window_holds_it"])
    assert "Qwen3-Next-80B-A3B" in holding and "Qwen3-32B" not in holding
    plan = _json(capsys, "plan", "qwen3-32b", *deploy[2:], "--context", "173056")
    assert cap["sessions_at_recommended_cap"] == plan["total_sessions"] == 1
    code, out, _ = run_cli(capsys, "trace", "stats", *map(str, WEKA), *deploy)
    assert code == 0
    assert "recommended cap: 173,056 tokens (169K)" in out
    assert "recommended (p99 + margin), past the window" in out
    assert "--context 173,056 is beyond" not in out  # said once, by the reading, not again as a plan warning
    within = _json(capsys, "trace", "stats", *map(str, WEKA), "--model", "qwen3-next-80b-a3b", "--gpu", "b200")["cap"]
    assert isinstance(within, dict)
    assert within["recommended_cap_tokens"] == 173056 and within["recommended_past_window"] is False
    assert within["serving_past_window"] is None and within["catalog_models_whose_window_holds_it"] == []
