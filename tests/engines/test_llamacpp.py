"""llama.cpp engine: every number in shared/reference/measured.md (llama.cpp section), the engine's
refusals, and its own log lines, from catalog geometries and hand-built specs."""

from __future__ import annotations

import pytest

from kvbudget.cost import compute_cost
from kvbudget.engines import parse_engine
from kvbudget.engines.base import EngineOptions
from kvbudget.engines.llamacpp import (
    context_cells,
    kv_cache_log_lines,
    layout,
    recurrent_rows,
    swa_cells,
)
from kvbudget.errors import EngineRefusalError, InputError
from kvbudget.model.sources import resolve
from kvbudget.model.spec import FullAttention, LayerSpec, ModelSpec, Recurrent, SharedKV, SlidingWindow
from kvbudget.precision import CacheDType, parse_cache_dtype
from tests.helpers import dense_config, spec_of

MIB = 1024 * 1024
F16 = parse_cache_dtype("f16")


def dt(name: str) -> CacheDType:
    return parse_cache_dtype(name)


def total(
    model: str | ModelSpec,
    tokens: int,
    sequences: int = 1,
    kv: str = "f16",
    *,
    flash_attn: bool = True,
    swa_full: bool = False,
) -> int:
    spec = resolve(model) if isinstance(model, str) else model
    options = EngineOptions(flash_attn=flash_attn, swa_full=swa_full)
    return compute_cost(
        spec, engine="llamacpp", kv_dtype=kv, tokens=tokens, sequences=sequences, options=options
    ).total_bytes


# --- Llama-3.1-70B geometry (80 layers, 8 KV heads x 128), n_ctx 4096, one sequence -------------


@pytest.mark.parametrize(
    ("kv", "flash_attn", "mib"),
    [("f16", True, 1280), ("f16", False, 1280), ("q8_0", True, 680), ("q4_0", True, 360), ("q8_0/f16", False, 980)],
)
def test_llama70b_measured_sizes(kv: str, flash_attn: bool, mib: int) -> None:
    assert total("Llama-3.1-70B", 4096, kv=kv, flash_attn=flash_attn) == mib * MIB


def test_llama70b_measured_log_lines() -> None:
    spec = resolve("Llama-3.1-70B")
    assert kv_cache_log_lines(spec, F16, F16, 4096) == [
        "llama_kv_cache: size = 1280.00 MiB (  4096 cells,  80 layers,  1/1 seqs), "
        "K (f16):  640.00 MiB, V (f16):  640.00 MiB"
    ]
    q8, q4 = dt("q8_0"), dt("q4_0")
    assert kv_cache_log_lines(spec, q8, q8, 4096)[0].startswith("llama_kv_cache: size =  680.00 MiB")
    assert kv_cache_log_lines(spec, q4, q4, 4096)[0].startswith("llama_kv_cache: size =  360.00 MiB")
    mixed = kv_cache_log_lines(spec, q8, F16, 4096, options=EngineOptions(flash_attn=False))
    assert mixed == [
        "llama_kv_cache: size =  980.00 MiB (  4096 cells,  80 layers,  1/1 seqs), "
        "K (q8_0):  340.00 MiB, V (f16):  640.00 MiB"
    ]


def test_quantized_v_without_flash_attention_is_refused_with_llamacpps_reason() -> None:
    with pytest.raises(EngineRefusalError, match="V cache quantization requires flash_attn"):
        total("Llama-3.1-70B", 4096, kv="q4_0", flash_attn=False)
    # A quantized K alone is fine without flash attention (only V is transposed).
    assert total("Llama-3.1-70B", 4096, kv="q8_0/bf16", flash_attn=False) == 980 * MIB


def test_context_padded_to_256_cells() -> None:
    spec = resolve("Llama-3.1-70B")
    assert context_cells(1000, 1, unified=False) == (1024, 1)
    assert total(spec, 1000) == 1024 * 327_680
    assert "(  1024 cells,  80 layers,  1/1 seqs)" in kv_cache_log_lines(spec, F16, F16, 1000)[0]


