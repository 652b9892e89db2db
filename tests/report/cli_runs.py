"""The report tests' CLI runs through the real entry point, each run once per test session (a report with a
simulation takes seconds on the shared CI cores)."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
from pathlib import Path
from typing import Any

from kvbudget.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
WEKA = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests/data/traces/weka_kv_cache_tester").glob("trace_*.json"))
QWEN = ("qwen3-32b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "32k", "--weights", "fp8")
# the docs' example: a coding agent's real traces and workload on one H100
DOCS_EXAMPLE = (*QWEN, "--trace", *WEKA, "--workload", "examples/coding-agent.toml")
QUICK_SIM = ("--simulate-sessions", "200", "--search-sessions", "200")


@functools.cache
def run(*argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``kvbudget ARGV`` run from the repository root."""
    out, err = io.StringIO(), io.StringIO()
    here = Path.cwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
    finally:
        os.chdir(here)
    return code, out.getvalue(), err.getvalue()


def document(*argv: str) -> Any:
    code, out, err = run(*argv, "--json")
    assert code == 0, err
    return json.loads(out)


def html(*argv: str) -> str:
    code, out, err = run("report", *argv)
    assert code == 0, err
    return out


# one deployment with the chat workload: a report with its simulation, and the same simulation run by ``simulate``
CHAT = ("llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "32k")


def chat_report_and_simulation() -> tuple[Any, Any]:
    """(``report --json``, ``simulate --json``) of CHAT with examples/chat.toml and 200 simulated sessions."""
    report = document("report", *CHAT, "--workload", "examples/chat.toml", *QUICK_SIM)
    sessions = ("--sessions", "200", "--search-sessions", "200")
    sim = document("simulate", "--model", *CHAT, "--workload", "examples/chat.toml", *sessions)
    return report, sim
