"""The Hugging Face ids people serve resolve offline from the catalog (no Hub, no cache), each to the geometry of
its sourced config.json: layers, KV heads, head size, vocabulary, context and parameter count, as integers. A
quantized checkpoint carries its own quantization_config, so its weights are counted as the checkpoint ships
them, never as the bf16 model's."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest

from kvbudget.cost import compute_cost
from kvbudget.model.sources import resolve
from kvbudget.plan.inputs import weights_figure
from kvbudget.weights.checkpoint import checkpoint_precision
from kvbudget.weights.params import count_params
from kvbudget.weights.precision import estimate_weights, weight_precision

GiB = 2**30

# hf id, short name, catalog name, layers, kv heads, head dim, vocab, max positions, parameters (from the config)
MODELS = [
    ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-8b-instruct", "Meta-Llama-3-8B-Instruct",
     32, 8, 128, 128256, 8192, 8_030_261_248),
    ("neuralmagic/Meta-Llama-3-8B-Instruct-FP8", "llama-3-8b-instruct-fp8", "Meta-Llama-3-8B-Instruct-FP8",
     32, 8, 128, 128256, 8192, 8_030_261_248),
    ("Qwen/Qwen2.5-0.5B-Instruct", "qwen2.5-0.5b-instruct", "Qwen2.5-0.5B-Instruct",
     24, 2, 64, 151936, 32768, 494_032_768),
    ("Qwen/Qwen2.5-1.5B-Instruct", "qwen2.5-1.5b-instruct", "Qwen2.5-1.5B-Instruct",
     28, 2, 128, 151936, 32768, 1_543_714_304),
    ("Qwen/Qwen2.5-1.5B", "qwen2.5-1.5b", "Qwen2.5-1.5B", 28, 2, 128, 151936, 131072, 1_543_714_304),
    ("Qwen/Qwen2.5-3B-Instruct", "qwen2.5-3b-instruct", "Qwen2.5-3B-Instruct",
     36, 2, 128, 151936, 32768, 3_085_938_688),
    ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b-instruct", "Qwen2.5-7B-Instruct",
     28, 4, 128, 152064, 32768, 7_615_616_512),
    ("Qwen/Qwen2.5-14B", "qwen2.5-14b", "Qwen2.5-14B", 48, 8, 128, 152064, 131072, 14_770_033_664),
    ("Qwen/Qwen2.5-32B", "qwen2.5-32b", "Qwen2.5-32B", 64, 8, 128, 152064, 131072, 32_763_876_352),
    ("Qwen/Qwen3-0.6B", "qwen3-0.6b", "Qwen3-0.6B", 28, 8, 128, 151936, 40960, 596_049_920),
    ("Qwen/Qwen3-1.7B", "qwen3-1.7b", "Qwen3-1.7B", 28, 8, 128, 151936, 40960, 1_720_574_976),
    ("Qwen/Qwen3-4B", "qwen3-4b", "Qwen3-4B", 36, 8, 128, 151936, 40960, 4_022_468_096),
    ("Qwen/Qwen3-14B", "qwen3-14b", "Qwen3-14B", 40, 8, 128, 151936, 40960, 14_768_307_200),
    ("Qwen/Qwen3-32B-FP8", "qwen3-32b-fp8", "Qwen3-32B-FP8", 64, 8, 128, 151936, 40960, 32_762_123_264),
    ("Qwen/Qwen3-30B-A3B-FP8", "qwen3-30b-a3b-fp8", "Qwen3-30B-A3B-FP8", 48, 4, 128, 151936, 40960, 30_532_122_624),
    ("Qwen/Qwen3-235B-A22B-FP8", "qwen3-235b-a22b-fp8", "Qwen3-235B-A22B-FP8",
     94, 4, 128, 151936, 40960, 235_093_634_560),
    ("mistralai/Mistral-7B-Instruct-v0.3", "mistral-7b-instruct-v0.3", "Mistral-7B-Instruct-v0.3",
     32, 8, 128, 32768, 32768, 7_248_023_552),
    ("mistralai/Mixtral-8x22B-v0.1", "mixtral-8x22b", "Mixtral-8x22B-v0.1", 56, 8, 128, 32000, 65536, 140_620_634_112),
    ("google/gemma-3-1b-it", "gemma-3-1b-it", "gemma-3-1b-it", 26, 1, 256, 262144, 32768, 999_885_952),
    ("microsoft/Phi-3.5-mini-instruct", "phi-3.5-mini", "Phi-3.5-mini-instruct",
     32, 32, 96, 32064, 131072, 3_821_079_552),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b-instruct", "Mixtral-8x7B-Instruct-v0.1",
     32, 8, 128, 32000, 32768, 46_702_792_704),
    ("mistralai/Mixtral-8x22B-Instruct-v0.1", "mixtral-8x22b-instruct", "Mixtral-8x22B-Instruct-v0.1",
     56, 8, 128, 32768, 65536, 140_630_071_296),
    ("mistralai/Mistral-Nemo-Instruct-2407", "mistral-nemo-instruct", "Mistral-Nemo-Instruct-2407",
     40, 8, 128, 131072, 131072, 12_247_782_400),
    ("Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3-30b-a3b-instruct-2507", "Qwen3-30B-A3B-Instruct-2507",
     48, 4, 128, 151936, 262144, 30_532_122_624),
]  # fmt: skip

# Models served with another entry's config (its config.json equal in every field the planner reads)
SAME_GEOMETRY = [
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "r1-distill-llama-8b", "DeepSeek-R1-Distill-Llama-8B", "Llama-3.1-8B"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "r1-distill-qwen-32b", "DeepSeek-R1-Distill-Qwen-32B", "Qwen2.5-32B"),
    ("Qwen/Qwen2.5-3B", "qwen2.5-3b", "Qwen2.5-3B", "Qwen2.5-3B-Instruct"),
]

# Published safetensors totals (the Hub's model API, as stored copies of it quote them; sources in models.json)
PUBLISHED = {
    "Meta-Llama-3-8B-Instruct": 8_030_261_248,  # meta-llama/Meta-Llama-3-8B's total: the same architecture
    "Qwen2.5-0.5B-Instruct": 494_032_768,
    "Qwen2.5-1.5B-Instruct": 1_543_714_304,
    "Qwen2.5-3B-Instruct": 3_085_938_688,
    "Qwen2.5-7B-Instruct": 7_615_616_512,
    "gemma-3-1b-it": 999_885_952,
    "DeepSeek-R1-Distill-Llama-8B": 8_030_261_248,
    "DeepSeek-R1-Distill-Qwen-32B": 32_763_876_352,
    "Qwen3-32B": 32_762_123_264,  # the geometry Qwen3-32B-FP8 quantizes
}


def _raw() -> dict[str, dict[str, Any]]:
    text = resources.files("kvbudget.model.catalog").joinpath("models.json").read_text(encoding="utf-8")
    return {m["name"]: m for m in json.loads(text)["models"]}


@pytest.mark.parametrize(
    ("hf_id", "short", "name", "layers", "kv", "head_dim", "vocab", "positions", "params"),
    MODELS,
    ids=[m[0] for m in MODELS],
)
def test_hf_id_resolves_offline_to_its_sourced_geometry(
    hf_id: str, short: str, name: str, layers: int, kv: int, head_dim: int, vocab: int, positions: int, params: int
) -> None:
    for ref in (hf_id, short, hf_id.lower(), hf_id.split("/")[1]):
        spec = resolve(ref)
        assert spec.name == name, ref
        assert spec.model_id == hf_id, ref
    attention = [s for _, s in spec.primitives() if s.kind in ("full_attention", "sliding_window")]
    assert len(spec.layers) == len(attention) == layers
    assert {s.kv_heads for s in attention} == {kv}
    assert {s.k_dim for s in attention} == {s.v_dim for s in attention} == {head_dim}
    assert spec.config["vocab_size"] == vocab
    assert spec.config["max_position_embeddings"] == positions
    assert count_params(spec).total == params
    # 512 tokens fit every window here (gemma-3-1b-it slides over 512, Phi-3.5-mini over 262,144): K+V on every layer
    assert compute_cost(spec, tokens=512).total_bytes == 2 * kv * head_dim * layers * 2 * 512


@pytest.mark.parametrize(("hf_id", "short", "name", "base"), SAME_GEOMETRY, ids=[m[0] for m in SAME_GEOMETRY])
def test_same_geometry_ids_name_the_config_they_use(hf_id: str, short: str, name: str, base: str) -> None:
    for ref in (hf_id, short, hf_id.split("/")[1]):
        spec = resolve(ref)
        assert spec.name == f"{name} (same geometry as {base})", ref
        assert spec.model_id == hf_id
        assert spec.source.startswith(f"{base}'s config: ")
    assert count_params(resolve(hf_id)).total == count_params(resolve(base)).total
    assert compute_cost(resolve(hf_id), tokens=4096).total_bytes == compute_cost(resolve(base), tokens=4096).total_bytes


@pytest.mark.parametrize(("name", "published"), sorted(PUBLISHED.items()))
def test_counts_equal_the_published_safetensors_totals(name: str, published: int) -> None:
    assert count_params(resolve(name)).total == published
    raw = _raw()
    if "published_total" in raw.get(name, {}).get("params_total", {}):
        assert raw[name]["params_total"]["value"] == raw[name]["params_total"]["published_total"] == published


def test_qwen3_0_6b_checkpoint_stores_its_tied_lm_head_once_more() -> None:
    """The published total (751,632,384) is the config's count plus one vocab x hidden matrix: the checkpoint keeps an
    lm_head.weight copy although tie_word_embeddings is true; the engines tie it, so the weights as loaded are the
    config's count."""
    spec = resolve("Qwen/Qwen3-0.6B")
    assert count_params(spec).total + 151936 * 1024 == _raw()["Qwen3-0.6B"]["params_total"]["published_total"]


