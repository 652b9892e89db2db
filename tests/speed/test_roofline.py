"""The speed model's arithmetic on hand-checked cases (Llama-3.1-8B), and its invariants."""

from __future__ import annotations

from typing import Any

import pytest

from kvbudget.model.sources import resolve
from kvbudget.requests.speed import SpeedRequest
from kvbudget.speed.answer import estimate_speed
from kvbudget.speed.work import attended_keys, model_work
from kvbudget.weights.params import count_params


def test_llama_3_1_8b_flops_by_hand() -> None:
    work = model_work(resolve("llama-3.1-8b"), count_params(resolve("llama-3.1-8b")))
    # 8,030,261,248 parameters - embeddings 128,256 x 4,096 - lm_head 128,256 x 4,096 (untied)
    assert work.lm_head_params == 128_256 * 4_096 == 525_336_576
    assert work.linear_params == 8_030_261_248 - 2 * 525_336_576 == 6_979_588_096
    # prefill of 1,000 tokens, one sequence: 2 x linear x tokens + 2 x lm_head (last token only)
    assert work.linear_flops(1000, 1) == 2 * 6_979_588_096 * 1000 + 2 * 525_336_576
    # attention: 32 layers x 2 x 32 heads x (128 + 128) per attended key; causal 1,000 tokens attend 500,500 keys
    assert attended_keys(0, 1000, None) == 500_500
    assert work.attention_flops(0, 1000) == 32 * 2 * 32 * 256 * 500_500
    # decode reads everything but the embedding gather: 8.03B - 0.525B
    assert work.read_params(1) == 7_504_924_672
    assert work.decode_flops(1) == 2 * 7_504_924_672


def test_sliding_window_attends_only_its_window() -> None:
    assert attended_keys(0, 10, 4) == 1 + 2 + 3 + 4 * 7
    assert attended_keys(100, 5, 4) == 20
    assert attended_keys(2, 5, 4) == 3 + 4 * 4
    gemma = model_work(resolve("gemma-3-27b"), count_params(resolve("gemma-3-27b")))
    reaches = {layer.reach for layer in gemma.attention}
    assert reaches == {None, 1024}  # 5 sliding layers of 1,024 per global one


def test_moe_reads_the_experts_a_batch_touches() -> None:
    spec = resolve("qwen3-30b-a3b")
    work = model_work(spec, count_params(spec))
    assert work.routed_share == pytest.approx(8 / 128)
    one, many = work.read_params(1), work.read_params(512)
    assert one == pytest.approx(work.dense_read_params + work.routed_params * 8 / 128)
    assert many == pytest.approx(work.dense_read_params + work.routed_params, rel=1e-6)


def _speed(**given: object) -> dict[str, Any]:
    base: dict[str, object] = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": "vllm", "isl": 1000, "osl": 1000}
    return estimate_speed(SpeedRequest.from_options({**base, **given})).to_dict()


def test_decode_bytes_of_one_iteration_by_hand() -> None:
    doc = _speed(concurrency="1")
    step = doc["decode_step"]
    # bf16 weights read once (all but the embedding gather) + one sequence's cache at 1,500 tokens (vLLM blocks of 16)
    weights = 8_030_261_248 * 2 * 7_504_924_672 / 8_030_261_248
    cache = 32 * 2 * 8 * 128 * 2 * 1504  # layers x (K, V) x kv heads x head dim x 2 bytes x 94 blocks of 16
    assert step["bytes_per_gpu"] == pytest.approx(weights + cache, rel=0.02)  # weights_per_gpu includes norms' dtype
    assert step["bound"] == "memory bandwidth"


def test_more_concurrency_never_lowers_total_throughput() -> None:
    totals = [_speed(concurrency=str(c))["output_tokens_per_s"] for c in (1, 4, 16, 64, 128)]
    assert totals == sorted(totals)
    per_request = [_speed(concurrency=str(c))["decode_tokens_per_s_per_request"] for c in (1, 16, 128)]
    assert per_request == sorted(per_request, reverse=True)


def test_tensor_parallelism_reads_fewer_bytes_per_gpu_and_is_not_slower_per_request() -> None:
    one = _speed(model="llama-3.1-70b", gpu="h200", weights="fp8", concurrency="8")
    four = _speed(model="llama-3.1-70b", gpu="h200", weights="fp8", concurrency="8", tp=4)
    assert four["decode_step"]["bytes_per_gpu"] < one["decode_step"]["bytes_per_gpu"] / 3
    assert four["decode_tokens_per_s_per_request"] > one["decode_tokens_per_s_per_request"]
    assert four["decode_step"]["allreduce_s"] > 0 == one["decode_step"]["allreduce_s"]


