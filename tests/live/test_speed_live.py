"""Speeds measured in one load test predict, through the simulator, the latency of another (real llama-server).

The server: a tiny GGUF with Llama-3.1-8B's KV geometry (tests/live/tiny_gguf.py), ``-c 1024 -np 4``: four slots
of 256 cells. Load test A ramps 2 then 4 sessions; its per-level decode tokens/s and prefill tokens/s
(``--speed-from``, kvbudget.simulate.measured) drive the simulator on the same slots (reserve-at-cap, as the load
test's own prediction models llama.cpp) for 3 sessions started together; load test B then holds 3 sessions. The
simulator's time to first token and inter-token latency p50 must land within 25% of B's. docs/speed.md records a
run's figures.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from kvbudget.cli.main import main
from kvbudget.measure.loadtest.predict import slot_memory
from kvbudget.schemas import schema
from kvbudget.simulate import MemoryPolicy, SimConfig, simulate
from kvbudget.simulate.measured import measured_speeds
from kvbudget.simulate.speeds import measured_time_model
from kvbudget.workload.generate import generate_sessions
from kvbudget.workload.loader import load_workload
from tests.live.server import binary, llama_server
from tests.live.tiny_gguf import write_llama

SLOTS, CAP = 4, 256
SCALE = 0.01  # the load test's --time-scale: tool pauses of 1 s last 10 ms
WORKLOAD = """\
name = "live-speed"
steps = 4
first_prompt_tokens = 48
append_tokens = 16
output_tokens = 24
tool_latency_s = {pause}
think_time_s = 0

[arrival]
rate_per_s = 1

[prefix]
system_prompt_tokens = 32

[cap]
at_cap = "refuse"
"""
TOLERANCE = 0.25


def _loadtest(capsys: pytest.CaptureFixture[str], out: Path, *args: str) -> dict[str, Any]:
    code = main(["loadtest", *args, "--json", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    jsonschema.validate(doc, schema("loadtest"))
    return doc


@pytest.mark.skip(
    reason="not yet passing (issue 19 item 3): on the shared 2-core machine llama-server ran at 1.7-7 tokens/s "
    "and the level at 4 sessions completed no request; to be run and tuned on an idle machine"
)
def test_speeds_from_one_load_test_predict_another(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    binary()
    model = write_llama(tmp_path / "llama-3.1-8b-tiny.gguf")
    workload = tmp_path / "agent.toml"
    workload.write_text(WORKLOAD.format(pause=1.0), encoding="utf-8")
    common = ("--workload", str(workload), "--context", str(CAP), "--history", "filler", "--time-scale", str(SCALE),
              "--target-ttft", "30", "--scrape-interval", "0.2")  # fmt: skip
    args = ("-c", str(SLOTS * CAP), "-np", str(SLOTS))
    with llama_server(model, tmp_path / "server.log", *args) as server:
        ramp = ("--start", "2", "--step", "2", "--max-sessions", "4", "--level-time", "15")
        a = _loadtest(capsys, tmp_path / "a.json", server.url, *common, *ramp)
        b = _loadtest(capsys, tmp_path / "b.json", server.url, *common, "--sessions", "3", "--duration", "15")
    assert [lv["sessions"] for lv in a["levels"]] == [2, 4]
    measured = measured_speeds(str(tmp_path / "a.json"))
    held = b["levels"][0]
    assert held["sessions"] == 3 and held["refused"] == 0

    scaled = tmp_path / "scaled.toml"
    scaled.write_text(WORKLOAD.format(pause=SCALE), encoding="utf-8")  # the pauses as the load test ran them
    sessions = [replace(plan, arrival_s=0.0) for plan in generate_sessions(load_workload(scaled), seed=0, count=3)]
    config = SimConfig(
        memory=slot_memory(SLOTS, CAP, CAP, False),
        policy=MemoryPolicy(policy="reserve", admission="queue"),
        time=measured_time_model(measured),
    )
    result = simulate(sessions, config)
    assert result.finished + result.refused_at_cap == 3
    predicted = {"ttft": result.ttft_s["p50"], "itl": result.itl_s["p50"]}
    observed = {"ttft": held["ttft_s"]["p50"], "itl": held["itl_s"]["p50"]}
    errors = {k: predicted[k] / observed[k] - 1 for k in predicted}
    report = f"measured at 2, 4: {measured.points}, prefill {measured.prefill_tokens_per_s:.0f}/s; " + ", ".join(
        f"{k} predicted {predicted[k] * 1e3:.2f} ms vs {observed[k] * 1e3:.2f} ms ({errors[k]:+.0%})" for k in errors
    )
    print(report)
    assert all(abs(e) <= TOLERANCE for e in errors.values()), report