def test_instruct_ids_are_not_served_with_the_base_context() -> None:
    """Qwen2.5-7B-Instruct's config.json has 32,768 positions, the base 131,072: the id was an alias of the base
    model, so vLLM's default context was planned at 131,072."""
    assert resolve("Qwen/Qwen2.5-7B-Instruct").config["max_position_embeddings"] == 32768
    assert resolve("Qwen/Qwen2.5-7B").config["max_position_embeddings"] == 131072
    # Llama 3 (8,192, no rope scaling) is not Llama 3.1 (131,072, llama3 scaling)
    llama3 = resolve("meta-llama/Meta-Llama-3-8B-Instruct")
    assert llama3.config["max_position_embeddings"] == 8192 and llama3.config.get("rope_scaling") is None
    assert resolve("meta-llama/Llama-3.1-8B-Instruct").name == "Llama-3.1-8B"
    # Qwen3-30B-A3B-2507: the same experts, 262,144 positions and rope_theta 1e7 (the original 40,960, 1e6)
    q2507, q3 = resolve("Qwen/Qwen3-30B-A3B-Instruct-2507"), resolve("Qwen/Qwen3-30B-A3B")
    assert (q2507.config["max_position_embeddings"], q3.config["max_position_embeddings"]) == (262144, 40960)
    assert (q2507.config["rope_theta"], q3.config["rope_theta"]) == (10_000_000, 1_000_000)
    assert count_params(q2507).total == count_params(q3).total