def test_prefix_cache_hits_are_not_recomputed() -> None:
    cold, warm = _speed(concurrency="8"), _speed(concurrency="8", prefix=900)
    assert warm["ttft_s"] < cold["ttft_s"]
    assert warm["prefill_s"] < cold["prefill_s"] / 5


def test_fp8_weights_multiply_at_fp8_only_where_the_gpu_has_it() -> None:
    assert _speed(weights="fp8", concurrency="8")["compute_precision"] == "fp8"
    assert _speed(gpu="a100-80gb", weights="fp8", concurrency="8")["compute_precision"] == "bf16"


def test_max_runs_what_the_kv_pool_holds() -> None:
    from kvbudget.plan.build import plan_deployment
    from kvbudget.requests.plan import PlanRequest

    plan = plan_deployment(PlanRequest(model="llama-3.1-8b", gpu="h100-sxm", engine="vllm", context=2000))
    assert _speed(concurrency="max")["batch_per_replica"] == plan.sessions


def test_more_in_flight_than_the_pool_holds_queue() -> None:
    doc = _speed(model="llama-3.1-70b", gpu="h200", weights="fp8", concurrency="100000")
    assert doc["queued"] > 0 and doc["warnings"]


@pytest.mark.parametrize(("model", "tp", "gpu"), [("llama-3.1-8b", 1, "h100-sxm"), ("qwen3-30b-a3b", 2, "l40s")])
def test_the_simulators_iteration_seconds_are_the_iterations_to_the_last_bit(model: str, tp: int, gpu: str) -> None:
    """The simulator keeps ``decode_terms`` per batch size and asks ``iteration_seconds`` (simulate/speeds.py): the
    same float as ``iteration(...).seconds`` at every batch size and cache size, or seeded runs would move."""
    from kvbudget import hardware
    from kvbudget.plan.build import plan_inputs
    from kvbudget.plan.plan import make_plan
    from kvbudget.requests.plan import PlanRequest
    from kvbudget.speed.answer import roofline_of
    from kvbudget.speed.efficiency import efficiency_for

    request = PlanRequest.from_options({"model": model, "gpu": gpu, "engine": "vllm", "tp": str(tp), "context": "16k"})
    plan = make_plan(plan_inputs(request)[0])
    roof, _, _ = roofline_of(request, plan, hardware.gpu(gpu), efficiency_for("vllm"))
    checked = 0
    for batch in (1, 2, 3, 7, 64, 255, 1024):
        terms = roof.decode_terms(batch)
        for kv in (0, 1, 131_072 * 1_531, 10**11 + 7):
            for flops in (0.0, kv * 1.7e-3):
                assert roof.iteration_seconds(terms, kv, flops) == roof.iteration(batch, kv, flops).seconds
                checked += 1
    assert checked == 56


def test_prefill_attention_is_at_its_own_share_of_the_bf16_peak_whatever_the_weights() -> None:
    """An fp8 model's prefill: linear FLOPs at the fp8 peak over the fp8 GEMM share, attention FLOPs at the bf16 peak
    over the attention share (FlashAttention runs bf16), by hand; the fp8 share does not touch the attention term."""
    from dataclasses import replace

    from kvbudget import hardware
    from kvbudget.plan.build import plan_deployment
    from kvbudget.requests.plan import PlanRequest
    from kvbudget.speed.answer import roofline_of
    from kvbudget.speed.efficiency import VLLM

    request = PlanRequest(model="llama-3.1-8b", gpu="h100-sxm", engine="vllm", weights="fp8", context=40_000)
    roof, precision, _ = roofline_of(request, plan_deployment(request), hardware.gpu("h100-sxm"), VLLM)
    assert precision == "fp8" and (roof.machine.linear_flops, roof.machine.attention_flops) == (1979e12, 989.5e12)
    linear = 2 * 6_979_588_096 * 32_000 + 2 * 525_336_576  # one prompt of 32,000 tokens (lm_head on its last)
    attention = 32 * 2 * 32 * 256 * (32_000 * 32_001 // 2)  # causal: 512,016,000 attended keys per layer
    by_hand = linear / 1979e12 / VLLM.prefill + attention / 989.5e12 / VLLM.prefill_attention
    assert roof.prefill_seconds(32_000, 0, 1) == pytest.approx(by_hand, rel=1e-12)
    # halving the fp8 GEMM share doubles the linear seconds and leaves the attention seconds as they were
    half = replace(roof, efficiency=replace(VLLM, prefill=VLLM.prefill / 2))
    extra = half.prefill_seconds(32_000, 0, 1) - roof.prefill_seconds(32_000, 0, 1)
    assert extra == pytest.approx(linear / 1979e12 / VLLM.prefill, rel=1e-9)
