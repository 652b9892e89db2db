"""TraceLab rounds and Azure CSV rows against the raw files; bad rows with file and line."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest

from kvbudget.errors import TraceError
from kvbudget.workload.record import BadRow
from kvbudget.workload.stats import trace_stats
from kvbudget.workload.traces import read_records
from tests.workload.raw_traces import AZURE, TRACELAB, azure_rows, iso, summary, tracelab_rounds


def test_tracelab_rounds_become_steps() -> None:
    raw = tracelab_rounds()
    records = list(read_records([TRACELAB]))
    assert len(records) == 19 and {r.session for r in records} == set(raw) and len(raw) == 2
    for r in records:
        start, _, row = raw[r.session][r.step]
        assert r.start_s == pytest.approx(start)
        assert (r.prompt_tokens, r.output_tokens) == (row["input_tokens_total"], row["output_tokens"])
        assert r.cached_tokens == row["prefix_tokens"]
        if r.step:
            before = raw[r.session][r.step - 1][2]
            assert r.new_tokens == row["input_tokens_total"] - before["input_tokens_total"] - before["output_tokens"]


def test_tracelab_pauses_and_statistics_match_an_independent_reading() -> None:
    raw = tracelab_rounds()
    pauses = [max(0.0, b[0] - a[1]) for rounds in raw.values() for a, b in pairwise(rounds)]
    spans = [b[0] - a[0] for rounds in raw.values() for a, b in pairwise(rounds)]
    contexts = [r["input_tokens_total"] + r["output_tokens"] for rounds in raw.values() for _, _, r in rounds]
    cached = sum(r["prefix_tokens"] for rounds in raw.values() for _, _, r in rounds)
    prompts = sum(r["input_tokens_total"] for rounds in raw.values() for _, _, r in rounds)
    stats = trace_stats(read_records([TRACELAB]), 0).to_json()
    assert (stats["sessions"], stats["subagents"], stats["steps"]) == (2, 0, 19)
    got = stats["pause_seconds"]
    assert isinstance(got, dict)
    for k, v in summary(pauses).items():
        assert got[k] == pytest.approx(v, abs=1e-6)
    assert stats["paused_share"] == pytest.approx(sum(pauses) / sum(spans), abs=1e-6)
    assert stats["cached_share"] == pytest.approx(cached / prompts, abs=1e-6)
    context = stats["context_tokens"]
    assert isinstance(context, dict)
    assert {k: context[k] for k in ("p50", "p90", "p99", "max")} == summary(contexts)
    # the Claude session's first pause is its WebSearch (19.3 s); the README quotes tools of 0.9-19 s
    assert min(r.pause_s for r in read_records([TRACELAB]) if r.step == 0 and r.pause_s) > 1


def _row(session: str, index: int, tokens: object = 1000, **extra: object) -> dict[str, object]:
    stamp = f"2026-06-01T05:40:{10 + 2 * index:02d}.000Z"
    row: dict[str, object] = {
        "session_id": session,
        "round_index": index,
        "input_tokens_total": tokens,
        "prefix_tokens": 0,
        "output_tokens": 10,
        "timing_events": [
            {"event_type": "user_message", "timestamp": stamp},
            {"event_type": "text", "timestamp": stamp.replace(".000Z", ".500Z")},
        ],
        "tools": [],
    }
    row.update(extra)
    return row


def test_tracelab_bad_rows(tmp_path: Path) -> None:
    no_session = _row("s", 9)
    del no_session["session_id"]
    lines = [
        json.dumps(_row("s", 0)),
        "{not json",
        json.dumps(no_session),
        json.dumps(_row("s", 1, tokens=-3)),
        json.dumps(_row("s", 2)),
        json.dumps(_row("s", 1)),  # out of round order
        json.dumps(_row("s", 3, timing_events=[])),
    ]
    path = tmp_path / "rounds.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    bad: list[BadRow] = []
    records = list(read_records([path], fmt="tracelab", bad_rows=bad))
    assert [r.step for r in records] == [0, 1]
    assert records[0].pause_s == pytest.approx(3.5)  # 05:40:14.0 (round 2) - 05:40:10.5
    assert [b.line for b in bad] == [2, 3, 4, 6, 7]
    assert "'session_id' is missing" in bad[1].reason
    assert "'input_tokens_total' must be at least 0" in bad[2].reason
    assert "round order" in bad[3].reason
    assert "no timestamp" in bad[4].reason
    with pytest.raises(TraceError, match=r"rounds\.jsonl:2: not valid JSON"):
        list(read_records([path], fmt="tracelab", strict=True))


@pytest.mark.parametrize("path", AZURE, ids=lambda p: p.name)
def test_azure_rows_are_one_step_sessions(path: Path) -> None:
    raw = azure_rows(path)
    assert len(raw) == {"AzureLLMInferenceTrace_code": 8819, "AzureLLMInferenceTrace_conv": 19366}[path.stem]
    records = list(read_records([path]))
    assert len(records) == len(raw)
    first, last = records[0], records[-1]
    assert first.prompt_tokens == int(raw[0]["ContextTokens"]) and last.output_tokens == int(raw[-1]["GeneratedTokens"])
    assert first.start_s == pytest.approx(iso(raw[0]["TIMESTAMP"][:26]))
    contexts = [int(r["ContextTokens"]) + int(r["GeneratedTokens"]) for r in raw]
    stats = trace_stats(iter(records), 0).to_json()
    assert stats["sessions"] == stats["steps"] == len(raw)
    got = stats["context_tokens"]
    assert isinstance(got, dict)
    assert {k: got[k] for k in ("p50", "p90", "p99", "max")} == summary(contexts)


def test_azure_bad_rows(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:03.9799600,4808,10\n"
        "2023-11-16 18:17:04.0319600,3180\n"
        "2023-11-16 18:17:05.0000000,many,8\n"
        "2023-11-16 18:17:06.0000000,100,-1\n"
        "yesterday,100,1\n"
        "2023-11-16 18:17:07.0000000,120,3\n",
        encoding="utf-8",
    )
    bad: list[BadRow] = []
    records = list(read_records([path], bad_rows=bad))
    assert [r.prompt_tokens for r in records] == [4808, 120]
    assert [(b.line, b.reason.split(":")[0]) for b in bad] == [
        (3, "expected 3 columns, got 2"),
        (4, "'ContextTokens' must be a whole number, got 'many'"),
        (5, "'GeneratedTokens' must be at least 0, got -1"),
        (6, "'TIMESTAMP' must be an ISO-8601 time, got 'yesterday'"),
    ]
    with pytest.raises(TraceError, match=r"azure\.csv:3: expected 3 columns"):
        list(read_records([path], strict=True))


def test_azure_wrong_header_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "other.csv"
    path.write_text("a,b,c\n1,2,3\n", encoding="utf-8")
    with pytest.raises(TraceError, match=r"other\.csv:1: not an Azure LLM trace header"):
        list(read_records([path], fmt="azure"))


def test_a_clock_that_goes_back_is_a_bad_row(tmp_path: Path) -> None:
    early = [
        {"event_type": "user_message", "timestamp": "2026-06-01T05:39:00.000Z"},
        {"event_type": "text", "timestamp": "2026-06-01T05:39:00.500Z"},
    ]
    lines = [json.dumps(_row("s", 0)), json.dumps(_row("s", 1, timing_events=early)), json.dumps(_row("s", 2))]
    path = tmp_path / "rounds.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    bad: list[BadRow] = []
    records = list(read_records([path], fmt="tracelab", bad_rows=bad))
    assert [r.step for r in records] == [0, 1]  # round 2 follows round 0
    assert [b.line for b in bad] == [2] and "must not go back in time" in bad[0].reason