@pytest.mark.parametrize(
    ("hf_id", "base"),
    [
        ("Qwen/Qwen3-32B-FP8", "Qwen/Qwen3-32B"),
        ("Qwen/Qwen3-30B-A3B-FP8", "Qwen/Qwen3-30B-A3B"),
        ("Qwen/Qwen3-235B-A22B-FP8", "Qwen/Qwen3-235B-A22B"),
    ],
)
def test_fp8_checkpoints_weigh_their_quantization_config(hf_id: str, base: str) -> None:
    spec, bf16 = resolve(hf_id), resolve(base)
    shipped = checkpoint_precision(spec)
    assert shipped is not None and shipped.precision == weight_precision("fp8") and shipped.keep == ()
    assert checkpoint_precision(bf16) is None
    assert count_params(spec).total == count_params(bf16).total  # the same geometry, quantized
    weights = weights_figure(spec, hf_id, None, None)
    assert weights.bytes == estimate_weights(count_params(spec), weight_precision("fp8")).total_bytes
    assert "quantization_config: fp8 e4m3, 128x128 block scales" in weights.basis
    assert weights.bytes < 0.6 * weights_figure(bf16, base, None, None).bytes
    # the same bytes as the bf16 entry planned with --weights fp8 (how the real-log rows of these checkpoints run)
    assert weights.bytes == weights_figure(bf16, base, "fp8", None).bytes
    assert compute_cost(spec, tokens=8192).total_bytes == compute_cost(bf16, tokens=8192).total_bytes


