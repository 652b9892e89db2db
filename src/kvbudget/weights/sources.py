"""Exact weight bytes from a checkpoint's own tensor table, without loading any weights.

* safetensors (local): each file starts with an 8-byte little-endian header length and a JSON
  header mapping tensor names to ``dtype``, ``shape`` and ``data_offsets``
  (https://huggingface.co/docs/safetensors/index#format). A tensor's bytes are
  ``end - begin``; where the dtype's width is known they must equal elements x width / 8.
  A sharded checkpoint is read through ``model.safetensors.index.json``.
* the Hub: the same headers, fetched by ``HfApi().get_safetensors_metadata`` (range requests).
* GGUF: the tensor table's ``n_bytes`` per tensor (gguf-py ``GGUFReader``).

A size the user measured (e.g. from the loaded process) overrides every other figure and is
labelled "measured"; a size derived from the config is "computed" (weights.precision).
"""

from __future__ import annotations

import re
import struct
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kvbudget.errors import ConfigError, InputError, MissingExtraError, SourceError
from kvbudget.hub import hub_offline, hub_reachable
from kvbudget.units import counted, parse_memory
from kvbudget.weights.precision import WeightEstimate

Provenance = Literal["exact", "measured", "computed"]

# Bits per element of each safetensors dtype (safetensors Dtype enum, 0.6+).
SAFETENSORS_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64, "C64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}  # fmt: skip
MAX_HEADER = 100_000_000  # the safetensors reference implementation refuses larger headers
MAX_TENSORS = 1_000_000  # tensors in one header (the largest checkpoints hold ~10^5)
MAX_RANK = 16  # dimensions of one tensor
MAX_DIM = 2**48  # one dimension or byte offset
MAX_SHARDS = 100_000  # files an index names


@dataclass(frozen=True)
class WeightSize:
    """Bytes of a model's weights, where the figure came from, and (when read) per-dtype bytes."""

    bytes: int
    provenance: Provenance
    basis: str
    elements: int | None = None
    by_dtype: tuple[tuple[str, int], ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "bytes": self.bytes,
            "provenance": self.provenance,
            "basis": self.basis,
            "elements": self.elements,
            "by_dtype": dict(self.by_dtype),
        }


def measured(size: int | str, *, what: str = "--weights-size") -> WeightSize:
    """A user-given footprint (bytes, or a size like ``42GB``); overrides computed and exact figures."""
    value = _positive_size(size, what) if isinstance(size, str) else size
    if value < 1:
        raise InputError(f"{what}: {size!r} must be a positive size")
    given = f"given as {size} ({value:,} B)" if isinstance(size, str) else f"given ({value:,} B)"
    return WeightSize(value, "measured", f"measured: {given}")


def computed(estimate: WeightEstimate, why: str = "") -> WeightSize:
    """The computed figure of a WeightEstimate as a WeightSize (``why``: where its precision came from)."""
    basis = f"{estimate.basis} ({why})" if why else estimate.basis
    return WeightSize(estimate.total_bytes, "computed", basis, estimate.total_params)


def _positive_size(text: str, what: str) -> int:
    if text.strip().startswith("-"):
        raise InputError(f"{what}: {text!r} is negative; give a positive size such as 42GB")
    return parse_memory(text, what=what)


def _tally(tensors: list[tuple[str, str, list[int], int]], basis: str) -> WeightSize:
    """Sum (name, dtype, shape, bytes) rows into a WeightSize."""
    by_dtype: dict[str, int] = defaultdict(int)
    elements = 0
    for _, dtype, shape, size in tensors:
        by_dtype[dtype] += size
        count = 1
        for dim in shape:
            count *= dim
        elements += count
    total = sum(by_dtype.values())
    return WeightSize(total, "exact", basis, elements, tuple(sorted(by_dtype.items())))