def test_four_sequences_get_one_stream_each() -> None:
    spec = resolve("Llama-3.1-70B")
    assert context_cells(4096, 4, unified=False) == (1024, 4)
    assert total(spec, 1024, 4) == 1280 * MIB
    assert kv_cache_log_lines(spec, F16, F16, 4096, 4) == [
        "llama_kv_cache: size = 1280.00 MiB (  1024 cells,  80 layers,  4/4 seqs), "
        "K (f16):  640.00 MiB, V (f16):  640.00 MiB"
    ]
    unified = EngineOptions(kv_unified=True)
    assert context_cells(4096, 4, unified=True) == (4096, 1)
    assert "(  4096 cells,  80 layers,  4/1 seqs)" in kv_cache_log_lines(spec, F16, F16, 4096, 4, unified)[0]


def test_context_split_rounds_each_stream_up_to_256() -> None:
    assert context_cells(4097, 4, unified=False) == (1280, 4)  # pad(4097)=4352; 4352/4=1088 -> 1280
    assert context_cells(4096, 32, unified=False) == (256, 32)  # -np 32 -c 4096 reads 256, not 128
    with pytest.raises(EngineRefusalError, match="LLAMA_MAX_SEQ"):
        context_cells(4096, 257, unified=False)


def test_per_token_bytes_and_layout_contract() -> None:
    lay = layout(resolve("Llama-3.1-70B"), F16, F16, 1, EngineOptions())
    assert lay.engine == "llamacpp"
    assert lay.version == "b7900"
    assert lay.kv_bytes_per_token == 327_680
    assert parse_engine("llama.cpp").version == "b7900"
    assert compute_cost(resolve("Llama-3.1-70B"), engine="llamacpp@b9000").layout.version == "b9000"


# --- Gemma-3-27B geometry: 52 sliding (W 1024) + 10 global, 16 KV heads x 128 ------------------


def test_gemma3_sliding_layers_get_window_plus_ubatch_cells() -> None:
    spec = resolve("gemma-3-27b-it")
    assert swa_cells(4096, 1024, 1, EngineOptions()) == 1536
    per_cell = 16 * 128 * 2 * 2
    assert total(spec, 4096) == (10 * 4096 + 52 * 1536) * per_cell
    assert total(spec, 4096, swa_full=True) == 62 * 4096 * per_cell
    lines = kv_cache_log_lines(spec, F16, F16, 4096)
    assert lines == [
        "llama_kv_cache_iswa: creating non-SWA KV cache, size = 4096 cells",
        "llama_kv_cache: size =  320.00 MiB (  4096 cells,  10 layers,  1/1 seqs), "
        "K (f16):  160.00 MiB, V (f16):  160.00 MiB",
        "llama_kv_cache_iswa: creating     SWA KV cache, size = 1536 cells",
        "llama_kv_cache: size =  624.00 MiB (  1536 cells,  52 layers,  1/1 seqs), "
        "K (f16):  312.00 MiB, V (f16):  312.00 MiB",
    ]
    full = kv_cache_log_lines(spec, F16, F16, 4096, options=EngineOptions(swa_full=True))
    assert full[2] == "llama_kv_cache_iswa: creating     SWA KV cache, size = 4096 cells"


def test_sliding_groups_do_not_grow_unless_swa_full() -> None:
    spec = resolve("gemma-3-27b-it")
    capped = layout(spec, F16, F16, 1, EngineOptions())
    assert capped.kv_bytes_per_token == 10 * 8192
    swa = next(g for g in capped.groups if g.kind == "sliding_window")
    assert swa.per_token_bytes == 0
    assert swa.bytes_at(100_000, 1) == swa.bytes_at(200_000, 1) == 52 * 8192 * 1536
    assert layout(spec, F16, F16, 1, EngineOptions(swa_full=True)).kv_bytes_per_token == 62 * 8192


def test_unified_sliding_cache_reserves_the_window_per_sequence() -> None:
    opts = EngineOptions(kv_unified=True)
    assert swa_cells(16384, 1024, 4, opts) == 4608  # pad(min(16384, 1024*4 + 512), 256)
    assert swa_cells(4096, 1024, 4, opts) == 4096  # never more than the base cache
    assert swa_cells(4096, 1024, 1, EngineOptions(n_ubatch=2048)) == 3072


def test_gpt_oss_window_128() -> None:
    spec = resolve("gpt-oss-20b")
    per_cell = 8 * 64 * 2 * 2
    # 12 full layers at 8192 cells, 12 sliding at pad(128 + 512, 256) = 768 cells
    assert total(spec, 8192) == 12 * per_cell * (8192 + 768)


