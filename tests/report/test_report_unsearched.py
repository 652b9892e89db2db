"""``report --workload W --search-sessions 0``: one simulated run and no search. A run that misses the target has
no sessions sustained (``simulate --json`` gives null, with the basis saying why); the report says so in every
format instead of failing on the missing number."""

from __future__ import annotations

import json

import jsonschema
import pytest

from kvbudget.schemas import schema
from tests.helpers import run_cli

# at an 8K cap the chat workload's longest sessions are refused there, more of them than the 0.1% target tolerates
DEPLOYMENT = ["llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "8k"]
DEPLOYMENT += ["--workload", "examples/chat.toml"]
SIMULATE = ["simulate", *DEPLOYMENT, "--sessions", "40", "--search-sessions", "0"]
REPORT = ["report", *DEPLOYMENT, "--simulate-sessions", "40", "--search-sessions", "0"]


def test_a_missed_run_without_a_search_is_reported_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, *SIMULATE, "--json")
    assert code == 0, err
    simulated = json.loads(out)
    assert simulated["sustained_sessions"] is None
    assert simulated["sustained_basis"] == "this run missed the target and no search was run"
    code, out, err = run_cli(capsys, *REPORT, "--json")
    assert code == 0, err
    doc = json.loads(out)
    jsonschema.validate(doc, schema("report"))
    assert doc["sessions"]["simulated"]["sustained_sessions"] is None
    assert doc["sessions"]["simulated"]["sustained_basis"] == simulated["sustained_basis"]
    code, out, err = run_cli(capsys, *REPORT, "--format", "md")
    assert code == 0, err
    assert "Sessions per replica sustained: none found (" in out and "simulated none found" in out
    code, out, err = run_cli(capsys, *REPORT)
    assert code == 0 and "Traceback" not in err and "none found" in out
