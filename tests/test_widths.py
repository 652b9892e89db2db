"""Every command's text output fits a 100-column terminal (issue 24): each line at most 100 characters, except a
line that is one unbreakable token (a URL, a path). Runs every command with text output on a fixed set of
deployments; the rest of the suite reads text unwrapped (tests/conftest.py), this file reads it as printed.

Not here: ``report`` (an HTML or Markdown document, not terminal text), ``serve`` and ``gateway`` (one line
naming the URL), ``loadtest`` (needs a live server: tests/live/test_loadtest_live.py) and ``measure`` (torch;
its table is narrow). ``--json`` output is a document too, and is not wrapped."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kvbudget.render.text import WIDTH, fit, table, wrap, wrap_command
from kvbudget.workload.fit import dump_toml
from kvbudget.workload.loader import load_workload
from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
WORKLOAD = str(ROOT / "examples" / "coding-agent.toml")
TRACE = str(DATA / "traces" / "mooncake_fast25" / "conversation_trace.jsonl")
OTEL = str(DATA / "traces" / "inference_perf_otel_examples" / "multi_agent_research.json")
SPEEDS = str(DATA / "loadtest" / "speeds-llama31-8b-vllm.json")  # a load test's speeds (--speed-from)
LOGS = sorted(str(p) for p in (DATA / "logs").glob("*/*.log") if p.parent.name != "serving")  # start-up logs
SERVING = str(DATA / "logs" / "serving" / "vllm-v1-mtp-running18-h.log")  # an engine's serving lines (--speed-from)
STARTUP_THEN_SERVING = str(DATA / "logs" / "serving" / "vllm-v1-startup-then-running18.log")

DEPLOYMENTS = [
    ["qwen3-32b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "32k"],
    ["qwen3-32b", "--gpu", "h100-sxm", "--engine", "trtllm", "--context", "32k"],
    ["llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "4", "--tp", "4", "--engine", "sglang", "--context", "128k"],
    [
        "llama-3.1-70b",
        "--gpu",
        "h200",
        "--tp",
        "8",
        "--engine",
        "sglang",
        "--dp-attention",
        "8",
        "--max-running-requests",
        "256",
        "--context",
        "32k",
    ],
    ["gemma-3-27b", "--gpu", "h200", "--engine", "llamacpp", "--context", "32k", "--kv-dtype", "q8_0"],
    ["llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "ollama", "--context", "64k"],
    ["qwen3-8b", "--gpu", "a100-80gb", "--engine", "vllm", "--context", "128k", "--prefix", "4096"],
]

COMMANDS = [
    *(["plan", *d] for d in DEPLOYMENTS),
    *(["levers", *d] for d in DEPLOYMENTS),
    ["cost", "gemma-3-27b", "--engine", "vllm", "--tokens", "32k"],
    ["cost", "llama-3.1-70b", "--tokens", "128k", "--sequences", "4"],
    ["table", "qwen3-32b", "--tokens", "8k,32k,128k", "--sequences", "1,4,16"],
    ["models"],
    ["models", "--engine", "vllm"],
    ["gpus"],
    ["weights", "llama-3.1-8b"],
    ["weights", "qwen3-30b-a3b"],
    ["infer", "--memory", "24GB", "--context", "256k", "--params", "8B", "--weight-bits", "4.5"],
    ["compare", "qwen3-32b,llama-3.1-8b", "--gpu", "h100-sxm,a100-80gb", "--engine", "vllm,sglang", "--context", "32k"],
    [
        "compare", "qwen3-32b,llama-3.1-8b", "--gpu", "h100-sxm", "--context", "32k", "--workload", WORKLOAD,
        "--rate", "50/h", "--price", "h100-sxm=2.49/h", "--simulate", "--search-sessions", "200",
        "--search-probes", "3",
    ],
    ["trace", "stats", TRACE, OTEL],
    ["trace", "stats", TRACE, "--model", "qwen3-8b", "--gpu", "h100-sxm", "--engine", "vllm"],
    ["workload", "check", WORKLOAD],
    ["workload", "fit", TRACE],
    [
        "simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "32k",
        "--workload", WORKLOAD, "--sessions", "200", "--search-sessions", "200", "--search-probes", "3",
    ],
    [
        "simulate", "--model", "llama-3.1-8b", "--gpu", "l40s", "--engine", "vllm", "--context", "16k", "--workload",
        str(ROOT / "examples" / "chat.toml"), "--replicas", "1", "--sessions", "100", "--search-sessions", "100",
        "--search-probes", "3", "--ttft", "2s", "--itl", "45ms", "--jobs", "1",
    ],
    *(["calibrate", log] for log in LOGS),
    ["calibrate", STARTUP_THEN_SERVING],  # a start-up and serving lines: its "Speeds (measured)" section
    ["speed", "qwen3-30b-a3b", "--gpu", "h200", "--engine", "vllm", "--concurrency", "300", "--prefix", "500"],
    ["speed", "llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "8", "--tp", "4", "--engine", "trtllm", "--weights", "fp8"],  # noqa: E501
    [
        "size", "qwen3-32b,gpt-oss-120b", "--gpu", "h100-sxm,h200", "--engine", "vllm,sglang", "--tp", "1,2",
        "--price", "h100-sxm=2.49/h,h200=3.59/h", "--sessions", "60", "--workload", WORKLOAD, "--context", "32k",
        "--ttft", "2s", "--itl", "50ms",
    ],
    ["size", "llama-3.1-70b", "--gpu", "h100-sxm", "--weights", "fp8", "--sessions", "60", "--context", "32k"],
    [
        "size", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm,sglang", "--sessions", "60", "--context", "32k",
        "--itl", "25ms", "--speed-from", SPEEDS,
    ],
    ["plan", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "32k", "--speed-from", SPEEDS],
    ["plan", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "32k", "--speed-from", SERVING],
    [
        "size", "qwen3-30b-a3b,llama-3.1-8b", "--gpu", "l40s,rtx-5090", "--kv-dtype", "auto,fp8", "--context", "16k",
        "--rate", "0.5/s", "--workload", "examples/chat.toml", "--price", "l40s=0.79/h,rtx-5090=0.89/h",
        "--target-refusal-rate", "0.5%",
    ],
    [  # a latency-bound count checked by simulation: the count column and the runs' note
        "size", "llama-3.1-8b", "--gpu", "l40s", "--context", "16k", "--sessions", "20", "--workload",
        "examples/chat.toml", "--ttft", "1s", "--itl", "30ms",
    ],
]  # fmt: skip

# The CLI modules that render in place (cli/compare.py) call render.text.fit once the lead ports it (issue 24).


def _too_wide(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line) > WIDTH and " " in line.strip()]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: " ".join(a.rsplit("/", 1)[-1] for a in argv)[:60])
def test_every_line_fits_100_columns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    monkeypatch.delenv("KVBUDGET_WIDTH")
    code, out, err = run_cli(capsys, *argv)
    assert code == 0 or (argv[0] == "calibrate" and err.count("\n") == 1), err  # a partial log: one error line
    wide = _too_wide(out)
    assert not wide, "\n".join(wide)


def test_kvbudget_width_0_keeps_each_figure_on_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVBUDGET_WIDTH", "0")
    _, out, _ = run_cli(capsys, "plan", *DEPLOYMENTS[0])
    assert any(
        len(line) > WIDTH and line.startswith("GPU memory") and "nvidia-smi" in line for line in out.splitlines()
    )


def test_a_long_free_text_column_moves_under_its_row() -> None:
    rows = [["a", "1", "word " * 30], ["b", "22", "short"]]
    out = table(["name", "n", "basis"], rows, [False, True, False], width=40).splitlines()
    assert out[:3] == ["name   n", "    basis", "----  --"]
    assert out[3] == "a      1" and all(line.startswith("    word") for line in out[4:8])
    assert out[-2:] == ["b     22", "    short"] and max(map(len, out)) <= 40


def test_columns_that_do_not_fit_continue_keyed_by_the_first() -> None:
    headers = ["key", *(f"column {i}" for i in range(8))]
    out = table(headers, [["row", *("12345678" for _ in range(8))]], [False, *[True] * 8], width=50)
    blocks = out.split("\n\n")
    assert len(blocks) > 1 and all(block.startswith("key") for block in blocks)
    assert max(map(len, out.splitlines())) <= 50


def test_prose_wraps_with_a_hanging_indent_and_keeps_long_tokens_whole() -> None:
    url = "https://example.org/" + "x" * 120
    lines = wrap(f"  note: see {url} for the figure", 60)
    assert lines == ["  note: see", f"    {url}", "    for the figure"]
    assert fit("short\n" + "word " * 30, 50).splitlines()[2].startswith("  word")


def test_a_wrapped_command_is_still_one_shell_command() -> None:
    line = "  vllm: vllm serve Qwen/Qwen3-32B " + " ".join(f"--flag-{i} {i}" for i in range(12)) + "  # then edit"
    out = wrap_command(line, 60)
    assert all(len(x) <= 60 for x in out)
    command = [x for x in out if not x.lstrip().startswith("#")]
    assert len(command) > 1 and all(x.endswith(" \\") for x in command[:-1])
    joined = " ".join(x.strip().removesuffix("\\").strip() for x in command)
    assert joined == line.split("  # ")[0].strip() and out[-1].strip() == "# then edit"


def test_a_long_description_round_trips_through_a_workload_file(tmp_path: Path) -> None:
    workload = load_workload(WORKLOAD)
    long = 'a description with a backslash \\ and a quote " ' + "word " * 40 + "end"
    text = dump_toml(dataclasses.replace(workload, description=long))
    assert max(map(len, text.splitlines())) <= WIDTH
    (tmp_path / "w.toml").write_text(text, encoding="utf-8")
    assert load_workload(tmp_path / "w.toml").description == long
