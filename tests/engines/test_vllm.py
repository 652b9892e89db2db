"""vLLM engine: every expected number below is worked out by hand (comments) or comes from a public oracle."""

from __future__ import annotations

import pytest

from kvbudget.cost import compute_cost
from kvbudget.engines import vllm
from kvbudget.engines.base import EngineOptions, Layout
from kvbudget.errors import EngineRefusalError
from kvbudget.model.sources import resolve
from kvbudget.model.spec import (
    FullAttention,
    LayerSpec,
    ModelSpec,
    Primitive,
    Recurrent,
    SharedKV,
    SlidingWindow,
)
from kvbudget.precision import parse_cache_dtype

BF16 = parse_cache_dtype("bf16")
GiB = 2**30


def _layout(name: str, version: str = vllm.DEFAULT_VERSION, tp: int = 1, dtype: str = "bf16", **opts: object) -> Layout:
    dt = parse_cache_dtype(dtype)
    return vllm.layout(resolve(name), dt, dt, tp, EngineOptions(**opts), version)  # type: ignore[arg-type]


def _spec(*layers: tuple[Primitive, ...]) -> ModelSpec:
    return ModelSpec("hand", "test", tuple(LayerSpec(i, states) for i, states in enumerate(layers)))


# ---- dense and MLA page sizes (measured.md: vLLM's own spec classes on CPU) ----


def test_llama_70b_full_attention_page_and_per_token() -> None:
    spec = resolve("llama-3.1-70b")
    pool = vllm.pool(spec, BF16, BF16)
    # FullAttentionSpec(8 kv heads, 128, bf16) at block 16: 16 x 8 x (128+128) x 2 = 65,536 B
    assert pool.page_bytes == 65_536
    assert pool.mode == "uniform"
    assert pool.layers_per_block == 80
    report = compute_cost(spec, engine="vllm", tokens=1000)
    assert report.kv_bytes_per_token == 327_680
    assert report.layout.block_size == 16
    # 1000 tokens -> cdiv(1000, 16) = 63 blocks = 1,008 slots; 80 layers x 4,096 B x 1,008
    assert report.sequence_bytes == 330_301_440
    # nothing else changes with S sequences
    assert compute_cost(spec, engine="vllm", tokens=1000, sequences=7).total_bytes == 7 * 330_301_440


def test_deepseek_v3_mla_latent() -> None:
    spec = resolve("deepseek-v3")
    # MLAAttentionSpec(1, 576, bf16) at block 16: 16 x 576 x 2 = 18,432 B; 61 layers x 1,152 B = 70,272 B/token
    assert vllm.pool(spec, BF16, BF16, options=EngineOptions(block_size=16)).page_bytes == 18_432
    report = compute_cost(spec, engine="vllm", options=EngineOptions(block_size=16))
    assert report.kv_bytes_per_token == 70_272
    # vLLM 0.33 on Hopper with a bf16 cache picks FLASH_ATTN_MLA (blocks of 16, as vLLM's own code does in
    # tests/oracle): 100 tokens -> 7 blocks = 112 slots x 70,272 B
    default = compute_cost(spec, engine="vllm", tokens=100)
    assert default.layout.block_size == 16
    assert default.sequence_bytes == 112 * 70_272
    assert any("FLASH_ATTN_MLA" in n for n in default.layout.notes)
    # fp8 latent: 576 B per layer per token; FLASH_ATTN_MLA takes 16-bit caches only, so FlashMLA's 64
    fp8 = compute_cost(spec, engine="vllm", kv_dtype="fp8", tokens=100)
    assert fp8.kv_bytes_per_token == 35_136
    assert fp8.layout.block_size == 64
    # the GPU decides: Blackwell FlashInfer-MLA (32), Ampere Triton MLA (16); vLLM 0.25 FlashMLA's 64
    assert vllm.pool(spec, BF16, BF16, options=EngineOptions(gpu_capability=100)).block_size == 32
    assert vllm.pool(spec, BF16, BF16, options=EngineOptions(gpu_capability=80)).block_size == 16
    assert vllm.pool(spec, BF16, BF16, version="0.25.0").block_size == 64


