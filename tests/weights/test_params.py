"""Parameter counts from configs, checked against the catalog's own exact counts and, for models
the catalog only names nominally, against transformers' modules instantiated on the meta device."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from kvbudget.errors import ConfigError, UnknownArchitectureError
from kvbudget.model import catalog
from kvbudget.model.families import read_spec
from kvbudget.model.sources import resolve
from kvbudget.model.spec import ModelSpec
from kvbudget.weights.params import ParamCount, count_params
from tests.helpers import dense_config, spec_of


def _raw_catalog() -> dict[str, dict[str, Any]]:
    text = resources.files("kvbudget.model.catalog").joinpath("models.json").read_text(encoding="utf-8")
    return {m["name"]: m for m in json.loads(text)["models"]}


RAW = _raw_catalog()
COMPUTED = sorted(
    name for name, m in RAW.items() if (m.get("params_total") or {}).get("kind") == "computed_from_config"
)


def _spec(name: str) -> ModelSpec:
    entry = catalog.lookup(name)
    assert entry is not None, name
    return read_spec(entry.config, name=entry.name, source=entry.source)


def _count(name: str) -> ParamCount:
    return count_params(_spec(name))


def test_every_computed_catalog_entry_is_covered() -> None:
    assert len(COMPUTED) >= 32  # every entry whose params_total was computed from its config
    assert "Llama-3.1-8B" in COMPUTED and "DeepSeek-V3" in COMPUTED and "gpt-oss-120b" in COMPUTED


@pytest.mark.parametrize("name", COMPUTED)
def test_total_matches_catalog_exactly(name: str) -> None:
    # The researcher's params_total is computed from the same config; every one matches exactly.
    assert _count(name).total == RAW[name]["params_total"]["value"]


@pytest.mark.parametrize("name", [n for n in COMPUTED if "active" in RAW[n]["params_total"]])
def test_active_matches_catalog_exactly(name: str) -> None:
    # Catalog convention: attention + norms + top-k routed + shared experts + embeddings + lm_head.
    assert _count(name).active == RAW[name]["params_total"]["active"]


def test_llama_3_1_seed_values_and_breakdown() -> None:
    assert _count("Llama-3.1-8B").total == 8_030_261_248
    count = _count("Llama-3.1-70B")
    assert count.total == count.active == 70_553_706_496
    parts = {c.name: c.params for c in count.components()}
    assert parts == {
        "embeddings": 128_256 * 8192,
        # q and o 8192x8192, k and v 8192x(8 x 128), 80 layers
        "attention": 80 * (2 * 8192 * 8192 + 2 * 8192 * 1024),
        "mlp": 80 * 3 * 8192 * 28_672,
        "norms": (2 * 80 + 1) * 8192,
        "lm_head": 128_256 * 8192,
    }
    assert not count.tied_embeddings


def test_tied_embeddings_have_no_lm_head() -> None:
    # Llama-3.2-1B writes tie_word_embeddings true; Gemma 2 relies on the class default (True).
    for name in ("Llama-3.2-1B", "gemma-2-9b"):
        count = _count(name)
        assert count.tied_embeddings
        assert "lm_head" not in {c.name for c in count.components()}


def test_moe_total_and_active_split() -> None:
    count = _count("Mixtral-8x7B-v0.1")
    experts = next(c for c in count.components() if c.name == "moe routed experts")
    # 32 layers x 8 experts x 3 x 4096 x 14336; 2 of 8 active per token
    assert experts.params == 32 * 8 * 3 * 4096 * 14_336
    assert experts.active == experts.params // 4
    assert count.active < count.total


def test_deepseek_v3_keeps_score_correction_bias_and_excludes_mtp() -> None:
    count = _count("DeepSeek-V3")
    router = next(c for c in count.components() if c.name == "moe router")
    # 58 MoE layers (61 - first_k_dense_replace 3), gate 256 x 7168 plus e_score_correction_bias (256):
    # transformers registers the bias as a buffer (its parameters() total is 14,848 lower), but the
    # checkpoint stores it, and the catalog counts it.
    assert router.params == 58 * (256 * 7168 + 256)
    assert any("multi-token-prediction" in n for n in count.notes)


def test_mla_attention_projections() -> None:
    count = _count("DeepSeek-V2-Lite")  # q_lora_rank null: direct q_proj
    attention = next(c for c in count.components() if c.name == "attention")
    per_layer = (
        2048 * 16 * (128 + 64)  # q_proj
        + 2048 * (512 + 64)  # kv_a_proj_with_mqa (latent + shared rope key)
        + 512  # kv_a_layernorm
        + 512 * 16 * (128 + 128)  # kv_b_proj
        + 16 * 128 * 2048  # o_proj
    )
    assert attention.params == 27 * per_layer


# Cross-checks for entries the catalog gives only nominally or as published round numbers:
# the exact counts of transformers 5.24 modules instantiated from these configs on the meta device,
# plus the e_score_correction_bias buffers the checkpoints store (Nemotron 3: 512 per MoE layer).
TRANSFORMERS_COUNTS = {
    "Nemotron-H-8B-Base-8K": 8_100_852_736,
    "Nemotron-H-56B-Base-8K": 56_324_350_464,
    "NVIDIA-Nemotron-3-Super-120B-A12B": 120_668_687_360 + 40 * 512,
    "Qwen3-Next-80B-A3B": 79_674_391_296,
    "Mamba-Codestral-7B-v0.1": 7_285_403_648,
    "Jamba-v0.1": 51_570_323_328,
    "Llama-3.2-11B-Vision": 9_775_192_080,  # text decoder only; the published 10.6B includes vision
}


@pytest.mark.parametrize(("name", "expected"), sorted(TRANSFORMERS_COUNTS.items()))
def test_hybrids_match_reference_implementation(name: str, expected: int) -> None:
    assert _count(name).total == expected


@pytest.mark.parametrize(
    ("name", "tolerance"),
    [
        # Published/nominal figures are rounded marketing numbers; the exact count sits within them.
        ("Jamba-v0.1", 0.01),  # 51.57B vs "52B"
        ("Nemotron-H-8B-Base-8K", 0.015),  # 8.10B vs "8B"
        ("Qwen3-Next-80B-A3B", 0.005),  # 79.67B vs "80B"
        ("Mamba-Codestral-7B-v0.1", 0.005),  # 7.285B vs "~7.3B"
    ],
)
def test_nominal_catalog_figures_are_close(name: str, tolerance: float) -> None:
    nominal = RAW[name]["params_total"]["value"]
    assert abs(_count(name).total - nominal) / nominal < tolerance


def test_glm_4_5_matches_the_catalog_note() -> None:
    # The catalog quotes the published 355B / 32B and notes "computed from config = 352.8B / 33.6B".
    count = _count("GLM-4.5")
    assert round(count.total / 1e9, 1) == 352.8
    assert round(count.active / 1e9, 1) == 33.6
    air = _count("GLM-4.5-Air")
    assert (round(air.total / 1e9, 1), round(air.active / 1e9, 1)) == (106.9, 13.4)


def test_dense_models_have_active_equal_total() -> None:
    for name in ("Qwen2.5-72B", "Phi-4", "c4ai-command-r-v01"):
        count = _count(name)
        assert count.active == count.total


def test_a_vlms_vision_tower_counts_toward_memory_not_toward_a_decoded_token() -> None:
    # Gemma 3's SigLIP tower (hidden 1152, intermediate 4304, 27 layers, patch 14 of a 896 image, no pooling head):
    # 416,866,032 parameters; the projector 1152 x (text hidden + 1). The totals are the checkpoints' published ones.
    tower = 3 * 14 * 14 * 1152 + 1152 + 64 * 64 * 1152 + 27 * (4 * (1152 * 1152 + 1152) + 4 * 1152 + 2 * 1152 * 4304)
    tower += 27 * (4304 + 1152) + 2 * 1152
    assert tower == 416_866_032
    for name, hidden, total in (("gemma-3-4b-it", 2560, 4_300_079_472), ("gemma-3-27b-it", 5376, 27_432_406_640)):
        count = _count(name)
        assert count.total == total
        assert count.total - count.active == tower + 1152 * (hidden + 1)
        assert any(note.startswith("vision tower (SigLIP)") for note in count.notes)


def test_qwen2_vl_and_qwen2_5_vl_count_their_vit_and_merger_to_the_published_totals() -> None:
    # the official config.json files (flat: the vision_config names no model_type, the decoder's says which ViT);
    # Qwen2-VL-7B-Instruct 8,291,375,616 and Qwen2.5-VL-7B-Instruct 8,292,166,656 parameters published, the same
    # Qwen2 decoder as Qwen2.5-7B (7,615,616,512) + the ViT: patch embed 3 x 2 x 14 x 14 x 1280, 32 blocks, merger
    configs = Path(__file__).parents[1] / "data" / "memory" / "configs"
    decoder = 7_615_616_512
    embed = 3 * 2 * 14 * 14 * 1280
    qkv_proj = 1280 * 3840 + 3840 + 1280 * 1280 + 1280
    v2_block = 4 * 1280 + qkv_proj + 2 * 1280 * 5120 + 5120 + 1280  # LayerNorms, fc1/fc2 (mlp_ratio 4)
    v25_block = 2 * 1280 + qkv_proj + 3 * 1280 * 3420 + 2 * 3420 + 1280  # RMSNorms, gate/up/down (3420)
    merger = 5120 * 5120 + 5120 + 5120 * 3584 + 3584
    for name, block, norm, total in (
        ("Qwen2-VL-7B-Instruct", v2_block, 2 * 1280, 8_291_375_616),
        ("Qwen2.5-VL-7B-Instruct", v25_block, 1280, 8_292_166_656),
    ):
        spec = resolve(str(configs / name))
        count = count_params(spec)
        assert count.total == decoder + embed + 32 * block + norm + merger == total, name
        assert count.active == decoder
        assert spec.count("full_attention") == 28  # use_sliding_window false: every layer full, as vLLM's Qwen2Model


def test_pixtral_and_mistral3s_projector_count_to_mistral_small_3_1s_published_total() -> None:
    # Mistral-Small-3.1-24B-Instruct-2503 (and 3.2-2506): 24,011,361,280 parameters published (keras-hub
    # mistral3_presets.py), the 2501 decoder's 23,572,403,200 + Pixtral + Mistral 3's projector
    tower = 3 * 14 * 14 * 1024 + 1024 + 24 * (2 * 1024 + 4 * 1024 * 1024 + 3 * 1024 * 4096)  # patch_conv, ln_pre
    assert tower == 403_305_472
    projector = 1024 + 4 * 1024 * 1024 + 1024 * 5120 + 5120 * 5120  # norm, 2x2 merging_layer, linear_1, linear_2
    assert projector == 35_652_608
    for name in ("mistral-small-3.1-24b", "mistralai/Mistral-Small-3.2-24B-Instruct-2506"):
        count = _count(name)
        assert count.total == 23_572_403_200 + tower + projector == 24_011_361_280
        assert count.active == _count("mistral-small-24b").total == 23_572_403_200
        assert "vision tower (Pixtral) and projector: 438,958,080 parameters" in count.notes


def test_llama4_vision_model_counts_to_scouts_published_total() -> None:
    # Llama-4-Scout-17B-16E-Instruct: 108,641,793,536 parameters published; the text decoder 107,769,861,120
    embeddings = 3 * 14 * 14 * 1408 + 1408 + (24 * 24 + 1) * 1408  # unfold linear, class, positional (577 rows)
    layer = 4 * (1408 * 1408 + 1408) + 1408 * 5632 + 5632 + 5632 * 1408 + 1408 + 4 * 1408
    adapter = 5632 * 4096 + 4096 * 4096  # pixel-shuffle MLP2 fc1 (intermediate -> 4096), fc2
    tower = embeddings + 2 * 2 * 1408 + 34 * layer + adapter
    assert tower == 850_960_896
    projector = 4096 * 5120
    count = _count("llama-4-scout-17b-16e-instruct")
    assert count.total == 107_769_861_120 + tower + projector == 108_641_793_536
    assert count.active == 17_172_894_720  # the tower is read only when an image is encoded


def test_the_projectors_top_level_fields_travel_with_a_nested_vision_config() -> None:
    cfg = dict(RAW["Mistral-Small-3.1-24B-Instruct-2503"]["config"])
    spec = read_spec({**cfg, "spatial_merge_size": 1, "multimodal_projector_bias": True}, name="m", source="t")
    # no 2x2 merge: merging_layer 1024 x 1024 (not 4096 x 1024); biased linear_1 and linear_2 (2 x 5120)
    assert count_params(spec).total == 24_011_361_280 - 3 * 1024 * 1024 + 2 * 5120


def test_a_vision_tower_without_a_rule_is_said_not_counted() -> None:
    from kvbudget.weights.vision import vision_parts

    parts, note = vision_parts({"vision_config": {"model_type": "intern_vit_6b", "hidden_size": 3200}}, 5120, "qwen2")
    assert parts == [] and "vision tower (intern_vit_6b) not counted" in note
    assert vision_parts({"hidden_size": 4096}, 4096, "llama") == ([], "")


def test_unknown_architecture_fails_closed() -> None:
    # Falcon-H1 has a rule now; the 34B's catalog config (from the transformers doc table) lacks vocab_size, and the
    # error starts with the model and names the field rather than the source address.
    with pytest.raises(ConfigError, match=r"^Falcon-H1-34B: field 'vocab_size' is missing"):
        _count("Falcon-H1-34B")
    spec = spec_of(dense_config(2, 4, 2, 16, model_type="starcoder2", vocab_size=100, intermediate_size=64))
    with pytest.raises(UnknownArchitectureError) as info:
        count_params(spec)
    assert "'starcoder2'" in str(info.value) and "\n" not in str(info.value)
    # the one-line error starts with the model and says the way out
    assert str(info.value).startswith(f"{spec.name}: model_type 'starcoder2'")
    assert "has no parameter-count rule; give the checkpoint" in str(info.value)


def test_missing_vocab_size_names_the_field() -> None:
    spec = spec_of(dense_config(2, 4, 2, 16, intermediate_size=64))
    with pytest.raises(ConfigError, match="'vocab_size' is missing"):
        count_params(spec)


def test_more_experts_per_token_than_experts_is_an_error() -> None:
    cfg = dense_config(2, 4, 2, 16, model_type="mixtral", vocab_size=100, intermediate_size=64)
    cfg.update(num_local_experts=4, num_experts_per_tok=8)
    with pytest.raises(ConfigError, match="num_experts_per_tok 8 exceeds the 4"):
        count_params(spec_of(cfg))
