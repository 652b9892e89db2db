"""When no session fits at the cap, no serve line is printed (it would only fail at start-up) but the largest cap at
which one session fits, by the engine's own rules: for vLLM the estimated maximum model length it prints when it
refuses to start."""

from __future__ import annotations

import json
import re

import pytest

from kvbudget.plan.flags import all_engine_flags
from tests.helpers import run_cli


def test_vllm_refusal_gives_its_own_estimated_length(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("plan", "llama-3.1-8b", "--gpu", "rtx-4090", "--context", "128k", "--engine", "vllm", "--json")
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0
    doc = json.loads(out)
    assert doc["sessions"] == 0
    refusal = doc["engine_log"][0]
    estimated = int(re.search(r"estimated maximum model length is (\d+)", refusal).group(1))  # type: ignore[union-attr]
    assert doc["flags"]["vllm"] == (
        "not served at --context 131072: no session of 131,072 tokens fits; "
        f"one session fits up to --context {estimated}"
    )


def test_the_largest_cap_serves_one_session() -> None:
    from kvbudget.api import PlanRequest, Tokens, plan_deployment

    for engine in ("vllm", "trtllm", "llamacpp", "ollama"):
        plan = plan_deployment(PlanRequest(model="llama-3.1-8b", gpu="rtx-4090", context=Tokens("128k"), engine=engine))
        largest = plan.largest_cap()
        assert plan.sessions == 0 and 0 < largest < 131_072
        assert plan.at_cap(largest).sessions == 1 and plan.at_cap(largest + 1).sessions == 0
        assert all_engine_flags(plan)[engine].endswith(f"--context {largest}")
