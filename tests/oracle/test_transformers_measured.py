"""Oracle: the real cache tensors of transformers, measured inside the test suite, byte for byte.

Each case builds a geometry-preserving skeleton of a catalog model (every cache-shaping field kept,
layer counts included; hidden sizes shrunk; windows and chunks shrunk so that short prompts cross
them), prefills N tokens, decodes one, and sums the cache's real storages. Three numbers must
agree: the measurement, kvbudget's ``transformers`` engine at N + 1 tokens, and the hand-worked
bytes below (from shared/reference/measured.md where the geometry is the one measured there).

CI installs torch and transformers (extra ``measure``); without them the measuring tests skip.
"""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import dataclass, field

import pytest

from kvbudget.errors import MissingExtraError
from kvbudget.measure import Measurement, measure
from kvbudget.measure.skeleton_config import skeleton_config
from kvbudget.model import catalog
from kvbudget.model.families import read_spec
from kvbudget.model.sources import resolve
from kvbudget.model.spec import ModelSpec
from tests.helpers import run_cli

KV_8x128 = 2 * 8 * 128 * 2  # K and V, 8 kv heads x 128 dims, bf16: 4,096 B per token per layer


def _spec(name: str, **changes: object) -> ModelSpec:
    """A catalog model, optionally with decoder fields changed (a shrunk window, another dtype)."""
    entry = catalog.lookup(name)
    assert entry is not None, name
    cfg = copy.deepcopy(entry.config)
    decoder = cfg.get("text_config", cfg)
    decoder.update(changes)
    return read_spec(cfg, name=entry.name, source=entry.source)


@dataclass(frozen=True)
class Case:
    model: str
    tokens: int
    expected_total: int
    expected_groups: dict[str, int] = field(default_factory=dict)  # kind -> bytes
    changes: dict[str, object] = field(default_factory=dict)


CASES = {
    # measured.md: 21,299,200 B at 65 tokens (80 layers x 65 x 4,096).
    "llama-3.1-70b-gqa": Case("Llama-3.1-70B", 64, 21_299_200),
    # Multi-head: 64 kv heads x 128 (head_dim from hidden 8192 / 64 heads, pinned in the skeleton).
    "command-r-mha": Case("c4ai-command-r-v01", 32, 40 * 33 * 2 * 64 * 128 * 2),
    # measured.md: 33,554,432 B = 32 layers x 256 tokens: the storage is W, not the W-1 view.
    "mistral-window-capped": Case("Mistral-7B-v0.1", 300, 33_554_432, changes={"sliding_window": 256}),
    "mistral-below-window": Case("Mistral-7B-v0.1", 100, 32 * 101 * KV_8x128, changes={"sliding_window": 256}),
    # Prefill of exactly W-1 tokens: the decode step's cat makes the W-token storage.
    "mistral-at-window": Case("Mistral-7B-v0.1", 255, 33_554_432, changes={"sliding_window": 256}),
    # 21 global layers x 101 tokens + 21 sliding layers x 64, 8 kv x 256 dims.
    "gemma-2-9b-alternating": Case(
        "gemma-2-9b",
        100,
        21 * 101 * 8_192 + 21 * 64 * 8_192,
        {"full_attention": 21 * 101 * 8_192, "sliding_window": 21 * 64 * 8_192},
        {"sliding_window": 64},
    ),
    # 5:1 pattern: 10 global x 65 + 52 sliding x 32, 16 kv x 128 dims.
    "gemma-3-27b-5to1": Case(
        "gemma-3-27b-it",
        64,
        10 * 65 * 8_192 + 52 * 32 * 8_192,
        {"full_attention": 10 * 65 * 8_192, "sliding_window": 52 * 32 * 8_192},
        {"sliding_window": 32},
    ),
    # 36 chunked RoPE layers hold one chunk (32), 12 global NoPE layers every token.
    "llama-4-scout-chunked": Case(
        "Llama-4-Scout-17B-16E-Instruct",
        64,
        36 * 32 * KV_8x128 + 12 * 65 * KV_8x128,
        {"chunked_local": 36 * 32 * KV_8x128, "full_attention": 12 * 65 * KV_8x128},
        {"attention_chunk_size": 32},
    ),
    # measured.md: 4,567,680 B at 65 tokens = 70,272 B/token, the latent (512 + 64) x 61 layers.
    "deepseek-v3-mla": Case("DeepSeek-V3", 64, 4_567_680, {"latent_attention": 65 * 70_272}),
    # measured.md: KV 4,210,688 at 257 tokens; 4,276,224 B per Mamba2 layer (conv [10240, 4] bf16 + SSM fp32).
    "nemotron-h-8b-mamba2": Case(
        "Nemotron-H-8B-Base-8K",
        256,
        4_210_688 + 24 * 4_276_224,
        {"full_attention": 4_210_688, "recurrent": 24 * 4_276_224},
    ),
    # measured.md: KV 6,316,032 at 257 tokens; GDN conv [8192, 4] bf16 + recurrent [32, 128, 128] fp32.
    "qwen3-next-gdn": Case(
        "Qwen3-Next-80B-A3B",
        256,
        6_316_032 + 36 * (8_192 * 4 * 2 + 32 * 128 * 128 * 4),
        {"full_attention": 6_316_032, "recurrent": 36 * (8_192 * 4 * 2 + 32 * 128 * 128 * 4)},
    ),
    # Mamba-1 (Jamba): conv [8192, 4] bf16 + SSM [8192, 16] fp32 on 28 layers; 4 attention layers.
    "jamba-mamba1": Case(
        "Jamba-v0.1",
        16,
        4 * 17 * KV_8x128 + 28 * (8_192 * 4 * 2 + 8_192 * 16 * 4),
        {"full_attention": 4 * 17 * KV_8x128, "recurrent": 28 * (8_192 * 4 * 2 + 8_192 * 16 * 4)},
    ),
    # fp16 model: conv state in fp16, the SSM state still fp32 (the mixer computes it in fp32).
    "nemotron-h-8b-fp16": Case(
        "Nemotron-H-8B-Base-8K",
        16,
        4 * 17 * KV_8x128 + 24 * 4_276_224,
        changes={"torch_dtype": "float16"},
    ),
    # fp32 model: an fp32 cache.
    "llama-3.2-1b-fp32": Case("Llama-3.2-1B", 16, 16 * 17 * 2 * 8 * 64 * 4, changes={"torch_dtype": "float32"}),
}


