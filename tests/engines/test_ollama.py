"""Ollama's rules around llama.cpp's cache: its defaults, the families it runs on one slot, what it refuses, the
environment that serves a plan. The cells themselves are checked against a real llama-server started with
Ollama's arguments in tests/live/test_ollama_live.py."""

from __future__ import annotations

import pytest

from kvbudget.engines import ollama, parse_engine
from kvbudget.engines.base import EngineOptions
from kvbudget.errors import EngineRefusalError
from kvbudget.model.sources import resolve
from kvbudget.plan.flags import all_engine_flags
from kvbudget.plan.plan import PlanInputs, make_plan
from kvbudget.precision import parse_cache_dtype
from kvbudget.weights.sources import WeightSize

GiB = 2**30
BF16, Q8 = parse_cache_dtype("bf16"), parse_cache_dtype("q8_0")


@pytest.mark.parametrize(("c", "batch"), [(4096, 512), (4097, 1024), (32768, 1024), (32769, 2048)])
def test_automatic_num_batch(c: int, batch: int) -> None:
    assert ollama.num_batch(EngineOptions(), c) == batch
    assert ollama.num_batch(EngineOptions(flash_attn=False), c) == 512
    assert ollama.num_batch(EngineOptions(n_ubatch=256), c) == 256


def test_num_ctx_is_clamped_to_the_training_context() -> None:
    spec = resolve("qwen3-8b")  # max_position_embeddings 40,960
    num_ctx, parallel, _, args = ollama.llama_server_args(spec, 131_072, 2, BF16, EngineOptions())
    assert (num_ctx, parallel) == (40_960, 2) and args[:4] == ("-c", "81920", "-np", "2")
    layout = parse_engine("ollama").rules.layout(spec, BF16, BF16, 1, EngineOptions())
    assert layout.total_bytes(131_072, 1) == layout.total_bytes(40_960, 1)


def test_go_engine_versions_are_refused_for_its_families() -> None:
    old = parse_engine("ollama@0.24.0").rules
    with pytest.raises(EngineRefusalError, match="own Go engine"):
        old.layout(resolve("qwen3-8b"), BF16, BF16, 1, EngineOptions())
    llama = old.layout(resolve("llama-3.1-8b"), BF16, BF16, 1, EngineOptions())  # llamarunner: llama.cpp's cells
    assert llama.total_bytes(8192, 1) == 8192 * 131_072


def test_one_type_for_k_and_v_and_no_unified_cache() -> None:
    rules = parse_engine("ollama").rules
    with pytest.raises(EngineRefusalError, match="one type for K and V"):
        rules.layout(resolve("llama-3.1-8b"), Q8, parse_cache_dtype("q4_0"), 1, EngineOptions())
    with pytest.raises(EngineRefusalError, match="--kv-unified"):
        rules.layout(resolve("llama-3.1-8b"), BF16, BF16, 1, EngineOptions(kv_unified=True))


def _plan(model: str, context: int, k: str = "bf16") -> PlanInputs:
    dtype = parse_cache_dtype(k)
    weights = WeightSize(16 * GiB, "measured", "given")
    return PlanInputs(resolve(model), parse_engine("ollama"), dtype, dtype, 80 * GiB, "given", weights, context)


def test_single_slot_families_serve_one_session() -> None:
    plan = make_plan(_plan("lfm2-350m", 32_768))
    assert plan.sessions == 1
    assert any("one lfm2 session at a time" in w for w in plan.warnings)
    assert "-np 1" in plan.engine_lines[0]


def test_serve_environment() -> None:
    plan = make_plan(_plan("llama-3.1-8b", 32_768, "q8_0"))
    command = all_engine_flags(plan)["ollama"]
    assert command == (
        f"OLLAMA_CONTEXT_LENGTH=32768 OLLAMA_NUM_PARALLEL={plan.sessions} OLLAMA_KV_CACHE_TYPE=q8_0 ollama serve"
    )
    bf16 = all_engine_flags(make_plan(_plan("llama-3.1-8b", 32_768)))["ollama"]
    assert "OLLAMA_KV_CACHE_TYPE" not in bf16  # Ollama's f16 default holds the same bytes
    # llama.cpp's share of the card (the fit margin) and -c/-np: the sessions llama-server would hold
    assert plan.kv_pool_bytes // plan.per_session_bytes == plan.sessions
