"""The runtime-overhead heuristic against what vLLM measured (tests/data/logs/vllm_profiles.csv)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbudget.engines import parse_engine
from kvbudget.engines.base import EngineOptions
from kvbudget.engines.overhead import Site
from kvbudget.engines.sglang_memory import MemorySettings, mem_fraction_static
from kvbudget.measure.logs import read_log
from kvbudget.model.sources import resolve

LOGS = Path(__file__).parent.parent / "data" / "logs" / "vllm"
GiB = 2**30


@pytest.mark.parametrize(
    ("log", "tokens"),
    [("v0-0.6.4fmt-llama31-8b-rtx3090-20k.log", 20000), ("v0-0.6.4fmt-llama31-8b-rtx3090-29k-refusal.log", 29000)],
)
def test_range_brackets_vllm_measured_overhead(log: str, tokens: int) -> None:
    # vLLM V0 without chunked prefill profiles max_model_len tokens; no CUDA graph subtraction before 0.20
    measured = read_log(LOGS / log).measured
    real = int(measured["activation_peak_bytes"].value) + int(measured["non_torch_bytes"].value)
    est = parse_engine("vllm@0.19").rules.overhead(
        resolve("llama-3.1-8b"), Site(tp=1, batched=tokens, batched_basis="")
    )
    assert est.low <= real <= est.high
    assert est.high / real < 1.2  # the plan reserves the high end: within 20% of the measurement


def test_batched_tokens_default_follows_the_gpu() -> None:
    vllm = parse_engine("vllm")
    assert vllm.rules.batched_tokens(int(79.22 * GiB), "NVIDIA H100", EngineOptions())[0] == 8192
    assert vllm.rules.batched_tokens(int(23.58 * GiB), "NVIDIA GeForce RTX 3090", EngineOptions())[0] == 2048
    assert vllm.rules.batched_tokens(int(79.5 * GiB), "NVIDIA A100-80GB SXM4", EngineOptions())[0] == 2048
    assert parse_engine("llamacpp").rules.batched_tokens(24 * GiB, "given", EngineOptions()) == (
        512,
        "llama.cpp -ub (n_ubatch)",
    )


def test_a_3090_no_longer_reserves_most_of_the_card() -> None:
    est = parse_engine("vllm").rules.overhead(resolve("llama-3.1-8b"), Site(tp=1, batched=2048, batched_basis=""))
    assert est.high < 2 * GiB  # was 5.8-8.8 GiB; vLLM measured 2.4-3.3 GiB at 10x the batch


def test_sglang_mem_fraction_static_is_sglang_0523s() -> None:
    """SGLang 0.5.23's own ServerArgs resolution (tests/oracle/test_sglang_oracle.py) on a 81,559 MiB H100:
    reserve 512 + 8,192 x 1.5 + 128 + 256 x 2 + 58 prefill graphs x 8 = 13,904 MiB -> 0.83; MLA reserves
    1,536 MiB for prefill graphs instead -> 0.816."""

    assert mem_fraction_static(85_520_809_984, MemorySettings())[0] == 0.83
    assert mem_fraction_static(85_520_809_984, MemorySettings(mla=True))[0] == 0.816