def _by_kind(result: Measurement) -> dict[str, int]:
    out: dict[str, int] = {}
    for group in result.groups:
        out[group.kind] = out.get(group.kind, 0) + group.measured_bytes
    return out


@pytest.mark.usefixtures("torch_installed")
@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_measured_equals_predicted(case: Case) -> None:
    result = measure(_spec(case.model, **case.changes), case.tokens)
    assert result.cached_tokens == case.tokens + 1
    assert result.unclassified_bytes == 0
    for group in result.groups:
        assert group.measured_bytes == group.predicted_bytes, group
    assert result.measured_bytes == result.predicted_bytes == case.expected_total
    assert result.match
    for kind, expected in case.expected_groups.items():
        assert _by_kind(result)[kind] == expected, kind
    spec = _spec(case.model, **case.changes)
    assert len(result.layer_bytes) == len(spec.layers)  # one cache layer per decoder layer, none dropped


@pytest.mark.usefixtures("torch_installed")
def test_sliding_layer_storage_is_the_window() -> None:
    """After prefill + decode each sliding layer's storage is exactly W tokens (K and V), not W - 1."""
    result = measure(_spec("Mistral-7B-v0.1", sliding_window=256), 300)
    assert set(result.layer_bytes) == {256 * KV_8x128}


@pytest.mark.usefixtures("torch_installed")
def test_cli_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "measure", "Llama-3.1-70B", "--tokens", "64", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["schema_version"] == 1
    assert data["model"] == "Llama-3.1-70B"
    assert (data["tokens"], data["cached_tokens"], data["device"]) == (64, 65, "cpu")
    assert data["predicted_bytes"] == data["measured_bytes"] == 21_299_200
    assert data["difference_bytes"] == 0 and data["match"] is True
    (group,) = data["groups"]
    assert (group["kind"], group["layers"], group["measured_bytes"]) == ("full_attention", 80, 21_299_200)


@pytest.mark.usefixtures("torch_installed")
def test_cli_text_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "measure", "gpt-oss-20b", "--tokens", "8")
    assert code == 0, err
    lines = out.splitlines()
    assert "predicted B" in lines[2] and "measured B" in lines[2] and "match" in lines[2]
    assert any(line.startswith("sliding window 128") and line.endswith("yes") for line in lines)
    assert lines[-1].startswith("total") and lines[-1].endswith("yes")


# ---- without torch: a one-line hint, never a traceback ----


