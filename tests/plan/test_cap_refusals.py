"""The sessions a cap refuses (plan/cap_refusals.py) and ``kvbudget size``'s use of them: shares held to a
workload whose length distribution is computed by hand, to the simulator's own refusals on the same sessions, and
to what size says and recommends at a cap that refuses too many."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from kvbudget.api import SizeRequest, size_deployments
from kvbudget.plan.cap_refusals import SAMPLE_SESSIONS, SessionLengths, smallest_cap
from kvbudget.simulate import simulate
from kvbudget.simulate.build import cap_from_workload
from kvbudget.workload.generate import generate_sessions
from kvbudget.workload.loader import load_workload
from tests.helpers import run_cli
from tests.simulate.builders import config

CHAT = "examples/chat.toml"

# Every step adds 1,024 tokens (the first prompt or an append of 1,000, plus 24 generated) and the steps are
# geometric with mean 2 (p = 1/2): a session of n steps ends at n x 1,024 tokens, so a cap of k x 1,024 refuses
# the sessions of more than k steps: P(N > k) = (1/2)^k.
DOUBLING = """
name = "doubling"
[arrival]
rate_per_s = 1
[steps]
dist = "geometric"
mean = 2
[first_prompt_tokens]
dist = "constant"
value = 1000
[append_tokens]
dist = "constant"
value = 1000
[output_tokens]
dist = "constant"
value = 24
[cap]
at_cap = "{mode}"
{extra}
"""


def _workload(tmp_path: Path, mode: str = "refuse", extra: str = "") -> str:
    path = tmp_path / f"doubling-{mode}.toml"
    path.write_text(DOUBLING.format(mode=mode, extra=extra))
    return str(path)


def _within_sampling(count: int, n: int, p: float) -> bool:
    """The count is within 4 binomial standard errors of n x p."""
    return abs(count - n * p) <= 4 * math.sqrt(n * p * (1 - p)) + 1e-9


@pytest.mark.parametrize(("k", "share"), [(1, 0.5), (2, 0.25), (4, 0.0625), (8, 1 / 256)])
def test_a_cap_refuses_the_sessions_that_outgrow_it(tmp_path: Path, k: int, share: float) -> None:
    lengths = SessionLengths(load_workload(_workload(tmp_path)))
    answer = lengths.at(k * 1024)
    assert answer.sessions == SAMPLE_SESSIONS == 16_384
    assert answer.refused == answer.reached  # refuse: every session that reaches the cap ends there
    assert _within_sampling(answer.refused, answer.sessions, share), (answer.refused, share)


def test_the_smallest_cap_within_the_tolerance(tmp_path: Path) -> None:
    lengths = SessionLengths(load_workload(_workload(tmp_path)))
    # (1/2)^8 = 0.39% > 0.1% at 8K; (1/2)^16 = 0.0015% at 16K
    answer = smallest_cap(lengths, [4096, 8192, 16_384, 32_768], 0.001)
    assert answer is not None and answer.cap == 16_384 and answer.refused <= 2
    assert smallest_cap(lengths, [2048, 4096], 0.001) is None


def test_compaction_refuses_only_what_does_not_fit_after_it(tmp_path: Path) -> None:
    # compacted to 1,024 tokens, a 1,024-token step fits under a 2,048-token cap: reached, never refused
    fits = SessionLengths(load_workload(_workload(tmp_path, "compact", "target_tokens = 1024"))).at(2048)
    assert fits.refused == 0 and _within_sampling(fits.reached, fits.sessions, 0.25)
    # compacted to 1,500, the step (1,024 more) passes 2,048 still: every session reaching the cap is refused
    cut = SessionLengths(load_workload(_workload(tmp_path, "compact", "target_tokens = 1500"))).at(2048)
    assert cut.refused == cut.reached and _within_sampling(cut.reached, cut.sessions, 0.25)


@pytest.mark.parametrize(
    ("path", "cap", "sessions", "refused"),
    [(CHAT, 8192, 2000, 41), ("examples/coding-agent.toml", 65_536, 300, 15)],
)
def test_the_count_is_the_simulators_refusals_on_the_same_sessions(
    path: str, cap: int, sessions: int, refused: int
) -> None:
    """The first sessions simulate draws (seed 0), run with memory to spare: its refusals at the cap are the sessions
    counted here, one for one (chat refuses at the cap; the coding agent summarizes, then refuses)."""
    workload = load_workload(path)
    cfg = config(4000 * cap, cap=cap, decode_rate=1e6, prefill_rate=1e9, check=False)
    cfg = replace(cfg, policy=replace(cfg.policy, cap=cap_from_workload(workload.cap, cap)))
    result = simulate(generate_sessions(workload, seed=0, count=sessions), cfg)
    assert result.refused == result.refused_at_cap == refused
    shared = cfg.memory.shared_prefix(workload.prefix_tokens)
    assert SessionLengths(workload, sessions).at(cap, shared).refused == refused


def test_size_at_a_cap_that_refuses_too_many_says_why_and_what_would_meet_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The chat workload at 8K: 2.24% of its sessions outgrow the cap; no replica count meets a 0.1% tolerance,
    and size says so, naming 16K; tolerating 3%, the row is met and shows the share."""
    argv = ["size", "llama-3.1-8b", "--gpu", "l40s", "--context", "8k", "--rate", "0.5/s", "--workload", CHAT]
    code, out, _ = run_cli(capsys, *argv, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["deployments"] == [] and doc["refusal_tolerance"] == 0.001
    (row,) = doc["unmet"]
    assert row["refused_at_cap"]["sessions_refused"] == 367 and row["refused_at_cap"]["sessions_drawn"] == 16_384
    assert "2.24% of the workload's sessions outgrow the 8K cap" in row["unmet"]
    assert "a 16K cap keeps them within it" in row["unmet"] and "--target-refusal-rate 2.24%" in row["unmet"]
    assert doc["smallest_cap_within_tolerance"]["cap"] == 16_384
    assert doc["smallest_cap_within_tolerance"]["sessions_refused"] == 6
    assert "Raise the cap to 16K (--context 16k)" in doc["recommendation"]
    code, out, _ = run_cli(capsys, *argv, "--target-refusal-rate", "3%")
    assert code == 0 and "2.24%" in out and "within the 3% tolerated" in out
    sizing = size_deployments(
        SizeRequest.from_options(
            {"model": "llama-3.1-8b", "gpu": "l40s", "context": "8k", "rate": "0.5/s", "workload": CHAT,
             "target_refusal_rate": "3%"}
        )
    )  # fmt: skip
    (pick,) = sizing.met
    assert pick.refusals is not None and pick.refusals.refused == 367


def test_a_target_one_session_misses_names_the_target_that_would_be_met() -> None:
    ask = {"model": "llama-3.1-8b", "gpu": "l40s", "context": "16k", "sessions": "10", "ttft": "10ms"}
    (row,) = size_deployments(SizeRequest.from_options(ask)).unmet
    given = row.unmet.split("a --ttft of ")[1].split(" s or more")[0]
    again = size_deployments(SizeRequest.from_options({**ask, "ttft": f"{given}s"}))
    assert again.met and not again.unmet  # the TTFT the reason names is met
