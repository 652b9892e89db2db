"""Pieces every trace reader shares: opening files, JSON lines, whole JSON documents with line
numbers, field checks with one-line reasons, timestamps, and the one-step-per-session buffer that
fills ``pause_s`` once the next step of a session is seen.

A reader is ``read(path, bad) -> Iterator[StepRecord]``. It yields a record for every usable row and
calls ``bad(BadRow(...))`` for every other row, so nothing is dropped without a report.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from kvbudget.errors import TraceError
from kvbudget.workload.record import BadRow, StepRecord

BadSink = Callable[[BadRow], None]
MAX_COUNT = 2**40  # tokens, steps, ids: no real trace comes near; 2^63 would overflow the statistics
JsonPath = tuple[str | int, ...]


class RowError(Exception):
    """One row cannot be used; the reader reports it as a BadRow with file and line."""


def open_text(path: Path) -> IO[str]:
    """The file as UTF-8 text; gzip-compressed files (TraceLab, Copilot releases) are opened transparently.

    Only regular files: a FIFO or a device would block or never end (kvbudget.safeio)."""
    from kvbudget.errors import InputError
    from kvbudget.safeio import regular_file

    try:
        regular_file(path, "trace")
    except InputError as exc:
        raise TraceError(str(exc)) from None
    try:
        raw = path.open("rb")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        magic = raw.peek(2)[:2]
    except OSError as exc:  # a directory on some systems, a device, ...
        raw.close()
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(io.BufferedReader(_CheckedGzip(path, raw)), encoding="utf-8", newline="")
    return io.TextIOWrapper(raw, encoding="utf-8", newline="")


class _CheckedGzip(io.RawIOBase):
    """A gzip stream whose corruption (truncated, bad CRC, not gzip after all) is one TraceError line."""

    def __init__(self, path: Path, raw: IO[bytes]) -> None:
        self._path, self._raw, self._inner = path, raw, gzip.GzipFile(fileobj=raw)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            return self._inner.readinto(buffer)
        except (EOFError, OSError, zlib.error) as exc:
            raise TraceError(f"{self._path}: a corrupt gzip file ({exc}); decompress it to see what is left") from None

    def close(self) -> None:
        self._inner.close()  # a GzipFile never closes the file object it was given
        self._raw.close()
        super().close()


def loads(text: str) -> object:
    """json.loads whose too-deep nesting is a ValueError like any other malformed JSON."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested deeper than a trace row can be") from None


def read_head(path: Path, size: int = 65536) -> str:
    """The first ``size`` characters (for format sniffing), undecodable bytes replaced.

    The first ``size`` bytes are read at once: when they are ASCII they are those characters (one byte
    each in UTF-8); otherwise the text is read again through the decoder."""
    with open_text(path) as f:
        raw = f.buffer.read(size) if isinstance(f, io.TextIOWrapper) else b"\x80"
    if raw.isascii():
        return raw.decode("ascii")
    with open_text(path) as f:
        if isinstance(f, io.TextIOWrapper):
            f.reconfigure(errors="replace")
        return f.read(size)


