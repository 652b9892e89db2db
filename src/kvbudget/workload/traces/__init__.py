"""Trace readers: one module per format, each streaming ``StepRecord``s (kvbudget.workload.record).

``read_records(paths)`` reads every file with its named or detected format and yields records as it
goes (a JSON-document format is parsed whole, its records still stream out). A row a reader cannot
use is a ``BadRow`` with file and line: appended to ``bad_rows`` and skipped, or, under
``strict=True``, raised as ``TraceError`` (``file:line: reason``). Every row is a record or a bad
row. Without a ``bad_rows`` list to report them in, a bad row raises as under ``strict``: nothing is
ever dropped unseen.

The format rules and field mapping of each format are in its module's docstring and in
docs/traces.md. Readers yield the steps of one session in step order; sessions may interleave.
"""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from kvbudget.errors import TraceError
from kvbudget.workload.record import BadRow, StepRecord

FORMATS = ("weka", "mooncake", "tracelab", "azure", "otel", "kvbudget")

_MODULES = {
    "weka": "weka",
    "mooncake": "mooncake",
    "tracelab": "tracelab",
    "azure": "azure",
    "otel": "otel",
    "kvbudget": "kvbudget_jsonl",
}

Reader = Callable[[Path, Callable[[BadRow], None]], Iterator[StepRecord]]


def _by_keys(row: dict[str, object]) -> str | None:
    """The format a whole JSON object (one JSONL line, or a one-line document) belongs to."""
    if "requests" in row:
        return "weka"
    if "spans" in row or "resourceSpans" in row:
        return "otel"
    if "session" in row and "prompt_tokens" in row:
        return "kvbudget"
    if "round_index" in row or "input_tokens_total" in row:
        return "tracelab"
    if "input_length" in row:
        return "mooncake"
    return None


HEAD = 65536  # characters read to detect a format


def detect_format(path: str | Path) -> str:
    """The format of a trace file, from its content (the first 64 KiB). Raises TraceError when unknown."""
    from kvbudget.workload.traces._common import loads, read_head

    where = Path(path)
    if where.is_dir():
        raise TraceError(f"{path}: is a directory; give the trace files themselves")
    raw = read_head(where, HEAD)
    head = raw.lstrip("\ufeff \t\r\n")
    if not head:
        raise TraceError(f"{path}: the file is empty; there is no trace to read")
    if head[0] in "{[":
        parts = head.split("\n", 5) if "\n" in head else [head]  # a one-line head: no split to scan it again
        lines = parts[:5]
        if len(raw) == HEAD and len(parts) <= 5:  # the head's last line is among the first 5
            lines.pop()  # cut off by the head's end: not JSON, and parsing it to fail costs as much as a row
        for line in lines:  # JSONL (or a small one-line document): the first whole lines decide
            try:
                row = loads(line)
            except ValueError:
                continue
            found = _by_keys(row) if isinstance(row, dict) else None
            if found:
                return found
        # one JSON document, larger than the head: look at its keys
        spans = '"span' in head and any(key in head for key in ('"spans"', '"span_id"', '"spanId"'))  # one scan if none
        if '"resourceSpans"' in head or spans:
            return "otel"
        if '"requests"' in head and any(key in head for key in ('"hash_ids"', '"block_size"', '"in"')):
            return "weka"
        # JSONL whose first line is longer than the head
        if '"session"' in head and '"prompt_tokens"' in head:
            return "kvbudget"
        if '"round_index"' in head or '"input_tokens_total"' in head:
            return "tracelab"
        if '"input_length"' in head:
            return "mooncake"
    else:
        header = head.split("\n", 1)[0].lower()
        if "contexttokens" in header and "generatedtokens" in header:
            return "azure"
    raise TraceError(
        f"{path}: cannot tell the trace format from its content; name it with --format ({', '.join(FORMATS)})"
    )


def reader(fmt: str) -> Reader:
    """The ``read(path, bad)`` function of a format (imported on first use)."""
    if fmt not in _MODULES:
        raise TraceError(f"unknown trace format {fmt!r}; use one of {', '.join(FORMATS)}")
    module = importlib.import_module(f"kvbudget.workload.traces.{_MODULES[fmt]}")
    read: Reader = module.read
    return read


