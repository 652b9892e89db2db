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
from dataclasses import replace
from functools import cache
from typing import Any

import pytest

from kvbudget import hardware
from kvbudget.coverage_oracle import (
    GPUS,
    PP,
    TPS,
    VLLM_MODELS,
    VLLM_PP_MODELS,
    VLLM_READ_NOT_RUN,
    gpu,
)
from kvbudget.engines import EngineRef, served_spec, vllm, vllm_batches
from kvbudget.engines.base import EngineOptions
from kvbudget.engines.capability import compute_capability
from kvbudget.errors import EngineRefusalError
from kvbudget.model import catalog
from kvbudget.model.families import read_spec
from kvbudget.model.spec import ModelSpec
from kvbudget.plan.capacity import stage_specs, staged_layout
from kvbudget.precision import parse_cache_dtype
from tests.oracle.oracle_env import Runs, run_probes

VERSION = "0.33.0"  # tests/oracle/requirements-oracle.txt
GiB = 2**30
CONTEXT = 8192
PP_CONTEXT = 32768  # past the batches in flight, so a sliding window shows them (3 x 8,192 at PP 2)
BUDGETS = (20 * GiB, 3 * GiB)
# the matrix (kvbudget.coverage_oracle, which docs/coverage.md renders): every GPU x model x TP, and PP 2 at TP 1
CASES = [(g.key, model, tp) for g in GPUS for model in VLLM_MODELS for tp in TPS]
PP_CASES = [(g.key, model) for g in GPUS for model in VLLM_PP_MODELS]


def _case_id(key: str, model: str, tp: int, pp: int = 1) -> str:
    return f"{key} {model} tp={tp}" + (f" pp={pp}" if pp > 1 else "")


def _config(name: str) -> dict[str, Any]:
    entry = catalog.lookup(name)
    assert entry is not None, name
    return copy.deepcopy(entry.config)


def _probe_case(model: str, tp: int, pp: int = 1) -> dict[str, Any]:
    return {
        "config": _config(model),
        "max_model_len": PP_CONTEXT if pp > 1 else CONTEXT,
        "tensor_parallel_size": tp,
        "pipeline_parallel_size": pp,
        "available": list(BUDGETS),
    }


def oracle_runs() -> tuple[str, Runs]:
    """The probe and its runs, one per GPU (tests/oracle/conftest.py starts them all when the session starts)."""
    runs = {}
    for g in GPUS:
        card = hardware.gpu(g.entry)
        cases = [{"id": _case_id(*c), **_probe_case(c[1], c[2])} for c in CASES if c[0] == g.key]
        cases += [{"id": _case_id(k, m, 1, PP), **_probe_case(m, 1, PP)} for k, m in PP_CASES if k == g.key]
        runs[g.key] = (cases, g.capability, card.cuda_total_bytes, card.name)
    return "vllm_probe.py", runs


@cache
def _oracle() -> dict[str, dict[str, Any]]:
    return run_probes(*oracle_runs(), tag=__name__)


def _spec(name: str, label: str) -> ModelSpec:
    entry = catalog.lookup(name)
    assert entry is not None
    spec = read_spec(_config(name), name=entry.name, source=entry.source)
    return served_spec(spec, EngineRef("vllm", VERSION), compute_capability(label))


def _check(key: str, name: str, tp: int, pp: int) -> None:
    got = _oracle()[key][_case_id(key, name, tp, pp)]
    if (key, name) in VLLM_READ_NOT_RUN:
        # the stand-in's limit, not vLLM's refusal: the day it runs, this fails and the cell joins the matrix
        assert VLLM_READ_NOT_RUN[key, name][1] in got.get("refused", ""), got
        return
    assert "refused" not in got, got
    card = hardware.gpu(gpu(key).entry)
    spec = _spec(name, card.name)
    k = parse_cache_dtype("auto", model_dtype=spec.dtype)
    batched = EngineRef("vllm", VERSION).rules.batched_tokens(card.cuda_total_bytes, card.name, EngineOptions())[0]
    assert batched == got["max_num_batched_tokens"]
    assert vllm_batches.concurrent_batches(pp) * batched == got["max_in_flight_tokens"]
    options = EngineOptions(gpu_capability=compute_capability(card.name), max_num_batched_tokens=batched)
    context = PP_CONTEXT if pp > 1 else CONTEXT
    # one pool per pipeline stage (kvbudget's split: vLLM's get_pp_indices gives the same at PP 2)
    layout = staged_layout(spec, EngineRef("vllm", VERSION), k, k, tp, pp, options)
    stages = [vllm.pool(s, k, k, tp, replace(options, pipeline_parallel=pp), VERSION) for s in stage_specs(spec, pp)]
    assert [stage.block_size for stage in layout.stages] == [stage.block_size for stage in stages]
    assert [sum(len(b.layer_indices) for b in p.buckets) for p in stages] == got["stage_layers"]
    for result in got["results"]:
        available = result["available"]
        if "error" in result:
            with pytest.raises(EngineRefusalError):
                for pool in stages:
                    vllm.check_admission(pool, available, context)
            continue
        # vLLM gives every worker the smallest stage's num_blocks (get_kv_cache_configs); that stage plans
        pool = min(stages, key=lambda p: vllm.num_blocks(p, available))
        vllm.check_admission(pool, available, context)
        assert pool.block_size == result["block_size"], (got["attention_backends"], result)
        assert vllm.num_blocks(pool, available) == result["num_blocks"], (available, result)
        assert vllm.kv_cache_size_tokens(pool, available, context) == result["tokens"], (available, result)
        assert vllm.max_concurrency(pool, available, context) == pytest.approx(result["concurrency"], rel=1e-12)
        assert vllm.report_lines(pool, available, context) == (result["line"],)


@pytest.mark.parametrize(("key", "name", "tp"), CASES, ids=[_case_id(*c) for c in CASES])
def test_vllm_matrix_equals_vllm(key: str, name: str, tp: int) -> None:
    _check(key, name, tp, 1)


@pytest.mark.parametrize(("key", "name"), PP_CASES, ids=[_case_id(k, m, 1, PP) for k, m in PP_CASES])
def test_vllm_pipeline_stages_equal_vllm(key: str, name: str) -> None:
    _check(key, name, 1, PP)
