"""SGLang engine: every expected number below is worked out by hand (comments) or comes from a public oracle."""

from __future__ import annotations

import pytest

from kvbudget.cost import compute_cost
from kvbudget.engines import sglang
from kvbudget.engines.base import EngineOptions, Layout
from kvbudget.errors import EngineRefusalError
from kvbudget.model.sources import resolve
from kvbudget.precision import parse_cache_dtype

BF16 = parse_cache_dtype("bf16")
GiB = 2**30


def _layout(name: str, tp: int = 1, dtype: str = "bf16", **opts: object) -> Layout:
    dt = parse_cache_dtype(dtype)
    return sglang.layout(resolve(name), dt, dt, tp, EngineOptions(**opts))  # type: ignore[arg-type]


def test_llama_70b_cell() -> None:
    report = compute_cost(resolve("llama-3.1-70b"), engine="sglang", tokens=1000, sequences=3)
    # 80 layers x 8 kv heads x (128 + 128) x 2 B = 327,680 B per token
    assert report.kv_bytes_per_token == 327_680
    assert sglang.pool_cells(report.layout) == (327_680, 0)
    assert report.layout.block_size == 1
    assert report.total_bytes == 3 * 1000 * 327_680
    # page 64: 1000 tokens -> 1,024 slots per sequence
    paged = compute_cost(resolve("llama-3.1-70b"), engine="sglang", tokens=1000, options=EngineOptions(block_size=64))
    assert paged.sequence_bytes == 1024 * 327_680


def test_max_total_num_tokens_page_rounding() -> None:
    available = 10 * GiB + 100 * 327_680  # 10 GiB holds exactly 32,768 cells of 327,680 B
    assert sglang.max_total_num_tokens(available, _layout("llama-3.1-70b")) == 32_868
    # page 64: 32,868 // 64 = 513 pages -> 32,832 tokens
    assert sglang.max_total_num_tokens(available, _layout("llama-3.1-70b", block_size=64)) == 32_832
    assert sglang.max_total_num_tokens(available - 1, _layout("llama-3.1-70b")) == 32_867


def test_mla_latent_replicated_at_tp8() -> None:
    report = compute_cost(resolve("deepseek-v3"), engine="sglang", tp=8)
    # (512 + 64) x 2 B x 61 layers = 70,272 B per token on every rank
    assert report.kv_bytes_per_token == 70_272
    assert any("replicated on all 8 GPUs" in w for w in report.layout.warnings)
    assert compute_cost(resolve("deepseek-v3"), engine="sglang", kv_dtype="fp8_e4m3").kv_bytes_per_token == 35_136


def test_llama_8b_tp16_replicates_heads() -> None:
    report = compute_cost(resolve("llama-3.1-8b"), engine="sglang", tp=16)
    assert report.kv_bytes_per_token == 16_384  # 1 head x 256 x 2 B x 32 layers
    assert any("replicated" in w for w in report.layout.warnings)


def test_qwen3_next_state_fp32_ssm_by_hand() -> None:
    layout = _layout("qwen3-next-80b-a3b")
    state = next(g for g in layout.groups if g.kind == "recurrent")
    # conv 3 x (2 x 16 x 128 + 32 x 128) x 2 B (bf16) = 49,152; SSM 32 x 128 x 128 x 4 B (fp32) = 2,097,152
    assert state.state_bytes == 2_146_304
    assert layout.state_bytes == 36 * 2_146_304 == 77_266_944
    # 12 attention layers x 2 kv heads x 512 x 2 B = 24,576 B per token
    assert layout.kv_bytes_per_token == 24_576
    assert layout.sequence_bytes(1000) == 24_576_000 + 77_266_944
    tp2 = _layout("qwen3-next-80b-a3b", tp=2)
    # conv 3 x 4,096 x 2 = 24,576; SSM 16 x 128 x 128 x 4 = 1,048,576
    assert next(g for g in tp2.groups if g.kind == "recurrent").state_bytes == 1_073_152


def test_nemotron_h_ssm_float32_by_default() -> None:
    # the config pins nothing; SGLang still keeps the SSM state in float32:
    # conv 3 x 10,240 x 2 = 61,440 + 128 x 64 x 128 x 4 = 4,194,304 -> 4,255,744 B per layer
    layout = _layout("nemotron-h-8b-base-8k")
    assert layout.state_bytes == 24 * 4_255_744
    assert layout.kv_bytes_per_token == 16_384


