"""``kvbudget loadtest`` against a real llama-server (no mock): a tiny GGUF with Llama-3.1-8B's KV geometry.

The server runs ``-c 1024 -np 4``: four slots of 256 cells. The workload's sessions grow by 24
appended + 8 generated tokens a step from a 32-token shared prefix and a 48-token first prompt, so
each reaches the 256-token cap at its seventh step and ends there; tool pauses are scaled to 10 ms.
llama-server is started with one thread (``-t 1``): with two threads on a busy 2-core machine its
barrier spins make decoding 100x slower; one thread keeps every test to seconds.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from kvbudget.cli.main import main
from kvbudget.engines.llamacpp import context_cells
from kvbudget.schemas import schema
from tests.live.server import Server, binary, llama_server
from tests.live.tiny_gguf import write_llama

SLOTS = 4
CAP = 256


def workload_text(prefix: int, first: int, append: int, output: int, cap: str = 'at_cap = "refuse"') -> str:
    return f"""\
name = "live-agent"
steps = 10
first_prompt_tokens = {first}
append_tokens = {append}
output_tokens = {output}
tool_latency_s = 1.0
think_time_s = 0

[arrival]
rate_per_s = 1

[prefix]
system_prompt_tokens = {prefix}

[cap]
{cap}
"""


WORKLOAD = workload_text(prefix=32, first=48, append=24, output=8)
FAST = ["--time-scale", "0.01", "--target-ttft", "30", "--scrape-interval", "0.1"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    binary()  # skip (or fail under KVBUDGET_REQUIRE_LIVE) before writing anything
    where = tmp_path_factory.mktemp("loadtest-live")
    model = write_llama(where / "llama-3.1-8b-tiny.gguf")
    args = ("-c", str(SLOTS * CAP), "-np", str(SLOTS), "-t", "1", "-tb", "1")
    with llama_server(model, where / "server.log", *args) as running:
        yield running


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("loadtest-workload") / "agent.toml"
    path.write_text(WORKLOAD, encoding="utf-8")
    return path


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any], str]:
    code = main(["loadtest", *args, "--json"])
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    jsonschema.validate(doc, schema("loadtest"))
    jsonschema.validate(doc, schema("loadtest"))  # every live document follows the shipped schema
    return code, doc, captured.err


def _levels(doc: dict[str, Any]) -> dict[int, dict[str, Any]]:
    levels = doc["levels"]
    assert isinstance(levels, list)
    return {int(lv["sessions"]): lv for lv in levels}


def test_ramp_sustains_the_planned_slots(server: Server, workload: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slots = server.get_json("/slots")
    assert isinstance(slots, list)
    assert [s["n_ctx"] for s in slots] == [CAP] * SLOTS
    assert context_cells(SLOTS * CAP, SLOTS, False) == (CAP, SLOTS)  # kvbudget's cell rule for -c 1024 -np 4
    code, doc, err = _run(
        capsys, server.url, "--workload", str(workload), "--context", str(CAP), "--history", "filler",
        "--start", "3", "--max-sessions", "8", "--level-time", "4", *FAST,
    )  # fmt: skip
    assert code == 0, err
    assert doc["server"] == {
        "url": server.url,
        "engine": "llamacpp",
        "version": "b0-unknown",
        "model": doc["server"]["model"],
        "total_slots": SLOTS,
        "slot_n_ctx": CAP,
        "max_model_len": None,
        "metrics": True,
    }
    levels = _levels(doc)
    assert sorted(levels) == [3, 4, 5], "the ramp stops at the first level that fails"
    for n in (3, 4):
        assert levels[n]["passed"] is True, levels[n]["reasons"]
        assert levels[n]["deferred_scrapes"] == 0 and levels[n]["refused"] == 0
        assert int(str(levels[n]["requests"])) >= n
    five = levels[5]
    assert five["passed"] is False
    assert int(str(five["deferred_peak"])) >= 1, "a fifth session waits for a slot: llama.cpp defers it"
    assert "deferred" in str(five["reasons"])
    assert doc["sessions_sustained"] == 4
    predicted = doc["predicted"]
    assert isinstance(predicted, dict)
    assert predicted["plan_sessions"] == 4 and predicted["simulated_sessions"] == 4
    assert [row["difference"] for row in doc["reconciliation"]] == [0, 0]
    # The server's own counts: one BOS per prompt, one token per letter, so every prompt is exactly
    # the planned size when each step resends new text of the output's token count.
    text = doc["text"]
    assert isinstance(text, dict) and text["exact"] and text["base_tokens"] == 1 and text["alphabet"] == "letters"
    tokens = doc["tokens"]
    assert isinstance(tokens, dict)
    assert tokens["prompt"] == tokens["planned_prompt"] > 0
    assert tokens["output"] == 8 * (int(str(doc["requests"])))
    assert doc["refused"] == 0 and doc["errors"] == 0 and doc["preempted"] == 0
    peak = float(str(doc["kv_usage_peak"]))
    assert 0.35 < peak <= 1.0, "four slots hold at least their first prompts (89 cells each) and grow"
    assert float(str(doc["prefix_hit_rate"])) > 0.5 and doc["prefix_hit_source"] == "server metrics"
    assert doc["stopped_by"] == "criterion"


def test_hold_on_the_chat_api(server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The chat template costs 81 tokens around the first prompt and 61 around each later turn on
    # this model (measured by the run itself): smaller steps, so sessions take a few before the cap.
    chat = tmp_path / "chat.toml"
    chat.write_text(workload_text(prefix=16, first=24, append=8, output=8), encoding="utf-8")
    code, doc, err = _run(
        capsys, server.url, "--workload", str(chat), "--context", str(CAP), "--api", "chat",
        "--history", "filler", "--sessions", "4", "--max-requests", "12", "--duration", "60", *FAST,
    )  # fmt: skip
    assert code == 0, err
    assert doc["stopped_by"] == "max-requests" and doc["sessions_sustained"] == 4
    (level,) = _levels(doc).values()
    assert level["passed"] is True and level["deferred_peak"] == 0 and level["refused"] == 0
    text = doc["text"]
    assert isinstance(text, dict) and text["base_tokens"] > 1 and text["turn_tokens"] > 0
    tokens = doc["tokens"]
    assert isinstance(tokens, dict)
    # each later turn's template tokens are the server's own, beyond the planned text
    assert tokens["prompt"] > tokens["planned_prompt"] > 0
    # 81 + 16 + 24 + 8 = 129 tokens after the first step, 206 after the second; a third would pass 256
    assert int(doc["requests"]) + int(doc["requests_aborted"]) == 12
    assert int(doc["sessions_capped"]) >= 4 and int(doc["sessions_started"]) >= 8


def test_a_cap_above_the_slot_is_refused_by_the_server(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = tmp_path / "big-steps.toml"
    big.write_text(workload_text(prefix=32, first=48, append=100, output=8), encoding="utf-8")  # 89, 197, 305
    code, doc, err = _run(
        capsys, server.url, "--workload", str(big), "--context", "1024", "--history", "filler",
        "--sessions", "2", "--max-requests", "6", "--duration", "120", *FAST,
    )  # fmt: skip
    # bounded by requests, not time (a slow machine once finished only 2 steps in a 4 s hold): of any 6 requests
    # of 2 sessions, one session's is a third step (305 tokens), which no 256-cell slot holds
    assert code == 0, err
    assert doc["stopped_by"] == "max-requests"
    assert int(str(doc["refused"])) >= 1, "past 256 cells llama-server refuses or cuts the request"
    (level,) = _levels(doc).values()
    assert level["passed"] is False and "refused" in str(level["reasons"])
    assert doc["sessions_sustained"] is None
    assert any("above llama-server's 256 cells per slot" in str(w) for w in doc["warnings"])
    predicted = doc["predicted"]
    assert isinstance(predicted, dict) and predicted["plan_sessions"] == 0  # no slot holds a 1,024-token session


def test_sessions_compact_at_the_cap(server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 89 tokens after the first step, +32 a step: at 249 the next step would pass 256, so the client
    # cuts its history to 128 tokens (prefix kept, new text) and goes on, as the simulator does.
    compact = tmp_path / "compact.toml"
    cap = 'at_cap = "compact"\ntarget_fraction = 0.5'
    compact.write_text(workload_text(prefix=32, first=48, append=24, output=8, cap=cap), encoding="utf-8")
    code, doc, err = _run(
        capsys, server.url, "--workload", str(compact), "--context", str(CAP), "--history", "filler",
        "--sessions", "2", "--max-requests", "14", "--duration", "60", *FAST,
    )  # fmt: skip
    assert code == 0, err
    assert int(doc["compactions"]) >= 2 and doc["refused"] == 0 and doc["sessions_capped"] == 0
    assert doc["tokens"]["prompt"] == doc["tokens"]["planned_prompt"]  # the compacted prompts too
    assert doc["sessions_sustained"] == 2


def test_max_requests_bounds_the_run(
    server: Server, workload: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "partial.json"
    code, doc, err = _run(
        capsys, server.url, "--workload", str(workload), "--context", str(CAP), "--sessions", "2",
        "--max-requests", "5", "--out", str(out), *FAST,
    )  # fmt: skip
    assert code == 0, err
    assert doc["stopped_by"] == "max-requests"
    assert int(str(doc["requests"])) + int(str(doc["requests_aborted"])) == 5
    assert json.loads(out.read_text(encoding="utf-8")) == doc


def test_ctrl_c_keeps_partial_results_and_stops_the_load(server: Server, workload: Path, tmp_path: Path) -> None:
    out = tmp_path / "interrupted.json"
    command = [
        sys.executable, "-m", "kvbudget", "loadtest", server.url, "--workload", str(workload), "--context", str(CAP),
        "--sessions", "4", "--duration", "120", "--json", "--out", str(out), *FAST,
    ]  # fmt: skip
    before = _predicted_tokens(server)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _predicted_tokens(server) < before + 40:
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, stderr.decode()
    assert b"Traceback" not in stderr
    doc = json.loads(stdout)
    jsonschema.validate(doc, schema("loadtest"))
    assert doc["stopped_by"] == "interrupted" and doc["error"] is None
    assert int(doc["requests"]) >= 1 and doc["sessions_sustained"] is None
    assert doc["levels"][0]["passed"] is None  # cut short: not judged
    assert json.loads(out.read_text(encoding="utf-8")) == doc
    # the cancelled requests were dropped by the server: no slot keeps working for a client that left
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(s["is_processing"] for s in _slots(server)):
        time.sleep(0.1)
    assert not any(s["is_processing"] for s in _slots(server))


def test_not_an_openai_server(server: Server, workload: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["loadtest", server.url + "/not-here", "--workload", str(workload), "--context", str(CAP)])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("Error: ") and err.count("\n") == 1
    assert "does not answer the OpenAI API" in err and "404" in err


def test_unreachable_server_is_one_line_and_keeps_the_document(
    workload: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "error.json"
    url = f"http://127.0.0.1:{port}"
    code = main(["loadtest", url, "--workload", str(workload), "--context", "256", "--json", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 1
    assert captured.err.startswith(f"Error: cannot reach {url}: connection failed") and captured.err.count("\n") == 1
    doc = json.loads(captured.out)
    jsonschema.validate(doc, schema("loadtest"))
    assert doc["stopped_by"] == "error" and doc["error"] in captured.err and doc["requests"] == 0
    assert json.loads(out.read_text(encoding="utf-8")) == doc


def _slots(server: Server) -> list[dict[str, object]]:
    slots = server.get_json("/slots")
    assert isinstance(slots, list)
    return slots


def _predicted_tokens(server: Server) -> float:
    import urllib.request

    with urllib.request.urlopen(server.url + "/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("llamacpp:tokens_predicted_total "):
                return float(line.split()[1])
    return 0.0
