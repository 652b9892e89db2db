"""kvbudget's own GGUF header reader (model/gguf_file.py) against the gguf package that wrote the files: the same
metadata and tensor table, little- and big-endian; hostile headers fail in one line at once."""

from __future__ import annotations

import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from kvbudget.errors import ConfigError
from kvbudget.model.gguf_file import GGML_TYPES, read_gguf_file
from tests.live.tiny_gguf import write_llama


def test_type_table_is_ggmls() -> None:
    theirs = {t.value: (t.name, block, size) for t, (block, size) in gguf.GGML_QUANT_SIZES.items()}
    assert {k: v for k, v in GGML_TYPES.items() if k in theirs} == {k: v for k, v in theirs.items() if k in GGML_TYPES}
    assert set(theirs) <= set(GGML_TYPES)


def _write(path: Path, endianess: gguf.GGUFEndian) -> Path:
    w = gguf.GGUFWriter(str(path), "llama", endianess=endianess)
    w.add_name("tiny")
    w.add_block_count(4)
    w.add_head_count_kv([8, 8, 4, 4])
    w.add_float32("llama.rope.freq_base", 500000.0)
    w.add_bool("llama.flag", True)
    w.add_array("llama.names", ["a", "bc"])
    w.add_token_list([f"t{i}" for i in range(1000)])
    w.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
    w.add_tensor("blk.0.attn_q.weight", np.zeros((2, 64), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("endianess", [gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG])
def test_metadata_and_tensors_equal_the_gguf_packages(tmp_path: Path, endianess: gguf.GGUFEndian) -> None:
    path = _write(tmp_path / "t.gguf", endianess)
    ours = read_gguf_file(path)
    reader = gguf.GGUFReader(path)
    theirs = {k: f.contents() for k, f in reader.fields.items() if not k.startswith(("GGUF.", "tokenizer."))}
    assert ours.metadata == theirs
    assert "tokenizer.ggml.tokens" not in ours.metadata  # stepped over, never built
    assert [(t.name, t.type_name, t.n_bytes) for t in ours.tensors] == [
        (t.name, t.tensor_type.name, int(t.n_bytes)) for t in reader.tensors
    ]
    assert ours.data_start + ours.tensors[0].offset == int(reader.tensors[0].data_offset)


def test_a_real_tokenizer_file(tmp_path: Path) -> None:
    path = write_llama(tmp_path / "llama.gguf")
    ours = read_gguf_file(path)
    assert ours.metadata["llama.block_count"] == 32 and ours.metadata["general.architecture"] == "llama"
    assert not any(k.startswith("tokenizer.") for k in ours.metadata)


def _header(*kv: bytes, n_kv: int | None = None, n_tensors: int = 0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, len(kv) if n_kv is None else n_kv) + b"".join(kv)


def _key(name: str) -> bytes:
    return struct.pack("<Q", len(name)) + name.encode()


@pytest.mark.parametrize(
    ("content", "why"),
    [
        # a 2^40-element uint32 array in a 100-byte file: refused before any allocation
        (_header(_key("llama.x") + struct.pack("<IIQ", 9, 4, 1 << 40)), "declares 1,099,511,627,776 items"),
        (_header(_key("llama.s") + struct.pack("<IQ", 8, 1 << 50)), "declares"),  # a 2^50-byte string
        (_header(n_kv=1 << 60), "the metadata declares"),
        (_header(_key("llama.v") + struct.pack("<I", 77) + b"\0" * 8), "unknown value type 77"),
        (b"GGUF" + struct.pack("<IQQ", 1, 0, 0), "GGUF version 1"),
        (_header(n_tensors=1) + _key("t") + struct.pack("<I", 99) + b"\0" * 32, "declares 99 dimensions"),
    ],
)
def test_hostile_headers_are_one_line(tmp_path: Path, content: bytes, why: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(content + b"\0" * max(0, 24 - len(content)))
    with pytest.raises(ConfigError, match=why) as info:
        read_gguf_file(path)
    assert "\n" not in str(info.value)


def test_a_tensor_past_the_end_is_a_truncated_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.gguf", gguf.GGUFEndian.LITTLE)
    data = path.read_bytes()
    path.write_bytes(data[:-100])
    with pytest.raises(ConfigError, match=r"cut short or damaged .*ends at byte"):
        read_gguf_file(path)
