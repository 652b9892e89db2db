"""Readers added for issue 7 (Gemma 4, Qwen3.5, sparse MLA, Kimi Linear, MiniCPM3, LFM2, EXAONE 4,
transformers-5 layer names), their engine rules, the one registry, and failing closed."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvbudget.cost import compute_cost
from kvbudget.errors import ConfigError, EngineRefusalError, KvBudgetError, UnknownArchitectureError
from kvbudget.model import catalog
from kvbudget.model.architectures import ARCHITECTURES, architecture_of, by_gguf_arch, by_model_type
from kvbudget.model.families import read_spec
from kvbudget.model.spec import FullAttention, LatentAttention, ModelSpec, Recurrent, SharedKV, SlidingWindow
from kvbudget.weights.params import count_params
from kvbudget.weights.rules import LAYER_RULES


def _config(name: str) -> dict[str, Any]:
    entry = catalog.lookup(name)
    assert entry is not None, name
    return copy.deepcopy(entry.config)


def _read(cfg: dict[str, Any]) -> ModelSpec:
    return read_spec(cfg, name="test", source="test")


def _per_token(name: str, engine: str, kv: str = "bf16") -> int:
    return compute_cost(_read(_config(name)), engine=engine, kv_dtype=kv, tokens=1).kv_bytes_per_token


# ---- the registry ----


def test_every_model_type_and_gguf_architecture_is_registered_once() -> None:
    types = [t for a in ARCHITECTURES for t in a.model_types]
    assert len(types) == len(set(types)) == len(by_model_type())
    assert "qwen3_5_moe_text" in by_model_type() and "gemma4_text" in by_model_type()
    for name in (
        "llama4",
        "nemotron_h_moe",
        "smollm3",
        "glm4moe",
        "exaone4",
        "cohere2",
        "gemma3n",
        "lfm2",
        "falcon-h1",
    ):
        assert name in by_gguf_arch(), name


def test_the_parameter_counter_shares_the_registry() -> None:
    assert set(LAYER_RULES) <= set(by_model_type())
    lfm2_moe = dict(_config("LFM2-350M"), model_type="lfm2_moe")  # a registered architecture without a rule
    no_rule = r"^test: model_type 'lfm2_moe' \(.*\) has no parameter-count rule"
    with pytest.raises(UnknownArchitectureError, match=no_rule):
        count_params(_read(lfm2_moe))
    unknown = ModelSpec("x", "no_such_type", ())
    with pytest.raises(UnknownArchitectureError, match="not an architecture kvbudget can read"):
        count_params(unknown)
    assert architecture_of("qwen35moe") is architecture_of("qwen3_5_moe_text")


# ---- Gemma 4 ----


def test_gemma4_per_type_heads_from_global_fields_or_per_layer_config() -> None:
    cfg = _config("gemma-4-26B-A4B-it")
    spec = _read(cfg)
    text = cfg["text_config"]
    resaved = {k: v for k, v in text.items() if k not in ("global_head_dim", "num_global_key_value_heads")}
    full = [i for i, t in enumerate(text["layer_types"]) if t == "full_attention"]
    # transformers 5 saves the full-layer overrides as per_layer_config instead of the global_* fields
    resaved["per_layer_config"] = {str(i): {"head_dim": 512, "num_key_value_heads": 2} for i in full}
    assert _read(resaved).layers == spec.layers
    without_k_eq_v = _read({**text, "attention_k_eq_v": False})
    heads = {s.kv_heads for _, s in without_k_eq_v.primitives() if isinstance(s, FullAttention | SlidingWindow)}
    assert heads == {8}  # the global KV heads apply only with attention_k_eq_v
    with pytest.raises(ConfigError, match="per_layer_config overrides"):
        _read({**resaved, "per_layer_config": {"5": {"sliding_window": 8}}})
    with pytest.raises(ConfigError, match="bidirectional"):
        _read({**text, "use_bidirectional_attention": "all"})


def test_gemma4_shared_kv_reads_the_last_layer_of_its_type() -> None:
    text = _config("gemma-4-26B-A4B-it")["text_config"]
    spec = _read({**text, "num_kv_shared_layers": 10})
    targets = {layer.index: s.target for layer in spec.layers for s in layer.states if isinstance(s, SharedKV)}
    assert sorted(targets) == list(range(20, 30))
    assert set(targets.values()) == {17, 19}  # the last full and the last sliding layer before layer 20


def test_a_dense_reader_refuses_gemma4_fields() -> None:
    with pytest.raises(UnknownArchitectureError, match="per_layer_config"):
        _read({**_config("Llama-3.1-8B"), "per_layer_config": {"0": {"head_dim": 64}}})


# ---- sparse MLA ----


def test_indexer_layers_from_types_pattern_or_frequency() -> None:
    cfg = _config("GLM-5.2")
    assert _read(cfg).count("indexer") == 21
    del cfg["indexer_types"]
    assert _read(cfg).count("indexer") == 21  # index_topk_freq 4, index_skip_topk_offset 3: the same layers
    cfg["index_topk_pattern"] = "F" * 70 + "S" * 8
    assert _read(cfg).count("indexer") == 70
    assert _read(_config("GLM-5")).count("indexer") == 78
    with pytest.raises(ConfigError, match="index_head_dim"):
        _read({**_config("DeepSeek-V3"), "index_head_dim": 128})


def test_sparse_mla_costs_on_every_engine() -> None:
    assert _per_token("DeepSeek-V3.2", "ideal") == 61 * (1152 + 256)
    assert _per_token("DeepSeek-V3.2", "transformers") == 61 * (1152 + 256)
    # vLLM DeepseekV32IndexerCache and SGLang NSATokenToKVPool: 128 fp8 B + one fp32 scale per 128 values
    assert _per_token("DeepSeek-V3.2", "vllm") == 61 * (1152 + 132)
    assert _per_token("DeepSeek-V3.2", "sglang") == 61 * (1152 + 132)
    assert compute_cost(_read(_config("GLM-5")), engine="sglang", tokens=1).layout.block_size == 64
    assert _per_token("DeepSeek-V3.2", "llamacpp", "f16") == 61 * (1152 + 256)
    for engine in ("vllm", "sglang"):
        with pytest.raises(EngineRefusalError, match="sparse-attention"):
            _per_token("DeepSeek-V3.2", engine, "fp8_e4m3")
        with pytest.raises(EngineRefusalError, match="shared"):
            _per_token("GLM-5.2", engine)


# ---- Kimi Linear, MiniCPM3, LFM2, Qwen3.5 ----


def test_kimi_linear_layers_are_one_indexed_in_linear_attn_config() -> None:
    spec = _read(_config("Kimi-Linear-48B-A3B-Instruct"))
    mla = [layer.index for layer in spec.layers if isinstance(layer.states[0], LatentAttention)]
    assert mla == [3, 7, 11, 15, 19, 23, 26]
    kda = {s for _, s in spec.primitives() if isinstance(s, Recurrent)}
    assert kda == {
        Recurrent("kda", 4, num_k_heads=32, head_k_dim=128, num_v_heads=32, head_v_dim=128, ssm_dtype="float32")
    }
    cfg = _config("Kimi-Linear-48B-A3B-Instruct")
    del cfg["linear_attn_config"]
    default = _read(cfg)  # KimiLinearConfig default: full attention on layers i > 0 with i % 4 == 0
    assert [layer.index for layer in default.layers if isinstance(layer.states[0], LatentAttention)] == list(
        range(4, 27, 4)
    )


def test_kda_state_on_each_engine() -> None:
    kimi = _read(_config("Kimi-Linear-48B-A3B-Instruct"))
    conv, state = 3 * 32 * 128, 32 * 128 * 128 * 4
    # vLLM and SGLang: conv_kernel - 1 columns in bf16 and the fp32 state; transformers keeps all 4 columns
    assert compute_cost(kimi, engine="sglang", tokens=1).state_bytes == 20 * (3 * conv * 2 + state)
    assert compute_cost(kimi, engine="transformers", tokens=1).state_bytes == 20 * (4 * conv * 2 + state)
    # llama.cpp: R = 3 x (d_conv - 1) x heads x dim and S = dim^2 x heads, both f32, one row per sequence
    assert compute_cost(kimi, engine="llamacpp", kv_dtype="f16", tokens=1).state_bytes == 20 * (3 * conv * 4 + state)


def test_minicpm3_latent_and_v_head_default() -> None:
    cfg = _config("MiniCPM3-4B")
    assert _per_token("MiniCPM3-4B", "vllm") == 62 * 288 * 2
    del cfg["v_head_dim"]
    assert {s for _, s in _read(cfg).primitives()} == {LatentAttention(256, 32, 40, 64, 2560 // 40)}


def test_lfm2_conv_layers_from_layer_types_or_full_attn_idxs() -> None:
    cfg = _config("LFM2-350M")
    spec = _read(cfg)
    idxs = [i for i, t in enumerate(cfg["layer_types"]) if t == "full_attention"]
    assert _read({**{k: v for k, v in cfg.items() if k != "layer_types"}, "full_attn_idxs": idxs}).layers == spec.layers
    assert compute_cost(spec, engine="vllm", tokens=1).state_bytes >= 10 * 2 * 1024 * 2  # page-padded in vLLM
    assert compute_cost(spec, engine="transformers", tokens=1).state_bytes == 10 * 3 * 1024 * 2
    with pytest.raises(EngineRefusalError, match="short-convolution"):
        compute_cost(spec, engine="sglang", tokens=1)


def test_qwen35_reads_its_text_config() -> None:
    spec = _read(_config("Qwen3.5-35B-A3B"))
    assert spec.model_type == "qwen3_5_moe_text"
    assert (spec.count("full_attention"), spec.count("recurrent")) == (10, 30)


# ---- transformers-5 layer names and EXAONE 4 ----


def test_transformers5_layer_kind_names() -> None:
    cfg = _config("Nemotron-H-8B-Base-8K")
    legacy = _read(cfg)
    kinds = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
    renamed = {k: v for k, v in cfg.items() if k != "hybrid_override_pattern"}
    renamed["layers_block_type"] = [kinds[c] for c in cfg["hybrid_override_pattern"]]
    assert [layer.states for layer in _read(renamed).layers] == [layer.states for layer in legacy.layers]
    with pytest.raises(ConfigError, match="unknown kinds"):
        _read({**renamed, "layers_block_type": ["sliding_attention"] * len(renamed["layers_block_type"])})


def test_exaone4_pattern_string() -> None:
    base = {
        "model_type": "exaone4",
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "sliding_window": 4096,
    }
    assert _read({**base, "sliding_window_pattern": "LLLG"}).count("sliding_window") == 6
    assert _read({**base, "sliding_window_pattern": 4}).count("sliding_window") == 6
    assert _read({**base, "sliding_window": None, "sliding_window_pattern": "LLLG"}).count("sliding_window") == 0
    with pytest.raises(ConfigError, match="L \\(local\\) and G"):
        _read({**base, "sliding_window_pattern": "LLXG"})


def test_unknown_architecture_fails_closed_with_its_fields() -> None:
    with pytest.raises(UnknownArchitectureError, match=r"'qwen9_omega'.*fields it could not place: .*linear_num"):
        _read({"model_type": "qwen9_omega", "num_hidden_layers": 4, "linear_num_value_heads": 8, "head_dim": 64})
    with pytest.raises(KvBudgetError):
        _read({"model_type": "lfm2", "num_hidden_layers": 2, "layer_types": ["conv", "mamba"], "hidden_size": 64})
