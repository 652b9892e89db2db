"""The fitted speed model against published measurements it was not fitted to (held out), per kind of figure
(throughput, TTFT, inter-token latency), within the errors docs/speed.md states; and the shipped efficiencies are
the fit's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kvbudget.speed.efficiency import FITTED, SGLANG, VLLM, efficiency_for
from kvbudget.speed.fit import (
    ATTENTION_PARAMETERS,
    ENGINE_PARAMETERS,
    LATENCY_PARAMETERS,
    THROUGHPUT_PARAMETERS,
    Prepared,
    Summary,
    errors,
    fit,
    fit_from,
    load,
    load_all,
    prepare,
)

DATA = Path(__file__).parent.parent / "data" / "speed"


@pytest.fixture(scope="module")
def prepared() -> list:  # type: ignore[type-arg]
    return prepare(load_all(DATA))


def _summary(prepared: list, kind: str, split: str, engine: str = "trtllm", source: str = "") -> Summary:  # type: ignore[type-arg]
    chosen = [
        p
        for p in prepared
        if p.figure.kind == kind
        and p.figure.split == split
        and p.figure.request.engine == engine
        and (not source or p.figure.source == source)
    ]
    return Summary.of(errors(chosen))


def test_every_figure_file_is_loaded_with_its_source() -> None:
    counts = {path.stem: len(load(path)[0]) for path in sorted(DATA.glob("*.json"))}
    assert counts == {
        "closed_loop_vllm": 2,
        "gpustack_sglang": 16,
        "gpustack_vllm": 68,
        "nim_llama33_70b_h100": 17,
        "trtllm_perf_overview": 60,
        "trtllm_v05_first_token": 10,
    }
    for path in DATA.glob("*.json"):
        source = load(path)[1]
        assert source.get("commit") or source.get("url")


def test_held_out_throughput_meets_the_stated_bounds(prepared: list) -> None:  # type: ignore[type-arg]
    # docs/speed.md: 44 figures (40 TensorRT-LLM offline + 4 NIM), median 9.3%, 91% within 30%
    s = _summary(prepared, "throughput", "held_out")
    assert s.count == 44 and s.median_abs <= 0.094 and s.within_30 >= 0.90


def test_held_out_ttft_meets_the_stated_bounds(prepared: list) -> None:  # type: ignore[type-arg]
    # docs/speed.md: 8 figures, median 10.4%, all within 30% (issue 19's target: <= 15% and >= 80%)
    s = _summary(prepared, "ttft", "held_out")
    assert s.count == 8 and s.median_abs <= 0.105 and s.within_30 == 1.0


def test_held_out_itl_meets_the_stated_bounds(prepared: list) -> None:  # type: ignore[type-arg]
    # docs/speed.md: 4 figures, median 10.6%, all within 30%
    s = _summary(prepared, "itl", "held_out")
    assert s.count == 4 and s.median_abs <= 0.11 and s.within_30 == 1.0


def test_training_errors(prepared: list) -> None:  # type: ignore[type-arg]
    assert _summary(prepared, "throughput", "train").median_abs <= 0.07
    assert _summary(prepared, "ttft", "train").median_abs <= 0.13
    assert _summary(prepared, "itl", "train").within_30 == 1.0


def test_without_the_prefill_wait_ttft_under_load_is_missed(prepared: list) -> None:  # type: ignore[type-arg]
    # NIM at concurrency 50: 834.51 ms measured; the request's own prefill + one iteration alone is ~395 ms
    at_50 = next(p for p in prepared if p.figure.kind == "ttft" and p.figure.label.endswith("c=50"))
    assert errors([at_50], replace(FITTED, prefill_queue=0.0))[0] < -0.45
    assert abs(errors([at_50], FITTED)[0]) < 0.10


def test_the_shipped_throughput_efficiencies_are_a_fit_optimum(prepared: list) -> None:  # type: ignore[type-arg]
    train = [p for p in prepared if p.figure.split == "train" and p.figure.source == "trtllm_perf_overview"]
    refit = fit(train, FITTED, rounds=1, steps=8, names=THROUGHPUT_PARAMETERS)
    for name in ("prefill", "decode_compute", "bandwidth"):
        assert getattr(refit, name) == pytest.approx(getattr(FITTED, name), rel=0.15)


def test_the_shipped_latency_parameters_are_the_fit_from_elsewhere(prepared: list) -> None:  # type: ignore[type-arg]
    train = [p for p in prepared if p.figure.split == "train" and p.figure.request.engine == "trtllm"]
    start = replace(FITTED, prefill_bf16=0.3, prefill_queue=0.2)
    refit = fit(train, start, rounds=2, steps=24, names=LATENCY_PARAMETERS)
    assert refit.prefill_bf16 == pytest.approx(FITTED.prefill_bf16, rel=0.02)
    assert refit.prefill_queue == pytest.approx(FITTED.prefill_queue, rel=0.02)


def test_the_shipped_attention_share_is_the_fit_from_elsewhere(prepared: list) -> None:  # type: ignore[type-arg]
    # fitted alone on the 22 throughput training figures (the 5,000-token rows weigh attention), the five held
    train = [
        p
        for p in prepared
        if p.figure.split == "train" and p.figure.request.engine == "trtllm" and p.figure.kind == "throughput"
    ]
    assert len(train) == 22
    refit = fit(train, replace(FITTED, prefill_attention=0.2), rounds=2, steps=24, names=ATTENTION_PARAMETERS)
    assert refit.prefill_attention == pytest.approx(FITTED.prefill_attention, rel=0.02)


def test_gpt_oss_long_prompts_on_a100_stay_far_too_fast(prepared: list) -> None:  # type: ignore[type-arg]
    # GPUStack, vLLM, 100 prompts of 32,000 tokens at once, gpt-oss-20b on A100 (held out): +99% with vLLM's own
    # shares (attention 0.368, x1.32 on A100), +91% with attention at the bf16 GEMM share (0.325), +52% without the
    # A100 ratio (+70% before it, attention at 0.325): far off whatever the rule (sinks and a 128-token window run
    # slower than their FLOPs say; the Qwen3 rows the ratio fits run dense attention)
    row = next(
        p
        for p in prepared
        if p.figure.request.engine == "vllm" and p.figure.label.startswith("gpt-oss-20b a100-80gb tp1 32000/95")
    )
    assert row.figure.split == "held_out" and row.figure.value == 21.62
    assert 0.97 < errors([row])[0] < 1.01
    assert 0.89 < errors([row], replace(VLLM, prefill_attention=VLLM.prefill_bf16))[0] < 0.93
    assert 0.50 < errors([row], replace(VLLM, prefill_a100=1.0))[0] < 0.54


def test_vllm_prefill_shares_are_apart_on_a100(prepared: list) -> None:  # type: ignore[type-arg]
    # GPUStack, vLLM, bf16 Qwen3-14B / 32B, 2,000 to 32,000-token prompts sent at once: one share made A100 80GB 36% to
    # 46% slow and H100 SXM up to 22% fast; x1.32 on the A100 (Machine.a100) the A100 rows are 19% to 33% slow
    # (the fit weighs them against the MoE rows on 8 x A100, too fast), the H100 rows do not move
    rows = [
        p
        for p in prepared
        if p.figure.source == "gpustack_vllm"
        and p.figure.label.split()[0] in ("qwen3-14b", "qwen3-32b")
        and p.figure.request.isl > 1000
    ]
    a100 = [p for p in rows if p.figure.request.gpu == "a100-80gb"]
    h100 = [p for p in rows if p.figure.request.gpu == "h100-sxm"]
    assert len(a100) == len(h100) == 6
    assert all(p.roof.machine.a100 for p in a100) and not any(p.roof.machine.a100 for p in h100)
    one_share = errors(a100, replace(VLLM, prefill_a100=1.0))
    assert max(one_share) < -0.35 and min(one_share) > -0.47
    assert all(-0.34 < e < -0.18 for e in errors(a100))
    assert errors(h100) == errors(h100, replace(VLLM, prefill_a100=1.0))


def test_trtllm_a100_first_tokens_want_no_ratio_apart(prepared: list) -> None:  # type: ignore[type-arg]
    # TensorRT-LLM v0.5's batch-1 first tokens on A100 80GB, H100 SXM and L40S: the A100 ratio fitted with the latency
    # pair stays at 1 (its A100 rows +18% and -6% in training, its H100 ones -13% and -16%): not taken apart
    l40s = [p for p in prepared if p.figure.request.gpu == "l40s"]  # Ada, compute capability 8.9: not apart
    assert l40s and not any(p.roof.machine.a100 for p in l40s)
    train = [p for p in prepared if p.figure.split == "train" and p.figure.request.engine == "trtllm"]
    refit = fit(train, FITTED, rounds=2, steps=24, names=(*LATENCY_PARAMETERS, "prefill_a100"))
    assert refit.prefill_a100 == 1.0 == FITTED.prefill_a100
    assert refit.prefill_bf16 == pytest.approx(FITTED.prefill_bf16, rel=0.02)


# docs/speed.md "vLLM and SGLang": each engine's held-out errors per kind of figure, as bench/speed.py prints them


def test_vllm_held_out_errors(prepared: list) -> None:  # type: ignore[type-arg]
    # GPUStack's held-out figures (gpustack_vllm.json)
    # throughput: 27 figures, median 12.9%, 89% within 30% (18.9%, 85% before the A100 prefill ratio)
    s = _summary(prepared, "throughput", "held_out", "vllm", "gpustack_vllm")
    assert s.count == 27 and s.median_abs <= 0.13 and s.within_30 >= 0.88
    # TTFT: 2 figures, median 11.8%, both within 30% (14.9% before the A100 prefill ratio)
    s = _summary(prepared, "ttft", "held_out", "vllm", "gpustack_vllm")
    assert s.count == 2 and s.median_abs <= 0.12 and s.within_30 == 1.0
    # ITL: 5 figures, median 2.8%, 80% within 30% (gpt-oss-120b on H100 at concurrency 4 +51%); 2.6% before vLLM's
    # MLA down-projections and routers were kept whole on every TP rank (DeepSeek-R1 on 8 H200s reads 0.93 GiB more
    # weights per step: +2.6% -> +2.8%)
    s = _summary(prepared, "itl", "held_out", "vllm", "gpustack_vllm")
    assert s.count == 5 and s.median_abs <= 0.029 and s.within_30 >= 0.80
    # every vLLM file together (bench/speed.py's engine lines): throughput 28 figures, 13.9%, 86% (issue 19's
    # target met: 19.4%, 82% before the A100 prefill ratio); ITL 6, 7.5%, 83% (7.4% before the MLA weights kept
    # whole on every TP rank)
    s = _summary(prepared, "throughput", "held_out", "vllm")
    assert s.count == 28 and s.median_abs <= 0.14 and s.within_30 >= 0.85
    s = _summary(prepared, "itl", "held_out", "vllm")
    assert s.count == 6 and s.median_abs <= 0.076 and s.within_30 >= 0.83


def test_a_cost_per_moe_layer_is_what_vllm_itl_of_moe_models_at_small_batch_needs(prepared: list) -> None:  # type: ignore[type-arg]
    # GPUStack, vLLM, concurrency 4, ~229 / ~215 tokens (held out): DeepSeek-R1 on 8 x H200 (61 layers, 58 with
    # routed experts) 19.41 ms, gpt-oss-120b (36 MoE layers) 8.40 ms on H100, 11.74 ms on A100; Qwen3-8B's 36 dense
    # layers need ~1 ms a step beyond their bytes, the MoE models 4.3 to 12.9 ms
    itl = {
        p.figure.label.split(" tp")[0]: p
        for p in prepared
        if p.figure.request.engine == "vllm" and p.figure.kind == "itl" and p.figure.label.endswith("c=4")
    }
    deepseek, h100, a100 = itl["deepseek-r1 h200"], itl["gpt-oss-120b h100-sxm"], itl["gpt-oss-120b a100-80gb"]
    assert (deepseek.figure.value, h100.figure.value, a100.figure.value) == (19.41, 8.40, 11.74)
    assert deepseek.roof.work.moe_layers == 58 and h100.roof.work.moe_layers == 36
    assert itl["qwen3-8b h100-sxm"].roof.work.moe_layers == 0
    without = errors([deepseek, h100, a100], replace(VLLM, moe_layer_overhead_s=0.0))
    assert without[0] < -0.60 and without[1] < -0.38 and without[2] < -0.34  # -61%, -40%, -36%
    # one cost per MoE layer (215 us) fits DeepSeek-R1 (+3%) and overshoots gpt-oss-120b (+51%, +29%): its layers
    # need ~0.1 ms, DeepSeek-R1's (MLA, tp 8) ~0.2 ms; the fit weighs them (docs/speed.md)
    deepseek_err, h100_err, a100_err = errors([deepseek, h100, a100])
    assert abs(deepseek_err) < 0.05 and 0.50 < h100_err < 0.53 and 0.27 < a100_err < 0.30


def _closed_loop(prepared: list[Prepared], concurrency: str) -> Prepared:
    return next(
        p for p in prepared if p.figure.source == "closed_loop_vllm" and p.figure.request.concurrency == concurrency
    )


def test_the_gpustack_fit_misses_a_clean_closed_loop_sweep(prepared: list) -> None:  # type: ignore[type-arg]
    # vLLM 0.23.0, Llama-3.1-8B bf16 on one A100 40GB, 1,024 / 128 tokens, --max-concurrency C (closed_loop_vllm.json):
    # about 75 tokens/s decode at C = 1 (13.33 ms), 6.6x that throughput at C = 8 (~495 tokens/s)
    at_1, at_8 = _closed_loop(prepared, "1"), _closed_loop(prepared, "8")
    assert (at_1.figure.kind, at_1.figure.value, at_8.figure.kind, at_8.figure.value) == (
        "itl",
        13.33,
        "throughput",
        495.0,
    )
    itl, throughput = errors([at_1, at_8])
    assert 0.11 < itl < 0.13  # +12.2%: 14.96 ms, the borrowed 0.74 bandwidth share reads the 16 GB of weights in 14 ms
    # -30.1%: 346 tokens/s, 8 prefills of 1,024 tokens at the bf16 share 0.325 x 1.32 (A100: 0.429)
    assert -0.31 < throughput < -0.29
    # a third of the miss is the prefill share GPUStack's all-at-once runs fit (0.429 on A100; TensorRT-LLM's 0.779)
    # and the per-sequence cost; the rest is chunked prefill, whose iterations carry the others' decode tokens (not
    # modelled)
    assert -0.12 < errors([at_8], replace(VLLM, prefill_bf16=FITTED.prefill_bf16, sequence_s=0.0))[0] < -0.09


def test_a_refit_with_the_clean_figure_is_not_adopted(prepared: list) -> None:  # type: ignore[type-arg]
    # the eight vLLM efficiencies refitted on GPUStack's training figures plus the clean C = 8 throughput: the clean
    # figure still misses by about 29% (-28.6%), and GPUStack's held-out throughput is worse: 15.0%, 85% within 30%
    # (12.9%, 89% shipped), past issue 19's target; TTFT 11.7% and ITL 2.6% as shipped
    vllm = [p for p in prepared if p.figure.request.engine == "vllm"]
    at_8 = _closed_loop(prepared, "8")
    train = [p for p in vllm if p.figure.split == "train"] + [at_8]
    refit = fit(train, VLLM, rounds=1, steps=24, names=ENGINE_PARAMETERS["vllm"])
    assert errors([at_8], refit)[0] < -0.28
    held_out = [p for p in vllm if p.figure.split == "held_out" and p.figure.source == "gpustack_vllm"]
    held = [p for p in held_out if p.figure.kind == "throughput"]
    refitted, shipped = Summary.of(errors(held, refit)), Summary.of(errors(held))
    assert refitted.median_abs > max(0.149, shipped.median_abs) and refitted.within_30 < shipped.within_30


def test_sglang_held_out_errors(prepared: list) -> None:  # type: ignore[type-arg]
    # throughput: 6 figures, median 9.6%, 83% within 30% (9.5% before SGLang's default fraction read nvidia-smi's
    # total: the pools, and the batches they hold, grew ~0.1%)
    s = _summary(prepared, "throughput", "held_out", "sglang")
    assert s.count == 6 and s.median_abs <= 0.097 and s.within_30 >= 0.83
    # one TTFT figure (Qwen3-8B-FP8 at concurrency 4: 39.66 ms), 31.7% short; one ITL figure 15.7% over
    assert _summary(prepared, "ttft", "held_out", "sglang").median_abs <= 0.318
    assert _summary(prepared, "itl", "held_out", "sglang").median_abs <= 0.158


def test_a_fixed_cost_a_request_is_what_vllm_ttft_at_low_concurrency_needs(prepared: list) -> None:  # type: ignore[type-arg]
    # GPUStack: Qwen3-8B on one H100, vLLM v0.11.0, concurrency 1: 59.01 ms TTFT for a ~233-token prompt, whose
    # prefill alone is a few ms; without request_s the model is ~75% short
    at_1 = next(p for p in prepared if p.figure.request.engine == "vllm" and p.figure.label.startswith("qwen3-8b"))
    assert at_1.figure.kind == "ttft" and at_1.figure.value == 59.01
    assert errors([at_1], replace(VLLM, request_s=0.0))[0] < -0.6
    assert abs(errors([at_1])[0]) < 0.05  # 1.3% over (the fit balances it against the other TTFTs)


def test_the_running_cap_and_the_per_sequence_cost_bound_the_offline_sharegpt_runs(prepared: list) -> None:  # type: ignore[type-arg]
    # DeepSeek-R1 on 8 x H200, 1,000 ShareGPT prompts at once: 2,621 output tokens/s measured; vLLM runs at most
    # max_num_seqs = 1,024 (v1 default on >= 70 GiB GPUs), and each running sequence costs host time every step
    row = next(
        p
        for p in prepared
        if p.figure.request.engine == "vllm" and p.figure.label.startswith("deepseek-r1 h200 tp8 219/201")
    )
    assert row.figure.value == 2621.05
    assert errors([row], replace(VLLM, sequence_s=0.0))[0] > 2.9  # without the per-sequence cost: +295%
    # +56.7% (-3.6% before the per-MoE-layer cost took part of the per-sequence cost: 316 us then, 215 us; +24.2%
    # before the A100 prefill ratio's refit took it to 147 us)
    assert 0.55 < errors([row])[0] < 0.59


def test_each_engine_names_what_it_borrows() -> None:
    assert efficiency_for("trtllm").borrowed == ()
    for own in (VLLM, SGLANG):
        assert "gpustack" in own.basis.lower() and own.borrowed
        assert "memory_bandwidth" in own.borrowed and "prefill_compute" not in own.borrowed
    llama = efficiency_for("llamacpp")
    assert "no fitted figures" in llama.basis and "prefill_compute" in llama.borrowed
    assert (llama.prefill, llama.bandwidth, llama.request_s) == (FITTED.prefill, FITTED.bandwidth, 0.0)


def test_the_shipped_engine_efficiencies_are_a_fit_optimum(prepared: list) -> None:  # type: ignore[type-arg]
    for engine, own in (("vllm", VLLM), ("sglang", SGLANG)):
        train = [p for p in prepared if p.figure.split == "train" and p.figure.request.engine == engine]
        refit = fit(train, own, rounds=1, steps=8, names=ENGINE_PARAMETERS[engine])
        for name in ENGINE_PARAMETERS[engine]:
            assert getattr(refit, name) == pytest.approx(getattr(own, name), rel=0.35), (engine, name)


def test_the_engine_fits_keep_the_start_of_lower_loss(prepared: list) -> None:  # type: ignore[type-arg]
    # coordinate descent stops at the optimum nearest its start: SGLang's five from TensorRT-LLM's values stop at a
    # bf16 share of 0.47, from SGLang's shipped ones at 0.69, where the training figures' loss is lower
    train = [p for p in prepared if p.figure.split == "train" and p.figure.request.engine == "sglang"]
    names = ENGINE_PARAMETERS["sglang"]
    start = replace(SGLANG, **{name: getattr(FITTED, name) for name in names if name != "request_s"})
    from_trtllm = fit(train, start, rounds=4, names=names)
    assert from_trtllm.prefill_bf16 == pytest.approx(0.473, rel=0.01)
    best = fit_from(train, [start, SGLANG], names=names)
    assert SGLANG.prefill_bf16 == 0.688 and best.prefill_bf16 == pytest.approx(SGLANG.prefill_bf16, rel=0.01)
