"""Exact weight bytes from tensor headers (safetensors, Hub metadata, GGUF) and measured overrides."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from kvbudget.errors import ConfigError, InputError, SourceError
from kvbudget.weights import sources


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int], int]], metadata: bool = True) -> int:
    """Write a safetensors file by hand: 8-byte little-endian header length, JSON header, data.

    ``tensors`` maps name -> (dtype, shape, bytes); returns the data bytes written."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}} if metadata else {}
    offset = 0
    for name, (dtype, shape, size) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)
    return offset


def test_hand_written_header(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    # BF16 4x8 = 64 B, F32 3 = 12 B, F8_E4M3 16x16 = 256 B
    written = write_safetensors(
        path, {"a": ("BF16", [4, 8], 64), "b": ("F32", [3], 12), "c": ("F8_E4M3", [16, 16], 256)}
    )
    size = sources.from_safetensors(path)
    assert size.bytes == written == 64 + 12 + 256
    assert size.provenance == "exact"
    assert size.elements == 32 + 3 + 256
    assert dict(size.by_dtype) == {"BF16": 64, "F32": 12, "F8_E4M3": 256}
    assert "\n" not in size.basis and "safetensors" in size.basis


def test_safetensors_package_file_matches_array_bytes(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    st = pytest.importorskip("safetensors.numpy")
    arrays = {
        "embed": np.zeros((32, 16), dtype=np.float16),
        "proj": np.zeros((16, 48), dtype=np.float32),
        "q": np.zeros((7,), dtype=np.int8),
    }
    path = tmp_path / "model.safetensors"
    st.save_file(arrays, str(path))
    size = sources.from_safetensors(path)
    assert size.bytes == sum(a.nbytes for a in arrays.values()) == 32 * 16 * 2 + 16 * 48 * 4 + 7


def test_sharded_directory_uses_the_index(tmp_path: Path) -> None:
    first = write_safetensors(tmp_path / "model-00001-of-00002.safetensors", {"a": ("BF16", [8, 8], 128)})
    second = write_safetensors(tmp_path / "model-00002-of-00002.safetensors", {"b": ("F16", [4], 8)})
    # A consolidated copy outside the index (as Mistral repos ship) must not be counted twice.
    write_safetensors(tmp_path / "consolidated.safetensors", {"a": ("BF16", [8, 8], 128), "b": ("F16", [4], 8)})
    index = {
        "metadata": {"total_size": first + second},
        "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"},
    }
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    size = sources.from_safetensors(tmp_path)
    assert size.bytes == first + second == 136
    assert "2 safetensors files" in size.basis


def test_missing_shard_is_one_line(tmp_path: Path) -> None:
    write_safetensors(tmp_path / "model-00001-of-00002.safetensors", {"a": ("BF16", [8], 16)})
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    with pytest.raises(SourceError) as info:
        sources.from_safetensors(tmp_path)
    assert "model-00002-of-00002.safetensors" in str(info.value) and "\n" not in str(info.value)


def test_damaged_headers(tmp_path: Path) -> None:
    bad_length = tmp_path / "a.safetensors"
    bad_length.write_bytes(struct.pack("<Q", 10**12) + b"{}")
    with pytest.raises(ConfigError, match="impossible"):
        sources.from_safetensors(bad_length)
    inconsistent = tmp_path / "b.safetensors"
    write_safetensors(inconsistent, {"a": ("BF16", [4, 8], 60)})  # 32 bf16 values need 64 bytes
    with pytest.raises(ConfigError, match="damaged"):
        sources.from_safetensors(inconsistent)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SourceError, match=r"no \.safetensors"):
        sources.from_safetensors(empty)