def read_records(
    paths: Sequence[str | Path],
    *,
    fmt: str | None = None,
    strict: bool = False,
    bad_rows: list[BadRow] | None = None,
    span_files: bool = False,
) -> Iterator[StepRecord]:
    """Stream the records of every file, in the order given.

    Formats are checked (or detected) for every file before the first record, so an unknown format
    fails at once. ``bad_rows`` collects each unusable row with file and line; ``strict`` (or no
    ``bad_rows`` list) raises TraceError at the first one instead.

    A session belongs to its file: with several files, session ids are prefixed with the file's name
    (its path when two names are alike), so equal ids in two files are two sessions, never one with
    invented growth. ``span_files`` says the files are parts of one trace whose sessions continue
    across them; when they are all kvbudget's own format (the ``--record`` files of several gateway replicas,
    whose rows of one session interleave across the files), each session's steps are merged in step order
    (kvbudget_jsonl.merged), and an empty part is skipped. The same file given twice is refused.
    """
    if not paths:
        raise TraceError("no trace files given")
    seen: dict[Path, str] = {}
    for p in paths:
        key = Path(p).resolve()
        if key in seen:
            raise TraceError(f"{p}: given twice (also as {seen[key]}); each trace file is read once")
        seen[key] = str(p)
    if span_files and len(paths) > 1:  # a part with no rows (a gateway replica that wrote none) is no trace format
        paths = [p for p in paths if not _empty(p)] or list(paths[:1])
    plan = [(Path(p), reader(fmt) if fmt is not None else reader(detect_format(p))) for p in paths]

    def sink(bad: BadRow) -> None:
        if strict or bad_rows is None:
            raise TraceError(str(bad))
        bad_rows.append(bad)

    if span_files and len(plan) > 1 and all(read is reader("kvbudget") for _, read in plan):
        from kvbudget.workload.traces import kvbudget_jsonl

        return _guarded(kvbudget_jsonl.merged([path for path, _ in plan], sink), plan[0][0])
    names = Counter(path.name for path, _ in plan)
    labels = (
        None
        if span_files or len(plan) == 1
        else [path.name if names[path.name] == 1 else str(path) for path, _ in plan]
    )
    return _stream(plan, sink, labels, keep_final=not span_files or len(plan) == 1)


def relabel(r: StepRecord, label: str) -> StepRecord:
    """The record with its session (and parent) prefixed ``label/``; built directly and positionally
    (in field order), as ``dataclasses.replace`` costs five times as much per record and a keyword
    call 2.5 times."""
    return StepRecord(
        f"{label}/{r.session}",
        r.step,
        r.start_s,
        r.prompt_tokens,
        r.output_tokens,
        None if r.parent is None else f"{label}/{r.parent}",
        r.new_tokens,
        r.cached_tokens,
        r.pause_s,
        r.block_hashes,
        r.block_size,
        r.source,
        r.final,
        r.shared_blocks,
        r.declared_prefix,
    )


def _empty(path: str | Path) -> bool:
    try:
        return Path(path).is_file() and Path(path).stat().st_size == 0
    except OSError:
        return False


def _guarded(records: Iterator[StepRecord], first: Path) -> Iterator[StepRecord]:
    """``records`` with a file that cannot be read reported in one line, as ``_stream`` does."""
    try:
        yield from records
    except UnicodeDecodeError:
        raise TraceError(f"{first} (or a file after it): not UTF-8 text; is this a trace file?") from None
    except (OSError, EOFError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise TraceError(f"{getattr(exc, 'filename', None) or first}: cannot read: {reason}") from None


def _stream(
    plan: list[tuple[Path, Reader]], sink: Callable[[BadRow], None], labels: list[str] | None, keep_final: bool
) -> Iterator[StepRecord]:
    for index, (path, read) in enumerate(plan):
        try:
            if labels is None:
                if keep_final:
                    yield from read(path, sink)
                else:  # parts of one trace: a session's last step in one file may continue in the next
                    for record in read(path, sink):
                        yield replace(record, final=False) if record.final else record
                continue
            label = labels[index]
            for record in read(path, sink):
                yield relabel(record, label)
        except UnicodeDecodeError:
            raise TraceError(f"{path}: not UTF-8 text; is this a trace file?") from None
        except (OSError, EOFError) as exc:  # unreadable, or a truncated .gz
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise TraceError(f"{path}: cannot read: {reason}") from None


__all__ = ["FORMATS", "BadRow", "StepRecord", "TraceError", "detect_format", "read_records", "reader"]