def test_mla_replicated_on_every_rank() -> None:
    report = compute_cost(resolve("deepseek-v3"), engine="vllm", tp=8)
    assert report.kv_bytes_per_token == 70_272
    assert any("replicated on all 8 GPUs" in w for w in report.layout.warnings)


def test_mla_expanded_models_vllm_mla_disable() -> None:
    # VLLM_MLA_DISABLE: 128 heads x (192 K + 192 V, V padded to the K head size) x 2 B = 98,304 B per layer
    report = compute_cost(resolve("deepseek-v3"), engine="vllm", options=EngineOptions(mla_storage="expanded"))
    assert report.kv_bytes_per_token == 61 * 98_304
    assert report.layout.block_size == 16
    tp8 = compute_cost(resolve("deepseek-v3"), engine="vllm", tp=8, options=EngineOptions(mla_storage="expanded"))
    assert tp8.kv_bytes_per_token == 61 * 12_288  # 16 heads per rank


def test_llama_8b_tp16_replicates_heads() -> None:
    report = compute_cost(resolve("llama-3.1-8b"), engine="vllm", tp=16)
    # max(1, 8 // 16) = 1 head: 2 x 128 x 2 B x 32 layers = 16,384 B/token/rank
    assert report.kv_bytes_per_token == 16_384
    assert any("replicated" in w for w in report.layout.warnings)


# ---- vLLM issue #12330: Llama-3-8B, 11.12 GiB -> 5,691 blocks, 11.12x at 8192 tokens ----


