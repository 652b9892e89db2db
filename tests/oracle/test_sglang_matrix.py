"""Oracle: SGLang 0.5.23's own resolution and sizing across GPU generations and parallel layouts.

The probe (sglang_probe.py) answers as one rank of a TP 1, 2, 4 or 8 server (SGLang publishes the parallel
widths from its arguments; the configurator reads ``attn_tp_size`` / ``attn_dp_size`` from them) on stand-ins
of an A100 (SM80), L40S (SM89), H100 and H200 (SM90) and B200 (SM100) with the memory kvbudget's GPU catalog
gives them, one probe process per GPU, in parallel. Besides the defaults it runs the settings that change
SGLang's budget: DP attention, ``--chunked-prefill-size``, ``--max-running-requests`` (with the radix cache
off for a Mamba hybrid: the state slots follow it) and pipeline parallelism (resolution only: a pipeline
stage's configurator needs its process groups). kvbudget must give the same ``mem_fraction_static``, chunked
prefill, page size, attention TP, token pools and running-request cap, to the token.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest

from kvbudget import hardware
from kvbudget.coverage_oracle import GPUS, PP, SGLANG_MODELS, SGLANG_PP_GPUS, SGLANG_PP_MODELS, TPS
from kvbudget.coverage_oracle import gpu as oracle_gpu
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
BUDGETS = (20 * GiB, 4 * GiB)
CONTEXT = 32768


@dataclass(frozen=True)
class Case:
    gpu: str
    model: str
    tp: int
    dp: int = 1  # DP attention size (1: off)
    chunked: int | None = None
    running: int | None = None
    no_radix: bool = False
    pp: int = 1
    no_graphs: bool = False  # --disable-cuda-graph (kvbudget --enforce-eager / --disable-cuda-graph)

    @property
    def id(self) -> str:
        extra = [
            f"dp={self.dp}" if self.dp > 1 else "",
            f"chunk={self.chunked}" if self.chunked else "",
            f"mrr={self.running}" if self.running else "",
            "no-radix" if self.no_radix else "",
            f"pp={self.pp}" if self.pp > 1 else "",
            "no-graphs" if self.no_graphs else "",
        ]
        return " ".join([self.gpu, self.model, f"tp={self.tp}", *filter(None, extra)])

    @property
    def context(self) -> int:
        """32k, or 8k for a model trained on less (SGLang refuses a --context-length past the config's)."""
        window = _config(self.model).get("max_position_embeddings", 8192)
        return CONTEXT if not isinstance(window, int) or window >= CONTEXT else 8192

    def options(self) -> EngineOptions:
        return EngineOptions(
            max_num_batched_tokens=self.chunked,
            max_running_requests=self.running,
            dp_attention=self.dp if self.dp > 1 else None,
            prefix_caching=False if self.no_radix else None,
            gpu_capability=oracle_gpu(self.gpu).capability,
            enforce_eager=self.no_graphs,
        )


CASES = [
    *(Case(g.key, model, tp) for g in GPUS for model in SGLANG_MODELS for tp in TPS),
    # DP attention: the graph reserve grows with max_bs x dp; attention heads split over tp / dp
    *(Case(gpu, model, 8, dp=dp) for gpu in ("h100", "b200", "l40s") for model in SGLANG_MODELS[:3] for dp in (2, 8)),
    Case("h200", "DeepSeek-V3", 8, dp=8),
    Case("h200", "Llama-3.1-8B", 4, dp=2),
    # the settings that change the reserve and the cap
    *(Case(gpu, "Llama-3.1-8B", 2, chunked=4096) for gpu in ("h100", "b200")),
    Case("h200", "DeepSeek-V3", 8, chunked=16384),
    *(Case(gpu, "Llama-3.1-8B", 1, running=64) for gpu in ("h100", "l40s")),
    Case("h100", "Llama-3.1-8B", 8, dp=8, running=1024),
    Case("h100", "Qwen3-Next-80B-A3B", 4, running=128, no_radix=True),
    Case("b200", "gpt-oss-20b", 2, running=300),
    # Blackwell's attention backend per model: triton (page 1) for Falcon-H1 and, with the radix cache on,
    # Qwen3-Next; trtllm_mha (page 64) for Nemotron-H and for Qwen3-Next with the radix cache off
    Case("b200", "Falcon-H1-1.5B", 2),
    Case("b200", "Nemotron-H-8B-Base-8K", 2),
    Case("b200", "Qwen3-Next-80B-A3B", 2, no_radix=True),
    # --disable-cuda-graph: neither the decode nor the prefill graphs are reserved; DP attention's padding stays
    *(Case(gpu, "Llama-3.1-8B", 1, no_graphs=True) for gpu in ("h100", "l40s", "b200")),
    Case("h100", "DeepSeek-V3", 8, no_graphs=True),
    Case("h100", "Llama-3.1-8B", 8, dp=8, no_graphs=True),
    # pipeline parallelism: no prefill graphs by default (resolution only)
    *(Case(key, model, 2, pp=PP) for key in SGLANG_PP_GPUS for model in SGLANG_PP_MODELS),
]


def _config(name: str) -> dict[str, Any]:
    entry = catalog.lookup(name)
    assert entry is not None, name
    return copy.deepcopy(entry.config)


def _probe_case(case: Case) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": case.id,
        "config": _config(case.model),
        "context_len": case.context,
        "tp_size": case.tp,
        "pp_size": case.pp,
        "chunked_prefill_size": case.chunked,
        "max_running_requests": case.running,
        "disable_radix_cache": case.no_radix,
        "disable_cuda_graph": case.no_graphs,
        "budgets": list(BUDGETS),
        "resolution_only": case.pp > 1,
    }
    if case.dp > 1:
        out.update(dp_size=case.dp, enable_dp_attention=True)
    return out


