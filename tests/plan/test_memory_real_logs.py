"""The memory before the KV pool, planned from defaults, held to real engine start-up logs
(tests/data/memory/real_logs.csv, each row cited): the pool within 15% of the engine's own figure, the weights as
loaded within 1% of the logged figure, and every refusal predicted. A plan that fits where the engine refused is a
failure, whichever way the plan says it (a shortfall error, or no session at the cap)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from kvbudget.api import PlanRequest, Tokens, plan_deployment
from kvbudget.errors import InputError
from kvbudget.model.sources import resolve
from kvbudget.weights.loaded import marlin_mxfp4_padding

GiB = 2**30
ROWS = list(csv.DictReader((Path(__file__).parents[1] / "data" / "memory" / "real_logs.csv").read_text().splitlines()))


def _request(row: dict[str, str]) -> PlanRequest:
    batched = int(row["max_num_batched_tokens"]) if row["max_num_batched_tokens"] else None
    return PlanRequest(
        model=row["model"],
        gpu=row["gpu"],
        engine=f"{row['engine']}@{row['version']}",
        context=Tokens(row["max_model_len"]),
        tp=int(row["tp"]),
        utilization=float(row["gpu_memory_utilization"]),
        max_num_batched_tokens=batched,
    )


@pytest.mark.parametrize("row", ROWS, ids=[r["case"] for r in ROWS])
def test_every_refusal_is_predicted_and_the_pool_is_near_the_logged_one(row: dict[str, str]) -> None:
    logged = float(row["available_kv_gib"]) * GiB
    try:
        plan = plan_deployment(_request(row))
    except InputError as shortfall:  # weights + runtime memory exceed the share: the engine's negative pool
        assert logged <= 0, f"the plan refused where vLLM found {row['available_kv_gib']} GiB: {shortfall}"
        assert "exceed" in str(shortfall)
        return
    assert logged > 0, f"the plan has a {plan.kv_pool_bytes / GiB:.2f} GiB pool where vLLM's was negative"
    assert abs(plan.kv_pool_bytes - logged) <= 0.15 * logged
    if row["refused"] == "yes":  # a positive pool too small for one request at the cap: vLLM's admission check
        assert plan.sessions == 0 and "refuses to start" in plan.engine_lines[0]
    if row["weights_loaded_gib"]:
        assert abs(plan.weights_per_gpu - float(row["weights_loaded_gib"]) * GiB) <= 0.01 * plan.weights_per_gpu


def test_gpt_oss_120b_on_one_h100_at_128k_and_0_9_is_a_refusal() -> None:
    request = PlanRequest(
        model="openai/gpt-oss-120b", gpu="h100", engine="vllm@0.10.1", context=Tokens("128k"), utilization=0.9
    )
    with pytest.raises(InputError, match=r"exceed the 71\.30 GiB vllm can use"):
        plan_deployment(request)


def test_gpt_oss_120b_at_0_95_leaves_a_pool_near_the_logged_1_71_gib_and_no_session() -> None:
    request = PlanRequest(
        model="openai/gpt-oss-120b",
        gpu="h100",
        engine="vllm@0.11",
        context=Tokens("128k"),
        utilization=0.95,
        max_num_batched_tokens=1024,
    )
    plan = plan_deployment(request)
    assert 1.71 * 0.85 * GiB <= plan.kv_pool_bytes <= 1.71 * 1.15 * GiB
    assert plan.sessions == 0


def test_marlin_padding_of_gpt_oss_120b_is_vllms_create_weights_arithmetic() -> None:
    # vLLM 0.10.1 mxfp4.py: intermediate 2880 -> round_up(2880, 128) = 2944, hidden 2880 -> round_up(2880, 256)
    # = 3072; 36 layers x 128 experts x 3 blocks; 17/32 B per element (fp4 + an e8m0 scale per 32)
    spec = resolve("openai/gpt-oss-120b")
    assert marlin_mxfp4_padding(spec, 1) == 36 * 128 * 3 * (2944 * 3072 - 2880 * 2880) * 17 // 32
    # at tp 2 the 1440 intermediate columns per GPU round up to 1536: more padding in all
    assert marlin_mxfp4_padding(spec, 2) == 36 * 128 * 3 * (1536 * 3072 - 1440 * 2880) * 2 * 17 // 32


def test_the_checkpoint_weights_are_kept_where_no_loading_rule_applies() -> None:
    # vLLM 0.33 (a Triton/FlashInfer MXFP4 path, no rule held to a log yet) and Blackwell (native FP4)
    for engine, gpu in (("vllm@0.33", "h100"), ("vllm@0.11", "b200"), ("sglang", "h100")):
        request = PlanRequest(model="openai/gpt-oss-120b", gpu=gpu, engine=engine, context=Tokens("8k"))
        plan = plan_deployment(request)
        assert "Marlin padding" not in plan.inputs.weights.basis


def test_a_pool_within_the_overhead_models_error_of_zero_says_so() -> None:
    # 0.93 x 79.22 GiB - 65.89 GiB as loaded - 7.50 GiB of runtime memory leaves ~0.3 GiB: the model's error
    # (15% of the overhead) is larger than that, so the plan must not sound sure the engine boots
    request = PlanRequest(
        model="openai/gpt-oss-120b",
        gpu="h100",
        engine="vllm@0.11",
        context=Tokens("8k"),
        utilization=0.93,
        max_num_batched_tokens=1024,
    )
    plan = plan_deployment(request)
    assert 0 < plan.kv_pool_bytes < GiB
    assert any(w.startswith("near the edge") and "kvbudget calibrate" in w for w in plan.warnings)


def test_a_plan_far_from_the_edge_carries_no_edge_warning() -> None:
    plan = plan_deployment(PlanRequest(model="llama-3.1-8b", gpu="h100", engine="vllm", context=Tokens("8k")))
    assert not any(w.startswith("near the edge") for w in plan.warnings)