def read_safetensors_header(path: Path) -> list[tuple[str, str, list[int], int]]:
    """(name, dtype, shape, bytes) of every tensor in one .safetensors file, from its header only."""
    from kvbudget.safeio import regular_file

    try:
        regular_file(path, "safetensors file")  # a FIFO or device named as a shard is refused, never opened
    except InputError as exc:
        raise SourceError(str(exc)) from None
    try:
        with path.open("rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise ConfigError(f"{path}: too short to be a safetensors file (no 8-byte header length)")
            (length,) = struct.unpack("<Q", head)
            if length > MAX_HEADER or length > path.stat().st_size - 8:
                raise ConfigError(f"{path}: header length {length:,} is impossible for this file; not safetensors")
            raw = fh.read(length)
    except OSError as exc:
        raise SourceError(f"{path}: cannot read ({exc.strerror or exc})") from None
    header = _header_json(raw, path)
    rows = [_tensor_row(path, name, info) for name, info in header.items() if name != "__metadata__"]
    _check_offsets(path, header, path.stat().st_size - 8 - length)
    return rows


def _header_json(raw: bytes, path: Path) -> dict[str, Any]:
    """The header's JSON: UTF-8, the safeio limits (no NaN, no 40-digit integers, no nesting past two levels
    below a tensor: {name: {dtype, shape, data_offsets}} and ``__metadata__`` of strings)."""
    from kvbudget.safeio import decode, loads_json

    if raw.count(b"[") + raw.count(b"{") > 4 * MAX_TENSORS or _depth(raw) > 3:
        raise ConfigError(f"{path}: the safetensors header nests or repeats past any checkpoint's; the file is damaged")
    try:
        header = loads_json(decode(raw, str(path), "safetensors header"), str(path), "safetensors header")
    except InputError as exc:
        raise ConfigError(f"{exc}; the file is damaged") from None
    if not isinstance(header, dict):
        raise ConfigError(f"{path}: the safetensors header must be a JSON object")
    return header


def _depth(raw: bytes) -> int:
    """How deep the JSON's brackets nest (strings counted too: a bound, not a parse; a real header is 3 deep)."""
    depth = deepest = 0
    for byte in raw.translate(None, delete=bytes(b for b in range(256) if b not in b"[]{}")):
        depth += 1 if byte in b"[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _check_offsets(path: Path, header: dict[str, Any], data_bytes: int) -> None:
    """Every tensor inside the data section and none overlapping: summed sizes are then the file's
    real bytes (safetensors spec: data_offsets are [begin, end) relative to the byte buffer)."""
    spans = sorted(
        (int(info["data_offsets"][0]), int(info["data_offsets"][1]), name)
        for name, info in header.items()
        if name != "__metadata__"
    )
    previous_end, previous = 0, None
    for begin, end, name in spans:
        if end > data_bytes:
            raise ConfigError(
                f"{path}: tensor {name!r} ends at byte {end:,} of a {data_bytes:,}-byte data section; "
                "the file is truncated or damaged"
            )
        if begin < previous_end:
            raise ConfigError(f"{path}: tensors {previous!r} and {name!r} overlap in the header; the file is damaged")
        previous_end, previous = end, name


def _tensor_row(path: Path | str, name: str, info: Any) -> tuple[str, str, list[int], int]:
    try:
        dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"{path}: tensor {name[:80]!r} lacks dtype, shape or data_offsets in the header") from None
    whole = (int,)
    if (
        not isinstance(dtype, str)
        or not isinstance(shape, list)
        or len(shape) > MAX_RANK
        or not all(isinstance(d, whole) and not isinstance(d, bool) and 0 <= d <= MAX_DIM for d in shape)
        or not all(isinstance(o, whole) and not isinstance(o, bool) and 0 <= o <= MAX_DIM for o in (begin, end))
    ):
        raise ConfigError(
            f"{path}: tensor {name[:80]!r} has a dtype, shape (at most {MAX_RANK} dimensions of 0..2^48) or "
            "data_offsets that no checkpoint has; the file is damaged"
        )
    size = end - begin
    count = 1
    for dim in shape:
        count *= dim
    bits = SAFETENSORS_BITS.get(dtype)
    if size < 0 or (bits is not None and (count * bits + 7) // 8 != size):
        raise ConfigError(
            f"{path}: tensor {name!r} ({dtype} {shape}) spans {size:,} bytes in the header; the file is damaged"
        )
    return name, dtype, shape, size


def _plain_name(name: object) -> bool:
    return (
        isinstance(name, str)
        and 0 < len(name) <= 255
        and name not in (".", "..")
        and not any(c in name for c in "/\\")
        and name.isprintable()
    )


def safetensors_files(directory: Path) -> list[Path]:
    """The checkpoint files of a model directory: the index's shards, else every *.safetensors."""
    index = directory / "model.safetensors.index.json"
    if index.exists():
        from kvbudget.safeio import read_json

        try:
            weight_map = read_json(index, "safetensors index")["weight_map"]
            names = sorted(set(weight_map.values()))
        except InputError as exc:
            raise ConfigError(str(exc)) from None
        except (KeyError, TypeError, AttributeError):
            raise ConfigError(f"{index}: not a safetensors index (needs a 'weight_map' object)") from None
        if len(names) > MAX_SHARDS or not all(_plain_name(n) for n in names):
            raise ConfigError(
                f"{index}: the weight_map names {counted(len(names), 'shard')}; each must be a file name in this "
                f"folder (no '/', '..' or control characters), at most {MAX_SHARDS:,}"
            )
        missing = [n for n in names if not (directory / n).is_file()]
        if missing:
            raise SourceError(
                f"{index}: {counted(len(missing), 'shard')} listed but absent, e.g. {missing[0]}; download them"
            )
        return [directory / n for n in names]
    return sorted(directory.glob("*.safetensors"))


def from_safetensors(path: Path) -> WeightSize:
    """Exact bytes of a .safetensors file or of a model directory's safetensors checkpoint."""
    files = safetensors_files(path) if path.is_dir() else [path]
    if not files:
        raise SourceError(f"{path}: no .safetensors files here")
    rows = [row for file in files for row in read_safetensors_header(file)]
    where = path.name or str(path)
    return _tally(rows, f"exact: tensor headers of {counted(len(files), 'safetensors file')} in {where}")


def from_hub(repo_id: str, *, revision: str | None = None) -> WeightSize:
    """Exact bytes from the Hub's safetensors headers (no weights downloaded; needs huggingface_hub)."""
    try:
        from huggingface_hub import HfApi, constants
    except ImportError:
        raise MissingExtraError(
            f"{repo_id}: reading Hub metadata needs huggingface_hub; install it with: pip install 'kvbudget[hub]'"
        ) from None
    unreachable = (
        f"{repo_id}: the Hugging Face Hub cannot be reached{{why}}; give a local model directory or --weights-size"
    )
    if hub_offline(constants.HF_HUB_OFFLINE):
        raise SourceError(unreachable.format(why=" (HF_HUB_OFFLINE is set)"))
    if not hub_reachable(constants.ENDPOINT):
        raise SourceError(unreachable.format(why=""))
    try:
        meta = HfApi().get_safetensors_metadata(repo_id, revision=revision)
    except Exception as exc:  # every Hub failure (missing repo, gated, not safetensors, transport) is one line
        raise SourceError(f"{repo_id}: no safetensors metadata from the Hub ({type(exc).__name__})") from None
    rows = []
    for file, fmeta in sorted(meta.files_metadata.items()):
        for name, t in fmeta.tensors.items():
            info = {"dtype": t.dtype, "shape": t.shape, "data_offsets": t.data_offsets}
            rows.append(_tensor_row(f"hf://{repo_id}/{file}", name, info))
    at = f"@{revision}" if revision else ""
    return _tally(
        rows, f"exact: Hub safetensors headers of {repo_id}{at} ({counted(len(meta.files_metadata), 'file')})"
    )


_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<i>\d{5})-of-(?P<n>\d{5})\.gguf$")


