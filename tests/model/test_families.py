"""Family readers: every spelling of sliding windows, chunked attention, latent attention,
hybrids, cross-attention and shared-KV layers lands on the right primitives."""

from __future__ import annotations

from kvbudget.cost import compute_cost
from kvbudget.model.sources import resolve
from kvbudget.model.spec import ChunkedLocal, Recurrent, SharedKV, SlidingWindow
from tests.helpers import dense_config, spec_of


def _kinds(cfg: dict[str, object]) -> list[str]:
    return ["+".join(s.kind for s in layer.states) or "none" for layer in spec_of(cfg).layers]


def test_qwen2_sliding_only_when_enabled_and_from_max_window_layers() -> None:
    base = dense_config(4, 8, 2, 64, model_type="qwen2", sliding_window=1024, max_window_layers=2)
    assert _kinds({**base, "use_sliding_window": False}) == ["full_attention"] * 4
    assert _kinds({**base, "use_sliding_window": True}) == ["full_attention"] * 2 + ["sliding_window"] * 2


def test_mistral_window_applies_to_every_layer_and_null_means_none() -> None:
    assert _kinds(dense_config(3, 8, 2, 64, model_type="mistral", sliding_window=4096)) == ["sliding_window"] * 3
    assert _kinds(dense_config(3, 8, 2, 64, model_type="mistral", sliding_window=None)) == ["full_attention"] * 3


def test_gemma2_alternates_starting_with_sliding() -> None:
    kinds = _kinds(dense_config(4, 8, 4, 256, model_type="gemma2", sliding_window=4096))
    assert kinds == ["sliding_window", "full_attention"] * 2


def test_gemma3_pattern_and_layer_types_agree() -> None:
    by_pattern = _kinds(
        dense_config(12, 8, 4, 256, model_type="gemma3_text", sliding_window=1024, sliding_window_pattern=6)
    )
    assert by_pattern == (["sliding_window"] * 5 + ["full_attention"]) * 2
    types = ["sliding_attention"] * 5 + ["full_attention"]
    by_types = _kinds(dense_config(12, 8, 4, 256, model_type="gemma3_text", sliding_window=1024, layer_types=types * 2))
    assert by_types == by_pattern


def test_gpt_oss_window_128_on_half_the_layers() -> None:
    spec = resolve("gpt-oss-20b")
    sliding = [s for _, s in spec.primitives() if isinstance(s, SlidingWindow)]
    assert len(sliding) == 12 and {s.window for s in sliding} == {128}
    # 12 full layers x 2 x 8 x 64 x 2 B grow; the sliding half stops at 128 tokens.
    report = compute_cost(spec, tokens=8192, sequences=32)
    assert report.kv_bytes_per_token == 24_576
    assert report.total_bytes == 32 * (24_576 * 8192 + 12 * 2048 * 128)


def test_gpt_oss_hf_mem_figure() -> None:
    """hf-mem PR #70: gpt-oss-20b, 8192 tokens x 32 sequences, bf16: 6.09 GiB capped vs 12.00 GiB uncapped."""
    report = compute_cost(resolve("gpt-oss-20b"), tokens=8192, sequences=32)
    assert round(report.total_bytes / 2**30, 2) == 6.09
    uncapped = 24 * 2048 * 8192 * 32
    assert uncapped / 2**30 == 12.0


def test_llama4_global_nope_every_fourth_layer_or_explicit_list() -> None:
    spec = resolve("llama-4-scout")
    chunked = [i for i, s in spec.primitives() if isinstance(s, ChunkedLocal)]
    assert len(chunked) == 36 and 3 not in chunked and 7 not in chunked
    explicit = dense_config(
        4, 8, 2, 64, model_type="llama4_text", attention_chunk_size=8192, no_rope_layers=[1, 0, 1, 0]
    )
    assert _kinds(explicit) == ["chunked_local", "full_attention"] * 2
    # an empty list is read as absent (Llama4TextConfig keeps it only when truthy): the every-fourth default
    empty = dense_config(4, 8, 2, 64, model_type="llama4_text", attention_chunk_size=8192, no_rope_layers=[])
    assert _kinds(empty) == ["chunked_local"] * 3 + ["full_attention"]


def test_jamba_attention_at_offset_of_period() -> None:
    spec = resolve("jamba-v0.1")
    attention = [i for i, s in spec.primitives() if s.kind == "full_attention"]
    assert attention == [4, 12, 20, 28]
    mamba = [s for _, s in spec.primitives() if isinstance(s, Recurrent)]
    assert len(mamba) == 28 and mamba[0].variant == "mamba1" and mamba[0].d_inner == 8192


