"""transformers engine, pure arithmetic: measured.md's transformers numbers, hand-worked shapes from
the 5.24 source (cache_utils.py and each modeling file), version branches and refusals.
The same rules are checked against real cache tensors in tests/oracle/test_transformers_measured.py."""

from __future__ import annotations

import copy

import pytest

from kvbudget.cost import compute_cost
from kvbudget.engines import parse_engine
from kvbudget.engines import transformers as hf
from kvbudget.engines.base import EngineOptions, Layout
from kvbudget.errors import EngineRefusalError
from kvbudget.model import catalog
from kvbudget.model.families import read_spec
from kvbudget.model.sources import resolve
from kvbudget.model.spec import LayerSpec, ModelSpec, Primitive, Recurrent
from kvbudget.precision import parse_cache_dtype

BF16 = parse_cache_dtype("bf16")


def _layout(spec: ModelSpec, dtype: str = "bf16", version: str = hf.DEFAULT_VERSION, **opts: object) -> Layout:
    dt = parse_cache_dtype(dtype)
    return hf.layout(spec, dt, dt, 1, EngineOptions(**opts), version)  # type: ignore[arg-type]


def _catalog(name: str, **changes: object) -> ModelSpec:
    """A catalog model with some decoder fields changed (windows shrunk, as the oracle tests do)."""
    entry = catalog.lookup(name)
    assert entry is not None
    cfg = copy.deepcopy(entry.config)
    decoder = cfg.get("text_config", cfg)
    decoder.update(changes)
    return read_spec(cfg, name=entry.name, source=entry.source)


def test_contract() -> None:
    assert hf.NAME == "transformers"
    assert hf.DEFAULT_VERSION == "5.24.0"
    assert parse_engine("transformers").version == "5.24.0"
    assert parse_engine("hf").name == "transformers"
    assert parse_engine("transformers<5").version == "4.57.6"


# ---- measured.md, transformers 5.24 bf16 (steady state after prefill + 1 decode) ----


def test_llama70b_measured() -> None:
    layout = _layout(resolve("Llama-3.1-70B"))
    assert layout.kv_bytes_per_token == 327_680  # 80 x 2 x 8 x 128 x 2
    assert layout.sequence_bytes(65) == 21_299_200


def test_mistral_window_measured() -> None:
    layout = _layout(_catalog("Mistral-7B-v0.1", sliding_window=256))
    assert layout.sequence_bytes(601) == 33_554_432  # 32 layers x 256 tokens x 4,096 B
    assert layout.sequence_bytes(101) == 32 * 101 * 4_096  # below the window: every token
    assert layout.sequence_bytes(256) == layout.sequence_bytes(10_000)  # storage is W, not W - 1
    assert layout.kv_bytes_per_token == 0


def test_gemma2_measured() -> None:
    # 21 global layers x 4,201 tokens + 21 sliding layers x 4,096 (the window), 8 kv x 256 x 2 x 2 B.
    assert _layout(resolve("gemma-2-9b")).sequence_bytes(4_201) == 1_427_349_504


def test_gemma3_measured() -> None:
    # 10 global layers x 1,201 + 52 sliding layers x 1,024, 16 kv x 128 x 2 x 2 B.
    assert _layout(resolve("gemma-3-27b-it")).sequence_bytes(1_201) == 534_593_536


def test_deepseek_v3_latent_and_expanded() -> None:
    spec = resolve("DeepSeek-V3")
    latent = _layout(spec)
    assert latent.kv_bytes_per_token == 70_272  # 61 x (512 + 64) x 2
    assert latent.sequence_bytes(65) == 4_567_680
    expanded = _layout(spec, version="4.57.6")
    assert expanded.kv_bytes_per_token == 4_997_120  # 61 x 128 x (192 + 128) x 2
    assert compute_cost(spec, engine="transformers<5", tokens=1).kv_bytes_per_token == 4_997_120
    assert _layout(spec, mla_storage="expanded").kv_bytes_per_token == 4_997_120
    assert _layout(spec, version="4.57.6", mla_storage="latent").kv_bytes_per_token == 70_272


