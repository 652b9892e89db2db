"""One start-up taken explicitly (issue 22): ``--startup N`` (or ``last``) reads that start-up of a file holding
several, exactly as if the file held it alone; without it the file is refused naming the option.

The file is two real excerpts of tests/data/logs (SOURCES.md) appended, as a careless user's log is."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import kvbudget
from kvbudget.requests.calibrate import CalibrateRequest
from kvbudget.requests.plan import PlanRequest
from tests.helpers import run_cli
from tests.measure.test_belong import FP8_100K, L40S_8B, error, joined


def _calibrated(capsys: pytest.CaptureFixture[str], *argv: str, offset: int = 0) -> object:
    """calibrate's document, its line numbers counted from the start-up's first line (``offset`` before it)."""
    code, out, err = run_cli(capsys, "calibrate", *argv, "--model", "llama-3.1-8b", "--json")
    assert code == 0, err
    doc = json.loads(out)
    del doc["log"], doc["lines_read"]  # the file's own: its name and length

    def shift(node: object) -> object:
        if isinstance(node, dict):
            return {k: v - offset if k == "line" and isinstance(v, int) else shift(v) for k, v in node.items()}
        if isinstance(node, list):
            return [shift(v) for v in node]
        if isinstance(node, str):
            return re.sub(r"\bline (\d+)", lambda m: f"line {int(m.group(1)) - offset}", node)
        return node

    return shift(doc)


@pytest.mark.parametrize(("startup", "alone"), [("1", L40S_8B), ("2", FP8_100K), ("last", FP8_100K)])
def test_each_start_up_gives_exactly_the_figures_of_its_excerpt_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], startup: str, alone: Path
) -> None:
    both = joined(tmp_path, L40S_8B, FP8_100K)
    taken = _calibrated(capsys, both, "--startup", startup, offset=0 if alone == L40S_8B else 7)
    assert taken == _calibrated(capsys, str(alone))
    # the figures themselves: 158,656 tokens on the L40S (line 6), 230,528 in the FP8 excerpt
    from kvbudget.measure.logs import read_log

    log = read_log(both, startup="last" if startup == "last" else int(startup))
    want = 158_656 if alone == L40S_8B else 230_528
    assert log.figure("kv_tokens").value == want  # type: ignore[union-attr]


def test_without_startup_the_refusal_names_the_option_and_where_each_begins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = error(capsys, "calibrate", joined(tmp_path, L40S_8B, FP8_100K), "--model", "llama-3.1-8b")
    # the L40S excerpt's last KV line is its line 7: the FP8 excerpt begins at line 8
    assert "holds 2 start-ups" in err and "give --startup 1..2 (or last) to take one (they begin at lines 1, 8)" in err


def test_time_going_back_splits_the_file_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    undated_kv = "INFO 01-02 10:00:00 [kv_cache_utils.py:634] Available KV cache memory: 10.55 GiB\n"
    both = joined(tmp_path, L40S_8B, undated_kv)  # dated 01-02 after 04-24: a run appended out of order
    err = error(capsys, "calibrate", both)
    assert "joins logs of several runs" in err and "give --startup 1..2 (or last) to take one" in err
    from kvbudget.measure.logs import read_log

    assert read_log(both, startup=2).figure("available_kv_bytes").value == 11_327_976_243  # type: ignore[union-attr]
    assert read_log(both, startup=1).figure("kv_tokens").value == 158_656  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("3", "--startup 3: "),
        ("0", "--startup"),
        ("first", "--startup"),
        ("-1", "--startup"),
    ],
)
def test_a_start_up_the_file_does_not_hold_is_one_line_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, said: str
) -> None:
    err = error(capsys, "calibrate", joined(tmp_path, L40S_8B, FP8_100K), "--startup", value)
    assert said in err


def test_past_the_count_names_the_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = error(capsys, "calibrate", joined(tmp_path, L40S_8B, FP8_100K), "--startup", "3")
    assert "holds 2 start-ups (lines 1, 8); give --startup 1..2 or last" in err
    err = error(capsys, "calibrate", str(L40S_8B), "--startup", "2")
    assert "holds one start-up; give --startup 1..1 or last" in err


def test_startup_1_of_a_one_start_up_file_is_the_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert _calibrated(capsys, str(L40S_8B), "--startup", "1") == _calibrated(capsys, str(L40S_8B))


def test_plan_and_report_take_the_start_up_and_the_api_agrees(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    both = joined(tmp_path, FP8_100K, L40S_8B)  # the L40S run second
    plan = ("plan", "llama-3.1-8b", "--context", "8k", "--gpu", "l40s", "--json")
    err = error(capsys, *plan, "--from-log", both)
    assert "give --startup 1..2" in err
    code, out, err = run_cli(capsys, *plan, "--from-log", both, "--startup", "2")
    assert code == 0, err
    code, alone, err = run_cli(capsys, *plan, "--from-log", str(L40S_8B))
    assert code == 0, err
    taken, single = json.loads(out), json.loads(alone)
    # the same figures, each at its line in the joined file: 3 lines (the FP8 excerpt) further down
    assert [{**f, "line": f["line"] - 3} for f in taken["from_log"]["figures"]] == single["from_log"]["figures"]
    assert taken["sessions"] == single["sessions"]
    api = kvbudget.plan_deployment(
        PlanRequest(model="llama-3.1-8b", context=8192, gpu="l40s", from_log=both, startup="last")
    ).to_dict()
    assert api["from_log"] == taken["from_log"]
    cal = kvbudget.calibrate_logs(CalibrateRequest(logs=(both,), model="llama-3.1-8b", startup=2)).to_dict()
    assert '"kv_tokens": {"value": 158656' in json.dumps(cal)  # the L40S run's 158,656 tokens, not the FP8 one's
    report = ["report", "llama-3.1-8b", "--gpu", "l40s", "--context", "32k", "--format", "json"]
    report += ["--engine", "vllm", "--log", both]
    assert "give --startup 1..2" in error(capsys, *report)
    code, out, err = run_cli(capsys, *report, "--startup", "2")
    assert code == 0, err
    # the L40S run's own line: maximum concurrency 4.84x for 32,768 tokens, line 10 of the joined file
    assert "logged maximum concurrency 4.84x for 32,768 tokens per request (line 10)" in out


def test_the_record_of_once_per_start_up_lines_is_bounded_whatever_the_file_holds() -> None:
    """A hostile log printing a once-per-GPU line under thousands of worker prefixes, thousands of times each,
    cannot grow the record of where it was printed past MAX_KEPT line numbers (nor past MAX_SEEN phrases)."""
    from kvbudget.measure.logs.record import EngineLog
    from kvbudget.measure.logs.rules import MAX_KEPT, MAX_SEEN, Rule, seen

    log = EngineLog(path="hostile.log", engine="vllm")
    r = Rule(re.compile("x"), lambda *_: None, "GPU KV cache size", "rank")
    line = 0
    for rank in range(MAX_SEEN + 50):
        for _ in range(12):
            line += 1
            seen(log, r, line, f"rank={rank}")
    assert len(log.once) == MAX_SEEN
    assert log.once_kept == MAX_KEPT
    assert sum(len(lines) - 1 for lines in log.once.values()) == MAX_SEEN + MAX_KEPT  # first lines + those kept
    assert all(lines[-1] == 12 for lines in log.once.values())  # every print still counted
