"""TensorRT-LLM's rules against the figures its own logs printed (cited below) and its sizing code's formulas:
the budget as a share of free memory, 73,728 B/token for gpt-oss-120b with every layer cached in full, blocks
rounded up before 1.3 and down since, recurrent slots reserved for the whole batch."""

from __future__ import annotations

import pytest

from kvbudget.engines import parse_engine, trtllm
from kvbudget.engines.base import EngineOptions
from kvbudget.engines.records import Deployment, MemoryShape
from kvbudget.errors import EngineRefusalError
from kvbudget.model.families import read_spec
from kvbudget.model.sources import resolve
from kvbudget.plan.flags import all_engine_flags
from kvbudget.plan.plan import PlanInputs, make_plan
from kvbudget.precision import parse_cache_dtype
from kvbudget.weights.sources import WeightSize
from tests.helpers import TINYLLAMA

GiB = 2**30
BF16 = parse_cache_dtype("bf16")
OPTS = EngineOptions()


def _deployment(model: str, version: str, context: int, available: int, **options: int) -> Deployment:
    spec = resolve(model)
    rules = parse_engine(f"trtllm@{version}").rules
    opts = EngineOptions(**options)  # type: ignore[arg-type]
    layout = rules.layout(spec, BF16, BF16, 1, opts)
    return Deployment(spec, layout, BF16, BF16, 1, 1, context, opts, available, 0)


def test_gpt_oss_120b_log_of_december_2025() -> None:
    """A trtllm-serve log (gpt-oss-120b, 119.70 GiB device): 'kv size is 73728', 'available KV cache memory ...
    5.95 GiB', 'max_tokens ... 86711', 'Attention window size 131072 exceeds upper bound 86720 ... Adjusted
    max_seq_len to 86720', '[MemUsageChange] Allocated 5.95 GiB for max tokens in paged KV cache (86720)'."""
    spec = resolve("gpt-oss-120b")
    assert trtllm.budget_bytes_per_token(spec, BF16, 1) == 73_728  # 2 x 36 layers x 8 heads x 64 x 2 B: no window
    # (total - peak + tmp) x fraction, as logged: (119.70 - 113.65 + 0.56) x 0.9 = 5.949 GiB, printed 5.95
    assert round((119.70 - 113.65 + 0.56) * 0.9, 2) == 5.95
    for available in (86_711 * 73_728, 86_712 * 73_728 - 1):  # every budget the log's 86,711 tokens allow
        d = _deployment("gpt-oss-120b", "1.2.1", 131_072, available, max_batch_size=64)
        pool = trtllm.pool(d.spec, d.layout, available, 64, 1, "1.2.1")
        assert (pool.max_tokens, pool.blocks) == (86_711, 2710)  # ceil(86,711 / 32) blocks before 1.3
        warnings: list[str] = []
        assert parse_engine("trtllm@1.2.1").rules.sessions(d, warnings) == 0
        assert "lowers max_seq_len to 86,720" in warnings[0]
        lines = parse_engine("trtllm@1.2.1").rules.start_up(d).lines
        assert "[MemUsageChange] Allocated 5.95 GiB for max tokens in paged KV cache (86720)." in lines
        assert "max_seq_len=86720, max_num_requests=64, max_num_tokens=8192, max_batch_size=64" in lines
    assert trtllm.pool(d.spec, d.layout, 86_711 * 73_728, 64, 1, "1.3.0").blocks == 2709  # floor since 1.3


def test_tinyllama_log_of_the_triton_tutorial() -> None:
    """triton-inference-server/tutorials PR #150: 'Max KV cache blocks per sequence: 65 [window size=2051], tokens
    per block=32, primary blocks=116617', '[MemUsageChange] Allocated 78.30 GiB ... (3731744)'. TinyLlama-1.1B:
    22 layers x 4 KV heads x 64 = 22,528 B/token."""
    spec = read_spec(TINYLLAMA, name="TinyLlama-1.1B", source="test")
    layout = trtllm.layout(spec, BF16, BF16, 1, OPTS)
    assert layout.kv_bytes_per_token == trtllm.budget_bytes_per_token(spec, BF16, 1) == 22_528
    available = 116_617 * 32 * 22_528
    d = Deployment(spec, layout, BF16, BF16, 1, 1, 2051, OPTS, available, 0)
    lines = parse_engine("trtllm").rules.start_up(d).lines
    assert (
        "Max KV cache blocks per sequence: 65 [window size=2051], tokens per block=32, primary blocks=116617, "
        "secondary blocks=0, max sequence length=2051"
    ) in lines
    assert "[MemUsageChange] Allocated 78.30 GiB for max tokens in paged KV cache (3731744)." in lines


def test_budget_is_a_share_of_the_free_memory_not_of_the_total() -> None:
    total, weights, overhead = 80 * GiB, 40 * GiB, 4 * GiB
    share = parse_engine("trtllm").rules.usable_share(
        MemoryShape(total, utilization=None, weights=weights, overhead=overhead)
    )
    assert share.usable_bytes - weights - overhead == int(36 * GiB * 0.9)  # vLLM's 0.92 x 80 - 44 would be 29.6
    assert share.fraction == 0.9


