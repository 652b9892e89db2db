"""Several ``--record`` files of one recording (gateway replicas sharing ``--state redis``, each writing the rows of
the steps it made writable): ``--sessions-span-files`` merges kvbudget-format files by session and step, with the
one-file rules (steps increase, never back in time), bounded, and with one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.errors import TraceError
from kvbudget.workload.record import BadRow
from kvbudget.workload.traces import kvbudget_jsonl, read_records
from tests.helpers import run_cli


def _row(session: str, step: int, start: float, prompt: int, output: int = 5, **extra: object) -> dict[str, object]:
    return {"session": session, "step": step, "start_s": start, "prompt_tokens": prompt, "output_tokens": output,
            **extra}  # fmt: skip


# session "a" alternates between the replicas; "b" is all on the second; rows in each file in the order written
ONE = [_row("a", 0, 10.0, 100, pause_s=0), _row("a", 2, 12.0, 300, pause_s=1.5), _row("a", 3, 20.0, 400)]
TWO = [_row("b", 0, 11.0, 50, pause_s=2.0), _row("a", 1, 10.5, 200, pause_s=0), _row("b", 1, 15.0, 80)]


def _write(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_the_files_of_one_recording_read_as_the_union_in_step_order(tmp_path: Path) -> None:
    one, two = _write(tmp_path / "one.jsonl", ONE), _write(tmp_path / "two.jsonl", TWO)
    bad: list[BadRow] = []
    records = list(read_records([one, two], span_files=True, bad_rows=bad))
    assert not bad
    assert [(r.session, r.step, r.prompt_tokens) for r in records] == [
        ("a", 0, 100), ("a", 1, 200), ("a", 2, 300), ("a", 3, 400), ("b", 0, 50), ("b", 1, 80)]  # fmt: skip
    # the same statistics as one file holding the union in order
    union = _write(tmp_path / "union.jsonl", sorted(ONE + TWO, key=lambda r: (str(r["session"]), int(str(r["step"])))))
    merged = _stats(tmp_path, "trace", "stats", str(one), str(two), "--sessions-span-files")
    assert merged == _stats(tmp_path, "trace", "stats", str(union))
    assert merged["sessions"] == 2 and merged["steps"] == 6 and merged["bad_rows"] == 0


def _stats(tmp_path: Path, *argv: str) -> dict[str, object]:
    import contextlib
    import io

    from kvbudget.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*argv, "--json"]) == 0
    data: dict[str, object] = json.loads(out.getvalue())
    data.pop("files", None)
    data.pop("sources", None)
    return data


def test_a_step_in_two_files_is_a_bad_row_naming_both(tmp_path: Path) -> None:
    one = _write(tmp_path / "one.jsonl", ONE)
    two = _write(tmp_path / "two.jsonl", [*TWO, _row("a", 2, 12.5, 310)])  # two replicas numbered step 2 alike
    bad: list[BadRow] = []
    records = list(read_records([one, two], span_files=True, bad_rows=bad))
    assert [(r.session, r.step) for r in records if r.session == "a"] == [("a", 0), ("a", 1), ("a", 2), ("a", 3)]
    assert [(b.path, b.line) for b in bad] == [(str(two), 4)]
    assert f"step 2 of session a is also at {one}:2" in bad[0].reason
    with pytest.raises(TraceError, match="steps of a session must increase"):
        list(read_records([one, two], span_files=True, strict=True))


def test_a_step_that_goes_back_in_time_across_the_files_is_a_bad_row(tmp_path: Path) -> None:
    one = _write(tmp_path / "one.jsonl", ONE)
    two = _write(tmp_path / "two.jsonl", [_row("a", 1, 9.0, 200)])  # step 1 before step 0's start
    bad: list[BadRow] = []
    assert [r.step for r in read_records([one, two], span_files=True, bad_rows=bad)] == [0, 2, 3]
    assert len(bad) == 1 and bad[0].line == 1 and "must not go back in time" in bad[0].reason


def test_merging_holds_at_most_the_limit_of_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kvbudget_jsonl, "MERGE_LIMIT", 4)
    one, two = _write(tmp_path / "one.jsonl", ONE), _write(tmp_path / "two.jsonl", TWO)
    with pytest.raises(TraceError, match="more than 4 rows") as caught:
        list(read_records([one, two], span_files=True))
    assert "\n" not in str(caught.value)


def test_the_cli_says_why_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = _write(tmp_path / "one.jsonl", ONE)
    two = _write(tmp_path / "two.jsonl", [*TWO, _row("a", 2, 12.5, 310)])
    code, out, err = run_cli(capsys, "trace", "stats", str(one), str(two), "--sessions-span-files", "--strict")
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and "is also at" in err