_DECODER = json.JSONDecoder()
_DECODE = _DECODER.decode
# the C scanner under decode(): (value, end) of the JSON value at an index (not in typeshed)
_SCAN: Callable[[str, int], tuple[object, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


def json_lines(path: Path, bad: BadSink) -> Iterator[tuple[int, dict[str, object], str]]:
    """(line number, object, the line's text) for each JSON-object line; blank lines are not rows.

    A line that is one JSON value and its newline is scanned by the C scanner alone (what
    ``json.loads`` does under its whitespace checks); any other line goes through ``decode``, so its
    value or its error is exactly ``json.loads``'s."""
    scan, decode = _SCAN, _DECODE
    with open_text(path) as f:
        for number, line in enumerate(f, start=1):
            try:
                try:
                    row, end = scan(line, 0)
                except (StopIteration, ValueError, RecursionError):
                    end = -1
                if end != len(line) - 1 or line[end] != "\n":
                    row = decode(line)
            except RecursionError:
                bad(BadRow(str(path), number, "not valid JSON: nested deeper than a trace row can be"))
                continue
            except ValueError as exc:
                if not line.strip():  # a blank line is not a row
                    continue
                bad(BadRow(str(path), number, f"not valid JSON: {_json_reason(exc)}"))
                continue
            if not isinstance(row, dict):
                bad(BadRow(str(path), number, f"a line must be a JSON object, not {type(row).__name__}"))
                continue
            yield number, row, line


def load_document(path: Path, bad: BadSink) -> tuple[str, object] | None:
    """(text, parsed) of a file that is one JSON document; a malformed or truncated document is one
    bad row (at the line where parsing stopped) and gives None."""
    with open_text(path) as f:
        text = f.read()
    try:
        return text, loads(text)
    except json.JSONDecodeError as exc:
        bad(BadRow(str(path), exc.lineno, f"not valid JSON: {exc.msg} (column {exc.colno}); the document is skipped"))
    except ValueError as exc:
        bad(BadRow(str(path), 1, f"not valid JSON: {exc}; the document is skipped"))
    return None


def _json_reason(exc: ValueError) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} (column {exc.colno})"
    return str(exc)


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def line_of(text: str, where: JsonPath) -> int:
    """The line on which the value at ``where`` (keys and indexes) starts in a JSON document.

    Used only when a row is bad, so the fast C parser does the normal work; this walks the text
    with ``raw_decode`` to skip sibling values. Returns 1 when the path cannot be followed.
    """
    decoder = json.JSONDecoder()
    pos = _skip_ws(text, 0)
    try:
        for key in where:
            pos = _skip_ws(text, pos + 1)  # past '{' or '['
            if isinstance(key, int):
                for _ in range(key):
                    _, pos = decoder.raw_decode(text, pos)
                    pos = _skip_ws(text, _skip_ws(text, pos) + 1)  # past ','
                continue
            while True:
                name, pos = decoder.raw_decode(text, pos)
                pos = _skip_ws(text, _skip_ws(text, pos) + 1)  # past ':'
                if name == key:
                    break
                _, pos = decoder.raw_decode(text, pos)
                pos = _skip_ws(text, _skip_ws(text, pos) + 1)  # past ','
    except (ValueError, IndexError):
        return 1
    return text.count("\n", 0, pos) + 1


def json_path(where: JsonPath) -> str:
    """``requests[3].requests[1]`` for ("requests", 3, "requests", 1)."""
    out = ""
    for key in where:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else key)
    return out


# Field checks. Token counts are whole numbers >= 0 (a JSON 12.0 is accepted as 12); booleans are not numbers.


def _present(row: Mapping[str, object], key: str) -> object:
    if key not in row or row[key] is None:
        raise RowError(f"{key!r} is missing")
    return row[key]


