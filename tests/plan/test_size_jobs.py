"""size's check by simulation gives the same answer on one process as on several (docs/size.md, "Which rows": the
probes are deterministic, the rows only run side by side): the chat workload at 10 sessions and a 30 ms p99
inter-token target, vLLM's and SGLang's rows on L40S both checked, ``--jobs 1`` and ``--jobs 2`` to the byte."""

from __future__ import annotations

import json
import multiprocessing

import pytest

from tests.helpers import run_cli
from tests.plan.test_size import CHAT


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="the rows' workers are forked")
def test_one_process_and_two_give_the_same_document(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("size", "llama-3.1-8b", "--gpu", "l40s", "--engine", "vllm,sglang", "--context", "16k", "--workload",
            str(CHAT), "--sessions", "10", "--ttft", "1s", "--itl", "30ms", "--json")  # fmt: skip
    code, serial, err = run_cli(capsys, *args, "--jobs", "1")
    assert code == 0, err
    code, parallel, err = run_cli(capsys, *args, "--jobs", "2")
    assert code == 0, err
    assert parallel == serial
    checked = [d for d in json.loads(serial)["deployments"] if d["replicas_basis"] == "simulated"]
    assert len(checked) == 2  # both rows were checked, so the two processes each ran one
