"""The speed model on the A30, A40 and RTX A6000: each efficiency applies where it was fitted, and a GPU without FP8
tensor cores gains from an fp8 checkpoint's fewer bytes only.

Their datasheet peaks were first left out of the catalog: vLLM's A100 prefill ratio (x1.32, fitted on GPUStack's
A100 80GB rows) reached every compute capability 8.0 GPU, the A30 among them, and an fp8 checkpoint on a GPU
without FP8 tensor cores took the bf16 prefill share (vLLM's 0.325 of the bf16 peak) where a GPU with them took the
fp8 share of its fp8 peak (0.136 x 2 = 0.272 of its bf16 peak): with the figures in, tests/speed/test_dominance.py
failed on 146 cases when found (an A30, A40 or RTX A6000 faster than an RTX 4090, L40S or A100 whose every roof is
at least theirs); on the catalog of models of the fix, 257: 164 with the ratio on the A30 alone, 113 with the bf16
share on fp8 weights alone.
"""

from __future__ import annotations

from functools import cache

import pytest

from kvbudget import hardware
from kvbudget.engines.capability import compute_capability
from kvbudget.plan.build import plan_deployment
from kvbudget.plan.plan import Plan
from kvbudget.requests.plan import PlanRequest
from kvbudget.requests.speed import SpeedRequest
from kvbudget.speed.answer import estimate_speed, roofline_of
from kvbudget.speed.efficiency import FITTED, SGLANG, VLLM, Efficiency
from kvbudget.speed.roofline import FORMAT_PEAK_RATIO, Roofline

# Llama-3.1-8B (tests/speed/test_roofline.py): linear and lm_head parameters, attention FLOPs per layer and key
LINEAR, LM_HEAD, PER_KEY, LAYERS = 6_979_588_096, 525_336_576, 2 * 32 * 256, 32
PROMPT = 4_000