def test_issue_12330_blocks_and_concurrency() -> None:
    pool = vllm.pool(resolve("llama-3.1-8b"), BF16, BF16, version="0.7.0")
    # a block of 16 tokens over 32 layers: 32 x 65,536 B = 2 MiB
    assert pool.block_bytes == 2 * 2**20
    # 5,691 blocks <=> available in [5,691, 5,692) x 2 MiB; both ends print as 11.12 GiB
    low, high = 5_691 * 2**21, 5_692 * 2**21
    assert (low, high) == (11_934_892_032, 11_936_989_184)
    assert f"{low / GiB:.2f}" == f"{(high - 1) / GiB:.2f}" == "11.12"
    for available in (low, (low + high) // 2, high - 1):
        assert vllm.num_blocks(pool, available) == 5_691
        # 5,691 blocks / cdiv(8192, 16) = 512 blocks per request = 11.115...
        assert f"{vllm.max_concurrency(pool, available, 8192):.2f}" == "11.12"
    assert vllm.num_blocks(pool, high) == 5_692
    assert vllm.report_lines(pool, low, 8192) == (
        "GPU KV cache size: 91,056 tokens",  # v0.7: 5,691 x 16
        "Maximum concurrency for 8,192 tokens per request: 11.12x",
    )


def test_log_token_count_by_version() -> None:
    spec = resolve("gpt-oss-20b")
    available = 12 * GiB  # // 32,768 B page // 12 layers per group = 32,768 blocks
    tokens = {}
    for version in ("0.9.2", "0.20.0", "0.25.0", "0.28.0"):
        pool = vllm.pool(spec, BF16, BF16, version=version)
        assert vllm.num_blocks(pool, available) == 32_768
        assert pool.num_groups == 2
        tokens[version] = vllm.kv_cache_size_tokens(pool, available, 8192)
    # <= 0.9: blocks x B; 0.10-0.26: blocks // 2 groups x 16; >= 0.27: int(32,768 / 1,025 x 8,192) = 261,888
    # (1,025 blocks per request at 8,192 tokens = 512 full + cdiv(8,192, 16) + 1 sliding)
    assert tokens == {"0.9.2": 524_288, "0.20.0": 262_144, "0.25.0": 262_144, "0.28.0": 261_888}


# ---- sliding window: gpt-oss-20b (12 sliding W=128 + 12 full, 8 kv heads x 64) ----


def test_gpt_oss_sliding_window_by_version() -> None:
    spec = resolve("gpt-oss-20b")
    old = compute_cost(spec, engine="vllm<0.26", tokens=32_768)
    new = compute_cost(spec, engine="vllm@0.26", tokens=32_768)
    slot = 8 * 64 * 2 * 2  # 2,048 B per layer per token
    full = 12 * slot * 32_768
    # 0.25: (cdiv(min(127 + 8,192, 32,768), 16) + 1) x 16 = (520 + 1) x 16 = 8,336 slots
    assert old.sequence_bytes == full + 12 * slot * 8_336 == 1_010_171_904
    # 0.26: in-flight 2 x 8,192 = 16,384 -> (cdiv(16,511, 16) + 1) x 16 = (1,032 + 1) x 16 = 16,528 slots
    assert new.sequence_bytes == full + 12 * slot * 16_528 == 1_211_498_496
    assert old.kv_bytes_per_token == new.kv_bytes_per_token == 12 * slot
    # short prompt: min(..., 100) -> (7 + 1) blocks = 128 slots in both versions
    short = compute_cost(spec, engine="vllm", tokens=100).layout
    sliding = next(g for g in short.groups if g.kind == "sliding_window")
    assert sliding.slots(100, 3) == 3 * 128
    assert "16,384" in sliding.slots.text and "window 128" in sliding.slots.text
    old_sliding = next(g for g in old.layout.groups if g.kind == "sliding_window")
    assert "8,192" in old_sliding.slots.text


def test_max_num_batched_tokens_option() -> None:
    layout = _layout("gpt-oss-20b", max_num_batched_tokens=2048)
    sliding = next(g for g in layout.groups if g.kind == "sliding_window")
    # 0.28: 127 + 2 x 2,048 = 4,223 -> (264 + 1) x 16 = 4,240 slots
    assert sliding.slots(32_768, 1) == 4_240
    assert any("2,048 (as set)" in n for n in layout.notes)


def test_pipeline_parallelism_keeps_pp_plus_one_batches_in_flight() -> None:
    # vLLM 0.33 at PP 2 (V2 model runner): max_in_flight_tokens 3 x 8,192 = 24,576 (read from vLLM's own
    # VllmConfig in tests/oracle/test_vllm_matrix.py); a 32K sliding-window sequence holds 128 - 1 + 24,576
    # -> (cdiv(24,703, 16) + 1) x 16 = (1,544 + 1) x 16 = 24,720 slots, against 16,528 at PP 1
    single = _layout("gpt-oss-20b")
    staged = _layout("gpt-oss-20b", pipeline_parallel=2)
    window = [next(g for g in layout.groups if g.kind == "sliding_window") for layout in (single, staged)]
    assert [g.slots(32_768, 1) for g in window] == [16_528, 24_720]
    assert "24,576 = 3 batches x 8,192" in window[1].slots.text


def test_disable_hybrid_turns_sliding_into_full() -> None:
    spec = resolve("gpt-oss-20b")
    options = EngineOptions(disable_hybrid_kv_cache_manager=True)
    report = compute_cost(spec, engine="vllm", tokens=32_768, options=options)
    assert report.sequence_bytes == 24 * 2_048 * 32_768 == 1_610_612_736
    pool = vllm.pool(spec, BF16, BF16, options=options)
    assert (pool.mode, pool.layers_per_block, pool.num_groups) == ("uniform", 24, 1)


def test_disable_hybrid_refused_with_mamba() -> None:
    rec = Recurrent("mamba1", 4, d_inner=64, d_state=4)
    spec = _spec((FullAttention(1, 16, 16),), (SlidingWindow(1, 16, 16, 64),), (rec,))
    with pytest.raises(EngineRefusalError, match="failed to convert"):
        vllm.layout(spec, BF16, BF16, 1, EngineOptions(disable_hybrid_kv_cache_manager=True), "0.28.0")


def test_chunked_local_llama4() -> None:
    spec = resolve("llama-4-scout-17b-16e-instruct")
    new = compute_cost(spec, engine="vllm", tokens=32_768).layout
    old = compute_cost(spec, engine="vllm<0.26", tokens=32_768).layout
    # 0.28: cdiv(min(8,192 + 16,384, 32,768), 16) x 16 = 24,576; 0.25: min(8,192 + 8,192, N) = 16,384
    assert next(g for g in new.groups if g.kind == "chunked_local").slots(32_768, 1) == 24_576
    assert next(g for g in old.groups if g.kind == "chunked_local").slots(32_768, 1) == 16_384
    # 36 chunked + 12 full: group size 12, 3 + 1 groups, no padding
    pool = vllm.pool(spec, BF16, BF16)
    assert (pool.layers_per_block, pool.num_groups) == (12, 4)


def test_cross_attention_fixed_per_sequence() -> None:
    layout = _layout("llama-3.2-11b-vision")
    cross = next(g for g in layout.groups if g.kind == "cross_attention")
    # cdiv(6,404, 16) x 16 = 6,416 slots x 4,096 B
    assert cross.state_bytes == 26_279_936
    assert layout.kv_bytes_per_token == 32 * 4_096
    # 32 full + 8 cross: group size 8 -> 4 + 1 groups
    assert vllm.pool(resolve("llama-3.2-11b-vision"), BF16, BF16).num_groups == 5


def test_shared_kv_layers_allocate_nothing() -> None:
    spec = _spec((FullAttention(2, 64, 64),), (SharedKV(0),), (FullAttention(2, 64, 64),))
    layout = vllm.layout(spec, BF16, BF16, 1, EngineOptions(), "0.28.0")
    # 2 layers x 2 x 2 x 64 x 2 B = 1,024 B/token; the sharing layer adds 0
    assert layout.kv_bytes_per_token == 1_024
    assert vllm.pool(spec, BF16, BF16).layers_per_block == 2


# ---- hybrid attention + Mamba block alignment ----


def test_nemotron_h_block_alignment_by_hand() -> None:
    spec = resolve("nemotron-h-8b-base-8k")
    layout = vllm.layout(spec, BF16, BF16, 1, EngineOptions(), "0.28.0")
    # Mamba2 state (SSM in fp32, NemotronHConfig's and vLLM's NemotronH default):
    #   conv 3 x (8,192 + 2 x 8 x 128) x 2 B = 61,440 + SSM 128 x 64 x 128 x 4 B = 4,194,304 -> 4,255,744 B.
    # Attention page per token: 8 x 256 x 2 = 4,096 B.
    # block = 16 x cdiv(4,255,744, 16 x 4,096) = 16 x 65 = 1,040; page 1,040 x 4,096 = 4,259,840 (+0.10%)
    assert layout.block_size == 1040
    assert any("Setting attention block size to 1040 tokens" in n for n in layout.notes)
    assert any("Padding mamba page size by 0.10%" in n for n in layout.notes)
    # prefix caching is on by default for hybrids, so mamba_cache_mode "align": 2 pages per request (0.28)
    state = next(g for g in layout.groups if g.kind == "recurrent")
    assert state.state_bytes == 2 * 4_259_840
    assert "4,194,304" in state.state_formula and "61,440" in state.state_formula
    # 8,192 tokens: cdiv(8,192, 1,040) = 8 blocks = 8,320 slots; 4 x 4,096 x 8,320 + 24 x 2 x 4,259,840
    assert layout.sequence_bytes(8192) == 136_314_880 + 2 * 102_236_160
    off = vllm.layout(spec, BF16, BF16, 1, EngineOptions(prefix_caching=False), "0.28.0")
    assert off.sequence_bytes(8192) == 136_314_880 + 102_236_160  # mode "none": one page
    pool = vllm.pool(spec, BF16, BF16)
    # 4 attention + 24 Mamba: group size 4 -> 1 + 6 groups; one block spans 4 pages
    assert (pool.mode, pool.layers_per_block, pool.num_groups) == ("hybrid", 4, 7)
    assert vllm.num_blocks(pool, 8 * GiB) == 504  # 8 GiB // 4,259,840 // 4
    # vLLM 0.33, align mode: each Mamba2 group holds 2 + 1 prefill checkpoint pages per request
    assert (pool.prefix_caching, pool.mamba_cache_mode) == (True, "align")
    assert pool.blocks_per_request(8192) == 8 + 6 * 3
    assert vllm.pool(spec, BF16, BF16, options=EngineOptions(prefix_caching=False)).blocks_per_request(8192) == 8 + 6


def _qwen35_spec() -> ModelSpec:
    # Qwen3.5-35B-A3B: 40 layers, every 4th full attention (2 kv heads x 256); gated delta net 16 k / 32 v
    # heads x 128, conv 4, config mamba_ssm_dtype float32
    gdn = Recurrent(
        "gated_delta_net", 4, num_k_heads=16, head_k_dim=128, num_v_heads=32, head_v_dim=128, ssm_dtype="float32"
    )
    layers = [(FullAttention(2, 256, 256),) if i % 4 == 3 else (gdn,) for i in range(40)]
    return _spec(*layers)


def test_qwen35_block_size_matches_public_log() -> None:
    # vLLM 0.18.1 log for Qwen3.5-35B-A3B-FP8 (bf16 KV): "Setting attention block size to 1056 tokens" and
    # "Padding mamba page size by 0.76%". State 3 x 8,192 x 2 + 32 x 128 x 128 x 4 = 2,146,304 B;
    # 16 x cdiv(2,146,304, 16 x 2,048) = 16 x 66 = 1,056; (2,162,688 - 2,146,304) / 2,146,304 = 0.76%
    layout = vllm.layout(_qwen35_spec(), BF16, BF16, 1, EngineOptions(), "0.18.1")
    assert layout.block_size == 1056
    assert any("Padding mamba page size by 0.76%" in n for n in layout.notes)


def test_qwen3_next_block_size_with_model_dtype_ssm() -> None:
    # vLLM 0.13 log, Qwen3-Next-80B at TP=2 with fp8 KV: "Setting attention block size to 1072 tokens".
    # With the SSM state in the model dtype: conv 3 x 4,096 x 2 + 16 x 128 x 128 x 2 = 548,864 B;
    # attention 1 head x 512 x 1 B = 512 B/token -> 16 x cdiv(548,864, 8,192) = 16 x 67 = 1,072
    spec = resolve("qwen3-next-80b-a3b")  # its config pins no SSM dtype: vLLM's auto = model dtype
    fp8 = parse_cache_dtype("fp8")
    assert vllm.layout(spec, fp8, fp8, 2, EngineOptions(), "0.13.0").block_size == 1072


def test_pure_mamba_one_page_per_sequence() -> None:
    layout = _layout("mamba-codestral-7b-v0.1")
    # 64 layers x 2,158,592 B (bf16 state, no padding without attention), independent of N
    assert layout.sequence_bytes(10) == layout.sequence_bytes(100_000) == 64 * 2_158_592
    assert layout.kv_bytes_per_token == 0


# ---- Gemma-3-27B grouping padding: 52 sliding + 10 full ----


def test_gemma3_grouping_padding_by_hand() -> None:
    spec = resolve("gemma-3-27b-it")
    layout = vllm.layout(spec, BF16, BF16, 1, EngineOptions(), "0.28.0")
    sliding = next(g for g in layout.groups if g.kind == "sliding_window")
    # group_size = 10 (52 >= 1.5 x 10); sliding -> cdiv(52, 10) = 6 groups x 10 = 60 layers, 8 padding
    assert (sliding.layers, sliding.allocated_layers) == (52, 60)
    assert any("Add 8 padding layers, may waste at most 15.38% KV cache memory" in n for n in layout.notes)
    # 32,768 tokens: full 10 x 8,192 x 32,768; sliding (cdiv(1,023 + 16,384, 16) + 1) x 16 = 17,424 slots x 60
    assert layout.sequence_bytes(32_768) == 2_684_354_560 + 8_564_244_480
    pool = vllm.pool(spec, BF16, BF16)
    assert (pool.layers_per_block, pool.num_groups, pool.page_bytes) == (10, 7, 131_072)


# ---- cache dtypes ----


def test_per_token_head_and_nvfp4_bytes() -> None:
    spec = resolve("llama-3.1-8b")
    # int8 + fp32 scale per head for K and V: 8 x (132 + 132) = 2,112 B per layer
    assert compute_cost(spec, engine="vllm", kv_dtype="int8_per_token_head").kv_bytes_per_token == 32 * 2_112
    # nvfp4: 128/2 + 128/16 = 72 B per head vector -> 8 x 144 = 1,152 B per layer
    assert compute_cost(spec, engine="vllm", kv_dtype="nvfp4").kv_bytes_per_token == 32 * 1_152


def test_per_token_head_page_matches_public_numbers() -> None:
    # A public vLLM note: attention page for 1 token is 4,096 B bf16, 2,080 B int8_per_token_head, 2,048 B fp8
    spec = _spec((FullAttention(4, 256, 256),))
    for dtype, size in (("bf16", 4_096), ("int8_per_token_head", 2_080), ("fp8", 2_048)):
        dt = parse_cache_dtype(dtype)
        assert vllm.layout(spec, dt, dt, 1, EngineOptions(), "0.28.0").kv_bytes_per_token == size


@pytest.mark.parametrize(
    ("model", "kwargs", "match"),
    [
        ("llama-3.1-8b", {"k_dtype": "fp8", "v_dtype": "bf16"}, "share one --kv-cache-dtype"),
        ("llama-3.1-8b", {"kv_dtype": "q4_0"}, "not a vLLM cache dtype"),
        ("llama-3.1-8b", {"kv_dtype": "int8"}, "accepted: bf16"),
        ("deepseek-v3", {"kv_dtype": "nvfp4"}, "no MLA attention backend"),
        ("deepseek-v3", {"kv_dtype": "fp8_per_token_head"}, "no MLA attention backend"),
    ],
)
def test_refusals(model: str, kwargs: dict[str, str], match: str) -> None:
    with pytest.raises(EngineRefusalError, match=match):
        compute_cost(resolve(model), engine="vllm", **kwargs)  # type: ignore[arg-type]


def test_nvfp4_needs_027() -> None:
    with pytest.raises(EngineRefusalError, match=r"nvfp4 needs vLLM >= 0\.27"):
        compute_cost(resolve("llama-3.1-8b"), engine="vllm@0.26", kv_dtype="nvfp4")
    assert "nvfp4" in vllm.accepted_dtypes("0.27.0")
    assert "nvfp4" not in vllm.accepted_dtypes("0.26.1")


def test_latent_plus_v_refused() -> None:
    with pytest.raises(EngineRefusalError, match="latent only"):
        compute_cost(resolve("deepseek-v3"), engine="vllm", options=EngineOptions(mla_storage="latent+v"))


# ---- vLLM 0.33 rules, as vLLM's own code gives them (tests/oracle/test_vllm_oracle.py runs it) ----


def test_qwen3_next_block_follows_the_gdn_checkpoint_alignment() -> None:
    spec = resolve("qwen3-next-80b-a3b")
    # prefix caching on (default): mode "align", FlashInfer's GDN prefill exports 64-aligned checkpoints:
    # block = lcm(16, 64) x cdiv(state page, 64 x 2,048 B) = 576; 2 + 1 checkpoint pages per GDN layer
    pool = vllm.pool(spec, BF16, BF16)
    assert (pool.block_size, pool.mamba_cache_mode) == (576, "align")
    assert next(b for b in pool.buckets if b.kind == "recurrent").state_pages == 3
    # prefix caching off: mode "none", blocks of 16 only: 544, one page
    off = vllm.pool(spec, BF16, BF16, options=EngineOptions(prefix_caching=False))
    assert (off.block_size, off.mamba_cache_mode) == (544, "none")
    # Ampere runs the Triton GDN prefill: no checkpoint page, no 64 alignment (2 pages in align mode)
    ampere = vllm.pool(spec, BF16, BF16, options=EngineOptions(gpu_capability=80))
    assert ampere.block_size == 544
    assert next(b for b in ampere.buckets if b.kind == "recurrent").state_pages == 2


def test_mamba1_takes_no_checkpoint_page() -> None:
    pool = vllm.pool(resolve("jamba-v0.1"), BF16, BF16)
    assert next(b for b in pool.buckets if b.kind == "recurrent").state_pages == 2


def test_attention_free_models_run_without_prefix_caching() -> None:
    pool = vllm.pool(resolve("mamba-codestral-7b-v0.1"), BF16, BF16)
    assert (pool.prefix_caching, pool.mamba_cache_mode, pool.block_size) == (False, "none", None)


def test_admission_holds_back_the_null_block() -> None:
    pool = vllm.pool(resolve("llama-3.1-8b"), BF16, BF16)
    # 8,192 tokens need 512 blocks of 2 MiB = 1 GiB; with exactly 1 GiB, vLLM >= 0.29 keeps one block back
    assert vllm.num_blocks(pool, GiB) == 512
    with pytest.raises(EngineRefusalError, match="estimated maximum model length is 8176"):
        vllm.check_admission(pool, GiB, 8192)
    assert vllm.estimate_max_model_len(pool, GiB, 8192) == 511 * 16
    vllm.check_admission(pool, GiB + 2 * 2**20, 8192)
    # 0.28 checked against the whole memory
    vllm.check_admission(vllm.pool(resolve("llama-3.1-8b"), BF16, BF16, version="0.28.0"), GiB, 8192)
    with pytest.raises(EngineRefusalError, match="No available memory"):
        vllm.check_admission(pool, 2 * 2**20, 8192)


def test_capacity_line_is_one_line_since_028() -> None:
    spec = resolve("llama-3.1-8b")
    assert vllm.report_lines(vllm.pool(spec, BF16, BF16), 20 * GiB, 8192) == (
        "GPU KV cache size: 163,840 tokens, Maximum concurrency for 8,192 tokens per request: 20.00x",
    )
    assert vllm.report_lines(vllm.pool(spec, BF16, BF16, version="0.27.1"), 20 * GiB, 8192) == (
        "GPU KV cache size: 163,840 tokens",
        "Maximum concurrency for 8,192 tokens per request: 20.00x",
    )


def test_blackwell_fa4_head_256_blocks_follow_tp() -> None:
    # vLLM 0.33 on Blackwell: FlashAttention 4's head-256 kernel takes 128-token pages, so a hybrid's attention
    # block (raised to hold a Gated DeltaNet state) is a multiple of 128, not 16 (vLLM's own code gives these in
    # tests/oracle/test_vllm_matrix.py); the state is split by TP, the 2 KV heads replicated past TP 2
    spec = resolve("qwen3-next-80b-a3b")
    blocks = [vllm.pool(spec, BF16, BF16, tp, EngineOptions(gpu_capability=100)).block_size for tp in (1, 2, 4, 8)]
    assert blocks == [640, 640, 384, 256]
    hopper = [vllm.pool(spec, BF16, BF16, tp, EngineOptions(gpu_capability=90)).block_size for tp in (1, 4)]
    assert hopper == [576, 320]
    assert vllm.fa4_hd256(spec, 100) and not vllm.fa4_hd256(spec, 90)
    assert not vllm.fa4_hd256(resolve("llama-3.1-8b"), 100)  # head 128: FA's multiples of 16
    # Gemma-2 (head 256) soft-caps its logits: FA4 falls back (fa_utils.py), blocks of 16 on a B200 as vLLM gives
    assert vllm.pool(resolve("gemma-2-9b"), BF16, BF16, 1, EngineOptions(gpu_capability=100)).block_size == 16
    assert not vllm.fa4_hd256(spec, 100, parse_cache_dtype("fp8"))  # a quantized cache falls back too
