"""Oracle: vLLM 0.33.0's own planning code across GPU generations and tensor parallelism.

The probe (vllm_probe.py) builds each model on the meta device as rank 0 of a TP 1, 2, 4 or 8 group (the
tensor-parallel group answers ``world_size`` N; model classes size their per-rank heads and states from
it; no collective runs) on stand-ins of an A100 (SM80), L40S (SM89), H100 and H200 (SM90) and B200 (SM100)
with the memory and name of kvbudget's GPU catalog, one probe process per GPU, in parallel. vLLM picks the
attention backend for the GPU and model from its own priority lists, and its block size follows; kvbudget
must give the same block size, ``num_blocks``, "KV cache size" tokens, maximum concurrency and log line.
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
from kvbudget.precision import parse_cache_dtype
from tests.oracle.oracle_env import run_probes

VERSION = "0.33.0"  # tests/oracle/requirements-oracle.txt
GiB = 2**30
GPUS = ("a100-80gb", "l40s", "h100-80gb", "h200", "b200")
MODELS = (
    "Llama-3.1-8B",  # 8 KV heads: 1 per rank at TP 8
    "Qwen3-30B-A3B",  # 4 KV heads: replicated at TP 8
    "DeepSeek-V3",  # MLA: the latent on every rank; FlashMLA / Triton MLA / Blackwell MLA backends
    "gpt-oss-20b",  # sliding 128 + sinks, alternating with full
    "Qwen3-Next-80B-A3B",  # Gated DeltaNet hybrid: the state split by TP, 2 KV heads replicated; head 256 (FA4)
    "gemma-2-9b",  # head 256 with logit soft capping: no FA4 hd256 kernel on Blackwell, blocks of 16
)
TPS = (1, 2, 4, 8)
CONTEXT = 8192
BUDGETS = (20 * GiB, 3 * GiB)
CASES = [(gpu, model, tp) for gpu in GPUS for model in MODELS for tp in TPS]
# Read, not run: cells whose backend cannot be stood in honestly on a CPU, with the reason. On Blackwell vLLM picks
# FLASHINFER_MLA for DeepSeek-V3, whose module queries the CUDA runtime at import; kvbudget's rule (32-token blocks,
# vllm.mla_backend) is read from vLLM's backend priority list and the backend's supported block sizes.
READ_NOT_RUN = {("b200", "DeepSeek-V3"): "Torch not compiled with CUDA enabled"}
# Run in part: on Blackwell vLLM picks FlashInfer's Gated DeltaNet prefill only on a CUDA 13 runtime, which the CPU
# torch cannot report, so the stand-in takes the Triton prefill (2 state pages per request, not 3 with FlashInfer's
# checkpoint); the block size and num_blocks are the same either way and are run, the per-request figures are read
# (vllm._gdn_flashinfer; with the Triton rule kvbudget gives vLLM's 588,530 tokens at TP 1 exactly).
BLOCKS_ONLY = {("b200", "Qwen3-Next-80B-A3B"): "Gated DeltaNet prefill backend needs CUDA 13 (read)"}


def _case_id(gpu: str, model: str, tp: int) -> str:
    return f"{gpu} {model} tp={tp}"


def _config(name: str) -> dict[str, Any]:
    entry = catalog.lookup(name)
    assert entry is not None, name
    return copy.deepcopy(entry.config)


@cache
def _oracle() -> dict[str, dict[str, Any]]:
    runs = {}
    for gpu in GPUS:
        card = hardware.gpu(gpu)
        sm = compute_capability(card.name)
        assert sm is not None, gpu
        cases = [
            {
                "id": _case_id(*case),
                "config": _config(case[1]),
                "max_model_len": CONTEXT,
                "tensor_parallel_size": case[2],
                "available": list(BUDGETS),
            }
            for case in CASES
            if case[0] == gpu
        ]
        runs[gpu] = (cases, sm, card.cuda_total_bytes, card.name)
    return run_probes("vllm_probe.py", runs)


def _spec(name: str, label: str) -> ModelSpec:
    entry = catalog.lookup(name)
    assert entry is not None
    spec = read_spec(_config(name), name=entry.name, source=entry.source)
    return served_spec(spec, EngineRef("vllm", VERSION), compute_capability(label))


@pytest.mark.parametrize(("gpu", "name", "tp"), CASES, ids=[_case_id(*c) for c in CASES])
def test_vllm_matrix_equals_vllm(gpu: str, name: str, tp: int) -> None:
    got = _oracle()[gpu][_case_id(gpu, name, tp)]
    if (gpu, name) in READ_NOT_RUN:
        # the stand-in's limit, not vLLM's refusal: the day it runs, this fails and the cell joins the matrix
        assert READ_NOT_RUN[gpu, name] in got.get("refused", ""), got
        return
    assert "refused" not in got, got
    card = hardware.gpu(gpu)
    spec = _spec(name, card.name)
    k = parse_cache_dtype("auto", model_dtype=spec.dtype)
    batched = EngineRef("vllm", VERSION).rules.batched_tokens(card.cuda_total_bytes, card.name, EngineOptions())[0]
    assert batched == got["max_num_batched_tokens"]
    options = EngineOptions(gpu_capability=compute_capability(card.name), max_num_batched_tokens=batched)
    pool = vllm.pool(spec, k, k, tp, options, VERSION)
    for result in got["results"]:
        available = result["available"]
        if "error" in result:
            with pytest.raises(EngineRefusalError):
                vllm.check_admission(pool, available, CONTEXT)
            continue
        vllm.check_admission(pool, available, CONTEXT)
        assert pool.block_size == result["block_size"], (got["attention_backends"], result)
        assert vllm.num_blocks(pool, available) == result["num_blocks"], (available, result)
        if (gpu, name) in BLOCKS_ONLY:
            continue
        assert vllm.kv_cache_size_tokens(pool, available, CONTEXT) == result["tokens"], (available, result)
        assert vllm.max_concurrency(pool, available, CONTEXT) == pytest.approx(result["concurrency"], rel=1e-12)
        assert vllm.report_lines(pool, available, CONTEXT) == (result["line"],)