def gguf_files(path: Path) -> list[Path]:
    """The files of a GGUF model: the file itself, every part of a split (-00001-of-00003) model, or,
    for a directory, the one GGUF model in it ([] when there is none)."""
    if path.is_dir():
        found = sorted(path.glob("*.gguf"))
        stems = {m["stem"] if (m := _SPLIT.match(p.name)) else p.stem for p in found}
        if len(stems) > 1:
            names = ", ".join(p.name for p in found[:3])
            raise SourceError(f"{path}: {len(stems)} GGUF models here ({names}, ...); pass one .gguf file")
        return gguf_files(found[0]) if found else []
    match = _SPLIT.match(path.name)
    if not match:
        return [path]
    n = int(match["n"])
    parts = [path.with_name(f"{match['stem']}-{i:05d}-of-{n:05d}.gguf") for i in range(1, n + 1)]
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise SourceError(f"{path}: split GGUF is missing part(s) {', '.join(missing)}")
    return parts


def from_gguf(path: Path) -> WeightSize:
    """Exact bytes from a GGUF's tensor table (sum of each tensor's bytes, model/gguf_file.py)."""
    from kvbudget.model.gguf_file import read_gguf_file

    files = gguf_files(path)
    if not files:
        raise SourceError(f"{path}: no .gguf files here")
    rows = []
    for file in files:
        for t in read_gguf_file(file).tensors:
            n_bytes = t.n_bytes
            if n_bytes is None:
                raise ConfigError(
                    f"{file}: tensor {t.name!r} has ggml type {t.type_id}, whose size kvbudget does not know; "
                    "give the weights with --weights-size"
                )
            rows.append((t.name, t.type_name, list(t.dims), n_bytes))
    return _tally(
        rows, f"exact: GGUF tensor table of {files[0].name}" + (f" (+{len(files) - 1} parts)" if len(files) > 1 else "")
    )