def test_swa_layers_hold_window_plus_page() -> None:
    layout = _layout("gpt-oss-20b")
    sliding = next(g for g in layout.groups if g.kind == "sliding_window")
    assert sliding.slots(32_768, 2) == 2 * 129  # min(32,768, 128 + 1)
    assert sliding.slots(100, 1) == 100
    assert any("swa_full_tokens_ratio 0.8" in n for n in layout.notes)
    # 12 full x 2,048 B x 32,768 + 12 sliding x 2,048 B x 129
    assert layout.sequence_bytes(32_768) == 805_306_368 + 3_170_304
    paged = _layout("gpt-oss-20b", block_size=64)
    assert next(g for g in paged.groups if g.kind == "sliding_window").slots(32_768, 1) == 192  # min(pad, 128+64)


def test_swa_pool_split_by_hand() -> None:
    spec = resolve("gpt-oss-20b")
    # F x n_full = 2,048 x 12 = 24,576; S x n_swa = 24,576; cell = 24,576 + 0.8 x 24,576 = 44,236.8
    # 10 GiB / 44,236.8 = 242,725.9 -> 242,725 full tokens; swa = int(242,725 x 0.8) = 194,180
    assert sglang.swa_pool_split(10 * GiB, spec, BF16, BF16) == (242_725, 194_180)
    assert sglang.max_total_num_tokens(10 * GiB, _layout("gpt-oss-20b")) == 242_725
    # page 64: 242,725 -> 242,688; int(242,688 x 0.8) = 194,150 -> 194,112
    assert sglang.swa_pool_split(10 * GiB, spec, BF16, BF16, options=EngineOptions(block_size=64)) == (
        242_688,
        194_112,
    )


def test_swa_pool_too_small_is_refused() -> None:
    # 5 MiB / 44,236.8 = 118 full tokens -> 94 SWA tokens <= window 128 + page 1
    with pytest.raises(EngineRefusalError, match="cannot hold even one request"):
        sglang.swa_pool_split(5 * 2**20, resolve("gpt-oss-20b"), BF16, BF16)


def test_sliding_layers_of_other_architectures_are_cached_in_full() -> None:
    """SGLang's is_hybrid_swa_model allow-list leaves out Gemma 2/3 and Mistral: every token is cached."""
    gemma = _layout("gemma-3-27b-it")
    # 62 layers x 8,192 B, sliding or not
    assert gemma.kv_bytes_per_token == 62 * 8_192
    assert gemma.sequence_bytes(32_768) == 62 * 8_192 * 32_768
    mistral = _layout("mistral-7b-v0.1")
    assert mistral.sequence_bytes(8192) == 32 * 4_096 * 8_192
    with pytest.raises(EngineRefusalError, match="no SWA pool"):
        sglang.swa_pool_split(10 * GiB, resolve("mistral-7b-v0.1"), BF16, BF16)


def test_swa_architecture_allow_list_note() -> None:
    caveat = "turns its SWA pool on only for"
    assert any(caveat in n for n in _layout("mistral-7b-v0.1").notes)
    assert any(caveat in n for n in _layout("gemma-3-27b-it").notes)
    assert not any(caveat in n for n in _layout("gpt-oss-20b").notes)
    assert not any(caveat in n for n in _layout("llama-4-scout-17b-16e-instruct").notes)
    assert not any(caveat in n for n in _layout("llama-3.1-8b").notes)


def test_cross_attention_one_token_pool() -> None:
    layout = _layout("llama-3.2-11b-vision")
    # every one of the 40 layers holds 1,000 text + 6,404 image slots of 4,096 B
    assert layout.sequence_bytes(1000) == 40 * 4_096 * 7_404 == 1_213_071_360


@pytest.mark.parametrize(
    ("model", "kwargs", "match"),
    [
        ("llama-3.1-8b", {"kv_dtype": "q4_0"}, "not an SGLang cache dtype"),
        ("llama-3.1-8b", {"k_dtype": "fp8_e4m3", "v_dtype": "bf16"}, "share one --kv-cache-dtype"),
    ],
)
def test_refusals(model: str, kwargs: dict[str, str], match: str) -> None:
    with pytest.raises(EngineRefusalError, match=match):
        compute_cost(resolve(model), engine="sglang", **kwargs)  # type: ignore[arg-type]


