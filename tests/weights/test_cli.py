"""``kvbudget weights`` through the real entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import dense_config, run_cli, write_config
from tests.weights.test_sources import write_safetensors


def _fails(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 1 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    return lines[0]


def test_catalog_model_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "weights", "llama-3.1-8b", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["schema_version"] == 1
    assert data["params"]["total"] == data["params"]["active"] == 8_030_261_248
    by_name = {p["name"]: p for p in data["precisions"]}
    assert by_name["bf16"]["bytes"] == 2 * 8_030_261_248
    assert by_name["awq"]["unquantized"] == ["embeddings", "lm_head", "norms"]
    assert by_name["q4_k"]["bits_per_weight"] == 4.5
    assert data["serving"]["provenance"] == "computed"
    assert data["exact"] is None and data["measured"] is None


def test_moe_shows_total_and_active(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "weights", "Qwen3-30B-A3B", "--precision", "fp8")
    assert code == 0
    assert "30,532,122,624 total" in out and "3,353,032,704 active" in out
    assert "moe routed experts" in out and "Stays at bf16" in out


def test_measured_size_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    # The seed's "70B at 4-bit (~0.6 GB per billion) 42 GB", given as a measured footprint.
    code, out, _ = run_cli(capsys, "weights", "llama-3.1-70b", "--precision", "awq", "--weights-size", "42GB", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["serving"] == data["measured"]
    assert data["serving"]["bytes"] == 42_000_000_000 and data["serving"]["provenance"] == "measured"
    assert data["precisions"][0]["bytes"] == 39_767_785_472  # computed int4 (AWQ g128) differs; that is fine
    assert any("overrides the computed 39,767,785,472 B" in n for n in data["notes"])


def test_local_directory_reads_safetensors_headers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = dense_config(2, 4, 2, 16, vocab_size=100, intermediate_size=128)
    write_config(tmp_path, cfg)
    written = write_safetensors(tmp_path / "model.safetensors", {"w": ("BF16", [100, 64], 12_800)})
    code, out, _ = run_cli(capsys, "weights", str(tmp_path), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["exact"]["bytes"] == written
    assert data["serving"]["provenance"] == "exact"
    assert data["params"]["total"] > 0  # the config still gives the breakdown


def test_gguf_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    np = pytest.importorskip("numpy")
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    code, out, _ = run_cli(capsys, "weights", str(path))
    assert code == 0
    assert "exact: 128 B" in out and "plan with: 128 B" in out


def test_bad_inputs_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert "unknown weight precision 'int3'" in _fails(capsys, "weights", "llama-3.1-8b", "--precision", "int3")
    assert "negative" in _fails(capsys, "weights", "llama-3.1-8b", "--weights-size=-4GB")
    # the catalog's Falcon-H1-34B config (a doc table) has no vocab_size: the error starts with the model and the field
    assert _fails(capsys, "weights", "Falcon-H1-34B").startswith("Error: Falcon-H1-34B: field 'vocab_size' is missing")
    assert "--group-size" in _fails(capsys, "weights", "llama-3.1-8b", "--group-size", "zero")


def test_json_matches_golden(capsys: pytest.CaptureFixture[str]) -> None:
    golden = Path(__file__).parent.parent / "golden" / "weights_llama-3.1-8b.json"
    code, out, _ = run_cli(capsys, "weights", "llama-3.1-8b", "--precision", "bf16,awq,q4_k,2bit", "--json")
    assert code == 0
    assert json.loads(out) == json.loads(golden.read_text(encoding="utf-8"))
