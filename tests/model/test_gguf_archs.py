"""The GGUF readers added for issue 7, on metadata alone (no llama-server): llama.cpp's hard-coded rules,
the layer filters, and failing closed. The live tests (tests/live/test_arch_gguf_live.py) check the same
files against llama.cpp's own allocation."""

from __future__ import annotations

from collections import Counter

import pytest

from kvbudget.errors import ConfigError, UnknownArchitectureError
from kvbudget.model.architectures import by_gguf_arch
from kvbudget.model.gguf import spec_from_metadata
from kvbudget.model.spec import ChunkedLocal, FullAttention, ModelSpec, Recurrent, SharedKV, SlidingWindow


def _spec(arch: str, **changes: object) -> ModelSpec:
    keys = {**by_gguf_arch()[arch].gguf_example, **changes}
    values = {"general.architecture": arch, **{f"{arch}.{k}": v for k, v in keys.items() if v is not None}}
    return spec_from_metadata(values, f"{arch}.gguf", arch)


def _kinds(spec: ModelSpec) -> dict[str, int]:
    return dict(Counter(state.kind for _, state in spec.primitives()))


def test_llama4_chunks_at_8192_unless_the_window_is_zero() -> None:
    spec = _spec("llama4")
    chunked = {s for _, s in spec.primitives() if isinstance(s, ChunkedLocal)}
    assert chunked == {ChunkedLocal(8, 128, 128, 8192)} and spec.count("chunked_local") == 36
    assert [i for i, layer in enumerate(spec.layers) if isinstance(layer.states[0], FullAttention)] == list(
        range(3, 48, 4)
    )
    # src/models/llama4.cpp overrides any other window with 8192; a 0 key turns chunking off
    other = _spec("llama4", **{"attention.sliding_window": 1024})
    assert {s.chunk for _, s in other.primitives() if isinstance(s, ChunkedLocal)} == {8192}
    assert _kinds(_spec("llama4", **{"attention.sliding_window": 0})) == {"full_attention": 48}


def test_exaone4_slides_only_with_64_layers() -> None:
    assert _kinds(_spec("exaone4")) == {"sliding_window": 48, "full_attention": 16}
    windows = {s.window for _, s in _spec("exaone4").primitives() if isinstance(s, SlidingWindow)}
    assert windows == {4096}
    keyed = _spec("exaone4", **{"attention.sliding_window": 2048})
    assert {s.window for _, s in keyed.primitives() if isinstance(s, SlidingWindow)} == {2048}
    thirty = {"block_count": 30, "attention.head_count_kv": 8, "attention.sliding_window": 4096}
    assert _kinds(_spec("exaone4", **thirty)) == {"full_attention": 30}  # EXAONE-4.0-1.2B: swa_type none


def test_cohere2_every_fourth_layer_is_global() -> None:
    spec = _spec("cohere2")
    assert [i for i, layer in enumerate(spec.layers) if isinstance(layer.states[0], FullAttention)] == list(
        range(3, 32, 4)
    )
    flags = [i % 2 == 0 for i in range(32)]
    assert _spec("cohere2", **{"attention.sliding_window_pattern": flags}).count("sliding_window") == 16


def test_gemma3n_keeps_kv_for_twenty_layers() -> None:
    spec = _spec("gemma3n")
    assert _kinds(spec) == {"sliding_window": 16, "full_attention": 4, "shared_kv": 15}
    targets = {s.target for _, s in spec.primitives() if isinstance(s, SharedKV)}
    assert targets == {18, 19}  # 20 - 2 for sliding layers, 20 - 1 for full ones


def test_glm4moe_mtp_layer_holds_no_kv() -> None:
    spec = _spec("glm4moe")
    assert len(spec.layers) == 47 and spec.count("full_attention") == 46 and spec.layers[46].states == ()
    assert "multi-token-prediction" in " ".join(spec.notes)
    with pytest.raises(UnknownArchitectureError, match="nextn_predict_layers"):
        _spec("smollm3", nextn_predict_layers=1)  # an architecture whose reader does not place MTP layers