# --- DeepSeek-V3 (arch deepseek2): V-less latent cache ------------------------------------------


def test_deepseek_v3_latent_k_only() -> None:
    spec = resolve("DeepSeek-V3")
    assert kv_cache_log_lines(spec, F16, F16, 4096) == [
        "llama_kv_cache: size =  274.50 MiB (  4096 cells,  61 layers,  1/1 seqs), "
        "K (f16):  274.50 MiB, V (f16):    0.00 MiB"
    ]
    assert layout(spec, F16, F16, 1, EngineOptions()).kv_bytes_per_token == 70_272
    assert layout(spec, dt("q8_0"), dt("q8_0"), 1, EngineOptions()).kv_bytes_per_token == 61 * 612 == 37_332


def test_deepseek_v3_older_storages() -> None:
    spec = resolve("DeepSeek-V3")
    latent_v = layout(spec, F16, F16, 1, EngineOptions(mla_storage="latent+v"))
    assert latent_v.kv_bytes_per_token == 61 * (576 + 512) * 2 == 132_736
    expanded = layout(spec, F16, F16, 1, EngineOptions(mla_storage="expanded"))
    assert expanded.kv_bytes_per_token == 61 * (128 * 192 + 128 * 128) * 2 == 4_997_120


def test_v_less_mla_needs_one_type_for_k_and_v() -> None:
    with pytest.raises(EngineRefusalError, match="same type"):
        layout(resolve("DeepSeek-V3"), dt("q8_0"), F16, 1, EngineOptions())
    # the older K + V storage had separate types
    assert layout(resolve("DeepSeek-V3"), dt("q8_0"), F16, 1, EngineOptions(mla_storage="latent+v"))


# --- hybrids: attention KV plus F32 recurrent state ---------------------------------------------


def test_nemotron_h_8b_kv_and_recurrent_state() -> None:
    spec = resolve("Nemotron-H-8B-Base-8K")
    assert kv_cache_log_lines(spec, F16, F16, 4096) == [
        "llama_kv_cache: size =   64.00 MiB (  4096 cells,   4 layers,  1/1 seqs), "
        "K (f16):   32.00 MiB, V (f16):   32.00 MiB",
        "llama_memory_recurrent: size =   98.81 MiB (     1 cells,  52 layers,  1 seqs), "
        "R (f32):    2.81 MiB, S (f32):   96.00 MiB",
    ]
    four = kv_cache_log_lines(spec, F16, F16, 4096, 4)
    assert four[1].endswith("R (f32):   11.25 MiB, S (f32):  384.00 MiB")
    assert "(     4 cells,  52 layers,  4 seqs)" in four[1]
    state = 24 * (3 * (8192 + 2 * 8 * 128) + 128 * 8192) * 4
    assert total(spec, 4096) == 64 * MIB + state
    assert total(spec, 1024, 4) == 64 * MIB + 4 * state


def test_recurrent_state_is_f32_whatever_the_cache_type() -> None:
    spec = resolve("Nemotron-H-8B-Base-8K")
    q8 = layout(spec, dt("q8_0"), dt("q8_0"), 1, EngineOptions())
    f32 = layout(spec, dt("f32"), dt("f32"), 1, EngineOptions())
    assert q8.state_bytes == f32.state_bytes == 24 * 4_317_184


def test_qwen3_next_kv_and_gated_delta_net_state() -> None:
    spec = resolve("Qwen3-Next-80B-A3B")
    gdn = next(s for _, s in spec.primitives() if isinstance(s, Recurrent))
    assert recurrent_rows(gdn) == (3 * (32 * 128 + 2 * 16 * 128), 128 * 32 * 128)
    lines = kv_cache_log_lines(spec, F16, F16, 4096)
    assert lines[0].startswith("llama_kv_cache: size =   96.00 MiB (  4096 cells,  12 layers,  1/1 seqs)")
    assert lines[1] == (
        "llama_memory_recurrent: size =   75.38 MiB (     1 cells,  48 layers,  1 seqs), "
        "R (f32):    3.38 MiB, S (f32):   72.00 MiB"
    )