def _by_hand_prefill(tflops: float, share: float, attention_share: float) -> float:
    """Seconds of one 4,000-token Llama-3.1-8B prefill at ``tflops`` dense bf16 (linear and attention alike)."""
    linear = 2 * LINEAR * PROMPT + 2 * LM_HEAD
    attention = LAYERS * PER_KEY * (PROMPT * (PROMPT + 1) // 2)
    return linear / (tflops * 1e12) / share + attention / (tflops * 1e12) / attention_share


@cache
def _plan(weights: str) -> tuple[PlanRequest, Plan]:
    """One deployment (an H100's plan): the same weight and cache bytes on every GPU, only the roofs differ."""
    request = PlanRequest(model="llama-3.1-8b", gpu="h100-sxm", engine="vllm", weights=weights, context=8_192)
    return request, plan_deployment(request)


def _roof(gpu: str, weights: str = "bf16", efficiency: Efficiency = VLLM) -> Roofline:
    request, plan = _plan(weights)
    return roofline_of(request, plan, hardware.gpu(gpu), efficiency)[0]


def test_the_three_cards_carry_their_datasheet_figures() -> None:
    for gpu, bf16, bandwidth in (("a30", 165, 933), ("a40", 149.7, 696), ("rtx-a6000", 154.8, 768)):
        card = hardware.gpu(gpu)
        assert card.peak_flops("bf16") == bf16 * 1e12 and card.bandwidth_bytes_per_s == bandwidth * 10**9
        assert card.peak_flops("fp8") is None and card.peak_flops("fp4") is None  # Ampere: no FP8 tensor cores
        assert card.compute_source and "@" in card.compute_source  # the cited commit
        assert card.interconnect == "pcie-gen4-x16"
        assert "not entered" not in card.notes


def test_the_a100_ratio_applies_to_the_a100_and_not_to_every_compute_capability_8_0() -> None:
    assert compute_capability(hardware.gpu("a30").name) == compute_capability(hardware.gpu("a100-40gb").name) == 80
    with_figures = [g.id for g in hardware.gpus() if g.dense_tflops and g.bandwidth_bytes_per_s]
    apart = sorted(g for g in with_figures if _roof(g).machine.a100)
    assert apart == ["a100-40gb", "a100-80gb", "a100-80gb-pcie"]
    assert _roof("a30").a100_factor == 1.0 and _roof("a100-40gb").a100_factor == VLLM.prefill_a100 == 1.32


def test_a30_a100_40gb_and_l40s_in_order_and_by_hand() -> None:
    """Llama-3.1-8B bf16 on vLLM: the A100 40GB prefills fastest (312 TFLOPS at 0.325 x 1.32), the L40S next
    (362.05 at 0.325), the A30 last (165 at 0.325, no A100 ratio); decode follows bandwidth: A100 1,555 GB/s, A30
    933, L40S 864."""
    a30, a100, l40s = _roof("a30"), _roof("a100-40gb"), _roof("l40s")
    prefill = {name: r.prefill_seconds(PROMPT, 0, 1) for name, r in (("a30", a30), ("a100", a100), ("l40s", l40s))}
    assert prefill["a100"] < prefill["l40s"] < prefill["a30"]
    decode = {name: r.decode_step(1, 4_096).seconds for name, r in (("a30", a30), ("a100", a100), ("l40s", l40s))}
    assert decode["a100"] < decode["a30"] < decode["l40s"]
    # by hand: linear FLOPs over 165 TFLOPS at vLLM's bf16 share 0.325, attention over it at 0.368: 1.1104 s
    # (A100 40GB 0.4449 s, L40S 0.5060 s; decode of one sequence at 4,096 tokens 14.45, 23.46 and 25.26 ms)
    assert prefill["a30"] == pytest.approx(_by_hand_prefill(165, 0.325, 0.368), rel=1e-12)
    assert prefill["a30"] == pytest.approx(1.11036, abs=5e-6)
    assert prefill["a100"] == pytest.approx(_by_hand_prefill(312, 0.325 * 1.32, 0.368 * 1.32), rel=1e-12)
    # the ratio given to the A30 (as compute capability 8.0 did): 0.8412 s, faster than the RTX 4090's 1.1090 s
    # (165.2 TFLOPS bf16, 1,008 GB/s: every roof at least the A30's); without it the A30 is 0.1% slower
    leaked = _by_hand_prefill(165, 0.325 * 1.32, 0.368 * 1.32)
    assert leaked == pytest.approx(prefill["a30"] / 1.32, rel=1e-12) == pytest.approx(0.84118, abs=5e-6)
    assert leaked < _roof("rtx-4090").prefill_seconds(PROMPT, 0, 1) < prefill["a30"]


def test_an_fp8_checkpoint_without_fp8_tensor_cores_gains_bytes_not_compute() -> None:
    """vLLM: fp8 products reach 0.136 of the fp8 peak (0.272 of the bf16 one on GPUs whose fp8 peak is twice it),
    bf16 ones 0.325. On an A40 the fp8 checkpoint runs weight-only at the bf16 peak at min(0.325, 2 x 0.136)."""
    bf16, fp8 = _roof("a40", "bf16"), _roof("a40", "fp8")
    assert (fp8.machine.products, fp8.machine.native, fp8.machine.linear_flops) == ("fp8", False, 149.7e12)
    assert fp8.prefill_efficiency == pytest.approx(2 * VLLM.prefill) == pytest.approx(0.272)
    seconds = fp8.prefill_seconds(PROMPT, 0, 1)
    assert seconds == pytest.approx(_by_hand_prefill(149.7, 0.272, 0.368), rel=1e-12)
    assert seconds == pytest.approx(1.44747, abs=5e-6)
    assert seconds > bf16.prefill_seconds(PROMPT, 0, 1)  # no gain from fp8 compute
    assert fp8.decode_step(1, 4_096).seconds < bf16.decode_step(1, 4_096).seconds  # half the weight bytes
    # an RTX 4090 (165.2 bf16, 330.3 fp8, 1,008 GB/s) prefills and decodes the fp8 checkpoint faster
    rtx = _roof("rtx-4090", "fp8")
    assert rtx.machine.native and rtx.prefill_seconds(PROMPT, 0, 1) < seconds
    assert rtx.decode_step(1, 4_096).seconds < fp8.decode_step(1, 4_096).seconds
    # before: the bf16 share on the A40 (0.325), 1.2238 s, faster than the RTX 4090's 1.3120 s
    before = _by_hand_prefill(149.7, 0.325, 0.368)
    assert before < rtx.prefill_seconds(PROMPT, 0, 1)


@pytest.mark.parametrize("efficiency", [FITTED, VLLM, SGLANG], ids=["trtllm", "vllm", "sglang"])
def test_weight_only_shares_per_engine(efficiency: Efficiency) -> None:
    """The weight-only share is the lower of the bf16 share and the format's share x its peak ratio: TensorRT-LLM's
    fp8 share doubled (1.14) is above its bf16 one (0.779), so an fp8 checkpoint on an A100 prefills exactly as a
    bf16 one; vLLM's (0.272) and SGLang's (0.448) are below theirs (0.325, 0.688)."""
    fp8, bf16 = _roof("a30", "fp8", efficiency), _roof("a30", "bf16", efficiency)
    expected = min(efficiency.prefill_bf16, 2 * efficiency.prefill)
    assert fp8.prefill_efficiency == pytest.approx(expected, rel=1e-12)
    if efficiency is FITTED:
        assert fp8.prefill_seconds(PROMPT, 0, 1) == bf16.prefill_seconds(PROMPT, 0, 1)
    else:
        assert fp8.prefill_seconds(PROMPT, 0, 1) > bf16.prefill_seconds(PROMPT, 0, 1)


def test_gpt_oss_mxfp4_on_hopper_and_ampere_keeps_the_bf16_share_it_was_fitted_with() -> None:
    """GPUStack's vLLM gpt-oss rows (mxfp4 weights on H100 and A100, neither with fp4 tensor cores) were fitted with
    the bf16 share: 4 x 0.136 = 0.544 is above 0.325, so the weight-only rule leaves them where they were."""
    request = PlanRequest(model="gpt-oss-20b", gpu="h100-sxm", engine="vllm", context=8_192)
    plan = plan_deployment(request)
    for gpu in ("h100-sxm", "a100-80gb"):
        roof, precision, why = roofline_of(request, plan, hardware.gpu(gpu), VLLM)
        assert precision == "bf16" and roof.machine.products == "fp4" and not roof.machine.native
        assert roof.prefill_efficiency == VLLM.prefill_bf16 * roof.a100_factor
        assert "weight-only" in why


def test_format_peaks_are_the_ratio_the_weight_only_rule_assumes() -> None:
    # every catalog GPU with fp8 / fp4 tensor cores lists them at 2x / 4x its dense bf16 peak, to its datasheet's
    # rounding (the L40S 733 / 362.05 = 2.02, the RTX 4090 330.3 / 165.2 = 1.9994)
    for gpu in hardware.gpus():
        bf16 = gpu.peak_flops("bf16")
        for fmt, ratio in FORMAT_PEAK_RATIO.items():
            peak = gpu.peak_flops(fmt)
            if peak is not None and bf16:
                assert peak / bf16 == pytest.approx(ratio, rel=0.015), (gpu.id, fmt)


def test_speed_answers_on_the_three_cards() -> None:
    for gpu in ("a30", "a40", "rtx-a6000"):
        request = SpeedRequest.from_options(
            {"model": "llama-3.1-8b", "gpu": gpu, "engine": "vllm", "weights": "fp8", "isl": 1000, "osl": 200}
        )
        answer = estimate_speed(request)
        assert answer.compute_precision == "bf16" and "weight-only" in answer.compute_basis
        assert answer.output_tokens_per_s > 0 and answer.to_dict()["efficiency"] == VLLM.to_dict()
