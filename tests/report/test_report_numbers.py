"""`kvbudget report --json` through the real entry point: each figure equals what the CLI command behind it
prints for the same options (plan, levers, cost, trace stats, simulate, calibrate), and the document follows
its schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from kvbudget.measure.loadtest.result import Outcome, to_json
from kvbudget.schemas import schema
from kvbudget.workload.stats import percentile
from tests.report.cli_runs import QWEN, WEKA, chat_report_and_simulation, document, run

LLAMA_L40S = ("llama-3.1-8b", "--gpu", "l40s", "--engine", "vllm", "--context", "32k")
L40S_LOG = "tests/data/logs/vllm/v1-pr17122-llama31-8b-l40s.log"


def test_plan_and_levers_are_the_cli_documents() -> None:
    doc = document("report", *QWEN)
    jsonschema.validate(doc, schema("report"))
    plan, levers = document("plan", *QWEN), document("levers", *QWEN)
    assert doc["plan"] == plan
    assert doc["levers"] == levers
    assert doc["kv_bytes_per_token"] == plan["kv_bytes_per_token"] == 262_144
    assert doc["sessions"]["planned"] == plan["sessions"] == 4
    assert doc["sessions"]["planned_total"] == plan["total_sessions"]
    assert doc["cap"] == {
        "tokens": 32768,
        "advertised_window_tokens": 40960,
        "engine": "vllm",
        "setting": "--max-model-len 32768",
    }
    # ranked per GPU at the same cap: fp8 takes one GPU's 4 sessions to 9; tp x2 holds 13 on two GPUs, 6.5 each
    # (vLLM 0.33 samples with FlashInfer: engines/vllm_profile.sampler_path)
    assert [lv["lever"] for lv in doc["levers"]["levers"]][:2] == ["KV fp8", "tp x2"]
    first, second = doc["levers"]["levers"][:2]
    assert (first["sessions_per_gpu"], second["sessions_per_gpu"], second["gpus"]) == (9, 6.5, 2)


def test_layer_groups_are_cost_json_at_the_cap() -> None:
    """Gemma 3 (sliding window + full attention): the groups are `cost --json` at the cap with the batched
    tokens vLLM derives on an H100 (8,192), and they add up to the plan's bytes per session."""
    argv = ("gemma-3-27b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "32k")
    doc = document("report", *argv)
    cost = document("cost", "gemma-3-27b", "--engine", "vllm", "--tokens", "32k", "--max-num-batched-tokens", "8192")
    plan = document("plan", *argv)
    same = (
        "kind",
        "label",
        "layers",
        "allocated_layers",
        "per_token_bytes",
        "slot_bytes",
        "token_slots",
        "state_bytes",
    )
    assert [{k: g[k] for k in same} for g in doc["groups"]] == [{k: g[k] for k in same} for g in cost["groups"]]
    assert [g["bytes_at_cap"] for g in doc["groups"]] == [g["bytes_at_tokens"] for g in cost["groups"]]
    assert [g["held_bytes_per_token"] for g in doc["groups"]] == [60 * 8192, 10 * 8192]
    assert sum(g["bytes_at_cap"] for g in doc["groups"]) == plan["per_session_bytes"] == 11_248_599_040
    assert doc["kv_bytes_per_token"] == plan["kv_bytes_per_token"] == 81_920


@pytest.mark.parametrize("cap", [8192, 16384, 32768, 40960])
def test_curve_points_are_plan_at_that_cap(cap: int) -> None:
    point = next(p for p in document("report", *QWEN)["curve"] if p["cap"] == cap)
    plan = document("plan", *QWEN[:-4], "--context", str(cap), *QWEN[-2:])
    assert point == {
        "cap": cap,
        "sessions": plan["sessions"],
        "total_sessions": plan["total_sessions"],
        "per_session_bytes": plan["per_session_bytes"],
    }


def test_curve_runs_from_1k_to_the_advertised_window() -> None:
    caps = [p["cap"] for p in document("report", *QWEN)["curve"]]
    assert caps == [1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 40960]
    sessions = [p["total_sessions"] for p in document("report", *QWEN)["curve"]]
    assert sessions == sorted(sessions, reverse=True)  # a longer cap never serves more


def test_trace_figures_are_trace_stats() -> None:
    doc = document("report", *QWEN, "--trace", *WEKA)
    stats = document("trace", "stats", *WEKA, "--model", *QWEN)
    trace = doc["trace"]
    assert trace["cap"] == stats["cap"]
    assert trace["session_peak_tokens"] == stats["session_peak_tokens"]
    assert trace["p99_session_peak_tokens"] == stats["session_peak_tokens"]["p99"] == 157_056
    # what the traces need (157,056 x 1.1, rounded up to 1,024), past Qwen3-32B's 40,960-token window: kept, marked
    assert trace["recommended_cap_tokens"] == stats["cap"]["recommended_cap_tokens"] == 173_056
    assert trace["advertised_window_tokens"] == 40960 and trace["recommended_past_window"] is True
    assert trace["sessions"] == stats["session_peak_tokens"]["count"] == 19
    # the CDF is the sessions' own peaks (19 of them, each point's share a rank / 19): unrolled, its
    # nearest-rank percentiles and maximum are the trace's
    ranks = [round(share * 19) for _, share in trace["cdf"]]
    assert ranks == sorted(ranks) and ranks[-1] == 19
    counts = [b - a for a, b in zip([0, *ranks[:-1]], ranks, strict=True)]
    peaks = [tokens for (tokens, _), n in zip(trace["cdf"], counts, strict=True) for _ in range(n)]
    assert percentile(peaks, 99) == 157_056 and percentile(peaks, 50) == stats["session_peak_tokens"]["p50"]
    assert peaks[-1] == stats["session_peak_tokens"]["max"]
    assert trace["sessions_over_cap"] == sum(1 for p in peaks if p > 32768) == 13
    assert doc["curve"][-1]["cap"] == 173_056  # the recommended cap is a point of the curve
    assert 40960 in [p["cap"] for p in doc["curve"]]  # and so is the window


def test_simulated_is_simulate_json() -> None:
    doc, sim = chat_report_and_simulation()
    simulated = doc["sessions"]["simulated"]
    for key in (
        "sustained_sessions",
        "sustained_sessions_total",
        "sustained_basis",
        "mean_concurrency",
        "peak_concurrency",
        "sessions_arrived",
        "refused",
        "preemptions",
        "static_plan_sessions",
        "source",
    ):
        assert simulated[key] == sim[key], key
    assert simulated["target"] == sim["target"]["text"]
    assert simulated["static_plan_sessions"] == doc["sessions"]["planned"]


def test_measured_from_an_engine_log_is_what_calibrate_reads() -> None:
    doc = document("report", *LLAMA_L40S, "--log", L40S_LOG)
    cal = document("calibrate", L40S_LOG, "--model", "llama-3.1-8b")
    measured = doc["sessions"]["measured"]
    assert cal["measured"]["max_concurrency"]["value"] == 4.84
    assert measured == [
        {
            "source": "log",
            "path": L40S_LOG,
            "engine": "vllm",
            "sessions": 4,  # floor(4.84) sessions of 32,768 tokens
            "context": cal["settings"]["concurrency_tokens"]["value"],
            "basis": "vllm logged maximum concurrency 4.84x for 32,768 tokens per request (line 7), rounded down",
            "figures_agreeing": cal["summary"]["agree"],
            "figures_checked": cal["summary"]["compared"],
        }
    ]
    # the log's one reconciled figure (4.84x) is derived from its own 158,656 tokens: nothing was compared
    assert measured[0]["figures_checked"] == 0 and measured[0]["figures_agreeing"] == 0


def test_measured_from_a_sglang_log_divides_its_tokens_by_the_context() -> None:
    log = "tests/data/logs/sglang/max-total-num-tokens-256k.log"
    doc = document("report", *LLAMA_L40S[:-3], "sglang", *LLAMA_L40S[-2:], "--log", log)
    cal = document("calibrate", log, "--model", "llama-3.1-8b")
    (measured,) = doc["sessions"]["measured"]
    tokens, context = cal["measured"]["max_total_num_tokens"]["value"], cal["settings"]["context"]["value"]
    assert (tokens, context) == (2_086_558, 256_000)
    assert measured["sessions"] == tokens // context == 8
    assert measured["context"] == 256_000


@pytest.mark.parametrize("context", [32768, 8192])
def test_measured_from_a_loadtest_result(tmp_path: Path, context: int) -> None:
    outcome = Outcome(
        url="http://127.0.0.1:8000",
        settings={"context": context},
        stopped_by="max-sessions",
        sustained=3,
        sustained_basis="the most sessions a level held with p99 TTFT under 2 s",
    )
    result = tmp_path / "result.json"
    written = to_json(outcome)  # what a run that held 3 sessions writes: the level, its time and its output
    written.update(levels=[{"sessions": 3, "duration_s": 30.0, "passed": True}], duration_s=31.2)
    written["tokens"]["output"] = 12_000  # type: ignore[index]
    result.write_text(json.dumps(written), encoding="utf-8")
    doc = document("report", *LLAMA_L40S, "--loadtest", str(result))
    assert doc["sessions"]["measured"] == [
        {
            "source": "loadtest",
            "path": str(result),
            "engine": None,
            "sessions": 3,
            "context": context,
            "basis": "the most sessions a level held with p99 TTFT under 2 s"
            + (
                ""
                if context == 32768  # the plan's cap; at another the figure says it answers another question
                else "; measured at the 8K cap, not the plan's 32K: not the same question, so it neither confirms "
                "nor refutes the plan's sessions"
            ),
            "figures_agreeing": None,
            "figures_checked": None,
        }
    ]


def test_units_follow_the_option() -> None:
    assert document("report", *QWEN)["units"] == "iec"
    assert document("report", *QWEN, "--units", "si")["units"] == "si"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (("report", "no-such-model", "--gpu", "h100-sxm", "--context", "32k"), "no-such-model"),
        (("report", *QWEN, "--trace", "missing.jsonl"), "missing.jsonl"),
        (("report", *QWEN, "--loadtest", "examples/chat.toml"), "the loadtest result is not valid JSON"),
        (
            ("report", *QWEN, "--loadtest", "tests/data/loadtest/llamacpp-slots.json"),
            "not a kvbudget loadtest --json document",
        ),
        (("report", *QWEN, "--log", "examples/chat.toml"), "examples/chat.toml"),
        (("report", *QWEN, "--out", "no-such-folder/report.html"), "the folder no-such-folder does not exist"),
        (("report", *QWEN, "--simulate-sessions", "0", "--workload", "examples/chat.toml"), "--simulate-sessions"),
        (("report", "qwen3-32b", "--gpu", "rtx-4090", "--context", "32k"), "exceed"),
        (("report", *QWEN, "--format", "pdf"), "--format: 'pdf' is not a choice"),
    ],
)
def test_bad_input_is_one_error_line(argv: tuple[str, ...], needle: str) -> None:
    code, out, err = run(*argv)
    assert code == 1 and out == ""
    assert err.startswith("Error: ") and err.count("\n") == 1 and needle in err, err


def test_bad_input_under_json_is_the_error_document() -> None:
    code, out, err = run("report", "qwen3-32b", "--gpu", "rtx-4090", "--context", "32k", "--json")
    assert code == 1 and err.startswith("Error: ")
    jsonschema.validate(json.loads(out), schema("error"))
