"""One safe way in and out for every file kvbudget reads or writes.

Reading: only regular files (a FIFO, ``/dev/zero``, a socket or a directory is refused before a byte
is read, so nothing hangs or grows without bound), a size limit, UTF-8 with or without a BOM (other
encodings are refused with the offset of the first bad byte), and JSON without NaN, Infinity,
out-of-range floats, integers of more than 40 digits or nesting deeper than Python can follow.

Writing (``AtomicWriter``): the target is validated before the work starts (its folder exists, it is
not a device or other non-regular file, it is not one of the command's inputs); the text goes to a
temporary file in the same folder, is flushed to disk and renamed over the target, so a full disk or
an interrupted run never leaves a half-written file; the new file gets ordinary permissions (0666
less the umask), not the 0600 of a temporary file.

Every problem is an InputError of one line naming the file and what to do.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from kvbudget.errors import InputError

MiB = 2**20
CONFIG_LIMIT = 64 * MiB  # a config.json, workload file or JSON header is kilobytes; refuse what is not one
MAX_INT_DIGITS = 40  # no count kvbudget reads needs more; a 5,000-digit integer is an attack, not a config


def regular_file(path: str | Path, what: str) -> Path:
    """``path`` if it is a regular file; InputError saying what it is otherwise."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise InputError(f"{path}: no such file ({what})") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    if stat.S_ISDIR(mode):
        raise InputError(f"{path}: is a directory; give the {what} file itself")
    if not stat.S_ISREG(mode):
        kind = (
            "a FIFO"
            if stat.S_ISFIFO(mode)
            else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else ("a socket" if stat.S_ISSOCK(mode) else "not a regular file")
        )
        raise InputError(f"{path}: is {kind}, not a regular file; save the {what} to a file and give that")
    return p


def read_text(path: str | Path, what: str, *, limit: int = CONFIG_LIMIT) -> str:
    """A whole UTF-8 text file (a leading BOM dropped), refused past ``limit`` bytes."""
    p = regular_file(path, what)
    try:
        with p.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise InputError(f"{path}: larger than {limit // MiB} MiB; that is not a {what}")
    return decode(data, str(path), what)


def decode(data: bytes, where: str, what: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{where}: the {what} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "save it as UTF-8"
        ) from None


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number kvbudget accepts")


def _float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is out of range for a number")
    return value


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text.lstrip('-')):,} digits is out of range")
    return int(text)


def loads_json(text: str, where: str, what: str) -> Any:
    """JSON with the limits above; InputError naming the line and column of the problem."""
    try:
        return json.loads(text, parse_constant=_constant, parse_float=_float, parse_int=_int)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{where}: the {what} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise InputError(f"{where}: the {what} nests deeper than kvbudget reads; it is not a {what}") from None
    except ValueError as exc:
        raise InputError(f"{where}: the {what} is not valid JSON: {exc}") from None


def read_json(path: str | Path, what: str, *, limit: int = CONFIG_LIMIT) -> Any:
    return loads_json(read_text(path, what, limit=limit), str(path), what)


class AtomicWriter:
    """Validate an output path now, write it atomically later (``write(text)``)."""

    def __init__(self, path: str | Path, option: str, inputs: Iterable[str | Path] = ()) -> None:
        self.path = Path(path)
        self.option = option
        target = self.path
        try:
            st = target.stat()
        except FileNotFoundError:
            st = None
        except OSError as exc:
            raise InputError(f"{option} {path}: cannot write there ({exc.strerror or exc})") from None
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise InputError(f"{option} {path}: exists and is not a regular file; give a file path")
        folder = target.parent if str(target.parent) else Path()
        if not folder.is_dir():
            raise InputError(f"{option} {path}: the folder {folder} does not exist")
        if not os.access(folder, os.W_OK):
            raise InputError(f"{option} {path}: the folder {folder} is not writable")
        resolved = target.resolve()
        for item in inputs:
            if Path(item).resolve() == resolved:
                raise InputError(f"{option} {path} is one of the input files; write to another file")

    def open(self) -> tuple[IO[str], Path]:
        """A text file to write into, and its temporary path; ``commit`` or ``discard`` it."""
        try:
            handle, temp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent or ".")
        except OSError as exc:
            raise InputError(f"{self.option} {self.path}: cannot write there ({exc.strerror or exc})") from None
        return os.fdopen(handle, "w", encoding="utf-8", newline="\n"), Path(temp)

    def commit(self, f: IO[str], temp: Path) -> None:
        try:
            f.flush()
            os.fsync(f.fileno())
            f.close()
            umask = os.umask(0)
            os.umask(umask)
            temp.chmod(0o666 & ~umask)
            temp.replace(self.path)
        except OSError as exc:
            self.discard(f, temp)
            raise InputError(f"{self.option} {self.path}: cannot write ({exc.strerror or exc})") from None

    @staticmethod
    def discard(f: IO[str], temp: Path) -> None:
        with contextlib.suppress(OSError):
            f.close()
        temp.unlink(missing_ok=True)

    @contextlib.contextmanager
    def stream(self) -> Iterator[IO[str]]:
        """A text file to write into; renamed over the target when the block ends, removed if it fails."""
        f, temp = self.open()
        try:
            yield f
        except OSError as exc:
            self.discard(f, temp)
            raise InputError(f"{self.option} {self.path}: cannot write ({exc.strerror or exc})") from None
        except BaseException:
            self.discard(f, temp)
            raise
        self.commit(f, temp)

    def write(self, text: str) -> None:
        with self.stream() as f:
            f.write(text)