def test_gguf_tensor_table(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))  # 128 B
    writer.add_tensor("output_norm.weight", np.zeros((16,), dtype=np.float16))  # 32 B
    q8 = gguf.quants.quantize(np.ones((64, 32), dtype=np.float32), gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("blk.0.ffn_up.weight", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)  # 64 blocks x 34 B
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    size = sources.from_gguf(path)
    assert size.bytes == 128 + 32 + 64 * 34
    assert dict(size.by_dtype) == {"F32": 128, "F16": 32, "Q8_0": 2176}
    assert size.elements == 32 + 16 + 2048
    assert size.provenance == "exact"


def test_damaged_gguf_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    path = tmp_path / "bad.gguf"
    path.write_bytes(b"not a gguf file at all")
    with pytest.raises(ConfigError) as info:
        sources.from_gguf(path)
    assert "too short for a GGUF header" in str(info.value) and "\n" not in str(info.value)


def test_split_gguf_missing_part(tmp_path: Path) -> None:
    path = tmp_path / "m-00001-of-00002.gguf"
    path.write_bytes(b"")
    with pytest.raises(SourceError, match=r"m-00002-of-00002\.gguf"):
        sources.from_gguf(path)


def _hub_metadata() -> Any:
    utils = pytest.importorskip("huggingface_hub.utils")

    def tensor(dtype: str, shape: list[int], begin: int, end: int) -> Any:
        return utils.TensorInfo(dtype=dtype, shape=shape, data_offsets=(begin, end))

    files = {
        "model-00001-of-00002.safetensors": utils.SafetensorsFileMetadata(
            metadata={}, tensors={"embed": tensor("BF16", [1000, 64], 0, 128_000)}
        ),
        "model-00002-of-00002.safetensors": utils.SafetensorsFileMetadata(
            metadata={},
            tensors={
                "w": tensor("F8_E4M3", [64, 64], 0, 4096),
                "w_scale": tensor("F32", [1], 4096, 4100),
            },
        ),
    }
    weight_map = {"embed": "model-00001-of-00002.safetensors", "w": "model-00002-of-00002.safetensors"}
    return utils.SafetensorsRepoMetadata(metadata=None, sharded=True, weight_map=weight_map, files_metadata=files)


def test_hub_metadata_without_network(monkeypatch: pytest.MonkeyPatch) -> None:
    hub = pytest.importorskip("huggingface_hub")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(pytest.importorskip("huggingface_hub.constants"), "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(sources, "hub_reachable", lambda endpoint, timeout=3.0: True)
    calls: list[tuple[str, str | None]] = []

    def fake(self: object, repo_id: str, *, revision: str | None = None, **_: object) -> Any:
        calls.append((repo_id, revision))
        return _hub_metadata()

    monkeypatch.setattr(hub.HfApi, "get_safetensors_metadata", fake)
    size = sources.from_hub("org/model", revision="main")
    assert calls == [("org/model", "main")]
    assert size.bytes == 128_000 + 4096 + 4
    assert size.provenance == "exact" and "org/model@main" in size.basis


def test_hub_unreachable_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(pytest.importorskip("huggingface_hub.constants"), "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(sources, "hub_reachable", lambda endpoint, timeout=3.0: False)
    with pytest.raises(SourceError) as info:
        sources.from_hub("org/model")
    assert "cannot be reached" in str(info.value) and "\n" not in str(info.value)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SourceError, match="HF_HUB_OFFLINE"):
        sources.from_hub("org/model")


def test_hub_errors_become_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    hub = pytest.importorskip("huggingface_hub")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(pytest.importorskip("huggingface_hub.constants"), "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(sources, "hub_reachable", lambda endpoint, timeout=3.0: True)

    def fail(self: object, repo_id: str, **_: object) -> Any:
        raise pytest.importorskip("huggingface_hub.utils").NotASafetensorsRepoError("no safetensors\nsecond line")

    monkeypatch.setattr(hub.HfApi, "get_safetensors_metadata", fail)
    with pytest.raises(SourceError) as info:
        sources.from_hub("org/model")
    assert "NotASafetensorsRepoError" in str(info.value) and "\n" not in str(info.value)


def test_measured_overrides_and_bad_sizes() -> None:
    size = sources.measured("42GB")
    assert (size.bytes, size.provenance) == (42_000_000_000, "measured")
    assert sources.measured("40GiB").bytes == 40 * 2**30
    for bad in ("-42GB", "forty", "0"):
        with pytest.raises(InputError):
            sources.measured(bad)


def _write_gguf(path: Path) -> int:
    np = pytest.importorskip("numpy")
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return 4 * 8 * 4


def test_gguf_directory(tmp_path: Path) -> None:
    assert sources.gguf_files(tmp_path) == []
    size = _write_gguf(tmp_path / "model-q4_k_m.gguf")
    assert sources.from_gguf(tmp_path).bytes == size
    _write_gguf(tmp_path / "model-q8_0.gguf")
    with pytest.raises(SourceError, match="2 GGUF models here"):
        sources.from_gguf(tmp_path)