def test_mla_versions_before_the_fix_are_flagged() -> None:
    layout = _layout(resolve("DeepSeek-V3"), version="5.3.0")
    assert layout.kv_bytes_per_token == 70_272
    assert any("PR #47761" in w for w in layout.warnings)
    assert not _layout(resolve("DeepSeek-V3")).warnings


def test_mla_latent_plus_v_refused() -> None:
    with pytest.raises(EngineRefusalError, match="latent\\+v"):
        _layout(resolve("DeepSeek-V3"), mla_storage="latent+v")


def test_nemotron_h_measured() -> None:
    layout = _layout(resolve("Nemotron-H-8B-Base-8K"))
    (state,) = [g for g in layout.groups if g.kind == "recurrent"]
    # conv [10240, 4] bf16 + SSM [128, 64, 128] fp32 (the config pins nothing; the code computes in fp32).
    assert state.state_bytes == 10_240 * 4 * 2 + 128 * 64 * 128 * 4 == 4_276_224
    assert state.layers == 24
    (attention,) = [g for g in layout.groups if g.kind == "full_attention"]
    assert attention.bytes_at(257, 1) == 4_210_688  # 4 layers x 257 x 8 kv x 128 x 2 x 2


def test_qwen3_next_measured() -> None:
    layout = _layout(resolve("Qwen3-Next-80B-A3B"))
    (attention,) = [g for g in layout.groups if g.kind == "full_attention"]
    assert attention.bytes_at(257, 1) == 6_316_032  # 12 layers x 257 x 2 kv x 256 x 2 x 2
    (state,) = [g for g in layout.groups if g.kind == "recurrent"]
    # conv [2*16*128 + 32*128 = 8192, 4] bf16 + recurrent [32, 128, 128] fp32.
    assert state.state_bytes == 8_192 * 4 * 2 + 32 * 128 * 128 * 4


def test_jamba_mamba1_state() -> None:
    layout = _layout(resolve("Jamba-v0.1"))
    (state,) = [g for g in layout.groups if g.kind == "recurrent"]
    # d_inner 2 x 4096: conv [8192, 4] bf16 + SSM [8192, 16] fp32.
    assert state.state_bytes == 8_192 * 4 * 2 + 8_192 * 16 * 4


def test_recurrent_state_is_fp32_whatever_the_model_dtype() -> None:
    spec = resolve("Nemotron-H-8B-Base-8K")
    (fp16,) = [g for g in _layout(spec, "fp16").groups if g.kind == "recurrent"]
    (fp32,) = [g for g in _layout(spec, "fp32").groups if g.kind == "recurrent"]
    assert fp16.state_bytes == 4_276_224
    assert fp32.state_bytes == 10_240 * 4 * 4 + 128 * 64 * 128 * 4


def test_pinned_ssm_dtype_is_noted_not_applied() -> None:
    mamba = Recurrent(
        "mamba2", conv_kernel=4, d_inner=64, d_state=16, n_groups=1, num_heads=4, head_dim=16, ssm_dtype="bfloat16"
    )
    layout = _layout(_hand((mamba,)))
    assert layout.groups[0].state_bytes == (64 + 2 * 16) * 4 * 2 + 4 * 16 * 16 * 4
    assert any("keeps fp32" in n for n in layout.notes)


def _hand(*layers: tuple[Primitive, ...]) -> ModelSpec:
    return ModelSpec("hand", "test", tuple(LayerSpec(i, states) for i, states in enumerate(layers)))


def test_llama4_chunked_is_a_sliding_layer_of_the_chunk() -> None:
    layout = _layout(_catalog("Llama-4-Scout-17B-16E-Instruct", attention_chunk_size=32))
    by_kind = {g.kind: g for g in layout.groups}
    assert by_kind["chunked_local"].layers == 36
    assert by_kind["chunked_local"].bytes_at(65, 1) == 36 * 32 * 8 * 128 * 2 * 2
    assert by_kind["full_attention"].bytes_at(65, 1) == 12 * 65 * 8 * 128 * 2 * 2