def test_lfm2_falcon_h1_and_nemotron_h_moe_states() -> None:
    lfm2 = _spec("lfm2")
    assert _kinds(lfm2) == {"recurrent": 10, "full_attention": 6}
    assert {s for _, s in lfm2.primitives() if isinstance(s, Recurrent)} == {Recurrent("short_conv", 3, d_inner=1024)}
    assert _kinds(_spec("lfm2", **{"attention.sliding_window": 512})) == {"recurrent": 10, "sliding_window": 6}
    falcon = _spec("falcon-h1")
    assert all(len(layer.states) == 2 for layer in falcon.layers)
    assert _kinds(falcon) == {"full_attention": 36, "recurrent": 36}
    assert _kinds(_spec("nemotron_h_moe")) == {"recurrent": 23, "full_attention": 6}
    with pytest.raises(ConfigError, match="MTP blocks"):
        _spec("nemotron_h_moe", nextn_predict_layers=1)


def test_smollm3_reads_as_dense() -> None:
    assert {s for _, s in _spec("smollm3").primitives()} == {FullAttention(4, 128, 128)}


def test_unread_gguf_architecture_names_what_it_could_not_place() -> None:
    values = {"general.architecture": "rwkv7", "rwkv7.block_count": 24, "rwkv7.wkv.head_size": 64}
    with pytest.raises(UnknownArchitectureError, match=r"'rwkv7' is not one kvbudget can read.*wkv.head_size"):
        spec_from_metadata(values, "rwkv7.gguf", "rwkv7")


def test_sparse_mla_indexer_layers() -> None:
    v32 = _spec("deepseek32")
    assert len(v32.layers) == 62 and v32.layers[61].states == ()  # the MTP layer
    assert _kinds(v32) == {"latent_attention": 61, "indexer": 61}
    assert _kinds(_spec("glm-dsa")) == {"latent_attention": 78, "indexer": 78}  # GLM-5: context below 1M
    glm52 = _spec("glm-dsa", context_length=1_048_576)  # llama.cpp's built-in GLM-5.2 pattern
    assert [i for i, layer in enumerate(glm52.layers) if len(layer.states) == 2] == [0, 1, *range(2, 78, 4)]
    explicit = _spec("glm-dsa", **{"attention.indexer.types": [int(i % 2 == 0) for i in range(78)]})
    assert explicit.count("indexer") == 39
    with pytest.raises(ConfigError, match="needs an MLA GGUF"):
        _spec("deepseek32", **{"attention.key_length_mla": None})


def test_minicpm3_is_a_per_head_cache_in_llamacpp() -> None:
    spec = _spec("minicpm3")
    assert {s for _, s in spec.primitives()} == {FullAttention(40, 96, 64)}  # V: 2,560 / 40 heads
    assert "not the kv_lora_rank + rope latent" in " ".join(spec.notes)


def test_gemma4_per_type_geometry_and_shared_kv() -> None:
    spec = _spec("gemma4")
    assert {s for _, s in spec.primitives()} == {FullAttention(2, 512, 512), SlidingWindow(8, 256, 256, 1024)}
    full = [(i + 1) % 5 == 0 for i in range(35)]
    small = {
        "block_count": 35,
        "attention.head_count_kv": [2 if f else 8 for f in full],
        "attention.sliding_window_pattern": [not f for f in full],
        "attention.shared_kv_layers": 20,
    }
    shared = _spec("gemma4", **small)
    assert {s.target for _, s in shared.primitives() if isinstance(s, SharedKV)} == {13, 14}
    with pytest.raises(ConfigError, match="cannot load this file"):
        _spec("gemma4", **{"attention.shared_kv_layers": 10})  # layer 19 of the 26B pattern is sliding


def test_kimi_linear_gguf() -> None:
    spec = _spec("kimi-linear")
    assert _kinds(spec) == {"recurrent": 20, "latent_attention": 7}
    kda = {s for _, s in spec.primitives() if isinstance(s, Recurrent)}
    assert kda == {
        Recurrent("kda", 4, num_k_heads=32, head_k_dim=128, num_v_heads=32, head_v_dim=128, ssm_dtype="float32")
    }