def test_heads_per_rank_round_up_in_the_allocation_but_not_in_the_budget() -> None:
    spec = resolve("llama-3.1-8b")  # 8 KV heads x 128
    layout = trtllm.layout(spec, BF16, BF16, 16, OPTS)
    assert layout.kv_bytes_per_token == 32 * 2 * 1 * 128 * 2  # ceil(8 / 16) = 1 head per layer
    assert trtllm.budget_bytes_per_token(spec, BF16, 16) == 32 * 2 * (128 * 8 // 16) * 2  # 64 values: half that


def test_mla_is_one_latent_head_on_every_rank_and_fp8_halves_it() -> None:
    spec = resolve("deepseek-v3")
    assert trtllm.layout(spec, BF16, BF16, 8, OPTS).kv_bytes_per_token == 61 * 576 * 2
    fp8 = parse_cache_dtype("fp8")
    assert trtllm.layout(spec, fp8, fp8, 8, OPTS).kv_bytes_per_token == 61 * 576
    nvfp4 = parse_cache_dtype("nvfp4")
    assert trtllm.layout(spec, nvfp4, nvfp4, 8, OPTS).kv_bytes_per_token == 61 * (288 + 36)


def test_hybrid_reserves_state_for_the_whole_batch() -> None:
    """Nemotron-H: (max_batch_size x pp + 1) state slots come off the budget first; at the default 2,048 nothing
    is left, and kvbudget names the max_batch_size that serves the most sessions."""
    spec = resolve("Nemotron-H-8B-Base-8K")
    layout = trtllm.layout(spec, BF16, BF16, 1, OPTS)
    state = layout.state_bytes
    available = 40 * GiB
    d = Deployment(spec, layout, BF16, BF16, 1, 1, 8192, OPTS, available, 0)
    warnings: list[str] = []
    assert parse_engine("trtllm").rules.sessions(d, warnings) == 0  # 2,049 slots exceed 40 GiB
    best = trtllm.best_max_batch_size(d, trtllm.DEFAULT_VERSION)
    assert f"set --max_batch_size {best}" in warnings[0]
    at_best = trtllm.pool(spec, layout, available, best, 1, trtllm.DEFAULT_VERSION)
    assert at_best.fixed_cost == (best + 1) * state
    assert at_best.blocks // 256 >= best  # 8,192 tokens = 256 blocks per session
    assert trtllm.pool(spec, layout, available, best + 1, 1, trtllm.DEFAULT_VERSION).blocks // 256 < best + 1


def test_refusals() -> None:
    with pytest.raises(EngineRefusalError, match="not a TensorRT-LLM cache dtype"):
        trtllm.layout(resolve("llama-3.1-8b"), parse_cache_dtype("q8_0"), parse_cache_dtype("q8_0"), 1, OPTS)
    with pytest.raises(EngineRefusalError, match="manager V2"):
        trtllm.layout(resolve("gemma-4-31b"), BF16, BF16, 1, OPTS)
    with pytest.raises(EngineRefusalError, match="indexer"):
        trtllm.layout(resolve("deepseek-v3.2"), BF16, BF16, 1, OPTS)


def _trtllm_command(kv_dtype: str, options: EngineOptions, utilization: float | None = None) -> str:
    """TensorRT-LLM's serve command for Llama-3.1-8B at 32K on an 80 GiB card with 16 GiB of measured weights."""
    dtype = parse_cache_dtype(kv_dtype)
    inputs = PlanInputs(
        resolve("llama-3.1-8b"),
        parse_engine("trtllm"),
        dtype,
        dtype,
        80 * GiB,
        "given",
        WeightSize(16 * GiB, "measured", "given"),
        32_768,
        utilization=utilization,
        options=options,
    )
    return all_engine_flags(make_plan(inputs))["trtllm"]


def test_serve_command_carries_the_fraction_and_the_cache_dtype() -> None:
    command = _trtllm_command("fp8", EngineOptions(), 0.85)
    assert command.startswith("printf 'kv_cache_config:\\n  dtype: fp8\\n  free_gpu_memory_fraction: 0.85\\n' >")
    assert command.endswith(
        "trtllm-serve meta-llama/Llama-3.1-8B --backend pytorch --max_seq_len 32768 "
        "--extra_llm_api_options trtllm-options.yaml"
    )


def test_the_flashinfer_attention_backend_reserves_its_320_mib_workspace_and_reaches_the_command() -> None:
    """TensorRT-LLM attn_backend FLASHINFER: FlashInferAttentionMetadata.__post_init__ allocates a 320 MiB uint8
    workspace (attention_backend/flashinfer.py), in the profiled peak; the default TRTLLM backend has no such term.
    The serve command puts the setting in the LLM API YAML, with the fraction still on the command line."""
    from dataclasses import replace

    from kvbudget.engines.overhead import Site
    from kvbudget.errors import InputError

    spec, rules = resolve("llama-3.1-8b"), parse_engine("trtllm").rules
    site = Site(1, 8192, "", int(79.19 * GiB), "NVIDIA H100 80GB HBM3", context=32_768)
    default = rules.overhead(spec, site)
    flashinfer = rules.overhead(spec, replace(site, attn_backend="flashinfer"))
    assert (flashinfer.low - default.low, flashinfer.high - default.high) == (320 * 2**20, 320 * 2**20)
    assert "FlashInfer workspace computed" in flashinfer.basis and "FlashInfer" not in default.basis
    assert rules.overhead(spec, replace(site, attn_backend="trtllm")).bytes == default.bytes
    command = _trtllm_command("auto", EngineOptions(attn_backend="flashinfer"))
    assert command.startswith("printf 'attn_backend: FLASHINFER\\n' > trtllm-options.yaml && trtllm-serve ")
    assert command.endswith("--extra_llm_api_options trtllm-options.yaml --kv_cache_free_gpu_memory_fraction 0.9")
    for engine in ("vllm", "sglang", "llamacpp", "ollama", "transformers", "ideal"):
        with pytest.raises(InputError, match=r"^--attn-backend: TensorRT-LLM's attn_backend, not .*; use --engine"):
            parse_engine(engine).rules.check_options(EngineOptions(attn_backend="flashinfer"))
