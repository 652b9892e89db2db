"""kvbudget's own JSONL: round trip through `trace convert`, bad rows, and format detection of every
shipped sample."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from kvbudget.errors import TraceError
from kvbudget.workload.record import BadRow, StepRecord
from kvbudget.workload.traces import FORMATS, detect_format, read_records
from tests.helpers import run_cli
from tests.workload.raw_traces import AZURE, MOONCAKE, OTEL, TRACELAB, TRACES, WEKA

ALL = [*WEKA, *MOONCAKE, TRACELAB, *AZURE, *OTEL]
EXPECTED = {
    **dict.fromkeys(WEKA, "weka"),
    **dict.fromkeys(MOONCAKE, "mooncake"),
    TRACELAB: "tracelab",
    **dict.fromkeys(AZURE, "azure"),
    **dict.fromkeys(OTEL, "otel"),
}


def _unsourced(records: list[StepRecord]) -> list[StepRecord]:
    return [dataclasses.replace(r, source="", final=False) for r in records]  # neither is in the JSONL


def test_formats_are_the_published_names() -> None:
    assert FORMATS == ("weka", "mooncake", "tracelab", "azure", "otel", "kvbudget")


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_every_sample_is_detected(path: Path) -> None:
    assert detect_format(path) == EXPECTED[path]


def test_every_data_file_shipped_is_covered() -> None:
    shipped = {p for p in TRACES.rglob("*") if p.suffix in (".json", ".jsonl", ".csv")}
    assert shipped == set(ALL)


def test_round_trip_through_convert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "all.jsonl"
    code, text, err = run_cli(capsys, "trace", "convert", *map(str, ALL), "--out", str(out))
    assert code == 0, err
    skipped: list[BadRow] = []
    original = list(read_records(ALL, bad_rows=skipped))
    assert f"wrote {len(original):,} steps" in text and "12 bad rows skipped" in text
    assert len(skipped) == 12
    assert detect_format(out) == "kvbudget"
    again = list(read_records([out]))
    assert _unsourced(again) == _unsourced(original)
    assert {r.source for r in again} == {"kvbudget:all.jsonl"}


def test_bad_rows_are_never_dropped_unseen() -> None:
    """Without a list to report them in, a bad row raises instead of vanishing from the counts."""
    with pytest.raises(TraceError, match=r"multi_agent_research\.json"):
        list(read_records(ALL))


def test_gzip_files_are_read_transparently(tmp_path: Path) -> None:
    packed = tmp_path / "rounds.jsonl.gz"
    packed.write_bytes(gzip.compress(TRACELAB.read_bytes()))
    assert detect_format(packed) == "tracelab"
    assert _unsourced(list(read_records([packed]))) == _unsourced(list(read_records([TRACELAB])))


def test_kvbudget_bad_rows(tmp_path: Path) -> None:
    good = {"session": "s", "step": 0, "start_s": 0.0, "prompt_tokens": 100, "output_tokens": 5}
    rows = [
        json.dumps(good),
        '{"session": "s", "step": 1,',
        json.dumps({**good, "step": 1, "prompt_tokens": -1}),
        json.dumps({k: v for k, v in good.items() if k != "session"}),
        json.dumps({**good, "step": 0}),  # not after step 0
        json.dumps({**good, "step": 2, "cached_tokens": 101}),
        json.dumps({**good, "step": 3, "block_hashes": [1, 2]}),
        json.dumps({**good, "step": 4, "new_tokens": -40, "pause_s": 1.5, "extra": "ignored"}),
    ]
    path = tmp_path / "steps.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    bad: list[BadRow] = []
    records = list(read_records([path], fmt="kvbudget", bad_rows=bad))
    assert [(r.step, r.new_tokens, r.pause_s) for r in records] == [(0, None, None), (4, -40, 1.5)]
    assert [b.line for b in bad] == [2, 3, 4, 5, 6, 7]
    reasons = [b.reason for b in bad]
    assert "not valid JSON" in reasons[0]
    assert "'prompt_tokens' must be at least 0, got -1" in reasons[1]
    assert "'session' is missing" in reasons[2]
    assert "steps of a session must increase" in reasons[3]
    assert "'cached_tokens' 101 exceeds 'prompt_tokens' 100" in reasons[4]
    assert "needs 'block_size'" in reasons[5]
    with pytest.raises(TraceError, match=r"steps\.jsonl:2: not valid JSON"):
        list(read_records([path], fmt="kvbudget", strict=True))


def test_unknown_empty_missing_and_binary_files(tmp_path: Path) -> None:
    odd = tmp_path / "notes.txt"
    odd.write_text("hello\nworld\n", encoding="utf-8")
    with pytest.raises(TraceError, match=r"notes\.txt: cannot tell the trace format.*--format"):
        read_records([odd])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(TraceError, match="empty"):
        detect_format(empty)
    with pytest.raises(TraceError, match=r"nothere\.json: no such file \(trace\)"):
        read_records([tmp_path / "nothere.json"])
    with pytest.raises(TraceError, match="unknown trace format 'csv'"):
        read_records([odd], fmt="csv")
    binary = tmp_path / "blob.jsonl"
    binary.write_bytes(b'{"session": "\xff\xfe"}\n')
    with pytest.raises(TraceError, match=r"blob\.jsonl: not UTF-8"):
        list(read_records([binary], fmt="kvbudget"))


def test_kvbudget_steps_may_not_start_before_the_previous_one(tmp_path: Path) -> None:
    rows = [
        {"session": "s", "step": 0, "start_s": 10.0, "prompt_tokens": 100, "output_tokens": 5},
        {"session": "s", "step": 1, "start_s": 4.0, "prompt_tokens": 200, "output_tokens": 5},  # the clock went back
        {"session": "s", "step": 2, "start_s": 12.0, "prompt_tokens": 300, "output_tokens": 5},
        {"session": "t", "step": 0, "start_s": 1.0, "prompt_tokens": 100, "output_tokens": 5},  # another session: fine
    ]
    path = tmp_path / "steps.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    bad: list[BadRow] = []
    records = list(read_records([path], fmt="kvbudget", bad_rows=bad))
    assert [(r.session, r.step) for r in records] == [("s", 0), ("s", 2), ("t", 0)]
    assert [b.line for b in bad] == [2] and "must not go back in time" in bad[0].reason
