"""GGUF metadata reader: tiny GGUF files written with gguf.GGUFWriter (metadata + one tiny tensor)
resolve to the right primitives, cost what llama.cpp measured, and fail closed or in one line."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import pytest

from kvbudget.cost import compute_cost
from kvbudget.engines.base import EngineOptions
from kvbudget.engines.llamacpp import kv_cache_log_lines
from kvbudget.errors import ConfigError, UnknownArchitectureError
from kvbudget.model.gguf import read_gguf_spec
from kvbudget.model.sources import resolve
from kvbudget.model.spec import FullAttention, LatentAttention, Recurrent, SlidingWindow
from kvbudget.precision import parse_cache_dtype
from tests.helpers import run_cli

MIB = 1024 * 1024
F16 = parse_cache_dtype("f16")
Setup = Callable[[gguf.GGUFWriter], None]


def write_gguf(path: Path, arch: str, setup: Setup) -> Path:
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(path.stem)
    setup(writer)
    writer.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _attention(w: gguf.GGUFWriter, layers: int, heads: int, kv: int | list[int], dim: int) -> None:
    w.add_block_count(layers)
    w.add_context_length(131_072)
    w.add_embedding_length(heads * dim)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_key_length(dim)
    w.add_value_length(dim)


def llama70b(tmp_path: Path, name: str = "llama70b.gguf") -> Path:
    return write_gguf(tmp_path / name, "llama", lambda w: _attention(w, 80, 64, 8, 128))


def gemma3(tmp_path: Path) -> Path:
    def setup(w: gguf.GGUFWriter) -> None:
        _attention(w, 62, 32, 16, 128)
        w.add_sliding_window(1024)

    return write_gguf(tmp_path / "gemma3.gguf", "gemma3", setup)


def deepseek2(tmp_path: Path, *, legacy: bool = False) -> Path:
    def setup(w: gguf.GGUFWriter) -> None:
        w.add_block_count(61)
        w.add_embedding_length(7168)
        w.add_head_count(128)
        w.add_kv_lora_rank(512)
        w.add_rope_dimension_count(64)
        if legacy:  # before llama.cpp PR #12801: per-head K (192) and V (128), 128 KV heads
            w.add_head_count_kv(128)
            w.add_key_length(192)
            w.add_value_length(128)
        else:
            w.add_head_count_kv(1)
            w.add_key_length(576)
            w.add_value_length(512)
            w.add_key_length_mla(192)
            w.add_value_length_mla(128)

    return write_gguf(tmp_path / f"deepseek2{'-legacy' if legacy else ''}.gguf", "deepseek2", setup)


NEMOTRON_PATTERN = "M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M-M-M-M-M-"  # 24 M, 4 *, 24 -


def nemotron_h(tmp_path: Path) -> Path:
    def setup(w: gguf.GGUFWriter) -> None:
        _attention(w, len(NEMOTRON_PATTERN), 32, [8 if c == "*" else 0 for c in NEMOTRON_PATTERN], 128)
        w.add_feed_forward_length([21504 if c == "-" else 0 for c in NEMOTRON_PATTERN])
        w.add_ssm_conv_kernel(4)
        w.add_ssm_inner_size(8192)
        w.add_ssm_state_size(128)
        w.add_ssm_time_step_rank(128)
        w.add_ssm_group_count(8)

    return write_gguf(tmp_path / "nemotron_h.gguf", "nemotron_h", setup)


def qwen3next(tmp_path: Path) -> Path:
    def setup(w: gguf.GGUFWriter) -> None:
        _attention(w, 48, 16, 2, 256)
        w.add_full_attention_interval(4)
        w.add_ssm_conv_kernel(4)
        w.add_ssm_inner_size(32 * 128)
        w.add_ssm_state_size(128)
        w.add_ssm_group_count(16)
        w.add_ssm_time_step_rank(32)

    return write_gguf(tmp_path / "qwen3next.gguf", "qwen3next", setup)


def _cost(path: Path, tokens: int, sequences: int = 1, kv: str = "f16", **opts: bool) -> int:
    spec = resolve(str(path))
    options = EngineOptions(flash_attn=opts.get("flash_attn", True), swa_full=opts.get("swa_full", False))
    report = compute_cost(spec, engine="llamacpp", kv_dtype=kv, tokens=tokens, sequences=sequences, options=options)
    return report.total_bytes


# --- geometries ----------------------------------------------------------------------------------


def test_llama_geometry_and_measured_sizes(tmp_path: Path) -> None:
    path = llama70b(tmp_path)
    spec = resolve(str(path))
    assert spec.source == str(path)
    assert spec.model_type == "llama"
    assert spec.name == "llama70b"
    assert spec.max_position_embeddings == 131_072
    assert {s for _, s in spec.primitives()} == {FullAttention(8, 128, 128)}
    assert len(spec.layers) == 80
    assert _cost(path, 4096) == 1280 * MIB
    assert _cost(path, 4096, kv="q8_0") == 680 * MIB
    assert _cost(path, 4096, kv="q4_0") == 360 * MIB
    assert _cost(path, 4096, kv="q8_0/f16", flash_attn=False) == 980 * MIB
    assert _cost(path, 1000) == 320 * MIB  # n_ctx 1000 -> 1024 cells
    assert _cost(path, 1024, 4) == 1280 * MIB  # -c 4096 -np 4: 4 streams of 1024 cells
    assert kv_cache_log_lines(spec, F16, F16, 4096, 4) == [
        "llama_kv_cache: size = 1280.00 MiB (  1024 cells,  80 layers,  4/4 seqs), "
        "K (f16):  640.00 MiB, V (f16):  640.00 MiB"
    ]


def test_auto_cache_type_means_f16_for_a_gguf(tmp_path: Path) -> None:
    report = compute_cost(resolve(str(llama70b(tmp_path))), engine="llamacpp", tokens=4096)
    assert report.kv_dtype_label == "fp16"
    assert report.total_bytes == 1280 * MIB


def test_head_dim_defaults_to_embedding_over_heads(tmp_path: Path) -> None:
    def setup(w: gguf.GGUFWriter) -> None:
        w.add_block_count(4)
        w.add_embedding_length(4096)
        w.add_head_count(32)
        w.add_head_count_kv(8)

    spec = read_gguf_spec(write_gguf(tmp_path / "nodims.gguf", "qwen2", setup))
    assert spec.layers[0].states == (FullAttention(8, 128, 128),)


def test_gemma3_sliding_pattern_and_cells(tmp_path: Path) -> None:
    path = gemma3(tmp_path)
    spec = resolve(str(path))
    full = [layer.index for layer in spec.layers if isinstance(layer.states[0], FullAttention)]
    assert full == [5, 11, 17, 23, 29, 35, 41, 47, 53, 59]  # llama.cpp set_swa_pattern(6)
    assert spec.layers[0].states == (SlidingWindow(16, 128, 128, 1024),)
    per_cell = 16 * 128 * 2 * 2
    assert _cost(path, 4096) == (10 * 4096 + 52 * 1536) * per_cell
    assert _cost(path, 4096, swa_full=True) == 62 * 4096 * per_cell
    assert "size = 1536 cells" in kv_cache_log_lines(spec, F16, F16, 4096)[2]


def test_swa_pattern_as_period_or_per_layer_array(tmp_path: Path) -> None:
    def period(w: gguf.GGUFWriter) -> None:
        _attention(w, 4, 8, 8, 64)
        w.add_sliding_window(128)
        w.add_sliding_window_pattern(4)

    def array(w: gguf.GGUFWriter) -> None:
        _attention(w, 4, 8, 8, 64)
        w.add_sliding_window(128)
        w.add_sliding_window_pattern([False, True, True, False])

    kinds = [s.kind for _, s in read_gguf_spec(write_gguf(tmp_path / "p.gguf", "gpt-oss", period)).primitives()]
    assert kinds == ["sliding_window"] * 3 + ["full_attention"]
    kinds = [s.kind for _, s in read_gguf_spec(write_gguf(tmp_path / "a.gguf", "gpt-oss", array)).primitives()]
    assert kinds == ["full_attention", "sliding_window", "sliding_window", "full_attention"]


def test_gpt_oss_alternates_starting_with_sliding(tmp_path: Path) -> None:
    def setup(w: gguf.GGUFWriter) -> None:
        _attention(w, 24, 64, 8, 64)
        w.add_sliding_window(128)

    spec = read_gguf_spec(write_gguf(tmp_path / "gpt-oss.gguf", "gpt-oss", setup))
    assert [s.kind for _, s in spec.primitives()][:2] == ["sliding_window", "full_attention"]
    assert spec.count("sliding_window") == spec.count("full_attention") == 12


def test_deepseek2_mla_gguf_is_a_v_less_latent(tmp_path: Path) -> None:
    path = deepseek2(tmp_path)
    spec = resolve(str(path))
    assert {s for _, s in spec.primitives()} == {LatentAttention(512, 64, 128, 128, 128)}
    report = compute_cost(spec, engine="llamacpp", tokens=4096)
    assert report.kv_bytes_per_token == 70_272
    assert report.total_bytes == 61 * 576 * 2 * 4096
    assert kv_cache_log_lines(spec, F16, F16, 4096)[0].endswith("K (f16):  274.50 MiB, V (f16):    0.00 MiB")
    assert compute_cost(spec, engine="llamacpp", kv_dtype="q8_0").kv_bytes_per_token == 37_332


def test_legacy_deepseek2_gguf_caches_full_per_head_kv(tmp_path: Path) -> None:
    spec = resolve(str(deepseek2(tmp_path, legacy=True)))
    assert {s for _, s in spec.primitives()} == {FullAttention(128, 192, 128)}
    assert any("legacy MLA GGUF" in note for note in spec.notes)
    assert compute_cost(spec, engine="llamacpp").kv_bytes_per_token == 4_997_120


def test_nemotron_h_hybrid(tmp_path: Path) -> None:
    path = nemotron_h(tmp_path)
    spec = resolve(str(path))
    assert spec.count("recurrent") == 24
    assert spec.count("full_attention") == 4
    assert sum(1 for layer in spec.layers if not layer.states) == 24  # MLP-only layers
    mamba = next(s for _, s in spec.primitives() if isinstance(s, Recurrent))
    assert mamba == Recurrent("mamba2", 4, d_inner=8192, d_state=128, n_groups=8, num_heads=128, head_dim=64)
    lines = kv_cache_log_lines(spec, F16, F16, 4096)
    assert lines[0].startswith("llama_kv_cache: size =   64.00 MiB (  4096 cells,   4 layers,  1/1 seqs)")
    assert lines[1] == (
        "llama_memory_recurrent: size =   98.81 MiB (     1 cells,  52 layers,  1 seqs), "
        "R (f32):    2.81 MiB, S (f32):   96.00 MiB"
    )
    assert kv_cache_log_lines(spec, F16, F16, 4096, 4)[1].endswith("R (f32):   11.25 MiB, S (f32):  384.00 MiB")
    state = 24 * (3 * 10240 + 128 * 8192) * 4
    assert _cost(path, 4096) == 64 * MIB + state


def test_qwen3next_hybrid(tmp_path: Path) -> None:
    spec = resolve(str(qwen3next(tmp_path)))
    assert spec.count("full_attention") == 12
    assert [layer.index for layer in spec.layers if isinstance(layer.states[0], FullAttention)][:2] == [3, 7]
    gdn = next(s for _, s in spec.primitives() if isinstance(s, Recurrent))
    assert (gdn.num_k_heads, gdn.head_k_dim, gdn.num_v_heads, gdn.head_v_dim) == (16, 128, 32, 128)
    lines = kv_cache_log_lines(spec, F16, F16, 4096)
    assert lines[0].startswith("llama_kv_cache: size =   96.00 MiB (  4096 cells,  12 layers,  1/1 seqs)")
    assert lines[1].endswith("(     1 cells,  48 layers,  1 seqs), R (f32):    3.38 MiB, S (f32):   72.00 MiB")
    assert "size =   75.38 MiB" in lines[1]


def test_pure_mamba2(tmp_path: Path) -> None:
    def setup(w: gguf.GGUFWriter) -> None:
        w.add_block_count(64)
        w.add_embedding_length(4096)
        w.add_ssm_conv_kernel(4)
        w.add_ssm_inner_size(8192)
        w.add_ssm_state_size(128)
        w.add_ssm_time_step_rank(128)
        w.add_ssm_group_count(8)

    spec = read_gguf_spec(write_gguf(tmp_path / "mamba2.gguf", "mamba2", setup))
    report = compute_cost(spec, engine="llamacpp", tokens=100_000, sequences=2)
    assert report.kv_bytes_per_token == 0
    assert report.total_bytes == 2 * 64 * (3 * 10240 + 128 * 8192) * 4


# --- failing closed ------------------------------------------------------------------------------


def test_unknown_architecture_names_arch_and_keys(tmp_path: Path) -> None:
    def setup(w: gguf.GGUFWriter) -> None:
        w.add_block_count(24)
        w.add_uint32("rwkv6.wkv.head_size", 64)

    with pytest.raises(UnknownArchitectureError, match=r"'rwkv6'.*rwkv6\.block_count.*rwkv6\.wkv\.head_size"):
        resolve(str(write_gguf(tmp_path / "rwkv.gguf", "rwkv6", setup)))


def test_known_architecture_with_a_key_it_cannot_place(tmp_path: Path) -> None:
    def window(w: gguf.GGUFWriter) -> None:
        _attention(w, 4, 8, 8, 64)
        w.add_sliding_window(4096)

    with pytest.raises(UnknownArchitectureError, match=r"llama\.attention\.sliding_window"):
        resolve(str(write_gguf(tmp_path / "swa.gguf", "llama", window)))

    def mtp(w: gguf.GGUFWriter) -> None:
        _attention(w, 4, 8, 8, 64)
        w.add_nextn_predict_layers(1)

    with pytest.raises(UnknownArchitectureError, match="nextn_predict_layers"):
        resolve(str(write_gguf(tmp_path / "mtp.gguf", "qwen3", mtp)))


def test_missing_required_key_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'llama\.block_count' is missing"):
        resolve(str(write_gguf(tmp_path / "noblocks.gguf", "llama", lambda w: w.add_head_count(8))))


# --- damaged files and the CLI ---------------------------------------------------------------


def _truncate(path: Path) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def test_truncated_gguf_is_a_config_error(tmp_path: Path) -> None:
    path = _truncate(llama70b(tmp_path))
    with pytest.raises(ConfigError, match="not a complete GGUF file"):
        resolve(str(path))


@pytest.mark.parametrize("content", [b"", b"GGUF", b"not a gguf file at all, just text" * 4])
def test_garbage_is_a_config_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=r"bad\.gguf: (not a GGUF file|\d+ bytes is too short for a GGUF header)"):
        read_gguf_spec(path)


def test_cli_truncated_gguf_prints_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _truncate(llama70b(tmp_path))
    code, out, err = run_cli(capsys, "cost", str(path), "--engine", "llamacpp")
    assert code == 1
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("Error: ")
    assert str(path) in lines[0]
    assert "not a complete GGUF file" in lines[0]


def test_cli_cost_of_a_gguf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = llama70b(tmp_path)
    code, out, err = run_cli(capsys, "cost", str(path), "--engine", "llamacpp", "--tokens", "4096", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["total_bytes"] == 1280 * MIB
    assert data["kv_bytes_per_token"] == 327_680
    assert data["source"] == str(path)
    assert data["engine"] == {"name": "llamacpp", "version": "b7900"}


def test_directory_with_a_gguf_resolves_to_it(tmp_path: Path) -> None:
    llama70b(tmp_path)
    assert resolve(str(tmp_path)).model_type == "llama"


def test_reading_needs_no_gguf_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = llama70b(tmp_path)  # written with the gguf package, read without it (model/gguf_file.py)
    monkeypatch.setitem(sys.modules, "gguf", None)
    assert compute_cost(read_gguf_spec(path), engine="llamacpp", tokens=1024).layout.kv_bytes_per_token == 327_680
