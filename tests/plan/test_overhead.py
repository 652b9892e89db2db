"""The runtime-overhead heuristic against what vLLM measured (tests/data/logs/vllm_profiles.csv)."""

from __future__ import annotations

from dataclasses import replace
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


def test_enforce_eager_drops_the_cuda_graph_term_where_vllm_would_subtract_it() -> None:
    """vLLM 0.20.0 under --enforce-eager: cudagraph_mode NONE (config/vllm.py), no graph estimate subtracted
    (gpu_worker.py determine_available_memory) and none captured (capture_model returns 0). Llama-3.1-8B at 8,192
    batched tokens on an H100: 0.20's range loses exactly the 0.1-0.9 GiB graph term and equals 0.19's; before 0.20
    (V1 and V0) the graphs come after the pool, so eager changes nothing."""
    spec = resolve("llama-3.1-8b")

    def estimate(engine: str, eager: bool) -> tuple[int, int]:
        site = Site(1, 8192, "", int(79.19 * GiB), "NVIDIA H100 80GB HBM3", enforce_eager=eager)
        est = parse_engine(engine).rules.overhead(spec, site)
        return est.low, est.high

    assert estimate("vllm@0.20", False) == (2_205_614_079, 3_333_042_994)
    assert estimate("vllm@0.20", True) == (2_098_239_897, 2_366_675_353)
    graph_term = (2_205_614_079 - 2_098_239_897, 3_333_042_994 - 2_366_675_353)
    assert graph_term == (int(0.1 * GiB), int(0.9 * GiB))
    assert estimate("vllm@0.19", True) == estimate("vllm@0.19", False) == (2_098_239_897, 2_366_675_353)
    assert estimate("vllm@0.6.6", True) == estimate("vllm@0.6.6", False) == (1_375_902_105, 1_644_337_561)
    eager = parse_engine("vllm@0.20").rules.overhead(spec, Site(1, 8192, "", enforce_eager=True))
    assert (eager.low, eager.high) == (1_030_592_921, 1_557_397_503)  # a bare --gpu-memory: no graph term either
    assert "CUDA graphs 0.1-0.9 GiB" not in eager.basis
    assert "--enforce-eager: vLLM captures no CUDA graphs" in eager.basis


@pytest.mark.parametrize("engine", ["trtllm", "llamacpp", "ollama", "transformers", "ideal"])
def test_enforce_eager_is_refused_for_an_engine_that_does_not_read_it(engine: str) -> None:
    from kvbudget.errors import InputError

    with pytest.raises(InputError, match=r"^--enforce-eager: no CUDA graphs .* not a switch kvbudget models for"):
        parse_engine(engine).rules.check_options(EngineOptions(enforce_eager=True))
    for reads in ("vllm", "sglang"):  # vLLM --enforce-eager, SGLang --disable-cuda-graph
        parse_engine(reads).rules.check_options(EngineOptions(enforce_eager=True))


def test_sglangs_disable_cuda_graph_drops_the_graph_reserve_from_its_derived_fraction() -> None:
    """SGLang 0.5.23 reserve_for_graph_mb counts the decode graphs (max_bs x 2 MiB) and the prefill graphs only when
    their backend is not disabled (checked against SGLang's own resolution in tests/oracle/test_sglang_matrix.py):
    on an H100 (CUDA total 81,121 MiB) Llama-3.1-8B's reserve drops by 256 x 2 + 58 x 8 = 976 MiB, 0.829 -> 0.841; DP
    attention's padding stays; before 0.5.3 the default holds no graph term, so the switch changes nothing."""
    total = 81_121 * 2**20
    assert mem_fraction_static(total, MemorySettings())[0] == 0.829
    fraction, words = mem_fraction_static(total, MemorySettings(no_graphs=True))
    assert fraction == 0.841 and "reserve 12,928 MiB" in words and "CUDA graphs disabled" in words
    for version in ("0.4.4", "0.5.2"):
        assert mem_fraction_static(total, MemorySettings(no_graphs=True), version) == mem_fraction_static(
            total, MemorySettings(), version
        )