def test_missing_torch_names_the_extra(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingExtraError, match=r"kvbudget\[measure\]"):
        measure(resolve("Llama-3.2-1B"), 4)
    code, _, err = run_cli(capsys, "measure", "Llama-3.2-1B", "--tokens", "4")
    assert code == 1
    assert err.startswith("Error: ") and "kvbudget[measure]" in err and len(err.strip().splitlines()) == 1


# ---- the skeleton config keeps the cache geometry (pure Python) ----


def test_skeleton_keeps_attention_geometry() -> None:
    cfg = skeleton_config(resolve("c4ai-command-r-v01"), 65)
    assert (cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]) == (40, 64, 64)
    assert cfg["head_dim"] == 128  # derived from hidden 8192 / 64 in the real model, pinned here
    assert (cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]) == (64, 64, 256)
    assert cfg["max_position_embeddings"] == 8192
    assert skeleton_config(resolve("c4ai-command-r-v01"), 20_000)["max_position_embeddings"] == 20_001
    llama4 = skeleton_config(resolve("Llama-4-Scout-17B-16E-Instruct"), 65)
    assert llama4["hidden_size"] % 40 == 0 and llama4["attention_chunk_size"] == 8192
    assert llama4["num_local_experts"] == 4 and llama4["intermediate_size_mlp"] == 64


def test_skeleton_keeps_latent_geometry() -> None:
    cfg = skeleton_config(resolve("DeepSeek-V3"), 65)
    assert "quantization_config" not in cfg and "head_dim" not in cfg
    assert (cfg["kv_lora_rank"], cfg["qk_rope_head_dim"], cfg["qk_nope_head_dim"], cfg["v_head_dim"]) == (
        512,
        64,
        128,
        128,
    )
    assert (cfg["num_attention_heads"], cfg["num_hidden_layers"]) == (128, 61)
    assert (cfg["q_lora_rank"], cfg["n_routed_experts"], cfg["n_group"], cfg["topk_group"]) == (32, 4, 1, 1)


def test_skeleton_keeps_recurrent_geometry() -> None:
    jamba = skeleton_config(resolve("Jamba-v0.1"), 17)
    assert jamba["mamba_expand"] * jamba["hidden_size"] == 8_192  # d_inner = expand x hidden, kept
    assert (jamba["mamba_d_state"], jamba["mamba_d_conv"]) == (16, 4)
    codestral = skeleton_config(resolve("Mamba-Codestral-7B-v0.1"), 17)
    assert codestral["expand"] * codestral["hidden_size"] == 128 * 64 == codestral["num_heads"] * codestral["head_dim"]
    falcon = skeleton_config(resolve("Falcon-H1-0.5B"), 17)
    assert falcon["mamba_d_ssm"] == 24 * 64  # FalconH1Config would otherwise fall back to 1024
    nemotron = skeleton_config(resolve("Nemotron-H-8B-Base-8K"), 17)
    assert (nemotron["mamba_num_heads"], nemotron["mamba_head_dim"], nemotron["n_groups"]) == (128, 64, 8)
    assert nemotron["head_dim"] == 128 and "attention_head_dim" not in nemotron


def test_skeleton_for_head_dim_from_hidden_families() -> None:
    cfg = skeleton_config(resolve("Llama-3.2-11B-Vision"), 17)
    # MllamaTextSelfAttention: head_dim = hidden // heads, so heads = kv heads and hidden = 8 x 128.
    assert (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["hidden_size"]) == (8, 8, 1_024)
    assert cfg["cross_attention_layers"] == [3, 8, 13, 18, 23, 28, 33, 38]


@pytest.mark.parametrize(
    ("model", "tokens", "expected"),
    [
        # (catalog model, prompt tokens, real bytes at tokens + 1): `kvbudget measure` on the newest
        # architectures, the indexer keys tallied apart from the latent, LFM2's conv width kept.
        ("deepseek-v3.2", 32, 2_834_304),
        ("glm-5", 32, 3_624_192),
        ("lfm2-350m", 32, 466_944),
    ],
)
def test_measure_command_on_indexer_and_short_conv_models(model: str, tokens: int, expected: int) -> None:
    from kvbudget.model.sources import resolve

    result = measure(resolve(model), tokens=tokens)
    assert all(g.match for g in result.groups) and result.unclassified_bytes == 0
    assert result.predicted_bytes == sum(g.measured_bytes for g in result.groups) == expected
