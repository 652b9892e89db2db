"""`kvbudget simulate` through the real entry point: the JSON contract, options, errors, plot, progress."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from kvbudget.cli.simulate import ProgressBar
from kvbudget.errors import InputError
from kvbudget.requests.values import read_bandwidth, read_seconds, read_share
from tests.helpers import run_cli

TRACES = Path(__file__).parent.parent / "data" / "traces"
WORKLOAD = """
[arrival]
rate_per_s = 0.2
[prefix]
system_prompt_tokens = 3000
[steps]
dist = "geometric"
mean = 8
[first_prompt_tokens]
dist = "lognormal"
mean = 2000
p99 = 8000
[append_tokens]
dist = "lognormal"
mean = 800
p99 = 6000
[output_tokens]
dist = "lognormal"
mean = 200
p99 = 1000
[tool_latency_s]
dist = "exponential"
mean = 5.0
[cap]
at_cap = "compact"
target_fraction = 0.4
"""
BASE = ("--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--engine", "vllm", "--context", "32k")
CONTRACT = {
    "schema_version",
    "sessions_arrived",
    "sessions_finished",
    "refused",
    "preemptions",
    "compactions",
    "pool_bytes",
    "peak_pool_bytes",
    "queue_delay_s",
    "prefix_hit_rate",
    "recomputed_tokens",
    "mean_concurrency",
    "sustained_sessions",
    "static_plan_sessions",
}


@pytest.fixture
def workload(tmp_path: Path) -> str:
    path = tmp_path / "agents.toml"
    path.write_text(WORKLOAD, encoding="utf-8")
    return str(path)


def sim(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, "simulate", *argv, "--json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def test_json_contract(capsys: pytest.CaptureFixture[str], workload: str) -> None:
    data = sim(
        capsys,
        *BASE,
        "--workload",
        workload,
        "--sessions",
        "300",
        "--search-sessions",
        "150",
        "--check",
        "--time-series",
    )
    assert set(data) >= CONTRACT
    assert data["schema_version"] == 1
    assert data["sessions_arrived"] == 300
    assert data["sessions_arrived"] == data["sessions_finished"] + data["refused"] + data["live_at_end"]
    assert set(data["queue_delay_s"]) == {"p50", "p99"}
    assert 0 <= data["prefix_hit_rate"] <= 1
    assert data["peak_pool_bytes"] <= data["pool_bytes"]
    assert all(s["used_bytes"] + s["cached_bytes"] <= data["pool_bytes"] for s in data["time_series"]["samples"])
    assert data["search"]["probe_sessions"] == 150 and 1 <= len(data["search"]["probes"]) <= 8
    assert isinstance(data["sustained_sessions"], float)
    code, out, _ = run_cli(
        capsys, "plan", "llama-3.1-8b", "--gpu", "h100-80gb", "--engine", "vllm", "--context", "32k", "--json"
    )
    assert code == 0
    assert data["static_plan_sessions"] == json.loads(out)["sessions"]


def test_deterministic_per_seed(capsys: pytest.CaptureFixture[str], workload: str) -> None:
    argv = (*BASE, "--workload", workload, "--sessions", "150", "--search-sessions", "0", "--pause", "evictable")
    assert "time_series" not in sim(capsys, *argv)  # only on request
    a = sim(capsys, *argv, "--time-series", "--seed", "5")
    b = sim(capsys, *argv, "--time-series", "--seed", "5")
    c = sim(capsys, *argv, "--time-series", "--seed", "6")
    assert a == b
    assert a["prefix_hit_rate"] != c["prefix_hit_rate"] or a["time_series"] != c["time_series"]


def test_policies_and_options(capsys: pytest.CaptureFixture[str], workload: str) -> None:
    common = (*BASE, "--workload", workload, "--duration", "20m", "--search-sessions", "0")
    reserve = sim(capsys, *common, "--policy", "reserve")
    assert reserve["preemptions"] == 0 and reserve["policy"] == "reserve"
    water = sim(capsys, *common, "--policy", "watermark", "--watermark", "10%", "--replicas", "2")
    assert water["watermark"] == 0.1 and water["replicas"] == 2
    swap = sim(capsys, *common, "--preempt", "swap", "--link", "pcie-gen4-x16", "--target-p99-delay", "5")
    assert swap["target"]["allow_preemption"] is True and swap["target"]["p99_queue_delay_s"] == 5.0
    fixed = sim(capsys, *common, "--decode-rate", "40", "--prefill-rate", "5000", "--admission", "refuse")
    assert fixed["decode_tokens_per_s"] == 40.0 and fixed["prefill_tokens_per_s"] == 5000.0


def test_positional_model_and_gpu_memory(capsys: pytest.CaptureFixture[str], workload: str) -> None:
    data = sim(
        capsys,
        "llama-3.1-8b",
        "--gpu-memory",
        "80GB",
        "--bandwidth",
        "3.35TB/s",
        "--prefill-rate",
        "8000",
        "--context",
        "16k",
        "--workload",
        workload,
        "--sessions",
        "50",
        "--search-sessions",
        "0",
    )
    assert data["bandwidth_bytes_per_s"] == 3.35e12 and data["context"] == 16_384


def test_trace_replay(capsys: pytest.CaptureFixture[str]) -> None:
    traces = sorted(str(p) for p in (TRACES / "weka_kv_cache_tester").glob("*.json"))
    data = sim(capsys, *BASE, "--trace", *traces, "--search-sessions", "0")
    assert data["sessions_arrived"] >= len(traces)
    assert data["source"].startswith("trace ")
    assert data["sessions_arrived"] == data["sessions_finished"] + data["refused"] + data["live_at_end"]


def test_text_output(capsys: pytest.CaptureFixture[str], workload: str) -> None:
    code, out, err = run_cli(
        capsys, "simulate", *BASE, "--workload", workload, "--sessions", "100", "--search-sessions", "60"
    )
    assert code == 0, err
    assert "Sessions sustained per replica:" in out and "static plan" in out and "Search (60 sessions" in out
    # the comparison with the static plan starts its own line: it was wrapped mid-phrase ("...  vs  static plan" /
    # "(worst case reserved at the cap): 15 per replica")
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Sessions sustained"))
    assert "static plan" not in lines[at] and lines[at + 1].startswith("  vs static plan (worst case reserved at the")
    assert err == ""  # no progress bar when stderr is not a terminal


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ((), "exactly one of --workload FILE or --trace"),
        (("--workload", "w.toml", "--trace", "t.json"), "exactly one of --workload"),
        (("--workload", "w.toml", "--sessions", "5", "--duration", "60"), "--sessions N or --duration S"),
    ],
)
def test_usage_errors(capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], message: str) -> None:
    code, _, err = run_cli(capsys, "simulate", *BASE, *extra)
    assert code == 1 and message in err and err.startswith("Error:")


def test_bandwidth_is_needed_without_a_catalog_gpu(capsys: pytest.CaptureFixture[str], workload: str) -> None:
    argv = ("--model", "llama-3.1-8b", "--gpu-memory", "80GB", "--context", "16k", "--workload", workload)
    code, _, err = run_cli(capsys, "simulate", *argv)
    assert code == 1 and "--bandwidth" in err
    code, _, err = run_cli(capsys, "simulate", "llama-3.1-8b", *BASE, "--workload", workload)
    assert code == 1 and "give the model once" in err


def test_plot_writes_a_figure(capsys: pytest.CaptureFixture[str], workload: str, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "sim.png"
    argv = (*BASE, "--workload", workload, "--sessions", "60", "--search-sessions", "0", "--plot", str(png))
    code, _, err = run_cli(capsys, "simulate", *argv)
    assert code == 0, err
    assert png.stat().st_size > 1000


def test_plot_without_matplotlib_is_a_one_line_hint(
    capsys: pytest.CaptureFixture[str], workload: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    argv = (*BASE, "--workload", workload, "--sessions", "60", "--plot", str(tmp_path / "sim.png"))
    code, out, err = run_cli(capsys, "simulate", *argv)
    assert code == 1 and out == ""
    assert err.strip() == "Error: --plot needs matplotlib: install kvbudget[plot]"


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal_after_two_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([0.0, 1.0, 3.0, 4.0])
    monkeypatch.setattr("kvbudget.cli.simulate.time.monotonic", lambda: next(clock))
    tty = _Tty()
    bar = ProgressBar(1000, None, tty)
    hook = bar.hook("run")
    assert hook is not None
    hook(10, 5.0)  # 1 s in: nothing yet
    assert tty.getvalue() == ""
    hook(500, 50.0)  # 3 s in: drawn
    assert "[############............] 500 sessions" in tty.getvalue()
    bar.close()
    assert ProgressBar(1000, None, io.StringIO()).hook("run") is None


def test_parsers() -> None:
    assert read_bandwidth("3.35TB/s", "--bandwidth") == 3.35e12 and read_bandwidth("4800GB/s", "--bandwidth") == 4.8e12
    assert read_bandwidth("2e12", "--bandwidth") == 2e12
    assert read_seconds("10m", "--duration") == 600 and read_seconds("2h", "--duration") == 7200
    assert read_share("5%", "--watermark") == pytest.approx(0.05) and read_share("0.1", "--watermark") == 0.1
    for bad in ("fast", "0"):
        with pytest.raises(InputError):
            read_seconds(bad, "--duration")
    with pytest.raises(InputError):
        read_share("1.5", "--watermark")
    with pytest.raises(InputError):
        read_bandwidth("lots", "--bandwidth")


@pytest.mark.parametrize(
    ("engine", "policy", "pause", "basis"),
    [
        ("vllm", "paged", "evictable", "vLLM 0.33.0's behaviour: vLLM frees a finished step's blocks into its prefix"),
        ("sglang", "paged", "evictable", "SGLang 0.5.23's behaviour: SGLang keeps a finished step's KV in its radix"),
        ("trtllm", "paged", "evictable", "TensorRT-LLM 1.3.0's behaviour: TensorRT-LLM keeps a finished step's"),
        ("llamacpp", "reserve", "hold", "llama.cpp b7900's behaviour: each slot (-np) owns its full share"),
        ("ollama", "reserve", "hold", "Ollama 0.32.15's behaviour: each slot (-np) owns its full share"),
    ],
)
def test_the_default_policy_is_the_engines_and_says_so(
    capsys: pytest.CaptureFixture[str], workload: str, engine: str, policy: str, pause: str, basis: str
) -> None:
    """Without --policy/--pause the simulator runs what the engine does (llama.cpp's slots reserve their cells,
    vLLM/SGLang/TensorRT-LLM keep a finished step's blocks in an evictable prefix cache), and says whose it is."""
    base = ("--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--engine", engine, "--context", "32k")
    data = sim(capsys, *base, "--workload", workload, "--sessions", "40", "--search-sessions", "0")
    assert (data["policy"], data["pause"]) == (policy, pause)
    assert data["policy_basis"].startswith(basis)
    code, out, _ = run_cli(
        capsys, "simulate", *base, "--workload", workload, "--sessions", "40", "--search-sessions", "0"
    )
    assert code == 0 and f"  policy: {basis}" in out
    data = sim(capsys, *base, "--workload", workload, "--sessions", "40", "--search-sessions", "0", "--pause", "hold")
    assert data["pause"] == "hold" and data["policy"] == policy and data["policy_basis"].endswith("(--pause as given)")


def test_text_reads_as_words(capsys: pytest.CaptureFixture[str], workload: str) -> None:
    """The head names the engine as 'vllm 0.33.0' (not its JSON object), long times read in minutes or hours, and
    the sustained-vs-static comparison is explained."""
    code, out, err = run_cli(capsys, "simulate", *BASE, "--workload", workload, "--sessions", "100")
    assert code == 0, err
    head = out.splitlines()[0]
    assert head.startswith("Llama-3.1-8B on vllm 0.33.0 · ") and "{" not in head
    concurrency = next(line for line in out.splitlines() if line.startswith("Mean concurrency"))
    assert concurrency.endswith(" min") or concurrency.endswith(" h")
    assert "sustained: the mean number of live sessions at the highest arrival rate" in out


def test_sessions_ended_at_the_cap_are_explained(capsys: pytest.CaptureFixture[str]) -> None:
    """The coding-agent example at a 32K cap: its 14,664-token prefix keeps a summarized context above the 8K target,
    so a long tool result still does not fit and the session ends; the text says why, with the count the JSON has."""
    argv = (*BASE, "--workload", "examples/coding-agent.toml", "--sessions", "200", "--search-sessions", "0")
    data = sim(capsys, *argv)
    assert data["refused_at_cap"] > 0
    code, out, _ = run_cli(capsys, "simulate", *argv)
    assert code == 0
    assert f"  {data['refused_at_cap']} sessions ended at the cap: even summarized to the target" in out
