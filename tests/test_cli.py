"""The CLI through its real entry points: the in-process ``main`` and the installed console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import dense_config, run_cli, write_config

GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize(
    ("name", "argv"),
    [
        ("cost_llama-3.1-70b_ideal.json", ["llama-3.1-70b", "--tokens", "32k", "--sequences", "8"]),
        ("cost_gemma-3-27b_ideal.json", ["gemma-3-27b", "--tokens", "8k", "--sequences", "2"]),
    ],
)
def test_cost_json_matches_golden(capsys: pytest.CaptureFixture[str], name: str, argv: list[str]) -> None:
    code, out, _ = run_cli(capsys, "cost", *argv, "--json")
    assert code == 0
    assert json.loads(out) == json.loads((GOLDEN / name).read_text(encoding="utf-8"))


def test_cost_json_contract_fields(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run_cli(capsys, "cost", "gemma-3-27b", "--tokens", "8k", "--sequences", "2", "--json")
    data = json.loads(out)
    for key in (
        "schema_version",
        "model",
        "engine",
        "kv_dtype",
        "tokens",
        "sequences",
        "tp",
        "kv_bytes_per_token",
        "sequence_bytes",
        "state_bytes",
        "total_bytes",
        "groups",
    ):
        assert key in data
    for key in ("kv_bytes_per_token", "sequence_bytes", "state_bytes", "total_bytes"):
        assert isinstance(data[key], int)
    # 10 global layers x 8,192 B/token; 52 sliding layers stop at 1,024 tokens.
    assert data["kv_bytes_per_token"] == 81_920
    assert data["sequence_bytes"] == 81_920 * 8192 + 52 * 8192 * 1024
    assert data["total_bytes"] == 2 * data["sequence_bytes"]
    kinds = {g["kind"]: g for g in data["groups"]}
    assert kinds["sliding_window"]["layers"] == 52 and kinds["sliding_window"]["per_token_bytes"] == 0


def test_text_output_shows_arithmetic_and_labelled_units(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "cost", "llama-3.1-70b", "--tokens", "128k", "--units", "si")
    assert code == 0
    assert "327,680 B" in out
    assert "2 (K,V) x 8 kv heads x 128 dims x 2 B (bf16)" in out
    assert "42.95 GB" in out


def test_kv_dtype_split_and_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run_cli(capsys, "cost", "llama-3.1-70b", "--kv-dtype", "q8_0/q4_0", "--json")
    data = json.loads(out)
    assert data["kv_dtype"] == "q8_0/q4_0"
    assert data["kv_bytes_per_token"] == 80 * 8 * (4 * 34 + 4 * 18)  # 128 dims = 4 blocks of 32
    _, out, _ = run_cli(capsys, "cost", "llama-3.1-70b", "--kv-dtype", "fp8", "--v-dtype", "bf16", "--json")
    assert json.loads(out)["kv_bytes_per_token"] == 80 * 8 * (128 + 256)


@pytest.mark.parametrize(
    ("dtype", "per_layer_head"),
    [
        ("nvfp4", 2 * (64 + 8)),  # d/2 + d/16 for K and V
        ("int4", 2 * (64 + 2 * 4)),  # 128 dims = 2 groups of 64: 32 B data + fp16 scale and zero each
        ("int2:g32:fp32", 2 * (32 + 4 * 8)),  # 4 groups of 32: 8 B data + 2 x fp32 each
    ],
)
def test_packed_dtypes(capsys: pytest.CaptureFixture[str], dtype: str, per_layer_head: int) -> None:
    _, out, _ = run_cli(capsys, "cost", "llama-3.1-8b", "--kv-dtype", dtype, "--json")
    assert json.loads(out)["kv_bytes_per_token"] == 32 * 8 * per_layer_head


def test_config_file_and_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_config(tmp_path, dense_config(32, 32, 8, 128))
    code, out, _ = run_cli(capsys, "cost", str(tmp_path), "--json")
    assert code == 0 and json.loads(out)["kv_bytes_per_token"] == 131_072
    code, out, _ = run_cli(capsys, "cost", str(tmp_path / "config.json"), "--json")
    assert code == 0 and json.loads(out)["kv_bytes_per_token"] == 131_072


def test_models_lists_the_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "models", "--json")
    assert code == 0
    models = {m["name"]: m for m in json.loads(out)["models"]}
    assert len(models) == 88  # every catalog entry (tests/model/test_catalog.py counts them)
    assert models["DeepSeek-V3"]["kv_bytes_per_token"] == 70_272
    assert models["Qwen3-Next-80B-A3B"]["state_bytes"] > 0
    code, text, _ = run_cli(capsys, "models")
    assert "Llama-3.1-70B" in text and "327,680" in text


def test_console_script_runs_as_a_process() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kvbudget", "cost", "llama-3.1-70b", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["kv_bytes_per_token"] == 327_680
    bad = subprocess.run(
        [sys.executable, "-m", "kvbudget", "cost", "nope-model"], capture_output=True, text=True, check=False
    )
    assert bad.returncode == 1 and bad.stderr.startswith("Error: ") and bad.stderr.count("\n") == 1


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--version")
    assert code == 0 and out.startswith("kvbudget ")


def test_errors_under_json_are_a_json_document(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "cost", "no-such-model", "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["schema_version"] == 1 and doc["error"]["kind"] == "SourceError"
    assert "no-such-model" in doc["error"]["message"]
    assert err.startswith("Error: ") and err.count("\n") == 1  # the one line stays on stderr


def test_cost_warns_past_the_native_window(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "cost", "qwen3-32b", "--tokens", "200k", "--json")
    assert code == 0
    [warning] = [w for w in json.loads(out)["warnings"] if "max_position_embeddings" in w]
    assert "204,800 tokens is beyond Qwen3-32B's max_position_embeddings 40,960" in warning
    code, out, _ = run_cli(capsys, "cost", "qwen3-32b", "--tokens", "32k", "--json")
    assert not [w for w in json.loads(out)["warnings"] if "max_position_embeddings" in w]