def test_plain_fp8_is_sglangs_fp8_e4m3() -> None:
    """SGLang's --kv-cache-dtype has no plain 'fp8': kvbudget's fp8 (e4m3, as vLLM's) is served as fp8_e4m3."""
    fp8 = compute_cost(resolve("llama-3.1-8b"), engine="sglang", kv_dtype="fp8")
    e4m3 = compute_cost(resolve("llama-3.1-8b"), engine="sglang", kv_dtype="fp8_e4m3")
    assert fp8.layout.kv_bytes_per_token == e4m3.layout.kv_bytes_per_token == 65_536


def test_expanded_mla_refused() -> None:
    with pytest.raises(EngineRefusalError, match="latent only"):
        compute_cost(resolve("deepseek-v3"), engine="sglang", options=EngineOptions(mla_storage="expanded"))


# ---- SGLang 0.5.23 pools, as SGLang's own code sizes them (tests/oracle/test_sglang_oracle.py runs it) ----


def test_mamba_carve_out_and_running_cap_qwen3_next() -> None:
    spec = resolve("qwen3-next-80b-a3b")
    built = sglang.layout(spec, BF16, BF16, 1, EngineOptions())
    # 36 GDN layers x (conv 3 x 8,192 x 2 B + SSM 32 x 128 x 128 x 4 B) = 77,266,944 B per request
    assert sglang.mamba_cache_per_req(built) == 77_266_944
    pools = sglang.pools(20 * GiB, spec, built, 8192)
    # Mamba budget 20 GiB x 0.9 / 1.9; K = (budget - per_req) // per_req = 130; (K + 1) x per_req charged
    assert pools.max_mamba_cache_size == 130
    assert 20 * GiB - 131 * 77_266_944 == 11_352_866_816
    # the token pool: 11,352,866,816 B // (12 full layers x 2 x 2 x 256 x 2 B = 24,576 B) = 461,949 tokens
    assert pools.max_total_num_tokens == 461_949
    # radix cache with the extra buffer: 3 + 2 state slots per request -> 130 // 5 = 26 running requests
    assert sglang.mamba_slots_per_request(spec) == 5
    assert (pools.max_running_requests, pools.sessions) == (26, 26)
    # --disable-radix-cache: one slot per request
    assert sglang.mamba_slots_per_request(spec, EngineOptions(prefix_caching=False)) == 1


def test_swa_sessions_are_bounded_by_the_full_pool() -> None:
    spec = resolve("gpt-oss-20b")
    pools = sglang.pools(20 * GiB, spec, sglang.layout(spec, BF16, BF16, 1, EngineOptions()), 8192)
    # full 485,451 and sliding 388,360 tokens (SGLang's own split of 20 GiB); an 8K session needs its whole
    # context in the full pool: 485,451 // 8,192 = 59
    assert (pools.full_tokens, pools.swa_tokens) == (485_451, 388_360)
    assert pools.sessions == 59
    assert pools.log_lines()[0] == "Use sliding window memory pool. full_layer_tokens=485451, swa_layer_tokens=388360"


def test_page_size_follows_the_gpu() -> None:
    # SGLang on SM100 picks trtllm_mha / trtllm_mla, which need 64-token pages; Hopper fa3 and others: 1
    assert _layout("llama-3.1-8b", gpu_capability=100).block_size == 64
    assert _layout("deepseek-v3", gpu_capability=100).block_size == 64
    assert _layout("llama-3.1-8b", gpu_capability=90).block_size == 1
    assert _layout("llama-3.1-8b").block_size == 1


def test_swa_allow_list_is_sglang_0523s() -> None:
    assert sglang.swa_architecture(resolve("gpt-oss-20b"))
    assert sglang.swa_architecture(resolve("llama-4-scout-17b-16e-instruct"))
    assert not sglang.swa_architecture(resolve("gemma-3-27b-it"))
    assert "GraniteSWAForCausalLM" in sglang.SWA_ARCHITECTURES and "LagunaForCausalLM" in sglang.SWA_ARCHITECTURES


