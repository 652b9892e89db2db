"""Serving precisions: real bits per weight from block layouts, and bytes per tensor group."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from kvbudget.errors import InputError
from kvbudget.model import catalog
from kvbudget.model.families import read_spec
from kvbudget.weights.params import ParamCount, count_params
from kvbudget.weights.precision import GGUF_BLOCKS, estimate_weights, weight_precision


def _count(name: str) -> ParamCount:
    entry = catalog.lookup(name)
    assert entry is not None
    return count_params(read_spec(entry.config, name=entry.name, source=entry.source))


# ggml/src/ggml-common.h block structs, summed field by field (QK_K = 256, QK8_0 = QK4_0 = 32).
BLOCK_FIELDS = {
    "q8_0": (2 + 32, 32),  # ggml_half d; int8_t qs[32]
    "q6_k": (128 + 64 + 16 + 2, 256),  # ql[QK_K/2]; qh[QK_K/4]; int8 scales[QK_K/16]; ggml_half d
    "q5_k": (2 * 2 + 12 + 32 + 128, 256),  # d, dmin; scales[12]; qh[QK_K/8]; qs[QK_K/2]
    "q4_k": (2 * 2 + 12 + 128, 256),  # d, dmin; scales[12]; qs[QK_K/2]
    "q3_k": (32 + 64 + 12 + 2, 256),  # hmask[QK_K/8]; qs[QK_K/4]; scales[12]; d
    "q2_k": (16 + 64 + 2 * 2, 256),  # scales[QK_K/16]; qs[QK_K/4]; d, dmin
    "iq2_xxs": (2 + 2 * 32, 256),  # d; uint16 qs[QK_K/8]
    "q4_0": (2 + 16, 32),  # d; qs[16]
    "q5_0": (2 + 4 + 16, 32),  # d; qh[4]; qs[16]
}
BITS = {
    "q8_0": 8.5,
    "q6_k": 6.5625,
    "q5_k": 5.5,
    "q4_k": 4.5,
    "q3_k": 3.4375,
    "q2_k": 2.625,
    "iq2_xxs": 2.0625,
    "q4_0": 4.5,
    "q5_0": 5.5,
}


@pytest.mark.parametrize("name", sorted(BITS))
def test_gguf_bits_per_weight_from_block_layout(name: str) -> None:
    size, elems = BLOCK_FIELDS[name]
    assert GGUF_BLOCKS[name][:2] == (size, elems)
    assert weight_precision(name).bits == Fraction(size * 8, elems)
    assert float(weight_precision(name).bits) == BITS[name]


def test_gguf_block_sizes_agree_with_gguf_py() -> None:
    gguf = pytest.importorskip("gguf")
    sizes = {t.name.lower(): (b, e) for t, (e, b) in gguf.GGML_QUANT_SIZES.items()}
    for name, (size, elems, _) in GGUF_BLOCKS.items():
        assert sizes[name] == (size, elems), name


@pytest.mark.parametrize(
    ("name", "bits"),
    [
        ("fp32", 32),
        ("float32", 32),  # a config's torch_dtype spelling
        ("bf16", 16),
        ("bfloat16", 16),
        ("FP16", 16),
        ("fp8", 8),
        ("int8", 8),
        ("int4", Fraction(4) + Fraction(16, 128)),  # 4.125: fp16 scale per 128
        ("gptq", Fraction(4) + Fraction(20, 128)),  # 4.15625: + packed 4-bit zero per group
        ("awq", Fraction(133, 32)),
        ("nvfp4", Fraction(9, 2)),  # 4 + 8/16
        ("mxfp4", Fraction(17, 4)),  # 4 + 8/32
        ("2bit", 2),
        ("2-bit", 2),
        ("2", 2),
        ("4.5", Fraction(9, 2)),
    ],
)
def test_bits_per_weight(name: str, bits: Fraction | int) -> None:
    assert weight_precision(name).bits == bits


def test_group_size_changes_scale_overhead() -> None:
    assert weight_precision("awq", group_size=32).bits == Fraction(4) + Fraction(20, 32)
    assert weight_precision("int4", group_size=64).group_size == 64
    with pytest.raises(InputError, match="--group-size"):
        weight_precision("gptq", group_size=0)


@pytest.mark.parametrize("text", ["int3", "fp6", "q4_k_m", "0", "64"])
def test_unknown_precision_is_one_line(text: str) -> None:
    with pytest.raises(InputError) as info:
        weight_precision(text)
    assert "\n" not in str(info.value)


def test_bf16_bytes_are_two_per_parameter() -> None:
    count = _count("Llama-3.1-70B")
    estimate = estimate_weights(count, weight_precision("bf16"))
    assert estimate.total_bytes == 2 * 70_553_706_496 == 141_107_412_992
    assert estimate.unquantized() == []


def test_awq_keeps_embeddings_lm_head_and_norms_at_bf16() -> None:
    count = _count("Llama-3.1-70B")
    estimate = estimate_weights(count, weight_precision("awq"))
    linear = sum(p.params for p in count.parts if p.kind == "linear")  # attention + MLP projections
    kept = count.total - linear
    assert kept == 2 * 128_256 * 8192 + (2 * 80 + 1) * 8192
    assert estimate.unquantized_bytes == 2 * kept
    # ceil per group: attention and mlp are separate groups
    parts = [p for p in count.parts if p.kind == "linear"]
    assert estimate.total_bytes == 2 * kept + sum(math.ceil(p.params * Fraction(133, 32) / 8) for p in parts)
    assert estimate.total_bytes == 39_767_785_472
    assert estimate.unquantized() == ["embeddings", "lm_head", "norms"]
    assert "kept at bf16 (embeddings, lm_head, norms)" in estimate.basis


def test_quantize_embeddings_includes_them() -> None:
    count = _count("Llama-3.1-70B")
    plain = estimate_weights(count, weight_precision("q4_k"))
    with_embed = estimate_weights(count, weight_precision("q4_k"), quantize_embeddings=True)
    table = 2 * 128_256 * 8192
    assert plain.total_bytes - with_embed.total_bytes == 2 * table - table * 9 // 16  # bf16 -> 4.5 bits
    assert "embeddings" not in with_embed.unquantized()


def test_moe_router_and_vectors_stay_bf16() -> None:
    count = _count("gpt-oss-20b")
    estimate = estimate_weights(count, weight_precision("mxfp4"))
    kept = {g.kind for g in estimate.groups if not g.quantized}
    assert kept == {"embedding", "lm_head", "norm", "router", "vector"}
    # gpt-oss's own checkpoint also keeps attention at bf16 (modules_to_not_convert): --keep attention
    attention_kept = estimate_weights(count, weight_precision("mxfp4"), keep_components=["attention"])
    assert attention_kept.total_bytes > estimate.total_bytes
    with pytest.raises(InputError, match="--keep"):
        estimate_weights(count, weight_precision("mxfp4"), keep_components=["vision"])


def test_seed_rule_of_thumb_differs_from_bit_arithmetic() -> None:
    # Seed: "70B at 4-bit (~0.6 GB per billion) 42 GB" and "4-bit to 2-bit saves 21 GB once".
    # The rule of thumb is 4.8 bits per weight; counted bits give less, and halving the bits of
    # the projections saves 17.1 GB, not 21 GB, because embeddings and norms stay at bf16.
    count = _count("Llama-3.1-70B")
    four = estimate_weights(count, weight_precision("4")).total_bytes
    two = estimate_weights(count, weight_precision("2bit")).total_bytes
    assert four < 42_000_000_000
    assert four - two == sum(p.params for p in count.parts if p.kind == "linear") * 2 // 8 == 17_112_760_320