def test_cross_attention_holds_the_image_tokens() -> None:
    spec = resolve("Llama-3.2-11B-Vision")
    (cross,) = [g for g in _layout(spec).groups if g.kind == "cross_attention"]
    assert cross.layers == 8
    assert cross.state_bytes == 6_404 * 8 * 128 * 2 * 2
    (none,) = [g for g in _layout(spec, image_tokens=0).groups if g.kind == "cross_attention"]
    assert none.state_bytes == 0


def test_shared_kv_layers_hold_nothing() -> None:
    cfg = {
        "model_type": "gemma3n_text",
        "num_hidden_layers": 4,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 8,
        "hidden_size": 16,
        "num_kv_shared_layers": 2,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        "sliding_window": 4,
    }
    layout = _layout(read_spec(cfg, name="tiny", source="test"))
    shared = [g for g in layout.groups if g.kind == "shared_kv"]
    assert sum(g.layers for g in shared) == 2
    assert all(g.bytes_at(100, 3) == 0 for g in shared)
    assert layout.kv_bytes_per_token == 1 * 8 * 2 * 2  # the one full layer that is not shared


def test_falcon_h1_layers_hold_attention_and_mamba() -> None:
    layout = _layout(resolve("Falcon-H1-0.5B"))
    kinds = sorted((g.kind, g.layers) for g in layout.groups)
    assert kinds == [("full_attention", 36), ("recurrent", 36)]


def test_sequences_scale_linearly_and_windows_cap() -> None:
    layout = _layout(resolve("gemma-3-27b-it"))
    assert layout.total_bytes(5_000, 4) == 4 * layout.sequence_bytes(5_000)
    assert layout.sequence_bytes(2_000) - layout.sequence_bytes(1_999) == layout.kv_bytes_per_token
    assert layout.kv_bytes_per_token == 10 * 16 * 128 * 2 * 2


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_compute_dtypes_accepted(dtype: str) -> None:
    size = parse_cache_dtype(dtype).block_bytes
    assert _layout(resolve("Llama-3.1-70B"), dtype).kv_bytes_per_token == 80 * 2 * 8 * 128 * size


@pytest.mark.parametrize("dtype", ["int4", "int2:g32", "q8_0", "fp8", "int8", "nvfp4"])
def test_quantized_dtypes_refused(dtype: str) -> None:
    with pytest.raises(EngineRefusalError, match="QuantizedCache") as info:
        _layout(resolve("Llama-3.1-70B"), dtype)
    message = str(info.value)
    assert "128" in message and "--engine ideal" in message and "full attention" in message


def test_mixed_k_v_refused() -> None:
    with pytest.raises(EngineRefusalError, match="compute dtype"):
        hf.layout(resolve("Llama-3.1-70B"), BF16, parse_cache_dtype("fp16"), 1, EngineOptions())


def test_tensor_parallel_refused() -> None:
    with pytest.raises(EngineRefusalError, match="one device per layer"):
        hf.layout(resolve("Llama-3.1-70B"), BF16, BF16, 2, EngineOptions())


def test_old_versions_warn() -> None:
    assert any("layered" in w for w in _layout(resolve("Llama-3.1-8B"), version="4.45.0").warnings)
    assert any("4.57.6" in w for w in _layout(resolve("Llama-3.1-8B"), version="4.57.6").warnings)


def test_cost_through_the_engine_name() -> None:
    report = compute_cost(resolve("Qwen3-Next-80B-A3B"), engine="transformers", tokens=257)
    assert report.total_bytes == 6_316_032 + 36 * (8_192 * 4 * 2 + 32 * 128 * 128 * 4)
    assert report.layout.engine == "transformers"
    assert any("steady state" in n for n in report.layout.notes)
