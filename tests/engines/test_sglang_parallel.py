"""SGLang 0.5.23 across parallel layouts and its memory settings: the figures its own code gives
(tests/oracle/test_sglang_matrix.py runs it on every GPU x TP cell), pinned here with the arithmetic."""

from __future__ import annotations

import pytest

from kvbudget import hardware
from kvbudget.engines import EngineRef, sglang
from kvbudget.engines.base import EngineOptions
from kvbudget.engines.records import ServeSettings
from kvbudget.engines.sglang_memory import MemorySettings, mem_fraction_static
from kvbudget.errors import InputError
from kvbudget.model.sources import resolve
from kvbudget.plan.build import plan_deployment
from kvbudget.precision import parse_cache_dtype
from kvbudget.requests.plan import PlanRequest

BF16 = parse_cache_dtype("bf16")
GiB = 2**30
H100_STAND_IN = 85_520_809_984  # the oracle's default stand-in H100: 81,559 MiB
H200 = hardware.gpu("h200").cuda_total_bytes  # 143,287 MiB
L40S = hardware.gpu("l40s").cuda_total_bytes  # 45,486 MiB


def test_dp_attention_reserve() -> None:
    # H200 TP 8, DP attention 8: 512 + 8,192 x 1.5 + 8 / 8 x 1,024 + decode graphs 512 x 2 + 512 x 8 x 3
    # + 512 x 8 x 1.5 (max_bs past 300) + 58 prefill graphs x 8 = 33,744 MiB -> round(109,543 / 143,287, 3)
    assert mem_fraction_static(H200, MemorySettings(tp=8, dp_attention=8))[0] == 0.765
    # MLA: the prefill graphs are a flat 1,536 MiB: 34,816 MiB reserved
    assert mem_fraction_static(H200, MemorySettings(tp=8, dp_attention=8, mla=True))[0] == 0.757
    # L40S (no 10 GiB floor under 60 GiB): chunked 4,096, decode graphs 160 at TP >= 4, under 300: 12,240 MiB
    assert mem_fraction_static(L40S, MemorySettings(tp=8, dp_attention=8))[0] == 0.731
    # without DP attention, the same TP: 15,312 MiB
    assert mem_fraction_static(H200, MemorySettings(tp=8))[0] == 0.893


def test_settings_that_move_the_reserve() -> None:
    # --max-running-requests 64 lowers the decode graph batch from 256: 13,904 - 384 = 13,520 MiB
    assert mem_fraction_static(H100_STAND_IN, MemorySettings())[0] == 0.83
    assert mem_fraction_static(H100_STAND_IN, MemorySettings(max_running_requests=64))[0] == 0.834
    # --chunked-prefill-size 4096: 512 + 6,144 + 128 + 512 + 50 prefill graphs x 8 = 7,696, floored at 10,240
    assert mem_fraction_static(H100_STAND_IN, MemorySettings(chunked_prefill=4096))[0] == 0.874
    # PP 2: no prefill graphs (off by default with pipeline parallelism): 512 + 12,288 + 512 + 512 = 13,824 MiB
    assert mem_fraction_static(H100_STAND_IN, MemorySettings(tp=2, pp=2))[0] == 0.831
    assert mem_fraction_static(H100_STAND_IN, MemorySettings(tp=2, pp=1))[0] == 0.828


def test_attention_heads_split_over_tp_over_dp() -> None:
    spec = resolve("llama-3.1-8b")
    assert sglang.attention_tp(8, EngineOptions(dp_attention=2)) == 4
    # DP attention 8 at TP 8: one attention rank per GPU keeps all 8 KV heads: 32 x 8 x 256 x 2 B
    full = sglang.layout(spec, BF16, BF16, 8, EngineOptions(dp_attention=8))
    assert sglang.pool_cells(full) == (131_072, 0)
    assert sglang.pool_cells(sglang.layout(spec, BF16, BF16, 8, EngineOptions())) == (16_384, 0)
    with pytest.raises(InputError, match="--dp-attention 3: SGLang needs it to divide --tp 8"):
        sglang.attention_tp(8, EngineOptions(dp_attention=3))


def test_running_request_cap_per_dp_worker() -> None:
    # resolve_max_num_reqs: a set --max-running-requests is split over the DP workers, at most half the tokens
    assert sglang.max_running_requests(163_840, 32_768, requested=1024, dp=8) == 128
    assert sglang.max_running_requests(163_840, 32_768, requested=4, dp=8) == 1
    assert sglang.max_running_requests(100, 32_768, requested=1024) == 50
    # unset: tokens / context x 512 clamped to [2,048, 4,096], at most half the tokens
    assert sglang.max_running_requests(163_840, 32_768) == 2560


def test_mamba_slots_follow_max_running_requests_without_radix_cache() -> None:
    spec = resolve("qwen3-next-80b-a3b")
    options = EngineOptions(prefix_caching=False, max_running_requests=128)
    built = sglang.layout(spec, BF16, BF16, 1, options)
    pools = sglang.pools(20 * GiB, spec, built, 8192, options)
    # _handle_max_mamba_cache: radix cache off and the cap set: 128 slots, 129 x 77,266,944 B charged
    assert pools.max_mamba_cache_size == 128
    assert pools.max_total_num_tokens == (20 * GiB - 129 * 77_266_944) // 24_576
    assert pools.max_running_requests == 128


def test_blackwell_page_size_follows_the_models_backend() -> None:
    def page(name: str, **opts: object) -> int | None:
        options = EngineOptions(gpu_capability=100, **opts)  # type: ignore[arg-type]
        return sglang.layout(resolve(name), BF16, BF16, 1, options).block_size

    assert page("nemotron-h-8b-base-8k") == 64  # trtllm_mha
    assert page("falcon-h1-1.5b") == 1  # triton (model_overrides/falcon_h1.py)
    assert page("qwen3-next-80b-a3b") == 1  # triton with the radix cache on (model_overrides/qwen3_5.py)
    assert page("qwen3-next-80b-a3b", prefix_caching=False) == 64


def test_dp_attention_serve_command() -> None:
    options = EngineOptions(dp_attention=8, max_running_requests=256)
    settings = ServeSettings("m", 32768, 64, BF16, BF16, 8, 1, 0.765, 10 * GiB, False, 0, options)
    command = " ".join(EngineRef("sglang", sglang.DEFAULT_VERSION).rules.serve_command(settings) or ())
    assert "--tp 8 --enable-dp-attention --dp 8 --max-running-requests 256" in command


def test_dp_attention_plan_serves_a_pool_per_attention_rank() -> None:
    plain = plan_deployment(PlanRequest(model="Llama-3.1-70B", engine="sglang", gpu="h200", tp=8, context=32768))
    dp = plan_deployment(
        PlanRequest(model="Llama-3.1-70B", engine="sglang", gpu="h200", tp=8, context=32768, dp_attention=8)
    )
    # one attention rank holds a session's whole KV (80 x 8 x 256 x 2 B x 32,768 = 10 GiB), 8 ranks serve
    assert dp.layout.sequence_bytes(32768) == 10 * GiB
    assert dp.layout.sequence_bytes(32768) == 8 * plain.layout.sequence_bytes(32768)
    per_rank = dp.kv_pool_bytes // (10 * GiB)
    assert dp.sessions == 8 * per_rank
