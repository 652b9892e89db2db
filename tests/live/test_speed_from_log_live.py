"""``--speed-from LOG`` on a real llama-server's own log: the file ``calibrate`` reads for memory gives ``plan`` the
server's speeds too, and so does ``calibrate --json``'s document of it (``--speed-from calibrate.json``). One slot
and requests one after another, so every request runs alone: each is a clean decode stretch and a prompt alone in
the server, however slow the machine (no wall-clock bound: what is asserted is that plan's figures are the log's
own timings through the arithmetic of measure/logs/serving.py).
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import run_cli
from tests.live.server import Server, binary, llama_server
from tests.live.tiny_gguf import write_llama

CAP = 256
REQUESTS = 2
TOKENS = 6  # generated per request (ignore_eos: never fewer)
TIMING = re.compile(r"(prompt eval time|  eval time) = +([\d.]+) ms / +(\d+) tokens")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    binary()  # skip (or fail under KVBUDGET_REQUIRE_LIVE) before writing anything
    where = tmp_path_factory.mktemp("speed-from-log-live")
    model = write_llama(where / "llama-3.1-8b-tiny.gguf")
    with llama_server(model, where / "server.log", "-c", str(CAP), "-np", "1") as running:
        yield running, model


def _complete(server: Server, prompt: str) -> None:
    body = {"prompt": prompt, "n_predict": TOKENS, "ignore_eos": True, "cache_prompt": False}
    request = urllib.request.Request(
        server.url + "/completion", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=600) as response:
        assert json.loads(response.read())["timings"]["predicted_n"] == TOKENS


def test_plan_reads_the_speeds_of_the_log_calibrate_reads(
    served: tuple[Server, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    server, model = served
    for words in (3, 5):
        _complete(server, "the quick brown fox " * words)
    log = server.log
    code, out, err = run_cli(capsys, "calibrate", str(log), "--json")
    assert code == 0, err  # the same file calibrates memory, and carries the speeds
    calibration = json.loads(out)
    (carried,) = calibration["speeds"]["decode"]
    assert carried["sessions"] == 1 and calibration["speeds"]["engine"] == "llamacpp"
    document = log.with_name("calibrate.json")
    document.write_text(out, encoding="utf-8")
    prompts = [(float(ms), int(n)) for what, ms, n in TIMING.findall(log.read_text()) if what == "prompt eval time"]
    evals = [(float(ms), int(n)) for what, ms, n in TIMING.findall(log.read_text()) if what != "prompt eval time"]
    assert len(prompts) == len(evals) == REQUESTS and all(n == TOKENS for _, n in evals)
    deployment = [str(model), "--gpu-memory", "24GB", "--context", str(CAP), "--sessions", "1"]
    code, out, err = run_cli(capsys, "plan", *deployment, "--engine", "llamacpp", "--speed-from", str(log), "--json")
    assert code == 0, err
    speeds = json.loads(out)["speeds"]
    assert speeds["provenance"] == "measured" and speeds["source"] == "server.log"
    # one slot: every request clean at 1 session; its clock runs from its first token: TOKENS - 1 iterations
    iteration = sum(ms / 1000 / (TOKENS - 1) for ms, _ in evals) / REQUESTS
    (level,) = speeds["decode"]["levels"]
    assert level["sessions"] == 1 and level["tokens_per_s_per_session"] == pytest.approx(1 / iteration, abs=6e-4)
    prefill = sum(n for _, n in prompts) / sum(ms / 1000 for ms, _ in prompts)
    assert speeds["prefill"]["tokens_per_s"] == pytest.approx(prefill, rel=1e-4)
    assert speeds["itl_s"] == pytest.approx(iteration, rel=1e-4) and speeds["extrapolated"] is False
    # the calibrate document of the same log: the same speeds, unrounded, and the same plan
    assert calibration["speeds"]["prefill_tokens_per_s"] == pytest.approx(prefill, rel=1e-4)
    assert carried["tokens_per_s_per_session"] == pytest.approx(1 / iteration, abs=6e-4)
    code, out, err = run_cli(
        capsys, "plan", *deployment, "--engine", "llamacpp", "--speed-from", str(document), "--json"
    )
    assert code == 0, err
    by_document = json.loads(out)["speeds"]
    assert by_document.pop("source") == "calibrate.json" and speeds.pop("source") == "server.log"
    assert by_document == speeds
    code, _, err = run_cli(capsys, "plan", *deployment, "--engine", "vllm", "--speed-from", str(log))
    assert code == 1 and "measured on llamacpp, but the plan is for vllm" in err and err.count("\n") == 1
