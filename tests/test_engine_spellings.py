"""The engines' own option spellings (a serve command's flags pasted) plan exactly what kvbudget's own do, and an
error names kvbudget's field."""

from __future__ import annotations

import argparse

import pytest

from kvbudget.cli.main import build_parser
from kvbudget.cli.options import ENGINE_SPELLINGS
from tests.helpers import run_cli

BASE = ("llama-3.1-8b", "--gpu", "h100-sxm", "--json")


@pytest.mark.parametrize(
    ("engine", "own", "theirs"),
    [
        (
            "vllm@0.10.1",
            ["--utilization", "0.85", "--context", "16k", "--tp", "2", "--kv-dtype", "fp8"],
            [
                "--gpu-memory-utilization",
                "0.85",
                "--max-model-len",
                "16384",
                "--tensor-parallel-size",
                "2",
                "--kv-cache-dtype",
                "fp8",
            ],
        ),
        (
            "sglang@0.5.5",
            ["--utilization", "0.8", "--context", "8k", "--tp", "2", "--max-num-batched-tokens", "4096"],
            [
                "--mem-fraction-static",
                "0.8",
                "--context-length",
                "8192",
                "--tp-size",
                "2",
                "--chunked-prefill-size",
                "4096",
            ],
        ),
        (
            "trtllm@1.2.1",
            ["--utilization", "0.7", "--context", "32k"],
            ["--free-gpu-memory-fraction", "0.7", "--max-seq-len", "32768"],
        ),
    ],
)
def test_a_serve_commands_flags_plan_as_kvbudgets_own(
    capsys: pytest.CaptureFixture[str], engine: str, own: list[str], theirs: list[str]
) -> None:
    code, mine, err = run_cli(capsys, "plan", *BASE, "--engine", engine, *own)
    assert code == 0, err
    code, pasted, err = run_cli(capsys, "plan", *BASE, "--engine", engine, *theirs)
    assert code == 0, err
    assert pasted == mine


def test_size_reads_the_spellings_too(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("size", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--sessions", "4", "--json")
    code, mine, err = run_cli(capsys, *argv, "--context", "32k", "--utilization", "0.8")
    assert code == 0, err
    code, pasted, err = run_cli(capsys, *argv, "--max-model-len", "32768", "--gpu-memory-utilization", "0.8")
    assert code == 0, err
    assert pasted == mine


def _switch(flag: str) -> bool:
    """Whether the plan parser's option spelled ``flag`` takes no value (a switch such as --enforce-eager)."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    plan = commands.choices["plan"]
    return bool(next(a for a in plan._actions if flag in a.option_strings).nargs == 0)


SPELLINGS = [s for spellings in ENGINE_SPELLINGS.values() for s in spellings]


@pytest.mark.parametrize("flag", [s for s in SPELLINGS if not _switch(s)])
def test_a_spelling_without_its_value_names_kvbudgets_field(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    own = next(k for k, v in ENGINE_SPELLINGS.items() if flag in v)
    code, _, err = run_cli(capsys, "plan", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "8k", flag)
    assert code == 1
    assert err == f"Error: {own}: give it a value; see kvbudget plan --help\n"


def test_sglangs_disable_cuda_graph_is_kvbudgets_enforce_eager(capsys: pytest.CaptureFixture[str]) -> None:
    """A switch spelling plans exactly what kvbudget's own does, for the engine it belongs to and for vLLM."""
    assert [s for s in SPELLINGS if _switch(s)] == ["--disable-cuda-graph"]
    for engine in ("sglang", "vllm@0.20"):
        argv = ("plan", *BASE, "--engine", engine, "--context", "32k")
        code, mine, err = run_cli(capsys, *argv, "--enforce-eager")
        assert code == 0, err
        assert run_cli(capsys, *argv, "--disable-cuda-graph") == (0, mine, "")
