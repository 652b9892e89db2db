"""Reverse reading of a (memory, context) claim: the seed's 24 GB / 256K worked example and bad input."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from kvbudget.errors import InputError
from kvbudget.infer import infer, nearest_dense, parse_params
from tests.helpers import run_cli

SEED = ["--params", "74B", "--weight-bits", "2", "--context", "256k", "--kv-heads", "2", "--head-dim", "128"]


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, "infer", *argv, "--json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def _fails(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, "infer", *argv)
    assert code == 1 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in err, err
    return lines[0]


def test_seed_decimal_chain(capsys: pytest.CaptureFixture[str]) -> None:
    # "74B parameters at 2 bits is roughly 18.5 GB of weights. On a 24 GB card that leaves something
    # under 4 GB": 24 GB - 18.5 GB - 1.5 GB runtime overhead = 4.0 GB, the seed's upper bound.
    data = _json(capsys, "--memory", "24GB", "--overhead", "1.5GB", *SEED)
    assert data["schema_version"] == 1
    assert data["weights_bytes"] == 18_500_000_000
    assert data["kv_budget_bytes"] == 4_000_000_000
    assert data["context"] == 262_144
    # In decimal units the division gives 15,258 B/token: 14 layers at bf16, 29 at int8.
    assert data["implied_bytes_per_token"] == 15_258
    assert data["implied_attention_layers"] == {"bf16": 14, "fp8": 29, "int8": 29, "int4": 52}
    assert data["memory_bytes"] == 24_000_000_000 and data["params"] == 74_000_000_000
    assert data["weight_bits"] == 2.0 and data["kv_heads"] == 2 and data["head_dim"] == 128
    # More runtime overhead leaves strictly under 4 GB.
    assert _json(capsys, "--memory", "24GB", "--overhead", "2GB", *SEED)["kv_budget_bytes"] < 4_000_000_000


def test_seed_binary_budget_gives_16_kib_32_and_16_layers(capsys: pytest.CaptureFixture[str]) -> None:
    # The seed's "4 GB / 262,144 tokens ~ 16 KB/token" is exact in binary units: 2^32 / 2^18 = 16,384.
    data = _json(capsys, "--kv-budget", "4GiB", *SEED)
    assert data["kv_budget_bytes"] == 4 * 2**30
    assert data["implied_bytes_per_token"] == 16_384
    assert data["implied_attention_layers"]["int8"] == 32  # 16,384 / (2 x 2 x 128 x 1)
    assert data["implied_attention_layers"]["bf16"] == 16  # 16,384 / (2 x 2 x 128 x 2)
    assert data["attention_layer_bytes_per_token"] == {"bf16": 1024, "fp8": 512, "int8": 512, "int4": 288}
    # A dense transformer of 74B (nearest dense catalog model: Qwen2.5-72B, 80 x 8 KV heads x 128)
    assert data["dense_equivalent"]["name"] == "Qwen2.5-72B"
    assert data["dense_equivalent_bytes_per_token"] == 327_680
    assert data["dense_equivalent_bytes_at_context"] == 327_680 * 262_144
    assert data["ratio_dense_to_implied"] == 20.0
    assert "20.0x below" in data["verdict"] and "hybrid or aggressive attention variant" in data["verdict"]


def test_text_output_shows_the_arithmetic(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "infer", "--memory", "24GB", "--overhead", "1.5GB", *SEED)
    assert code == 0
    assert "74,000,000,000 params x 2 bits / 8 = 18,500,000,000 B (18.50 GB" in out
    assert "4,000,000,000 // 262,144 tokens = 15,258 B/token" in out
    assert "= 29 at int8" in out and "= 14 at bf16" in out
    assert "verdict: implied per-token cost is 21.5x below" in out


def test_gpu_memory_from_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, "--gpu", "rtx-4090", "--overhead", "1.5GB", *SEED)
    assert data["memory_bytes"] == 25_757_220_864
    assert "nvidia-smi" in data["memory_basis"]
    assert data["kv_budget_bytes"] == 25_757_220_864 - 18_500_000_000 - 1_500_000_000


def test_dense_budget_needs_no_special_design() -> None:
    result = infer(context=8192, memory=80 * 10**9, params=70 * 10**9, weight_bits=Fraction(4), overhead=4 * 10**9)
    assert result.dense is not None and result.dense.bytes_per_token == 327_680
    # geometry defaults to the dense reference's: 8 KV heads x 128
    assert (result.kv_heads, result.head_dim) == (8, 128)
    assert result.implied_attention_layers["bf16"] == result.implied_bytes_per_token // 4096
    assert "needs no special attention design" in result.verdict


def test_weights_size_instead_of_params() -> None:
    result = infer(context=262_144, memory=24 * 10**9, weights_bytes=18_500_000_000, kv_heads=2, head_dim=128)
    assert result.kv_budget_bytes == 5_500_000_000
    assert result.dense is None and "no dense comparison" in result.verdict


def test_nearest_dense_reference() -> None:
    assert nearest_dense(8 * 10**9).name == "Llama-3.1-8B"
    assert nearest_dense(405 * 10**9).name == "Llama-3.1-405B"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("74B", 74 * 10**9),
        ("74e9", 74 * 10**9),
        ("8.03B", 8_030_000_000),
        ("1.5T", 1_500_000_000_000),
        ("500M", 500 * 10**6),
    ],
)
def test_parse_params(text: str, value: int) -> None:
    assert parse_params(text) == value


@pytest.mark.parametrize("text", ["74X", "seventy", "-74B", "0", "1.5", "74 billion", ""])
def test_unparsable_params(text: str) -> None:
    with pytest.raises(InputError) as info:
        parse_params(text)
    assert "--params" in str(info.value)


def test_bad_input_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert "--params" in _fails(
        capsys, "--memory", "24GB", "--params", "74X", "--weight-bits", "2", "--context", "256k"
    )
    assert "negative" in _fails(capsys, "--memory=-24GB", *SEED)
    assert "--memory" in _fails(capsys, "--memory", "lots", *SEED)
    assert "--context" in _fails(
        capsys, "--memory", "24GB", "--params", "74B", "--weight-bits", "2", "--context", "big"
    )
    assert "--weight-bits" in _fails(
        capsys, "--memory", "24GB", "--params", "74B", "--weight-bits", "x", "--context", "1k"
    )
    assert "not both" in _fails(capsys, "--memory", "24GB", "--kv-budget", "4GiB", *SEED)
    assert "GPU 'h100-90gb'" in _fails(capsys, "--gpu", "h100-90gb", *SEED)


def test_weights_exceeding_memory_name_the_shortfall(capsys: pytest.CaptureFixture[str]) -> None:
    line = _fails(capsys, "--memory", "24GB", "--params", "74B", "--weight-bits", "4", "--context", "256k")
    # 74e9 x 4 / 8 = 37 GB of weights on a 24 GB budget
    assert "weights 37.00 GB" in line and "exceed the memory 24.00 GB by 13.00 GB" in line


def test_json_matches_golden(capsys: pytest.CaptureFixture[str]) -> None:
    golden = Path(__file__).parent / "golden" / "infer_seed_24gb_256k.json"
    data = _json(capsys, "--memory", "24GB", "--overhead", "1.5GB", *SEED)
    assert data == json.loads(golden.read_text(encoding="utf-8"))


def test_zero_overhead_is_allowed_but_zero_memory_is_not(capsys: pytest.CaptureFixture[str]) -> None:
    assert _json(capsys, "--memory", "24GB", "--overhead", "0", *SEED)["kv_budget_bytes"] == 5_500_000_000
    assert "--memory" in _fails(capsys, "--memory", "0GB", *SEED)
