"""vLLM's profiled runtime memory, term by term, against the engine's own code and its own logs: which top-k/top-p
sampler each version runs by default (topk_topp_sampler.py), the bytes each path holds per (sequence, vocabulary
entry), and the fused-MoE buffers of the dummy forward (fused_moe.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from unittest import mock

import pytest

from kvbudget.api import PlanRequest, Tokens, plan_deployment
from kvbudget.engines.overhead import Overhead
from kvbudget.engines.vllm_profile import (
    FLASHINFER_BYTES,
    SAMPLER_BYTES,
    Sampler,
    moe_workspace,
    profiled_overhead,
    sampler_bytes,
    sampler_path,
)
from kvbudget.errors import InputError
from kvbudget.model.sources import resolve
from tests.plan.test_memory_real_logs import ROWS, _planned

GiB = 2**30


@pytest.mark.parametrize(
    ("version", "path"),
    [
        # 0.8: FlashInfer sampling off for FlashInfer >= 0.2.3 (PR #14815)
        ("0.8.5", "native"),
        # 0.9-0.11.0: on when flashinfer-python is importable (PR #15777); the wheels list it as an extra only
        ("0.9.2", "flashinfer if installed"),
        ("0.10.1", "flashinfer if installed"),
        ("0.11.0", "flashinfer if installed"),
        # 0.11.1: a dependency, but the sampler off by default (PR #26859); 0.16.0 still sorts the logits
        ("0.11.1", "native"),
        ("0.16.0", "native"),
        # 0.17.0 apply_top_k_top_p: 8 rows or more go to the Triton kernel (topk_topp_triton.py), no sort
        ("0.17.0", "triton"),
        ("0.19.0", "triton"),
        # 0.20.0-0.20.2 envs.py: VLLM_USE_FLASHINFER_SAMPLER defaults to None (off)
        ("0.20.2", "triton"),
        # 0.21.0, 0.22.0 and 0.22.1 envs.py: defaults to True (PR #40376)
        ("0.21", "flashinfer"),
        ("0.21.0", "flashinfer"),
        ("0.22.0", "flashinfer"),
        ("0.33", "flashinfer"),
    ],
)
def test_the_default_sampler_path_follows_the_version(version: str, path: str) -> None:
    assert sampler_path(version) == path


def test_flashinfer_keeps_14_bytes_per_entry_and_the_native_path_37() -> None:
    spec = resolve("llama-3.1-8b")  # vocabulary 128,256
    # FlashInfer: bf16 logits (2) + their fp32 copy (4) + top-k-masked logits (4) + probabilities (4)
    assert FLASHINFER_BYTES == 2 + 4 + 4 + 4
    assert sampler_bytes(spec, 256, "flashinfer") == 256 * 128_256 * 14
    assert sampler_bytes(spec, 256) == 256 * 128_256 * SAMPLER_BYTES
    # where the path depends on the installation, the plan keeps the native (larger) figure
    assert sampler_bytes(spec, 256, "flashinfer if installed") == sampler_bytes(spec, 256)


def test_the_triton_path_keeps_14_bytes_per_entry_and_its_buffer_of_vocabulary_rows() -> None:
    # vLLM 0.17.0-0.20: bf16 logits (2, held by _dummy_sampler_run) + fp32 logits (4, Sampler.forward) + softmax
    # probabilities (4, forward_native) + exponential noise (4, random_sample), and topk_topp_triton.py's cached
    # buffer of min(SMs, requests) fp32 rows, counted at up to 192 rows (no SM counts in the catalog)
    spec = resolve("qwen3-32b")  # vocabulary 151,936
    assert sampler_bytes(spec, 256, "triton") == 256 * 151_936 * 14 + 192 * 151_936 * 4
    assert sampler_bytes(spec, 64, "triton") == 64 * 151_936 * (14 + 4)
    # fewer than 8 rows keep the sorting path (apply_top_k_top_p_pytorch)
    assert sampler_bytes(spec, 4, "triton") == sampler_bytes(spec, 4)


def test_the_0_17_to_0_19_logs_land_within_1_percent_on_the_triton_figure_and_low_on_the_sort_figure() -> None:
    # four held-out start-ups of vLLM 0.17.1 and 0.19.0 on A100s (Llama-3.1-8B, Qwen2.5-3B, Qwen3-32B, gpt-oss-20b;
    # fitted on none of them): the Triton path read from the wheels lands each pool within 1% of the logged one;
    # the sort path's 37 B would have kept 0.3-1.0 GiB more runtime memory than vLLM did
    cases = (
        "llama31-8b-a100-80gb-0.17.1-32k",
        "qwen25-3b-a100-80gb-0.17.1-32k",
        "qwen3-32b-a100-80gb-pcie-0.19-8k-eager",
        "gpt-oss-20b-a100-0.65-128k",
    )
    rows = [r for r in ROWS if r["case"] in cases]
    assert len(rows) == len(cases)
    for row in rows:
        logged = float(row["available_kv_gib"]) * GiB
        pool, _ = _planned(row)
        assert pool is not None and abs(pool - logged) <= 0.01 * logged, row["case"]
        with mock.patch("kvbudget.engines.vllm.chosen_sampler", lambda version, flashinfer, runs=True: "native"):
            sorted_pool, _ = _planned(row)
        assert sorted_pool is not None and 0.3 * GiB < pool - sorted_pool < 1.1 * GiB, row["case"]


def test_the_native_figure_reproduces_the_gpt_oss_120b_refusal_it_was_fitted_on() -> None:
    # issue #23278: 0.9 x 79.22 GiB - 65.97 GiB loaded - the runtime memory = -2.14 GiB: vLLM kept 7.47 GiB; 1,024
    # sequences x 201,088 x 37 B = 7.10 GiB of it is the sampler, the rest non-torch memory
    spec = resolve("openai/gpt-oss-120b")
    runtime = 0.9 * 79.22 - 65.9651 + 2.14
    assert sampler_bytes(spec, 1024) / GiB == pytest.approx(7.10, abs=0.01)
    assert 0 < runtime - sampler_bytes(spec, 1024) / GiB < 0.4  # within the measured non-torch range


def test_an_installation_dependent_sampler_widens_the_range_down_to_flashinfers_figure() -> None:
    spec = resolve("qwen2.5-7b")

    def overhead(sampler: Sampler) -> Overhead:
        return profiled_overhead(
            spec, tp=1, batched=2048, batched_basis="", seqs=256, seqs_basis="", graphs=False, sampler=sampler
        )

    plain, either = overhead("native"), overhead("flashinfer if installed")
    assert either.bytes == plain.bytes  # the plan reserves the native figure
    assert plain.low - either.low == sampler_bytes(spec, 256) - sampler_bytes(spec, 256, "flashinfer")
    assert "boot once and calibrate" in either.basis and "FlashInfer" in either.basis


def test_a_plan_whose_sampler_depends_on_the_installation_says_so_and_asks_for_a_boot() -> None:
    # dennislee22/vLLM-benchmarking, vLLM 0.10.1.1 on an A100 80GB at 0.25 (the log prints "Using FlashInfer for
    # top-p & top-k sampling"): the plan keeps the native figure, says how much less FlashInfer keeps, and asks for
    # one boot and calibrate; its range reaches down to FlashInfer's figure
    request = PlanRequest(
        model="qwen2.5-7b", gpu="a100-80gb", engine="vllm@0.10.1", context=Tokens("16384"), utilization=0.25
    )
    plan = plan_deployment(request)
    assert plan.overhead.provenance == "heuristic"
    assert "keeps up to 0.83 GiB less: boot once and calibrate" in plan.overhead.basis
    assert plan.overhead.high - plan.overhead.low > sampler_bytes(resolve("qwen2.5-7b"), 256) // 2


def test_fused_moe_buffers_are_fused_moe_pys_three_caches() -> None:
    # Qwen3-235B-A22B at TP 4, 8,192 tokens: top-8 of 128 experts, expert width 1,536 / 4 = 384, hidden 4,096;
    # cache1 (M, 8, 2 x 384) + cache2 (M x 8, 384) + cache3 (M, 8, 4,096), 2 B each
    spec = resolve("qwen3-235b-a22b")
    assert moe_workspace(spec, 4, 8192) == 8192 * 8 * (2 * 384 + 384 + 4096) * 2
    assert moe_workspace(resolve("llama-3.1-8b"), 1, 8192) == 0  # a dense model has none


def test_the_logs_that_name_their_sampler_are_planned_with_it() -> None:
    # the vLLM 0.10.1.1 logs of dennislee22/vLLM-benchmarking print "Using FlashInfer for top-p & top-k sampling",
    # except the cross-node TP 2 one ("FlashInfer is not available"): the CSV's flashinfer_sampler column carries what
    # each log prints, and planned with it (14 B, read from FlashInfer's code, fitted on none of them) every pool of
    # that benchmark lands within 6% of the logged one; without it the 0.25 log is -22% (the native 37 B)
    rows = {r["case"]: r for r in ROWS if "dennislee22" in r["source_url"]}
    assert len(rows) == 6
    assert {c for c, r in rows.items() if r["flashinfer_sampler"] == "off"} == {"qwen2-7b-2xa100-40gb-0.5-16k"}
    for row in rows.values():
        pool, _ = _planned(row)
        assert pool is not None
        logged = float(row["available_kv_gib"]) * GiB
        assert abs(pool - logged) <= 0.06 * logged, row["case"]
    default, _ = _planned({**rows["qwen2-7b-a100-80gb-0.25-16k"], "flashinfer_sampler": ""})
    assert default is not None and (default - 5.01 * GiB) / (5.01 * GiB) == pytest.approx(-0.224, abs=0.001)


def test_the_v1_versions_that_count_the_whole_device_as_non_torch_memory_say_so() -> None:
    # vLLM 0.8.0-0.9.0 gpu_worker.py: non-torch = (total - free) - torch allocated after the profile, other processes
    # included; 0.9.1 measures from a snapshot taken after the CUDA context exists (memory_profiling, PR #19312)
    def basis(version: str) -> str:
        request = PlanRequest(model="llama-3.1-8b", gpu="l40s", engine=f"vllm@{version}", context=Tokens("32768"))
        return plan_deployment(request).overhead.basis

    for version in ("0.8.0", "0.8.5", "0.9.0"):
        assert "other processes" in basis(version), version
    for version in ("0.9.1", "0.10.1"):
        assert "other processes" not in basis(version), version


def test_a_vision_language_plan_counts_the_encoders_dummy_pass_where_it_has_a_rule() -> None:
    # vLLM's profile run first pushes dummy images or videos through the vision tower (engines/vllm_encoder.py): from
    # 0.11 the runtime line counts it for the Qwen ViTs and Gemma 3's SigLIP; V0 and 0.8-0.10 say it is not counted
    configs = Path(__file__).parents[1] / "data" / "memory" / "configs"
    qwen_vl = str(configs / "Qwen2.5-VL-7B-Instruct")
    for engine, gpu, models, words in (
        ("vllm@0.23.0", "a100-80gb", (qwen_vl, "gemma-3-27b-it"), "first the vision encoder's dummy pass"),
        ("vllm@0.11.0", "mi300x", (qwen_vl, "gemma-3-27b-it"), "first the vision encoder's dummy pass"),
        ("vllm@0.10.1", "a100-80gb", (qwen_vl,), "not counted: the vision encoder's dummy pass"),
        ("vllm@0.7.3", "a100-80gb", (qwen_vl,), "not counted: the vision encoder's dummy pass"),  # V0
    ):
        for model in models:
            request = PlanRequest(model=model, gpu=gpu, engine=engine, context=Tokens("4k"))
            line = next(x for x in plan_deployment(request).ledger if x.label == "runtime overhead")
            assert words in line.basis, (engine, model)
    text = PlanRequest(model="llama-3.1-8b", gpu="a100-80gb", engine="vllm@0.23.0", context=Tokens("4k"))
    line = next(x for x in plan_deployment(text).ledger if x.label == "runtime overhead")
    assert "vision encoder" not in line.basis


def test_the_qwen25_vl_refusal_at_0_22_is_a_shortfall_near_the_logged_one() -> None:
    # vLLM 0.23.0, Qwen2.5-VL-7B on an A100-SXM4-80GB at 0.22 and 128,000 tokens: "Available KV cache memory: -14.28
    # GiB" after a 0.53 GiB graph estimate, so 0.22 x 79.26 - 15.67 - 0.53 + 14.28 = 15.52 GiB of profiled memory; the
    # plan (weights 15.45 GiB, the encoder's peak over the dummy 14-frame video, graphs at 0.9 GiB) is short by 14.69
    configs = Path(__file__).parents[1] / "data" / "memory" / "configs"
    request = PlanRequest(
        model=str(configs / "Qwen2.5-VL-7B-Instruct"),
        gpu="a100-80gb",
        engine="vllm@0.23.0",
        context=Tokens("128000"),
        utilization=0.22,
    )
    with pytest.raises(InputError, match=r"exceed the 17\.44 GiB vllm can use .* by 14\.69 GiB"):
        plan_deployment(request)


def test_only_the_last_pipeline_stage_holds_the_sampler_run() -> None:
    """vLLM 0.9.2 v1/worker/gpu_model_runner.py profile_run makes _dummy_sampler_run only on the last pipeline rank,
    and unify_kv_cache_configs keeps the smallest block count of all workers: the first stage's overhead is its
    forward alone, and the last stage keeps the sampler's excess less pool (StagedLayout.reserved)."""
    spec = resolve("deepseek-v2-lite")
    # DeepSeek-V2-Lite at TP 2 on an L4: 2,048 tokens (the default below 70 GiB), 256 sequences x vocab 102,400
    act = 2048 * 4 * 2048 * 2 + moe_workspace(spec, 2, 2048)  # hidden states + the fused-MoE caches
    assert moe_workspace(spec, 2, 2048) == 2048 * 6 * (2 * 704 + 704 + 2048) * 2
    kwargs = {"tp": 2, "batched": 2048, "batched_basis": "", "seqs": 256, "seqs_basis": "", "graphs": False}
    whole = profiled_overhead(spec, **kwargs)  # type: ignore[arg-type]
    first = profiled_overhead(spec, pp=2, **kwargs)  # type: ignore[arg-type]
    sampler = 256 * 102400 * SAMPLER_BYTES
    assert whole.high == int(0.4 * GiB) + max(int(1.35 * act), sampler) and whole.last_stage_extra == 0
    assert first.high == int(0.4 * GiB) + int(1.35 * act)
    assert first.last_stage_extra == sampler - int(1.35 * act) == whole.high - first.high
    # PR #20665 (a 0.9.2-era main build, four L4s, TP 2 x PP 2, 1,024 tokens): "Available KV cache memory: 12.13 GiB"
    # on the first stage's ranks, 11.33 GiB on the last's; the first stage (14 of 27 layers) binds: 807,792 tokens
    request = PlanRequest(model="deepseek-v2-lite", gpu="l4", engine="vllm@0.9.2", context=Tokens(1024), tp=2, pp=2)
    plan = plan_deployment(request)
    assert abs(plan.kv_pool_bytes - 12.13 * GiB) <= 0.05 * 12.13 * GiB
    assert plan.layout.reserved == (0, plan.overhead.last_stage_extra)
    last_pool = plan.kv_pool_bytes - plan.overhead.last_stage_extra
    assert abs(last_pool - 11.33 * GiB) <= 0.05 * 11.33 * GiB
    assert plan.sessions <= 807_792 // 1024