def test_a_multimodal_models_fraction_is_reduced_as_each_release_does() -> None:
    """SGLang keeps back more of the GPU for a multimodal model (read in each wheel): ModelRunner x 0.95 on any
    fraction until 0.4.4.post3, x 0.90 in 0.4.5-0.4.8; 0.4.9 x 0.90 on the derived default only; from 0.4.10
    adjust_mem_fraction_for_vlm, 0.95 x clamp(1 - 0.1 x (L x H^2 / (24 x 1024^2) - 1), 0.8, 1.05), default only."""
    from kvbudget.engines.sglang_memory import eager_prefill, multimodal, vlm_factor

    gemma3, qwen25_vl, text = ("Gemma3ForConditionalGeneration",), ("Qwen2_5_VLForConditionalGeneration",), ("X",)
    assert vlm_factor((27, 1152), "0.4.4", given=True)[0] == 0.95
    assert vlm_factor((27, 1152), "0.4.8", given=True)[0] == 0.90
    assert vlm_factor((27, 1152), "0.4.9", given=False)[0] == 0.90
    assert vlm_factor((27, 1152), "0.4.9", given=True)[0] == 1.0
    # Gemma 3's SigLIP tower, 27 layers of 1152: 27 x 1152^2 / (24 x 1024^2) = 1.4238, 1 - 0.0424 = 0.9576, x 0.95
    assert vlm_factor((27, 1152), "0.5.23", given=False)[0] == pytest.approx(
        0.95 * (1 - 0.1 * (27 * 1152**2 / (24 * 1024**2) - 1))
    )
    # Qwen2.5-VL's tower has "depth", not num_hidden_layers: SGLang's getattr default 24, hidden 1280: x 0.8966
    assert vlm_factor((None, 1280), "0.5.23", given=False)[0] == pytest.approx(0.95 * 0.94375)
    assert vlm_factor((None, 1280), "0.5.23", given=True)[0] == 1.0
    assert vlm_factor(None, "0.5.23", given=False)[0] == 1.0  # no vision_config: left alone
    # Gemma 3 (and Llama 4) are served text-only unless --enable-multimodal from 0.4.6 (mm_disabled_models)
    assert multimodal(gemma3, (27, 1152), "0.4.5") and not multimodal(gemma3, (27, 1152), "0.4.6")
    assert multimodal(qwen25_vl, (None, 1280), "0.5.23") and not multimodal(text, None, "0.5.23")
    # a multimodal model's prefill runs eagerly (no prefill-graph reserve) unless 0.5.23 allow-lists its arch
    assert eager_prefill(qwen25_vl, (None, 1280), "0.5.23")
    assert not eager_prefill(("Qwen3_5MoeForConditionalGeneration",), (27, 1152), "0.5.23")


def test_qwen25_vl_on_an_h100_plans_sglangs_reduced_default() -> None:
    # 0.5.23 on an H100 (nvidia-smi 81,559 MiB): 512 + 8,192 x 1.5 + 256 x 2 + 128 MiB kept back, no prefill graphs
    # (a multimodal model prefills eagerly): round((81,559 - 13,440) / 81,559, 3) = 0.835, then x 0.95 x 0.94375
    from kvbudget.api import PlanRequest, Tokens, plan_deployment

    model = "tests/data/memory/configs/Qwen2.5-VL-7B-Instruct"
    plan = plan_deployment(PlanRequest(model=model, gpu="h100-sxm", engine="sglang@0.5.23", context=Tokens("32k")))
    assert plan.inputs.utilization is None
    usable = next(line for line in plan.ledger if line.label == "usable by the engine")
    assert "0.835" in usable.basis and "x 0.8966 for a multimodal model" in usable.basis


def test_gemma3_27b_awq_on_a_4090_refuses_only_with_the_multimodal_reduction() -> None:
    # sglang issue #4895 (lmsysorg/sglang:dev of 2025-03-29, 0.4.4; one RTX 4090; mem_fraction_static=0.88 printed):
    # 'Load weight end. type=Gemma3ForConditionalGeneration, ..., avail mem=3.64 GB, mem usage=18.82 GB.', then
    # "Not enough memory". 0.4.4 profile_max_num_token: rest = 3.64 - (3.64 + 18.82) x (1 - mfs) GiB; ModelRunner
    # multiplies a multimodal model's 0.88 by 0.95 first
    from kvbudget.engines.sglang_memory import vlm_factor

    free_before = 3.64 + 18.82
    assert 3.64 - free_before * (1 - 0.88) > 0  # 0.88 alone would have started
    assert 3.64 - free_before * (1 - 0.88 * vlm_factor((27, 1152), "0.4.4", given=False)[0]) < 0