def test_the_flashinfer_sampler_switch_picks_the_profiles_sampler_per_release() -> None:
    """VLLM_USE_FLASHINFER_SAMPLER with flashinfer-python installed (--flashinfer-sampler): on, the dummy sampler run
    keeps FlashInfer's 14 B per (sequence, vocabulary entry); off, the release's own path (the 37 B sort before 0.17,
    the Triton kernel from 0.17); unset, the release's default (0.10.1: the sort, with a range down to FlashInfer's
    figure since the path depends on the installation). Llama-3.1-8B at 8,192 batched tokens, 1,024 sequences on an
    H100: the sampler is the larger term of the profile, so the reserve moves by exactly the sampler's difference."""
    from kvbudget.engines.vllm_profile import chosen_sampler, sampler_bytes
    from kvbudget.errors import InputError

    spec = resolve("llama-3.1-8b")

    def estimate(engine: str, flashinfer: bool | None) -> tuple[int, int, str]:
        site = Site(1, 8192, "", int(79.19 * GiB), "NVIDIA H100 80GB HBM3", flashinfer_sampler=flashinfer)
        est = parse_engine(engine).rules.overhead(spec, site)
        return est.low, est.high, est.basis

    native, flashinfer = sampler_bytes(spec, 1024), sampler_bytes(spec, 1024, "flashinfer")
    assert (native, flashinfer) == (1024 * 128_256 * 37, 1024 * 128_256 * 14)
    default_low, default_high, words = estimate("vllm@0.10.1", None)
    on_low, on_high, on_words = estimate("vllm@0.10.1", True)
    off_low, off_high, _ = estimate("vllm@0.10.1", False)
    assert default_high - on_high == native - flashinfer  # on: FlashInfer's figure reserved
    assert off_high == default_high and off_low > default_low == on_low  # off: the sort, the range no longer widened
    assert "keeps up to" in words and "keeps up to" not in on_words and "FlashInfer top-k/top-p" in on_words
    assert [chosen_sampler(v, False) for v in ("0.10.1", "0.16.0", "0.17.0", "0.21.0")] == [
        "native",
        "native",
        "triton",
        "triton",
    ]
    assert [chosen_sampler(v, None) for v in ("0.8.5", "0.10.1", "0.17.0", "0.21.0")] == [
        "native",
        "flashinfer if installed",
        "triton",
        "flashinfer",
    ]
    assert estimate("vllm@0.21", None)[:2] == estimate("vllm@0.21", True)[:2]  # 0.21's default is FlashInfer
    assert estimate("vllm@0.8.5", True)[:2] == estimate("vllm@0.10.1", True)[:2]  # 0.8 with FlashInfer < 0.2.3
    with pytest.raises(InputError, match=r"^--flashinfer-sampler: vLLM 0\.6\.6 runs its V0 engine here"):
        estimate("vllm@0.6.6", True)
    assert estimate("vllm@0.6.6", False)[:2] == estimate("vllm@0.6.6", None)[:2]  # off: V0's sort, as modelled


def test_the_flashinfer_sampler_switch_changes_nothing_on_model_runner_v2_and_says_so() -> None:
    # vLLM 0.25 runs Llama on Model Runner V2, whose dummy sampler run is greedy (no top-k/top-p path at all)
    spec = resolve("llama-3.1-8b")
    rules = parse_engine("vllm@0.25").rules
    site = Site(1, 8192, "", int(79.19 * GiB), "NVIDIA H100 80GB HBM3")
    plain, on = rules.overhead(spec, site), rules.overhead(spec, replace(site, flashinfer_sampler=True))
    assert (plain.low, plain.high) == (on.low, on.high)
    assert "--flashinfer-sampler changes nothing here: Model Runner V2" in on.basis


@pytest.mark.parametrize("engine", ["sglang", "trtllm", "llamacpp", "ollama", "transformers", "ideal"])
def test_the_flashinfer_sampler_switch_is_refused_for_an_engine_that_does_not_read_it(engine: str) -> None:
    from kvbudget.errors import InputError

    for value in (True, False):
        with pytest.raises(InputError, match=r"^--flashinfer-sampler: vLLM's sampler switch .* not .*; use --engine"):
            parse_engine(engine).rules.check_options(EngineOptions(flashinfer_sampler=value))
    parse_engine("vllm").rules.check_options(EngineOptions(flashinfer_sampler=True))


def test_where_flashinfer_cannot_run_vllm_samples_with_its_own_path() -> None:
    """FlashInfer is CUDA-only and needs SM 7.5 (vLLM 0.33.0 topk_topp_sampler.py flashinfer_sampler_supported: not
    CUDA -> False; on ROCm TopKTopPSampler takes forward_native): on an MI300X vLLM 0.11.0's range does not reach
    down to FlashInfer's figure (no installation can change the path), 0.21+ samples with the Triton kernel, and
    asking for FlashInfer is refused; on an H100 the same versions keep their defaults."""
    from kvbudget.engines.capability import flashinfer_runs
    from kvbudget.engines.vllm_profile import chosen_sampler
    from kvbudget.errors import InputError

    labels = ("AMD Instinct MI300X", "Tesla V100-SXM2-32GB", "NVIDIA H100 80GB HBM3", "")
    assert [flashinfer_runs(label) for label in labels] == [False, False, True, True]
    assert [chosen_sampler(v, None, False) for v in ("0.11.0", "0.17.0", "0.21.0")] == ["native", "triton", "triton"]
    assert [chosen_sampler(v, None, True) for v in ("0.11.0", "0.21.0")] == ["flashinfer if installed", "flashinfer"]
    spec = resolve("qwen2.5-14b")

    def estimate(engine: str, label: str, flashinfer: bool | None = None) -> tuple[int, int, str]:
        site = Site(1, 8192, "", int(191.69 * GiB), label, flashinfer_sampler=flashinfer)
        est = parse_engine(engine).rules.overhead(spec, site)
        return est.low, est.high, est.basis

    amd_low, amd_high, words = estimate("vllm@0.11.0", "AMD Instinct MI300X")
    h100_low, h100_high, _ = estimate("vllm@0.11.0", "NVIDIA H100 80GB HBM3")
    assert amd_high == h100_high and amd_low > h100_low  # the sort either way; no FlashInfer low end on ROCm
    assert "FlashInfer does not run on this GPU" in words and "keeps up to" not in words
    assert estimate("vllm@0.21", "AMD Instinct MI300X")[2].count("Triton top-k/top-p") == 1
    with pytest.raises(InputError, match=r"^--flashinfer-sampler: FlashInfer does not run on this GPU"):
        estimate("vllm@0.11.0", "AMD Instinct MI300X", True)
