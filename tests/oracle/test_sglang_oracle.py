"""Oracle: SGLang's own sizing code, run in the test suite, against kvbudget's ``sglang`` engine.

The probe (sglang_probe.py, in the oracle environment of scripts/setup-oracles) resolves SGLang 0.5.23's
``ServerArgs`` for each model on a stood-in GPU, builds its ``ModelConfig`` and a ``KVCacheConfigurator``
as the model runner does, and sizes the pools for several KV budgets: the Mamba carve-out, the token
pool, the full / sliding split, the running-request cap. kvbudget must give the same
``mem_fraction_static``, ``chunked_prefill_size``, ``max_total_num_tokens``, pool split, Mamba state slots
and ``max_running_requests``, to the token.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import pytest

from kvbudget import hardware
from kvbudget.engines import EngineRef, served_spec, sglang
from kvbudget.engines.base import EngineOptions
from kvbudget.engines.common import group_primitives
from kvbudget.engines.sglang_memory import MemorySettings, mem_fraction_static
from kvbudget.model import catalog
from kvbudget.model.families import read_spec
from kvbudget.model.spec import LatentAttention, ModelSpec
from kvbudget.precision import parse_cache_dtype
from tests.oracle.oracle_env import Runs, run_probes

GiB = 2**30
# kvbudget's GPU catalog: the total CUDA reports (what SGLang reads), and the compute capability
GPUS = {
    name: (hardware.gpu(entry).cuda_total_bytes, sm, hardware.gpu(entry).name)
    for name, entry, sm in (("h100", "h100-80gb", 90), ("b200", "b200", 100), ("l4", "l4", 89))
}
MODELS: dict[str, dict[str, Any]] = {
    "Llama-3.1-8B": {},  # dense
    "gpt-oss-20b": {},  # hybrid SWA pool (sliding 128 + sinks)
    "Llama-4-Scout-17B-16E-Instruct": {},  # hybrid SWA pool for chunked attention
    "gemma-3-27b-it": {"architectures": ["Gemma3ForCausalLM"], "torch_dtype": "bfloat16"},  # no SWA pool
    "DeepSeek-V3": {},  # MLA
    "Qwen3-Next-80B-A3B": {},  # Gated DeltaNet hybrid
    "Nemotron-H-8B-Base-8K": {},  # Mamba2 hybrid
    "NVIDIA-Nemotron-3-Nano-30B-A3B": {},  # Mamba2 + MoE hybrid
    "Falcon-H1-1.5B": {},  # parallel hybrid
}
BUDGETS = (20 * GiB, 3 * GiB)
FP32 = "-fp32"  # a catalog model saved in float32: SGLang runs it in float16 (Gemma in bfloat16)


def _base(name: str) -> str:
    return name.removesuffix(FP32)


def _config(name: str) -> dict[str, Any]:
    entry = catalog.lookup(_base(name))
    assert entry is not None, name
    cfg = copy.deepcopy(entry.config)
    cfg.update(MODELS.get(_base(name), {}))
    if name.endswith(FP32):
        cfg["torch_dtype"] = "float32"
    return cfg


def _context(name: str) -> int:
    window = _config(name).get("max_position_embeddings", 8192)
    return 8192 if isinstance(window, int) and window < 32768 else 32768


CASES: list[tuple[str, str, int, str, bool]] = [
    *(("h100", name, _context(name), "auto", False) for name in MODELS),
    ("h100", "Llama-3.1-8B", 8192, "auto", False),
    ("h100", "DeepSeek-V3", 8192, "fp8_e4m3", False),
    ("h100", "gpt-oss-20b", 8192, "auto", False),
    ("h100", "Qwen3-Next-80B-A3B", 8192, "auto", True),  # --disable-radix-cache: 1 state slot per request
    ("b200", "Llama-3.1-8B", 32768, "auto", False),
    ("b200", "DeepSeek-V3", 32768, "auto", False),
    ("l4", "Llama-3.1-8B", 8192, "auto", False),
    ("h100", "Llama-3.1-8B" + FP32, 8192, "auto", False),
    ("h100", "gemma-3-27b-it" + FP32, 8192, "auto", False),
]


def _case_id(gpu: str, name: str, context: int, kv: str, no_radix: bool) -> str:
    return f"{gpu} {name} ctx={context} kv={kv}" + (" no-radix" if no_radix else "")


def oracle_runs() -> tuple[str, Runs]:
    """The probe and its runs, one per GPU (tests/oracle/conftest.py starts them all when the session starts)."""
    runs: Runs = {}
    for gpu, (memory, sm, label) in GPUS.items():
        cases = [
            {
                "id": _case_id(*case),
                "config": _config(case[1]),
                "context_len": case[2],
                "kv_cache_dtype": case[3],
                "disable_radix_cache": case[4],
                "budgets": list(BUDGETS),
            }
            for case in CASES
            if case[0] == gpu
        ]
        if cases:
            runs[gpu] = (cases, sm, memory, label)
    return "sglang_probe.py", runs


@cache
def _oracle(gpu: str) -> dict[str, Any]:
    return run_probes(*oracle_runs(), tag=__name__)[gpu]


def _spec(name: str) -> ModelSpec:
    """The model as SGLang runs it: in the dtype it resolves the checkpoint's to."""
    entry = catalog.lookup(_base(name))
    assert entry is not None
    spec = read_spec(_config(name), name=entry.name, source=entry.source)
    return served_spec(spec, EngineRef("sglang", sglang.DEFAULT_VERSION))


