"""The seed documents' worked numbers, reproduced exactly (ideal engine, the textbook formula).

Seed units: "0.3125 MB" per token is 327,680 B = 0.3125 MiB, and the 80-layer context table is in GiB
("2.5 GB" = 2.5 GiB); the 70B users table of the concurrency seed is in decimal GB (42.9 GB at 128K).
"""

from __future__ import annotations

import json

import pytest

from kvbudget.cost import compute_cost
from kvbudget.model.sources import resolve
from tests.helpers import dense_config, run_cli, spec_of

GiB = 2**30
KiB = 2**10


def test_70b_class_geometry_costs_327680_bytes_per_token() -> None:
    spec = spec_of(dense_config(80, 64, 8, 128))
    report = compute_cost(spec, tokens=1)
    assert report.kv_bytes_per_token == 327_680
    assert report.kv_bytes_per_token / 2**20 == 0.3125  # the seed's "0.3125 MB" is MiB


@pytest.mark.parametrize(("tokens", "gib"), [(8_192, 2.5), (32_768, 10.0), (131_072, 40.0), (262_144, 80.0)])
def test_70b_context_table_in_gib(tokens: int, gib: float) -> None:
    report = compute_cost(resolve("llama-3.1-70b"), tokens=tokens)
    assert report.sequence_bytes == 327_680 * tokens
    assert report.sequence_bytes / GiB == gib


@pytest.mark.parametrize(
    ("name", "per_token"), [("llama-3.1-8b", 131_072), ("llama-3.1-70b", 327_680), ("llama-3.1-405b", 516_096)]
)
def test_llama_family_per_token(name: str, per_token: int) -> None:
    assert compute_cost(resolve(name)).kv_bytes_per_token == per_token


@pytest.mark.parametrize(
    ("kv_heads", "dtype", "kib", "gib_at_32k"),
    [(32, "bf16", 512, 16.0), (8, "bf16", 128, 4.0), (8, "fp8", 64, 2.0), (1, "bf16", 16, 0.5)],
)
def test_8b_attention_variants(kv_heads: int, dtype: str, kib: int, gib_at_32k: float) -> None:
    """MHA / GQA-8 / GQA-8+FP8 / MQA at 32 layers, 128 dims: 512 / 128 / 64 / 16 KiB per token."""
    spec = spec_of(dense_config(32, 32, kv_heads, 128))
    report = compute_cost(spec, kv_dtype=dtype, tokens=32_768)
    assert report.kv_bytes_per_token == kib * KiB
    assert report.sequence_bytes / GiB == gib_at_32k


def test_mla_versus_equivalent_mha_at_61_layers() -> None:
    latent = compute_cost(resolve("deepseek-v3")).kv_bytes_per_token
    mha = compute_cost(spec_of(dense_config(61, 128, 128, 128))).kv_bytes_per_token
    assert latent == 70_272  # 61 x 576 x 2 B
    assert mha == 3_997_696  # 2 x 61 x 128 x 128 x 2 B
    assert round(mha / latent) == 57  # "~57x compression"


@pytest.mark.parametrize(
    ("tokens", "one_gb", "eight_gb"),
    [(4_096, 1.3, 10.7), (16_384, 5.4, 42.9), (32_768, 10.7, 85.9), (131_072, 42.9, 343.6)],
)
def test_70b_users_table_in_decimal_gb(tokens: int, one_gb: float, eight_gb: float) -> None:
    layout = compute_cost(resolve("llama-3.1-70b")).layout
    assert round(layout.total_bytes(tokens, 1) / 1e9, 1) == one_gb
    assert round(layout.total_bytes(tokens, 8) / 1e9, 1) == eight_gb


def test_70b_users_table_through_cli(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys,
        "table",
        "llama-3.1-70b",
        "--tokens",
        "4096,16384,32768,131072",
        "--sequences",
        "1,8",
        "--units",
        "si",
        "--json",
    )
    assert code == 0
    rows = {(r["tokens"], r["sequences"]): r["total_bytes"] for r in json.loads(out)["rows"]}
    assert rows[(4_096, 1)] == 1_342_177_280
    assert rows[(131_072, 8)] == 343_597_383_680
    code, text, _ = run_cli(
        capsys, "table", "llama-3.1-70b", "--tokens", "4096,131072", "--sequences", "1,8", "--units", "si"
    )
    assert code == 0
    assert "1.34 GB" in text and "343.60 GB" in text and "GB = 10^9 B" in text
