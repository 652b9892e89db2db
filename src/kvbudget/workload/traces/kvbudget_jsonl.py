"""kvbudget's own per-step JSONL: one ``StepRecord.to_json()`` object per line (spec: docs/traces.md).

It is what ``kvbudget trace convert`` writes, so reading a converted file gives the same records.
Required: ``session`` (text), ``step`` (whole >= 0, increasing within a session), ``start_s``
(seconds), ``prompt_tokens`` and ``output_tokens`` (whole >= 0). Optional: ``parent``,
``new_tokens`` (whole, negative after a compaction), ``cached_tokens`` (0..prompt_tokens), ``pause_s``
(seconds >= 0), ``block_hashes`` (integers) with ``block_size`` (whole >= 1). Other keys are
ignored, so later versions can add fields.

Several files of one recording (the ``--record`` files of several ``kvbudget gateway`` replicas sharing
``--state redis``: a session's steps may be written by any replica) are read together by ``merged``: every row
of every file, a session's steps put in step order across the files, then the same checks as one file's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from kvbudget.errors import TraceError
from kvbudget.workload.record import BadRow, StepRecord
from kvbudget.workload.traces._common import (
    BadSink,
    RowError,
    as_whole,
    bool_free,
    check_not_earlier,
    hashes,
    json_lines,
    number,
    optional_number,
    optional_whole,
    text,
    whole,
)

MERGE_LIMIT = 2_000_000  # rows held in memory by ``merged`` (525 bytes each, measured: docs/traces.md)


def read(path: Path, bad: BadSink) -> Iterator[StepRecord]:
    source = f"kvbudget:{path.name}"
    last_step: dict[str, tuple[int, float]] = {}  # per session: memory grows with sessions, not steps
    for line, row, raw in json_lines(path, bad):
        try:
            record = _record(row, source, bools=not bool_free(raw))
            before = last_step.get(record.session)
            if before is not None and record.step <= before[0]:
                raise RowError(
                    f"step {record.step} of session {record.session} comes after step {before[0]}; "
                    "steps of a session must increase"
                )
            if before is not None:
                check_not_earlier(record.start_s, before[1], record.session)
        except RowError as exc:
            bad(BadRow(str(path), line, str(exc)))
            continue
        last_step[record.session] = (record.step, record.start_s)
        yield record


def merged(paths: Sequence[Path], bad: BadSink) -> Iterator[StepRecord]:
    """The rows of ``paths`` (parts of one recording) with each session's steps in step order across the files,
    checked as one file's are: a session's steps increase (a step number in two files is a bad row, naming both)
    and never go back in time. Every row is held in memory to order them (at most ``MERGE_LIMIT``)."""
    rows: list[tuple[str, int, int, str, int, StepRecord]] = []  # session, step, file, path, line, record
    for index, path in enumerate(paths):
        source = f"kvbudget:{path.name}"
        for line, row, raw in json_lines(path, bad):
            try:
                record = _record(row, source, bools=not bool_free(raw))
            except RowError as exc:
                bad(BadRow(str(path), line, str(exc)))
                continue
            rows.append((record.session, record.step, index, str(path), line, record))
            if len(rows) > MERGE_LIMIT:
                raise TraceError(
                    f"{path}: more than {MERGE_LIMIT:,} rows in the files of one recording (--sessions-span-files "
                    "holds them all to order each session's steps); give fewer files, or one time span of them"
                )
    rows.sort(key=lambda item: item[:3])  # by session, step, then the order the files were given
    last: tuple[str, int, float, str, int] | None = None  # the previous row's session, step, start, file, line
    for session, step, _, where, line, record in rows:
        try:
            if last is not None and last[0] == session:
                if step == last[1]:
                    raise RowError(
                        f"step {step} of session {session} is also at {last[3]}:{last[4]}; steps of a session must "
                        "increase (are these files of one recording?)"
                    )
                check_not_earlier(record.start_s, last[2], session)
        except RowError as exc:
            bad(BadRow(where, line, str(exc)))
            continue
        last = (session, step, record.start_s, where, line)
        yield record


def _record(row: dict[str, object], source: str, *, bools: bool) -> StepRecord:
    prompt = whole(row, "prompt_tokens")
    cached = optional_whole(row, "cached_tokens")
    if cached is not None and cached > prompt:
        raise RowError(f"'cached_tokens' {cached} exceeds 'prompt_tokens' {prompt}")
    blocks = hashes(row, "block_hashes", bools=bools)
    block_size = None
    if blocks:
        if row.get("block_size") is None:
            raise RowError("'block_hashes' needs 'block_size' (tokens per block)")
        block_size = as_whole(row["block_size"], "block_size", minimum=1)
    parent = None if row.get("parent") is None else text(row, "parent")
    system, tool = optional_whole(row, "system_prompt_tokens"), optional_whole(row, "tool_catalog_tokens")
    if (system is None) != (tool is None):
        raise RowError("'system_prompt_tokens' and 'tool_catalog_tokens' go together (the declared shared prefix)")
    return StepRecord(
        session=text(row, "session"),
        step=whole(row, "step"),
        start_s=number(row, "start_s", minimum=None),
        prompt_tokens=prompt,
        output_tokens=whole(row, "output_tokens"),
        parent=parent,
        new_tokens=optional_whole(row, "new_tokens", minimum=None),
        cached_tokens=cached,
        pause_s=optional_number(row, "pause_s"),
        block_hashes=blocks,
        block_size=block_size,
        source=source,
        declared_prefix=None if system is None or tool is None else (system, tool),
    )
