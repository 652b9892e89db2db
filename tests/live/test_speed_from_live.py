"""``--speed-from`` on a real load test: ``kvbudget loadtest`` against a real llama-server (the tiny GGUF with
Llama-3.1-8B's KV geometry, as tests/live/test_loadtest_live.py runs it), then ``plan`` and ``size`` read its
result. What the server's speeds are depends on the machine; what is asserted is what the code guarantees
whatever they are: the figures plan and size show are the result's own (1 / its decode p50, its prefill p50)
through the arithmetic of plan/speeds.py and plan/sizing_load.py, labelled measured, and a result of this
llama.cpp server is refused for vLLM. No wall-clock bound: the load test holds 2 sessions until 4 requests were
sent (``--max-requests``; ``--duration`` only a ceiling), however slow the machine.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvbudget.cli.main import main
from tests.helpers import run_cli
from tests.live.server import Server, binary, llama_server
from tests.live.test_loadtest_live import CAP, FAST, SLOTS, WORKLOAD
from tests.live.tiny_gguf import write_llama


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    binary()  # skip (or fail under KVBUDGET_REQUIRE_LIVE) before writing anything
    where = tmp_path_factory.mktemp("speed-from-live")
    model = write_llama(where / "llama-3.1-8b-tiny.gguf")
    args = ("-c", str(SLOTS * CAP), "-np", str(SLOTS), "-t", "1", "-tb", "1")
    with llama_server(model, where / "server.log", *args) as running:
        yield running, model


def test_plan_and_size_read_a_real_load_test(
    served: tuple[Server, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server, model = served
    workload = tmp_path / "agent.toml"
    workload.write_text(WORKLOAD, encoding="utf-8")
    result = tmp_path / "lt.json"
    code = main(
        [
            "loadtest", server.url, "--workload", str(workload), "--context", str(CAP), "--history", "filler",
            "--sessions", "2", "--max-requests", "4", "--duration", "600", *FAST, "--out", str(result),
        ]
    )  # fmt: skip
    capsys.readouterr()
    assert code == 0 and result.is_file()
    doc = json.loads(result.read_text(encoding="utf-8"))
    assert doc["stopped_by"] == "max-requests"
    (level,) = doc["levels"]
    # 4 requests sent, at most one in flight per session when it stops: at least 2 completed
    assert level["sessions"] == 2 and int(doc["requests"]) >= 2
    decode, prefill = level["decode_tokens_per_s"]["p50"], level["prefill_tokens_per_s"]["p50"]
    assert decode > 0 and prefill > 0
    deployment = [str(model), "--engine", "llamacpp", "--gpu-memory", "24GB", "--context", str(CAP)]
    code, out, err = run_cli(capsys, "plan", *deployment, "--sessions", "2", "--speed-from", str(result), "--json")
    assert code == 0, err
    speeds = json.loads(out)["speeds"]
    # one level: its iteration at 2 sessions is 1 / its decode p50; the worst TTFT is the cap at its prefill rate
    assert speeds["provenance"] == "measured" and speeds["source"] == "lt.json"
    assert speeds["sessions_per_replica"] == 2 and speeds["extrapolated"] is False
    assert speeds["itl_s"] == pytest.approx(1 / decode, rel=1e-4, abs=2e-6)
    assert speeds["prefill"]["tokens_per_s"] == pytest.approx(prefill, rel=1e-4, abs=2e-6)
    assert speeds["ttft_s"] == pytest.approx(CAP / prefill + 1 / decode, rel=1e-4, abs=2e-6)
    code, out, err = run_cli(
        capsys, "size", str(model), "--engine", "llamacpp", "--gpu", "rtx-3090", "--context", str(CAP), "--sessions",
        "2", "--isl", "100", "--osl", "10", "--speed-from", str(result), "--json",
    )  # fmt: skip
    assert code == 0, err
    (row,) = json.loads(out)["deployments"]
    assert row["speeds"]["provenance"] == "measured" and row["latency"]["provenance"] == "measured"
    running = row["latency"]["sessions_per_replica"]
    # a replica of n sessions on one measured level: ITL = 1 / decode + n prefills of 100 tokens over 10 outputs
    assert row["latency"]["itl_s"] == pytest.approx(1 / decode + running * 100 / prefill / 10, rel=1e-4, abs=2e-6)
    code, _, err = run_cli(
        capsys, "plan", *deployment[:1], "--engine", "vllm", "--gpu-memory", "24GB", "--context", str(CAP),
        "--speed-from", str(result),
    )  # fmt: skip
    assert code == 1 and "measured on llamacpp, but the plan is for vllm" in err and err.count("\n") == 1