def test_vllm_0_10_1_to_0_13_caches_chunked_local_layers_as_full_attention_but_checks_them_as_chunked() -> None:
    """vLLM 0.10.1-0.13 VllmConfig turns the hybrid KV cache manager off for a model with an attention_chunk_size
    unless VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1 (envs.py default "0"; "1" from 0.14.0; 0.10.0 has
    no rule), so unify_hybrid_kv_cache_specs caches Llama 4's chunked layers as full attention; the start-up check
    (check_enough_kv_cache_memory) runs on the layers' own specs before that, so the engine starts anyway."""
    from kvbudget.engines.vllm_memory import chunked_hybrid_off_by_default

    assert [chunked_hybrid_off_by_default(v) for v in ("0.10.0", "0.10.1", "0.12.0", "0.13.0", "0.14.0")] == [
        False,
        True,
        True,
        True,
        False,
    ]
    # Llama-4-Scout at TP 8: 1 KV head x 128 x 2 (K, V) x 2 B = 512 B per layer and token on each GPU, 48 layers
    n = 5_242_880
    request = PlanRequest(
        model="llama-4-scout-17b-16e-instruct", gpu="h200", engine="vllm@0.12.0", context=Tokens(n), tp=8
    )
    plan = plan_deployment(request)
    assert plan.per_session_bytes == 48 * 512 * n  # every layer full: 120 GiB, more than the pool
    assert plan.sessions == 0 and not plan.engine_refused  # vLLM starts: one request fits with the chunked layers
    # the write-up of the 8x H200 start-up (README / HYBRID_KV_CACHE_ANALYSIS.md of fuhengwu2021/coderepo) gives
    # 3,919,664 tokens at 5,242,880 with the manager off, 0.75x: planned 0.77x (the pool is 3.5% high)
    assert plan.engine_lines[1].endswith("0.77x")
    # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1: 12 full layers at the cap, 36 chunked ones at one
    # 8,192-token chunk + the 8,192-token batch; the write-up's 1.86x at 8,388,608 tokens
    hybrid = plan_deployment(replace(request, context=8_388_608, chunked_hybrid=True))
    assert hybrid.per_session_bytes == 12 * 512 * 8_388_608 + 36 * 512 * (8192 + 8192)
    assert hybrid.sessions == 1 and abs(89.71 * GiB / hybrid.per_session_bytes - 1.86) < 0.01
    # 0.14 keeps the chunk by default
    later = plan_deployment(replace(request, engine="vllm@0.14.1"))
    assert later.per_session_bytes == 12 * 512 * n + 36 * 512 * (8192 + 8192)


