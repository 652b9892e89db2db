"""simulate refuses runs far past what it does in a couple of minutes (saying what they would cost), a replica
count past its ceiling, and a workload whose shared prefix cannot fit under the cap; --allow-long lifts the
ceilings. Through the real entry point."""

from __future__ import annotations

import pytest

from tests.helpers import run_cli

BASE = ("simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "32k")
WORKLOAD = ("--workload", "examples/coding-agent.toml")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--sessions", "1000000000"), "about 30,000,480,000 model calls to simulate"),
        (("--sessions", "100", "--search-sessions", "5000000"), "pass --allow-long"),
        (("--sessions", "100", "--replicas", "20000"), "--replicas 20,000: each replica keeps its own pool"),
        (("--sessions", "100", "--replicas", "1000000"), "--replicas: 1,000,000 is outside 1..65,536 GPUs"),
        (("--sessions", "100", "--search-sessions", "lots"), "--search-sessions: cannot read 'lots'"),
    ],
)
def test_runs_past_the_ceiling_are_refused(
    capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], message: str
) -> None:
    code, out, err = run_cli(capsys, *BASE, *WORKLOAD, *extra)
    assert code == 1 and out == ""
    assert message in err and err.count("\n") == 1


def test_a_prefix_longer_than_the_cap_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    args = [a if a != "32k" else "8k" for a in BASE]
    code, _, err = run_cli(capsys, *args, *WORKLOAD, "--sessions", "10")
    assert code == 1
    assert "shared prefix (14,664 tokens) does not fit under the 8,192-token cap" in err


def test_allow_long_lifts_the_ceiling(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run_cli(
        capsys, *BASE, *WORKLOAD, "--sessions", "20", "--search-sessions", "0", "--replicas", "10001", "--allow-long"
    )
    assert code == 0