def oracle_runs() -> tuple[str, Runs]:
    """The probe and its runs, one per GPU (tests/oracle/conftest.py starts them all when the session starts)."""
    runs = {}
    for g in GPUS:
        card = hardware.gpu(g.entry)
        cases = [_probe_case(case) for case in CASES if case.gpu == g.key]
        runs[g.key] = (cases, g.capability, card.cuda_total_bytes, card.name)
    return "sglang_probe.py", runs


@cache
def _oracle() -> dict[str, dict[str, Any]]:
    return run_probes(*oracle_runs(), tag=__name__)


def _spec(name: str) -> ModelSpec:
    entry = catalog.lookup(name)
    assert entry is not None
    spec = read_spec(_config(name), name=entry.name, source=entry.source)
    return served_spec(spec, EngineRef("sglang", sglang.DEFAULT_VERSION))


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_sglang_matrix_equals_sglang(case: Case) -> None:
    got = _oracle()[case.gpu][case.id]
    assert "refused" not in got, got
    spec = _spec(case.model)
    options = case.options()
    memory = hardware.gpu(oracle_gpu(case.gpu).entry).cuda_total_bytes
    mla = any(isinstance(state, LatentAttention) for state, _ in group_primitives(spec))
    settings = MemorySettings(
        tp=case.tp,
        pp=case.pp,
        mla=mla,
        chunked_prefill=case.chunked,
        max_running_requests=case.running,
        dp_attention=case.dp,
        no_graphs=case.no_graphs,
    )
    assert mem_fraction_static(memory, settings)[0] == got["mem_fraction_static"]
    rules = EngineRef("sglang", sglang.DEFAULT_VERSION).rules
    chunked = case.chunked // case.dp if case.chunked else rules.batched_tokens(memory, "", options)[0]
    assert chunked == got["chunked_prefill_size"]
    assert sglang.attention_tp(case.tp, options) == got["attn_tp_size"]
    assert sglang.dp_attention(options) == got["attn_dp_size"]
    if case.pp > 1:
        return
    dtype = parse_cache_dtype("auto", model_dtype=spec.dtype)
    built = sglang.layout(spec, dtype, dtype, case.tp, options)
    assert built.block_size == got["page_size"]
    for result in got["results"]:
        pools = sglang.pools(result["rest"], spec, built, case.context, options)
        if "max_mamba_cache_size" in result:
            assert pools.mamba_cache_per_req == result["mamba_cache_per_req"]
            assert pools.max_mamba_cache_size == result["max_mamba_cache_size"]
        assert pools.max_total_num_tokens == result["max_total_num_tokens"], result
        if result["swa_max_total_num_tokens"] is not None:
            assert (pools.full_tokens, pools.swa_tokens) == (
                result["full_max_total_num_tokens"],
                result["swa_max_total_num_tokens"],
            )
        assert pools.max_running_requests == result["max_running_requests"], result
