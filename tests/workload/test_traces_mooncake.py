"""Mooncake FAST'25 rows (one-step sessions) and AIPerf session rows (incremental turns), against the
raw files; bad rows with file and line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kvbudget.errors import TraceError
from kvbudget.workload.record import BadRow
from kvbudget.workload.stats import trace_stats
from kvbudget.workload.traces import read_records
from tests.workload.raw_traces import MOONCAKE, jsonl, summary


@pytest.mark.parametrize("path", MOONCAKE, ids=lambda p: p.name)
def test_rows_are_one_step_sessions_with_512_token_blocks(path: Path) -> None:
    raw = jsonl(path)
    assert all(len(row["hash_ids"]) == math.ceil(row["input_length"] / 512) for row in raw)
    records = list(read_records([path]))
    assert len(records) == len(raw) == {"conversation_trace": 12031, "synthetic_trace": 3993}[path.stem]
    for record, row in zip(records, raw, strict=True):
        assert record.step == 0 and record.pause_s is None and record.parent is None
        assert record.start_s == pytest.approx(row["timestamp"] / 1000)
        assert (record.prompt_tokens, record.output_tokens) == (row["input_length"], row["output_length"])
        assert record.block_hashes == tuple(row["hash_ids"]) and record.block_size == 512
    assert len({r.session for r in records}) == len(raw)


@pytest.mark.parametrize("path", MOONCAKE, ids=lambda p: p.name)
def test_statistics_match_the_raw_rows(path: Path) -> None:
    raw = jsonl(path)
    contexts = [row["input_length"] + row["output_length"] for row in raw]
    stats = trace_stats(read_records([path]), 0).to_json()
    assert stats["sessions"] == stats["steps"] == len(raw)
    assert stats["subagents"] == 0
    for key in ("context_tokens", "session_end_tokens"):
        got = stats[key]
        assert isinstance(got, dict)
        assert {k: got[k] for k in ("p50", "p90", "p99", "max")} == summary(contexts)
    pause = stats["pause_seconds"]
    assert isinstance(pause, dict) and pause["count"] == 0 and pause["p50"] is None
    assert stats["paused_share"] is None


def _write(tmp_path: Path, rows: list[object], name: str = "t.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def test_aiperf_sessions_accumulate_incremental_turns(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        [
            {"session_id": "a", "timestamp": 1000, "input_length": 600, "output_length": 50, "hash_ids": [7, 8]},
            {"session_id": "b", "timestamp": 1500, "input_length": 100, "output_length": 20},
            {"session_id": "a", "delay": 2500, "input_length": 40, "output_length": 30, "hash_ids": [9]},
            {"session_id": "a", "delay": 500, "input_length": 10, "output_length": 5},
        ],
    )
    records = sorted(read_records([path]), key=lambda r: (r.session, r.step))
    a = [r for r in records if r.session == "a"]
    assert [r.prompt_tokens for r in a] == [600, 600 + 50 + 40, 690 + 30 + 10]
    assert [r.new_tokens for r in a] == [600, 40, 10]
    assert [r.start_s for r in a] == pytest.approx([1.0, 3.5, 4.0])
    assert [r.pause_s for r in a] == [2.5, 0.5, None]
    assert a[0].block_hashes == (7, 8) and a[1].block_hashes == () and a[1].block_size is None
    b = [r for r in records if r.session == "b"]
    assert len(b) == 1 and b[0].pause_s is None


def test_bad_rows_have_file_and_line(tmp_path: Path) -> None:
    good = {"timestamp": 0, "input_length": 600, "output_length": 50, "hash_ids": [1, 2]}
    path = _write(
        tmp_path,
        [
            good,
            '{"timestamp": 1, "input_length": 600',  # malformed JSON
            {"timestamp": 2, "output_length": 5},  # missing field
            {"timestamp": 3, "input_length": -4, "output_length": 5},  # negative tokens
            "",
            {"timestamp": 4, "input_length": 10, "output_length": 2.5},  # not whole
            [1, 2],  # not an object
            {"input_length": 10, "output_length": 1},  # no timestamp
            good,
        ],
    )
    bad: list[BadRow] = []
    records = list(read_records([path], fmt="mooncake", bad_rows=bad))
    assert len(records) == 2
    assert [(b.path, b.line) for b in bad] == [(str(path), n) for n in (2, 3, 4, 6, 7, 8)]
    assert "not valid JSON" in bad[0].reason
    assert "'input_length' is missing" in bad[1].reason
    assert "'input_length' must be at least 0, got -4" in bad[2].reason
    assert "whole number" in bad[3].reason
    assert "JSON object" in bad[4].reason
    assert "'timestamp' is missing" in bad[5].reason
    with pytest.raises(TraceError) as caught:
        list(read_records([path], fmt="mooncake", strict=True))
    assert str(caught.value).startswith(f"{path}:2: not valid JSON")
    assert "\n" not in str(caught.value)


def test_a_session_turn_that_goes_back_in_time_is_a_bad_row(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        [
            {"session_id": "a", "timestamp": 5000, "input_length": 6, "output_length": 5},
            {"session_id": "a", "timestamp": 1000, "input_length": 4, "output_length": 3},
        ],
    )
    bad: list[BadRow] = []
    assert len(list(read_records([path], bad_rows=bad))) == 1
    assert bad[0].line == 2 and "before the previous turn" in bad[0].reason
