"""Azure LLM inference traces (Azure/AzurePublicDataset, 2023 and 2024): CSV with a header.

Columns (data/AzureLLMInferenceTrace_*.csv; tests/data/traces/README.md): ``TIMESTAMP`` (a local
date-time with 7 fractional digits, e.g. ``2023-11-16 18:17:03.9799600``, read as UTC),
``ContextTokens`` (the whole prompt), ``GeneratedTokens``. The columns are matched by name, in any
order and any letter case. There is no session id and no prefix hash: every row is its own
one-step session ``<file>:<line>`` starting at its timestamp (seconds since the Unix epoch).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from kvbudget.errors import TraceError
from kvbudget.workload.record import BadRow, StepRecord
from kvbudget.workload.traces._common import BadSink, RowError, as_whole, open_text, parse_time

COLUMNS = ("timestamp", "contexttokens", "generatedtokens")


def read(path: Path, bad: BadSink) -> Iterator[StepRecord]:
    source = f"azure:{path.name}"
    with open_text(path) as f:
        reader = csv.reader(f)
        rows = _checked(reader, path)
        header = next(rows, None)
        names = [cell.strip().lower() for cell in header or []]
        missing = [c for c in COLUMNS if c not in names]
        if missing:
            raise TraceError(
                f"{path}:1: not an Azure LLM trace header: need TIMESTAMP, ContextTokens, GeneratedTokens "
                f"(missing {', '.join(missing)})"
            )
        at = {c: names.index(c) for c in COLUMNS}
        for cells in rows:
            line = reader.line_num
            if not any(cell.strip() for cell in cells):
                continue
            try:
                if len(cells) != len(names):
                    raise RowError(f"expected {len(names)} columns, got {len(cells)}")
                start = parse_time(cells[at["timestamp"]], "TIMESTAMP")
                prompt = _count(cells[at["contexttokens"]], "ContextTokens")
                output = _count(cells[at["generatedtokens"]], "GeneratedTokens")
            except RowError as exc:
                bad(BadRow(str(path), line, str(exc)))
                continue
            yield StepRecord(
                session=f"{path.name}:{line}",
                step=0,
                start_s=start,
                prompt_tokens=prompt,
                output_tokens=output,
                new_tokens=prompt,
                source=source,
            )


def _checked(reader: Iterator[list[str]], path: Path) -> Iterator[list[str]]:
    """Rows of the csv reader; a row the csv module cannot split (a field over its 128 KiB limit, a NUL
    byte) stops the file with one line naming it: what follows such a row cannot be trusted."""
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            line = getattr(reader, "line_num", 0)
            raise TraceError(f"{path}:{line}: not a CSV row ({exc}); this is not an Azure LLM trace") from None
        yield cells


def _count(cell: str, key: str) -> int:
    try:
        value: object = int(cell.strip())
    except ValueError:
        try:
            value = float(cell.strip())
        except ValueError:
            value = cell
    return as_whole(value, key)
