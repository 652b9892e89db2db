"""Oracle: vLLM's own planning code, run in the test suite, against kvbudget's ``vllm`` engine.

For each model of the matrix (full catalog configs: the meta device makes size free), the probe
(vllm_probe.py, in the oracle environment of scripts/setup-oracles) runs vLLM 0.33.0 from
``EngineArgs.create_engine_config`` to the capacity log line on a stood-in H100, and an A100 for the
Ampere rules (oracle_standin.py),
for several KV budgets, context lengths, and prefix caching on (vLLM's default) and off. kvbudget
must give the same block size, ``num_blocks``, "KV cache size" tokens, maximum concurrency and log
line, and refuse where vLLM refuses, with vLLM's estimated maximum model length.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import pytest

from kvbudget import hardware
from kvbudget.engines import EngineRef, served_spec, vllm
from kvbudget.engines.base import EngineOptions
from kvbudget.engines.capability import compute_capability
from kvbudget.errors import EngineRefusalError
from kvbudget.model import catalog
from kvbudget.model.families import read_spec
from kvbudget.model.spec import ModelSpec
from kvbudget.plan.capacity import StagedLayout, sessions_at
from kvbudget.precision import parse_cache_dtype
from tests.oracle.oracle_env import Runs, run_probes

VERSION = "0.33.0"  # tests/oracle/requirements-oracle.txt
GiB = 2**30
# kvbudget's GPU catalog: the name and total vLLM reads, and the compute capability the plan derives from it
GPUS = {gpu: (hardware.gpu(gpu).cuda_total_bytes, hardware.gpu(gpu).name) for gpu in ("h100-80gb", "a100-80gb")}

# Catalog models, one per cache architecture, with the few config changes vLLM's loader needs.
MODELS: dict[str, dict[str, Any]] = {
    "Llama-3.1-8B": {},  # dense full attention
    "gemma-3-27b-it": {"architectures": ["Gemma3ForCausalLM"], "torch_dtype": "bfloat16"},  # sliding 1024, 5:1
    "gpt-oss-20b": {},  # sliding 128 alternating with full, sinks
    "Llama-4-Scout-17B-16E-Instruct": {},  # chunked local attention 8192, 3:1
    "DeepSeek-V3": {},  # MLA
    "Qwen3-Next-80B-A3B": {},  # Gated DeltaNet 3:1 with full attention
    "Nemotron-H-8B-Base-8K": {},  # Mamba2 hybrid
    "NVIDIA-Nemotron-3-Nano-30B-A3B": {},  # Mamba2 + MoE hybrid
    "Jamba-v0.1": {},  # Mamba1 hybrid
    "Falcon-H1-1.5B": {},  # parallel hybrid: attention and Mamba2 in every layer
    "Mamba-Codestral-7B-v0.1": {},  # attention-free Mamba2
}
BUDGETS = (20 * GiB, 3 * GiB, 256 * 2**20)
FP32 = "-fp32"  # a catalog model saved in float32: vLLM runs it (weights and the auto cache) in its preferred dtype


def _base(name: str) -> str:
    return name.removesuffix(FP32)


def _config(name: str) -> dict[str, Any]:
    entry = catalog.lookup(_base(name))
    assert entry is not None, name
    cfg = copy.deepcopy(entry.config)
    cfg.update(MODELS[_base(name)])
    if name.endswith(FP32):
        cfg["torch_dtype"] = "float32"
    return cfg


def _case_id(gpu: str, name: str, context: int, kv: str, prefix: bool | None) -> str:
    return f"{gpu} {name} ctx={context} kv={kv} prefix={'default' if prefix is None else prefix}"


def _contexts(name: str) -> tuple[int, ...]:
    """Two context lengths within the model's window (vLLM refuses a longer max_model_len)."""
    entry = catalog.lookup(_base(name))
    assert entry is not None
    # Falcon-H1's catalog config names no window: vLLM derives 8,192 (transformers' FalconH1Config default)
    window = entry.config.get("max_position_embeddings", 8192)
    return (4096, 8192) if isinstance(window, int) and window < 32768 else (8192, 32768)