def test_vllm_keeps_the_mla_down_projections_and_routers_whole_on_every_tensor_parallel_rank() -> None:
    """vLLM deepseek_v2.py (0.9.2 and 0.12.0 wheels): q_a_proj and kv_a_proj_with_mqa (0.12: one fused_qkv_a_proj,
    disable_tp=True) are ReplicatedLinear, and so is each MoE layer's router (quant_config=None, the model dtype):
    each rank holds them whole, where an even split of the weights gives it 1/tp."""
    from kvbudget.weights.loaded import mla_replicated_bytes

    r1 = resolve("deepseek-r1")  # fp8 checkpoint: 61 layers, 3 dense, 256 routed experts, hidden 7,168
    replicated = 61 * 7168 * (1536 + 512 + 64) * 1 + (61 - 3) * 7168 * 256 * 2
    assert mla_replicated_bytes(r1) == replicated
    lite = resolve("deepseek-v2-lite")  # bf16, q_lora_rank null: kv_a_proj_with_mqa only; 26 MoE layers of 64
    assert mla_replicated_bytes(lite) == 27 * 2048 * (512 + 64) * 2 + 26 * 2048 * 64 * 2
    assert mla_replicated_bytes(resolve("llama-3.1-8b")) == 0
    whole = PlanRequest(model="deepseek-r1", gpu_memory=2**41, engine="vllm@0.12.0", context=Tokens(32768))
    one = plan_deployment(whole)  # TP 1 on a (notional) 2 TiB device holds everything once: the checkpoint's bytes
    request = PlanRequest(model="deepseek-r1", gpu="h200", engine="vllm@0.12.0", context=Tokens(32768), tp=8)
    eight = plan_deployment(request)
    checkpoint = one.weights_per_gpu
    assert eight.weights_per_gpu == -(-(checkpoint + replicated * 7) // 8)  # (total - R) / 8 + R
    assert "kept whole on every rank" in eight.inputs.weights.basis


def test_v0s_profile_keeps_the_larger_of_the_forward_and_the_dummy_samplers_sort() -> None:
    """vLLM V0 worker/model_runner.py profile_run samples its dummy prompts with top_k = vocab - 1 and top_p = 0.99:
    one fp32 logits row per sequence, sorted (37 B per entry, as V1's native path). At a short batch the sort is the
    peak: Qwen2.5-3B at 4,096 tokens keeps 256 x 151,936 x 37 B, not its 0.23 GiB of activations."""
    from kvbudget.engines.overhead import NON_TORCH, activations
    from kvbudget.engines.vllm_profile import V0_ACT_FIT, v0_profiled_overhead

    spec = resolve(str(Path(__file__).parents[1] / "data" / "memory" / "configs" / "Qwen2.5-3B-Instruct"))
    v0 = v0_profiled_overhead(spec, tp=1, batched=4096, batched_basis="")
    assert v0.bytes == 256 * 151_936 * 37 + NON_TORCH[1]
    assert "top-k/top-p sort on the driver worker" in v0.basis
    # at a long batch the forward's activations stay the peak (the fit of issue #10517 is unchanged)
    long = v0_profiled_overhead(resolve("llama-3.1-8b"), tp=1, batched=20_000, batched_basis="")
    act = activations(resolve("llama-3.1-8b"), 1, 20_000)
    assert long.bytes == int(V0_ACT_FIT * act) + 256 * 128_256 * 4 + NON_TORCH[1]
    # max_num_seqs caps the rows: 192 sequences (the T4 log's Unsloth setting) sort 192 rows
    few = v0_profiled_overhead(resolve("llama-3.2-3b"), tp=1, batched=2048, batched_basis="", seqs=192)
    assert few.bytes == 192 * 128_256 * 37 + NON_TORCH[1]


def test_v0s_chunked_prefill_batch_is_512_before_0_6_5() -> None:
    """V0 SchedulerConfig: with chunked prefill on (max_model_len above 32K) and no --max-num-batched-tokens, 512
    tokens, printed "Chunked prefill is enabled with max_num_batched_tokens=512." by 0.6.4.post1 (the GTX 1080 row);
    2,048 from 0.6.5; below 32K the whole max_model_len (at least 2,048)."""
    from kvbudget.engines.vllm_memory import batched_tokens

    GiB = 2**30
    assert batched_tokens(8 * GiB, "", "0.6.4", context=105_088)[0] == 512
    assert batched_tokens(8 * GiB, "", "0.7.2", context=131_072)[0] == 2048
    assert batched_tokens(8 * GiB, "", "0.6.4", context=20_000)[0] == 20_000
    assert batched_tokens(8 * GiB, "", "0.6.4", context=1_024)[0] == 2048


def test_vllm_0_20_subtracts_its_cuda_graph_estimate_and_0_19_does_not() -> None:
    """envs.py VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS: os.getenv(..., "0") in the 0.18 wheels (0.19 logs print "In
    v0.19, CUDA graph memory profiling will be enabled by default"), "1" from the 0.20.0 wheel, whose gpu_worker.py
    nonetheless says "(default since v0.21.0)"; with it on, determine_available_memory takes the estimate out of the
    pool before sizing the cache."""
    from kvbudget.engines.vllm_memory import subtracts_graphs

    assert [subtracts_graphs(v) for v in ("0.18.1", "0.19.1", "0.20.0", "0.20.2", "0.21.0", "0.28.0")] == [
        False,
        False,
        True,
        True,
        True,
        True,
    ]
    # the same deployment on 0.19 and on 0.20 (same sampler path, utilization given): the 0.20 pool is smaller by the
    # graph reserve alone
    pools = {}
    for version in ("0.19.1", "0.20.2"):
        request = PlanRequest(
            model="qwen3-8b", gpu="rtx-pro-6000", engine=f"vllm@{version}", context=Tokens(1024), utilization=0.85
        )
        pools[version] = plan_deployment(request).kv_pool_bytes
    assert 0.1 * GiB <= pools["0.19.1"] - pools["0.20.2"] <= 0.9 * GiB


def test_model_runner_v2_profiles_a_greedy_dummy_sampler_where_a_release_makes_it_the_default() -> None:
    """Each wheel's config/vllm.py _is_default_v2_model_runner_model: 0.22 Qwen3ForCausalLM, 0.23 Llama, Mistral and
    Qwen3ForCausalLM (dense, unquantized), 0.24 those and three MoE architectures, from 0.25 every dense model that is
    neither hybrid nor attention-free. Model Runner V2's _dummy_sampler_run samples its dummy requests greedily (no
    top-k/top-p), so the profile keeps the bf16 logits and, in 0.22-0.25, their fp32 copy (Sampler
    .apply_sampling_params); from 0.26 no copy."""
    from kvbudget.engines.vllm_profile import model_runner_v2, profile_sampler

    qwen3, llama, qwen25, moe = (resolve(m) for m in ("qwen3-8b", "llama-3.1-8b", "qwen2.5-7b", "qwen3-30b-a3b"))
    assert not any(model_runner_v2("0.21.0", s) for s in (qwen3, llama, qwen25, moe))
    assert model_runner_v2("0.22.0", qwen3) and not model_runner_v2("0.22.0", llama)
    assert not model_runner_v2("0.22.0", qwen3, quantized=True)  # 0.22-0.23: "not model_config.is_quantized"
    assert model_runner_v2("0.23.0", llama) and not model_runner_v2("0.23.0", qwen25)
    assert model_runner_v2("0.24.0", llama, quantized=True) and not model_runner_v2("0.24.0", qwen25)
    assert model_runner_v2("0.25.0", qwen25) and not model_runner_v2("0.25.0", moe)  # Qwen3Moe is not listed
    assert not model_runner_v2("0.27.1", resolve("qwen3-next-80b-a3b"))  # hybrid (linear attention)
    assert profile_sampler("0.23.0", llama) == "mrv2 fp32"
    assert profile_sampler("0.26.0", llama) == "mrv2"
    assert profile_sampler("0.27.1", moe) == "flashinfer"  # a MoE the release does not list stays on V1
    # Qwen3-32B (vocabulary 151,936) at vLLM's 1,024 sequences: 0.29 GiB of logits, where FlashInfer keeps 2.03 GiB
    assert sampler_bytes(resolve("qwen3-32b"), 1024, "mrv2") == 1024 * 151_936 * 2
    assert sampler_bytes(resolve("qwen3-32b"), 1024, "mrv2 fp32") == 1024 * 151_936 * (2 + 4)
    assert sampler_bytes(resolve("qwen3-32b"), 1024, "flashinfer") == 1024 * 151_936 * 14