def test_falcon_h1_has_attention_and_mamba_in_every_layer() -> None:
    spec = resolve("Falcon-H1-7B")
    assert all(len(layer.states) == 2 for layer in spec.layers)
    assert spec.count("full_attention") == spec.count("recurrent") == 44


def test_nemotron_pattern_and_block_type_list() -> None:
    nano = resolve("nemotron-3-nano")
    assert nano.count("full_attention") == 6 and nano.count("recurrent") == 23
    ultra = resolve("nemotron-3-ultra")
    assert [i for i, s in ultra.primitives() if s.kind == "full_attention"] == [
        7,
        14,
        23,
        32,
        39,
        48,
        57,
        64,
        73,
        82,
        89,
        98,
    ]


def test_qwen3_next_full_attention_every_fourth_layer() -> None:
    spec = resolve("qwen3-next-80b-a3b")
    assert [i for i, s in spec.primitives() if s.kind == "full_attention"] == list(range(3, 48, 4))


def test_pure_mamba2_has_no_growing_cache() -> None:
    report = compute_cost(resolve("mamba-codestral"), tokens=131_072)
    assert report.kv_bytes_per_token == 0
    # 64 layers x (3 x (8192 + 2 x 8 x 128) conv + 128 x 64 x 128 state) x 2 B (bf16)
    assert report.state_bytes == 64 * (3 * 10_240 + 128 * 64 * 128) * 2
    assert report.sequence_bytes == report.state_bytes


def test_cross_attention_source_is_fixed_per_sequence() -> None:
    spec = resolve("llama-3.2-11b-vision")
    one = compute_cost(spec, tokens=1000)
    assert one.kv_bytes_per_token == 131_072
    assert one.state_bytes == 8 * 6404 * 4096  # 8 cross layers x 6404 image tokens x 2 x 8 x 128 x 2 B


def test_shared_kv_layers_store_nothing() -> None:
    cfg = dense_config(
        6,
        8,
        2,
        64,
        model_type="gemma3n_text",
        sliding_window=512,
        layer_types=["sliding_attention", "full_attention"] * 3,
        num_kv_shared_layers=2,
    )
    spec = spec_of(cfg)
    shared = [(i, s) for i, s in spec.primitives() if isinstance(s, SharedKV)]
    assert [(i, s.target) for i, s in shared] == [(4, 2), (5, 3)]
    report = compute_cost(spec, tokens=100_000)
    assert report.kv_bytes_per_token == 2 * (2 * 2 * 64 * 2)  # layers 1 and 3 grow; 4 and 5 reuse


def test_gemma3s_own_config_reads_with_transformers_defaults(tmp_path: object) -> None:
    """google/gemma-3-27b-it's config.json writes no vocab_size, sliding_window_pattern nor layer_types in its
    text_config: transformers' Gemma3TextConfig fills 262,208 and five sliding layers to one global, as every engine
    loading it does. kvbudget read every layer as full attention (15.50 GiB for one 32K sequence, not 2.91 GiB) and
    refused to plan it ("field 'vocab_size' is missing")."""
    import json
    from pathlib import Path

    from kvbudget.weights.params import count_params

    text = {"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504, "model_type": "gemma3_text",
            "num_attention_heads": 32, "num_hidden_layers": 62, "num_key_value_heads": 16,
            "query_pre_attn_scalar": 168, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": 1024}  # fmt: skip
    vision = {"model_type": "siglip_vision_model", "hidden_size": 1152, "intermediate_size": 4304,
              "num_hidden_layers": 27, "num_attention_heads": 16, "patch_size": 14, "image_size": 896,
              "vision_use_head": False}  # fmt: skip
    official = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": text,
                "vision_config": vision, "torch_dtype": "bfloat16", "mm_tokens_per_image": 256}  # fmt: skip
    path = Path(str(tmp_path)) / "config.json"
    path.write_text(json.dumps(official), encoding="utf-8")
    spec = resolve(str(path))
    catalog = resolve("gemma-3-27b")
    assert spec.config["vocab_size"] == 262_208 and spec.max_position_embeddings == 131_072
    assert count_params(spec).total == count_params(catalog).total
    ours, theirs = (compute_cost(s, tokens=32_768) for s in (spec, catalog))
    assert ours.total_bytes == theirs.total_bytes == 52 * 8192 * 1024 + 10 * 8192 * 32_768  # 2.91 GiB