@pytest.mark.parametrize("case", CASES, ids=[_case_id(*c) for c in CASES])
def test_sglang_sizing_equals_sglang(case: tuple[str, str, int, str, bool]) -> None:
    gpu, name, context, kv, no_radix = case
    got = _oracle(gpu)[_case_id(*case)]
    assert "refused" not in got, got
    spec = _spec(name)
    ours, theirs = parse_cache_dtype(spec.dtype), parse_cache_dtype(got["model_dtype"])
    if name.endswith(FP32):
        assert ours.name == theirs.name
    else:  # catalog configs without torch_dtype: kvbudget reads bf16, SGLang float32 run as fp16 (same bytes)
        assert ours.block_bytes == theirs.block_bytes
    memory = GPUS[gpu][0]
    mla = any(isinstance(state, LatentAttention) for state, _ in group_primitives(spec))
    assert mem_fraction_static(memory, MemorySettings(mla=mla))[0] == got["mem_fraction_static"]
    assert (
        EngineRef("sglang", sglang.DEFAULT_VERSION).rules.batched_tokens(memory, "", EngineOptions())[0]
        == (got["chunked_prefill_size"])
    )
    dtype = parse_cache_dtype("auto" if kv == "auto" else kv, model_dtype=spec.dtype)
    options = EngineOptions(prefix_caching=False if no_radix else None, gpu_capability=GPUS[gpu][1])
    built = sglang.layout(spec, dtype, dtype, 1, options)
    assert built.block_size == got["page_size"]
    assert sglang.swa_architecture(spec) == got["is_hybrid_swa"]
    for result in got["results"]:
        pools = sglang.pools(result["rest"], spec, built, context, options)
        if "max_mamba_cache_size" in result:
            assert pools.mamba_cache_per_req == result["mamba_cache_per_req"]
            assert pools.max_mamba_cache_size == result["max_mamba_cache_size"]
            assert sglang.mamba_slots_per_request(spec, options) == result["mamba_ratio"]
        assert pools.max_total_num_tokens == result["max_total_num_tokens"], result
        if result["swa_max_total_num_tokens"] is not None:
            assert (pools.full_tokens, pools.swa_tokens) == (
                result["full_max_total_num_tokens"],
                result["swa_max_total_num_tokens"],
            )
        assert pools.max_running_requests == result["max_running_requests"], result
