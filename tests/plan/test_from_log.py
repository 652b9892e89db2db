"""plan --from-log: the engine's measured figures become ledger lines labelled measured, with their line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_cli
from tests.plan.test_plan import _plan

LOGS = Path(__file__).parent.parent / "data" / "logs"
GiB = 2**30


def _ledger(doc: dict[str, object]) -> dict[str, dict[str, object]]:
    lines = doc["ledger"]
    assert isinstance(lines, list)
    return {line["label"]: line for line in lines}


def test_vllm_log_gives_cuda_total_weights_and_profiled_overhead(capsys: pytest.CaptureFixture[str]) -> None:
    # vLLM #10517: RTX 3090, Llama-3.1-8B at 20,000 tokens; the log measured 3.81 GiB of KV memory, 1,952 blocks
    log = LOGS / "vllm" / "v0-0.6.4fmt-llama31-8b-rtx3090-20k.log"
    doc = _plan(capsys, "llama-3.1-8b", "--from-log", str(log), "--context", "20000")
    ledger = _ledger(doc)
    assert ledger["GPU memory"]["provenance"] == "measured" and ledger["GPU memory"]["bytes"] == round(23.58 * GiB)
    assert ":2 '23.58 GiB'" in str(ledger["GPU memory"]["basis"])
    assert ledger["weights"]["provenance"] == "measured" and ledger["weights"]["bytes"] == round(14.9888 * GiB)
    overhead = ledger["runtime overhead"]
    assert overhead["provenance"] == "measured"
    assert overhead["bytes"] == round(17.06 * GiB) - round(14.9888 * GiB) + round(0.35 * GiB)
    pool = ledger["KV pool"]["bytes"]
    assert isinstance(pool, int) and abs(pool - 3.81 * GiB) <= 0.01 * GiB  # the log's own 3.81 GiB
    assert doc["engine"] == "vllm" or "vllm" in str(doc["engine"])


def test_the_same_card_planned_at_another_cap(capsys: pytest.CaptureFixture[str]) -> None:
    log = LOGS / "vllm" / "v0-0.6.4fmt-llama31-8b-rtx3090-20k.log"
    doc = _plan(capsys, "llama-3.1-8b", "--from-log", str(log), "--context", "8k")
    assert doc["sessions"] == 3  # 1,951 blocks x 16 / 8,192 tokens


def test_engine_mismatch_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    log = LOGS / "vllm" / "v1-fp8-kv-100k.log"
    code, _, err = run_cli(
        capsys, "plan", "llama-3.1-8b", "--from-log", str(log), "--engine", "sglang", "--gpu", "h100", "--context", "8k"
    )
    assert code == 1 and "--from-log is a vllm log but --engine is sglang" in err
