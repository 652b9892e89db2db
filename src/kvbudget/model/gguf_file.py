"""A GGUF file's header, read without the ``gguf`` package: metadata and the tensor table, nothing else.

GGUF v2/v3 (ggml's gguf.h; little- or big-endian): magic ``GGUF``, version, tensor count, key/value count, the
key/value pairs, then per tensor its name, dims, ggml type and offset into the data section, which starts at
the next multiple of ``general.alignment`` (32). Reading is bounded by the file: every declared count and
length is checked against the bytes left before anything is allocated, so a 400-byte file that declares a
2^40-element array is an error at once, not a loop. The tokenizer's arrays (``tokenizer.*``, 150K strings in a
real model) are stepped over, never turned into Python objects. A tensor of a known ggml type must end inside
the file (a truncated download is refused).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from kvbudget.errors import ConfigError, SourceError
from kvbudget.safeio import regular_file

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 8
# ggml_type -> (name, elements per block, bytes per block): ggml.c type_traits (checked against the gguf package's
# GGML_QUANT_SIZES in tests/model/test_gguf_file.py)
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36),
    41: ("Q1_0", 128, 18),
}
# gguf value types: fixed-size scalars (struct code), 8 = string, 9 = array
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9
Value = int | float | bool | str | list[object]


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]
    type_id: int
    offset: int  # from the start of the data section

    @property
    def type_name(self) -> str:
        return GGML_TYPES.get(self.type_id, (f"type {self.type_id}", 0, 0))[0]

    @property
    def n_bytes(self) -> int | None:
        """Bytes of the tensor's data, or None for a ggml type kvbudget does not know."""
        known = GGML_TYPES.get(self.type_id)
        if known is None:
            return None
        _, block, size = known
        elems = 1
        for d in self.dims:
            elems *= d
        return elems // block * size


@dataclass(frozen=True)
class GgufFile:
    path: Path
    version: int
    metadata: dict[str, Value]  # every key but the tokenizer's
    tensors: tuple[TensorInfo, ...]
    data_start: int
    size: int


class _Truncated(Exception):
    pass


class _Cursor:
    def __init__(self, buf: mmap.mmap | bytes, endian: str) -> None:
        self.buf, self.pos, self.endian = buf, 0, endian

    def left(self) -> int:
        return len(self.buf) - self.pos

    def take(self, code: str) -> int | float | bool:
        fmt = self.endian + code
        n = struct.calcsize(fmt)
        if self.left() < n:
            raise _Truncated(f"a {n}-byte value at byte {self.pos:,}")
        value: int | float | bool = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += n
        return value

    def count(self, what: str, unit: int) -> int:
        """A declared count whose items take at least ``unit`` bytes each: never more than the bytes left allow."""
        n = int(self.take("Q"))
        if n * unit > self.left():
            raise _Truncated(f"{what} declares {n:,} items but only {self.left():,} bytes are left")
        return n

    def string(self) -> str:
        n = self.count("a string", 1)
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        n = self.count("a string", 1)  # read the length first: it moves the cursor
        self.pos += n


def _value(cur: _Cursor, kind: int, keep: bool) -> Value | None:
    if kind in _SCALARS:
        return cur.take(_SCALARS[kind])
    if kind == STRING:
        if keep:
            return cur.string()
        cur.skip_string()
        return None
    if kind != ARRAY:
        raise ValueError(f"unknown value type {kind} at byte {cur.pos:,}")
    inner = int(cur.take("I"))
    if inner in _SCALARS:
        size = struct.calcsize(_SCALARS[inner])
        n = cur.count("an array", size)
        if not keep:
            cur.pos += n * size
            return None
        fmt = f"{cur.endian}{n}{_SCALARS[inner]}"
        values = list(struct.unpack_from(fmt, cur.buf, cur.pos))
        cur.pos += n * size
        return values
    n = cur.count("an array", 8 if inner == STRING else 12)
    out: list[object] = []
    for _ in range(n):
        item = _value(cur, inner, keep)
        if keep:
            out.append(item)
    return out if keep else None


def read_gguf_file(path: Path) -> GgufFile:
    """The header of the GGUF at ``path``; a damaged or cut-short file is one ConfigError line."""
    regular_file(path, "GGUF file")
    size = path.stat().st_size
    try:
        with path.open("rb") as f:
            if size < 24:
                raise ConfigError(
                    f"{path}: {size:,} bytes is too short for a GGUF header; re-download or re-convert it"
                )
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _parse(path, buf, size)
    except (PermissionError, FileNotFoundError) as exc:
        raise SourceError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except (_Truncated, ValueError, struct.error, OverflowError) as exc:
        raise ConfigError(
            f"{path}: not a complete GGUF file: {size:,} bytes, cut short or damaged ({exc}); re-download or "
            "re-convert it"
        ) from None


def _parse(path: Path, buf: mmap.mmap, size: int) -> GgufFile:
    if bytes(buf[:4]) != MAGIC:
        raise ConfigError(f"{path}: not a GGUF file (no GGUF magic); give a .gguf model file")
    endian = "<"
    version = struct.unpack_from("<I", buf, 4)[0]
    if version > 0xFFFF:  # a big-endian file: its version reads as a huge little-endian number
        endian, version = ">", struct.unpack_from(">I", buf, 4)[0]
    if version not in (2, 3):
        raise ConfigError(f"{path}: GGUF version {version} is not one kvbudget reads (2, 3); re-convert the model")
    cur = _Cursor(buf, endian)
    cur.pos = 8
    n_tensors = cur.count("the tensor table", 24)
    n_kv = cur.count("the metadata", 12)
    metadata: dict[str, Value] = {}
    for _ in range(n_kv):
        key = cur.string()
        kind = int(cur.take("I"))
        keep = not key.startswith("tokenizer.")
        value = _value(cur, kind, keep)
        if keep and value is not None:
            metadata[key] = value
    tensors = []
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = int(cur.take("I"))
        if n_dims > MAX_DIMS:
            raise ValueError(f"tensor {name!r} declares {n_dims} dimensions")
        dims = tuple(int(cur.take("Q")) for _ in range(n_dims))
        type_id, offset = int(cur.take("I")), int(cur.take("Q"))
        tensors.append(TensorInfo(name, dims, type_id, offset))
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0:
        raise ValueError(f"general.alignment {alignment!r} is not a positive integer")
    data_start = -(-cur.pos // alignment) * alignment
    for t in tensors:
        n = t.n_bytes
        end = data_start + t.offset + (n or 0)
        if end > size:
            raise _Truncated(f"tensor {t.name!r} ends at byte {end:,} but the file has {size:,} bytes")
    return GgufFile(path, version, metadata, tuple(tensors), data_start, size)