def test_llama3_fp8_weighs_its_published_checkpoint_size() -> None:
    """neuralmagic/Meta-Llama-3-8B-Instruct-FP8's model.safetensors.index.json gives total_size 9,081,202,432 bytes:
    fp8 linear layers, bf16 embeddings, lm_head and norms, plus one fp32 weight_scale and input_scale per linear layer
    (7 x 32 layers x 2 x 4 bytes), which the weights figure leaves out."""
    spec = resolve("neuralmagic/Meta-Llama-3-8B-Instruct-FP8")
    shipped = checkpoint_precision(spec)
    assert shipped is not None and shipped.precision == weight_precision("fp8") and shipped.keep == ()
    published = _raw()["Meta-Llama-3-8B-Instruct-FP8"]["params_total"]["checkpoint_bytes"]
    assert published == 9_081_202_432
    weights = weights_figure(spec, "neuralmagic/Meta-Llama-3-8B-Instruct-FP8", None, None)
    assert weights.bytes + 7 * 32 * 2 * 4 == published
    bf16 = resolve("meta-llama/Meta-Llama-3-8B-Instruct")
    assert compute_cost(spec, tokens=8192).total_bytes == compute_cost(bf16, tokens=8192).total_bytes == 2 * GiB // 2


def test_instruct_ids_keep_their_own_vocabulary() -> None:
    """Mixtral-8x22B-Instruct-v0.1 has the v3 tokenizer's 32,768 tokens where the base has 32,000: its own entry, two
    768 x 6,144 matrices (embeddings and lm_head) larger; Mixtral-8x7B-Instruct-v0.1 counts as its base does."""
    instruct, base = resolve("mistralai/Mixtral-8x22B-Instruct-v0.1"), resolve("mistralai/Mixtral-8x22B-v0.1")
    assert count_params(instruct).total - count_params(base).total == 2 * 768 * 6144
    assert count_params(resolve("mixtral-8x7b-instruct")).total == count_params(resolve("mixtral-8x7b")).total
    # Mistral-Nemo writes head_dim 128: hidden_size / heads would be 160
    nemo = resolve("mistralai/Mistral-Nemo-Instruct-2407")
    assert (nemo.config["hidden_size"], nemo.config["num_attention_heads"], nemo.config["head_dim"]) == (5120, 32, 128)
    assert compute_cost(nemo, tokens=1).total_bytes == 2 * 8 * 128 * 40 * 2


def test_every_new_entry_names_a_stored_source() -> None:
    raw = _raw()
    for name in {m[2] for m in MODELS}:
        assert raw[name]["source"].startswith("GitHub "), name
        assert "@" in raw[name]["source"], name  # pinned to a commit


def test_llama4_scout_fp8_dynamic_weighs_its_compressed_tensors_config() -> None:
    """RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic: compressed-tensors fp8 weights whose ignore list keeps every
    layer's q/k/v/o projections and router at bf16; the experts and dense MLPs are fp8. Its config.json writes
    ``no_rope_layers: []``, which Llama4TextConfig reads as absent: 36 chunked layers and 12 global NoPE layers, the
    bf16 model's cache."""
    hf_id = "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic"
    spec, bf16 = resolve(hf_id), resolve("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    assert spec.name == "Llama-4-Scout-17B-16E-Instruct-FP8-dynamic" and spec.model_id == hf_id
    assert _raw()["Llama-4-Scout-17B-16E-Instruct-FP8-dynamic"]["config"]["text_config"]["no_rope_layers"] == []
    shipped = checkpoint_precision(spec)
    assert shipped is not None and shipped.precision == weight_precision("fp8") and shipped.keep == ("attention",)
    # the stored copy of its config carries the text model only; the bf16 entry's also carries the vision tower
    # and projector (871,932,416 parameters, weights/vision.py), which the checkpoint ships too
    assert count_params(spec).total == 107_769_861_120
    assert count_params(bf16).total == 107_769_861_120 + 871_932_416
    weights = weights_figure(spec, hf_id, None, None)
    assert "102,676,561,920 at fp8" in weights.basis and "5,093,299,200 kept at bf16" in weights.basis
    assert weights.bytes == 102_676_561_920 + 2 * 5_093_299_200
    # attention kept at bf16: more than the bf16 entry planned with --weights fp8 (attention in fp8)
    assert weights.bytes > weights_figure(bf16, "meta-llama/Llama-4-Scout-17B-16E-Instruct", "fp8", None).bytes
    kinds = [s.kind for _, s in spec.primitives()]
    assert kinds == [s.kind for _, s in bf16.primitives()]
    assert compute_cost(spec, tokens=100_000).total_bytes == compute_cost(bf16, tokens=100_000).total_bytes