H100 = "h100-80gb"
CASES: list[tuple[str, str, int, str, bool | None]] = [
    *(
        (H100, name, context, "auto", prefix)
        for name in MODELS
        for context in _contexts(name)
        for prefix in (None, False)
    ),
    (H100, "Llama-3.1-8B", 131072, "auto", None),
    (H100, "Llama-3.1-8B", 8192, "fp8", None),
    (H100, "Llama-3.1-8B" + FP32, 8192, "auto", None),  # float32 checkpoint: bf16 on Hopper
    ("a100-80gb", "Llama-3.1-8B" + FP32, 8192, "auto", None),
    (H100, "DeepSeek-V3", 8192, "fp8", None),
    (H100, "gpt-oss-20b", 32768, "fp8", False),
    # Ampere: Triton MLA (blocks of 16), Triton GDN prefill (no checkpoint page), the A100's 2,048-token batch
    ("a100-80gb", "DeepSeek-V3", 8192, "auto", None),
    ("a100-80gb", "Qwen3-Next-80B-A3B", 8192, "auto", None),
    ("a100-80gb", "gpt-oss-20b", 32768, "auto", None),
    ("a100-80gb", "NVIDIA-Nemotron-3-Nano-30B-A3B", 8192, "auto", None),
]


def oracle_runs() -> tuple[str, Runs]:
    """The probe and its runs, one per GPU (tests/oracle/conftest.py starts them all when the session starts)."""
    runs: Runs = {}
    for gpu, (memory, label) in GPUS.items():
        cases = [
            {
                "id": _case_id(*case),
                "config": _config(case[1]),
                "max_model_len": case[2],
                "kv_cache_dtype": case[3],
                "enable_prefix_caching": case[4],
                "available": list(BUDGETS),
            }
            for case in CASES
            if case[0] == gpu
        ]
        sm = compute_capability(label)
        assert sm is not None
        runs[gpu] = (cases, sm, memory, label)
    return "vllm_probe.py", runs


@cache
def _oracle(gpu: str) -> dict[str, Any]:
    return run_probes(*oracle_runs(), tag=__name__)[gpu]


def _spec(name: str, label: str) -> ModelSpec:
    """The model as vLLM runs it on the GPU ``label``: in the dtype it resolves the checkpoint's to."""
    entry = catalog.lookup(_base(name))
    assert entry is not None
    spec = read_spec(_config(name), name=entry.name, source=entry.source)
    return served_spec(spec, EngineRef("vllm", VERSION), compute_capability(label))


@pytest.mark.parametrize(("gpu", "name", "context", "kv", "prefix"), CASES, ids=[_case_id(*c) for c in CASES])
def test_vllm_capacity_equals_vllm(gpu: str, name: str, context: int, kv: str, prefix: bool | None) -> None:
    got = _oracle(gpu)[_case_id(gpu, name, context, kv, prefix)]
    assert "refused" not in got, got
    memory, label = GPUS[gpu]
    spec = _spec(name, label)
    assert parse_cache_dtype(spec.dtype).name == parse_cache_dtype(got["model_dtype"]).name
    k = parse_cache_dtype(kv, model_dtype=spec.dtype)
    # what the plan derives from the GPU: the API server's batch, the compute capability
    batched = EngineRef("vllm", VERSION).rules.batched_tokens(memory, label, EngineOptions())[0]
    assert batched == got["max_num_batched_tokens"]
    options = EngineOptions(
        prefix_caching=prefix, gpu_capability=compute_capability(label), max_num_batched_tokens=batched
    )
    pool = vllm.pool(spec, k, k, 1, options, VERSION)
    layout = StagedLayout((vllm.layout(spec, k, k, 1, options, VERSION),))
    assert pool.prefix_caching == got["enable_prefix_caching"]
    for result in got["results"]:
        available = result["available"]
        if "error" in result:
            with pytest.raises(EngineRefusalError) as refused:
                vllm.check_admission(pool, available, context)
            expected = result["error"]
            if "estimated maximum model length is" in expected:
                estimate = int(expected.split("estimated maximum model length is ")[1].split(".")[0])
                assert f"estimated maximum model length is {estimate}" in str(refused.value)
            continue
        vllm.check_admission(pool, available, context)
        # attention-free: vLLM reports the Mamba block, max_model_len with prefix caching off
        assert (pool.block_size or context) == result["block_size"], (available, result)
        assert vllm.num_blocks(pool, available) == result["num_blocks"], (available, result)
        assert vllm.kv_cache_size_tokens(pool, available, context) == result["tokens"], (available, result)
        assert vllm.max_concurrency(pool, available, context) == pytest.approx(result["concurrency"], rel=1e-12)
        assert vllm.report_lines(pool, available, context) == (result["line"],)
        # the plan's sessions at the cap: vLLM's maximum concurrency, whole sessions
        assert sessions_at(layout, available, context) == int(result["concurrency"]), (available, result)