def as_whole(value: object, key: str, *, minimum: int | None = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RowError(f"{key!r} must be a whole number, got {value!r}")
    if isinstance(value, float):
        if not value.is_integer():
            raise RowError(f"{key!r} must be a whole number, got {value!r}")
        value = int(value)
    if minimum is not None and value < minimum:
        raise RowError(f"{key!r} must be at least {minimum}, got {value}")
    if value > MAX_COUNT:
        raise RowError(f"{key!r} is {value:,}, past any real context (at most {MAX_COUNT:,})")
    return value


def whole(row: Mapping[str, object], key: str, *, minimum: int | None = 0) -> int:
    return as_whole(_present(row, key), key, minimum=minimum)


def optional_whole(row: Mapping[str, object], key: str, *, minimum: int | None = 0) -> int | None:
    return None if row.get(key) is None else whole(row, key, minimum=minimum)


def as_number(value: object, key: str, *, minimum: float | None = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RowError(f"{key!r} must be a number, got {value!r}")
    if minimum is not None and value < minimum:
        raise RowError(f"{key!r} must be at least {minimum:g}, got {value:g}")
    return float(value)


def number(row: Mapping[str, object], key: str, *, minimum: float | None = 0.0) -> float:
    return as_number(_present(row, key), key, minimum=minimum)


def optional_number(row: Mapping[str, object], key: str, *, minimum: float | None = 0.0) -> float | None:
    return None if row.get(key) is None else number(row, key, minimum=minimum)


def text(row: Mapping[str, object], key: str) -> str:
    """A non-empty identifier; integers are accepted and turned into text (some exporters write numbers)."""
    value = _present(row, key)
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise RowError(f"{key!r} must be a non-empty string, got {value!r}")
    return str(value)


def hashes(row: Mapping[str, object], key: str = "hash_ids", *, bools: bool = True) -> tuple[int, ...]:
    """A list of integer block hashes; absent or null means none. ``bools=False``: the row's JSON text
    holds no ``true``/``false`` literal (``bool_free``), so the ids are checked in bulk."""
    return tuple(hash_list(row, key, bools=bools))


def hash_list(row: Mapping[str, object], key: str = "hash_ids", *, bools: bool = True) -> list[int]:
    """``hashes`` as the parsed list itself (checked, not copied); empty when absent or null."""
    value = row.get(key)
    if value is None:
        return []
    if type(value) is not list:
        raise RowError(f"{key!r} must be a list of integers, got {type(value).__name__}")
    if not int_list(value, bools=bools):
        for item in value:
            if type(item) is not int:
                raise RowError(f"{key!r} must hold integers, got {item!r}")
    return value


def int_list(value: Sequence[object], *, bools: bool = True) -> bool:
    """Whether every item of a parsed JSON list is an integer (a bool or a float is not).

    With ``bools=False`` (the JSON text was ``bool_free``) one C-level ``sum`` decides: the sum of JSON
    values is an int exactly when they all are (a float makes it a float; a string, null, list or
    object raises TypeError), about 5 ns an id. Otherwise the type of each item is looked at (18 ns)."""
    if bools:
        return INT_ONLY.issuperset(map(type, value))  # one C-level pass; bool and float are other types
    try:
        return type(sum(value)) is int  # type: ignore[arg-type]  # TypeError on a non-number: not an int
    except TypeError:
        return False


def bool_free(text: str) -> bool:
    """Whether a JSON text cannot hold a ``true`` or ``false`` literal (nor so a bool anywhere it parses
    to): one ``memchr`` per letter, the words searched only where their letters occur."""
    return ("r" not in text or "true" not in text) and ("f" not in text or "false" not in text)


INT_ONLY = frozenset((int,))


def parse_time(value: object, key: str) -> float:
    """Seconds since the Unix epoch from an ISO-8601 text (``Z``, any number of fractional digits,
    space or ``T``; no zone means UTC) or a number of seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return as_number(value, key, minimum=None)
    if not isinstance(value, str) or not value.strip():
        raise RowError(f"{key!r} must be an ISO-8601 time, got {value!r}")
    stamp = value.strip().replace("Z", "+00:00").replace("z", "+00:00")
    head, dot, rest = stamp.partition(".")
    if dot:  # Python 3.10 takes at most 6 fractional digits (Azure writes 7: 18:17:03.9799600)
        digits = len(rest) - len(rest.lstrip("0123456789"))
        stamp = head + "." + rest[:digits][:6].ljust(6, "0") + rest[digits:]
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        raise RowError(f"{key!r} must be an ISO-8601 time, got {value!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def check_not_earlier(start: float, previous: float, session: str) -> None:
    """A step of a session may not start before the session's previous step (a clock that went backwards)."""
    if start < previous:
        raise RowError(
            f"step starts at {start:g} s, before the previous step of session {session} ({previous:g} s); "
            "a session's steps must not go back in time"
        )


def gap(later: float, earlier: float) -> float:
    """A pause in seconds: never negative (clock rounding), rounded to a microsecond (float noise)."""
    return round(max(0.0, later - earlier), 6)


@dataclass(frozen=True, slots=True)
class Pending:
    """A session's latest step, held until the next step of that session says how long it paused."""

    record: StepRecord
    end_s: float | None = None  # when the step finished, where the trace says
    fallback_pause: float | None = None  # a pause the row itself states (tool latency), used without end_s
    order: int = 0  # the trace's own ordering key (round index), to refuse rows out of order


class PauseBuffer:
    """One pending step per open session: memory grows with sessions, not with steps."""

    def __init__(self) -> None:
        self._open: dict[str, Pending] = {}

    def last(self, session: str) -> Pending | None:
        return self._open.get(session)

    def push(self, pending: Pending, pause_of_previous: float | None) -> StepRecord | None:
        """Hold ``pending``; return the session's previous step, now with its pause filled in."""
        previous = self._open.get(pending.record.session)
        self._open[pending.record.session] = pending
        if previous is None:
            return None
        return replace(previous.record, pause_s=pause_of_previous)

    def flush(self) -> Iterator[StepRecord]:
        """The last step of every session: nothing follows it, so its pause stays None (and it is final)."""
        for pending in self._open.values():
            yield replace(pending.record, final=True)
        self._open.clear()