def test_qwen36_27b_lm_studio_report() -> None:
    # LM Studio bug #1862: Qwen3.6-27B at 262,144 tokens, 4 sequences: KV 16,384 MiB (16 attention layers)
    # + recurrent 598.5 MiB. Geometry: 64 layers, every 4th full attention (4 KV heads x 256),
    # gated delta net 16 k heads x 128, 48 v heads x 128, conv 4.
    cfg = {
        **dense_config(64, 24, 4, 256, model_type="qwen3_next"),
        "full_attention_interval": 4,
        "linear_conv_kernel_dim": 4,
        "linear_num_key_heads": 16,
        "linear_key_head_dim": 128,
        "linear_num_value_heads": 48,
        "linear_value_head_dim": 128,
    }
    lines = kv_cache_log_lines(spec_of(cfg), F16, F16, 262_144, 4)
    assert lines[0].startswith("llama_kv_cache: size = 16384.00 MiB ( 65536 cells,  16 layers,  4/4 seqs)")
    assert "llama_memory_recurrent: size =  598.50 MiB (     4 cells,  64 layers,  4 seqs)" in lines[1]


# --- refusals and edge cases ---------------------------------------------------------------------


@pytest.mark.parametrize("kv", ["fp8", "int8", "nvfp4", "int4", "fp8_per_token_head"])
def test_cache_types_llamacpp_does_not_have_are_refused(kv: str) -> None:
    with pytest.raises(EngineRefusalError, match="f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1"):
        total("Llama-3.1-70B", 4096, kv=kv)


@pytest.mark.parametrize("kv", ["q4_1", "iq4_nl", "q5_0", "q5_1", "f32", "bf16"])
def test_every_llamacpp_cache_type_is_accepted(kv: str) -> None:
    per_elem = {"q4_1": 20, "iq4_nl": 18, "q5_0": 22, "q5_1": 24, "f32": 128, "bf16": 64}[kv]
    assert total("Llama-3.1-70B", 4096, kv=kv) == 80 * 2 * 8 * 4 * per_elem * 4096


def test_rows_must_fill_whole_blocks() -> None:
    spec = spec_of(dense_config(2, 32, 32, 80))  # head dim 80: not a multiple of 32
    with pytest.raises(InputError, match="whole blocks"):
        total(spec, 4096, kv="q8_0")


def test_tensor_parallel_is_refused() -> None:
    with pytest.raises(EngineRefusalError, match="does not shard the KV cache"):
        compute_cost(resolve("Llama-3.1-70B"), engine="llamacpp", tp=2)


def test_cross_attention_is_refused() -> None:
    with pytest.raises(EngineRefusalError, match="no cross-attention"):
        compute_cost(resolve("Llama-3.2-11B-Vision"), engine="llamacpp")


def test_shared_kv_layers_allocate_nothing() -> None:
    layers = (*tuple(LayerSpec(i, (FullAttention(2, 64, 64),)) for i in range(2)), LayerSpec(2, (SharedKV(1),)))
    spec = ModelSpec("shared", "test", layers)
    lay = layout(spec, F16, F16, 1, EngineOptions())
    assert [g.kind for g in lay.groups] == ["full_attention", "shared_kv"]
    assert lay.total_bytes(4096, 1) == 2 * 2 * 64 * 2 * 2 * 4096


def test_flash_attention_off_stores_v_at_the_widest_layer() -> None:
    # src/llama-kv-cache.cpp: with v_trans every V tensor is n_embd_v_gqa_max() wide.
    layers = (LayerSpec(0, (FullAttention(8, 128, 128),)), LayerSpec(1, (FullAttention(2, 128, 128),)))
    spec = ModelSpec("uneven", "test", layers)
    on = layout(spec, F16, F16, 1, EngineOptions())
    off = layout(spec, F16, F16, 1, EngineOptions(flash_attn=False))
    assert on.kv_bytes_per_token == (8 + 2) * 128 * 2 * 2
    assert off.kv_bytes_per_token == (8 + 2) * 128 * 2 + 2 * 8 * 128 * 2


def test_two_different_windows_are_refused() -> None:
    layers = (LayerSpec(0, (SlidingWindow(2, 64, 64, 512),)), LayerSpec(1, (SlidingWindow(2, 64, 64, 1024),)))
    mixed = ModelSpec("w", "test", layers)
    with pytest.raises(EngineRefusalError, match="single sliding window"):
        layout(mixed, F16, F16, 1, EngineOptions())


def test_log_lines_refuse_nonsense_settings() -> None:
    with pytest.raises(InputError):
        kv_cache_log_lines(resolve("Llama-3.1-70B"), F16, F16, 0)
