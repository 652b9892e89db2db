"""vLLM's --max-num-seqs: the running limit the user serves with, through every face, in vLLM's profile (the
dummy sampler's rows, the CUDA graphs it captures) and as the running cap of plan and speed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.api import PlanRequest, Tokens, plan_deployment
from kvbudget.engines.overhead import GRAPHS, NON_TORCH
from kvbudget.engines.vllm_profile import capture_sizes, graph_ceiling, profiled_overhead, sampler_bytes
from kvbudget.errors import InputError
from kvbudget.model.sources import resolve
from kvbudget.plan.flags import engine_command
from kvbudget.requests.speed import SpeedRequest
from kvbudget.speed.answer import estimate_speed
from tests.test_faces import api_document, cli_document, web_document

H100_8K = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": "vllm", "context": "8k"}


# --- vLLM 0.33.0 vllm/config/vllm.py VllmConfig._set_cudagraph_sizes: top = min(max_num_seqs * 2, 512 (1,024 on
# data-center Blackwell)) capped at max_num_batched_tokens; [1, 2, 4] + range(8, min(top + 1, 256), 8) +
# range(256, top + 1, 16), + max_num_batched_tokens if <= top, + max_num_seqs (the uniform decode size)


def test_capture_sizes_follow_vllms_rule_at_64_and_100() -> None:
    # --max-num-seqs 64: top 128 -> 1, 2, 4, 8 .. 128 every 8 (64 among them): 19 graphs
    assert capture_sizes(64, 8192) == (1, 2, 4, *range(8, 129, 8))
    # --max-num-seqs 100: top 200 -> 1, 2, 4, 8 .. 200 every 8, and 100 itself (off the grid): 29 graphs
    assert capture_sizes(100, 8192) == tuple(sorted((1, 2, 4, 100, *range(8, 201, 8))))
    assert len(capture_sizes(100, 8192)) == 29
    assert capture_sizes(6, 8192) == (1, 2, 4, 6, 8)  # top 12


def test_capture_sizes_at_vllms_defaults_on_hopper_and_blackwell_and_under_a_small_batch() -> None:
    # the default max_num_seqs (256, or 1,024 on >= 70 GiB GPUs) reaches the 512 ceiling: 51 graphs
    assert len(capture_sizes(256, 2048)) == len(capture_sizes(1024, 8192)) == 51
    # data-center Blackwell (capability 10.x): a 1,024 ceiling, 83 graphs at the default 1,024
    assert graph_ceiling(100) == 1024 and graph_ceiling(90) == graph_ceiling(120) == 512
    assert len(capture_sizes(1024, 16384, 1024)) == 83
    # max_num_batched_tokens 300 caps the grid at 288 and is captured itself; 1,024 (over the batch) is not
    assert capture_sizes(1024, 300)[-4:] == (256, 272, 288, 300)


def _overhead(seqs: int) -> tuple[int, int, str]:
    spec = resolve("llama-3.1-8b")
    o = profiled_overhead(
        spec,
        tp=1,
        batched=8192,
        batched_basis="",
        seqs=seqs,
        seqs_basis="",
        graphs=True,
        sampler="flashinfer",
        default_seqs=1024,
    )
    return o.low, o.high, o.basis


def test_the_sampler_runs_on_max_num_seqs_rows_and_the_graphs_scale_with_the_sizes_captured() -> None:
    # gpu_model_runner.py _dummy_run: min(max_num_seqs, max_num_batched_tokens) rows reach the sampler; FlashInfer's
    # 14 B per (row, vocabulary entry), Llama-3.1-8B's vocabulary 128,256
    assert sampler_bytes(resolve("llama-3.1-8b"), 1024, "flashinfer") == 1024 * 128_256 * 14
    _, high_1024, _ = _overhead(1024)
    low_64, high_64, basis = _overhead(64)
    act_high = int(1.35 * 8192 * (4 * 4096 + 2 * 14336) * 2)  # the batch's activations x 1.35 (overhead.py)
    # 1,024 rows: the sampler (1.84 GB) is the profile's peak; 64 rows: the activations are, and 19 of 51 graphs
    assert high_1024 == NON_TORCH[1] + 1024 * 128_256 * 14 + GRAPHS[1]
    assert high_64 == NON_TORCH[1] + act_high + GRAPHS[1] * 19 // 51
    assert low_64 == NON_TORCH[0] + 8192 * (4 * 4096 + 2 * 14336) * 2 + GRAPHS[0] * 19 // 51
    assert "x 19/51 captured sizes" in basis and "at 64 sequences" in basis


# --- the running cap


def test_plan_runs_at_most_max_num_seqs_and_says_the_rest_wait() -> None:
    request = PlanRequest(**H100_8K, max_num_seqs=16)  # type: ignore[arg-type]
    plan = plan_deployment(request)
    assert plan.sessions == 16
    warning = next(w for w in plan.warnings if "--max-num-seqs 16" in w)
    assert "16 running, the rest wait" in warning
    held = int(warning.split("the KV pool holds ")[1].split()[0].replace(",", ""))
    assert held > 16
    assert "--max-num-seqs 16" in str(engine_command(plan)["text"])  # the command the plan serves
    # a limit above what the pool holds changes no count, only the profile (64 sampler rows, 19 graphs)
    wide = plan_deployment(PlanRequest(**H100_8K, max_num_seqs=64))  # type: ignore[arg-type]
    assert wide.sessions < 64 and not any("runs at most" in w for w in wide.warnings)
    default = plan_deployment(PlanRequest(**H100_8K))  # type: ignore[arg-type]
    # the default vLLM runs Llama-3.1-8B on Model Runner V2, whose greedy dummy sampler keeps 2 B per entry (0.24 GiB
    # at 1,024 rows, under the 8,192-token forward's activations at either limit), so only the graphs differ
    assert default.overhead.bytes - wide.overhead.bytes == GRAPHS[1] - GRAPHS[1] * 19 // 51


def test_speed_runs_max_num_seqs_and_queues_the_rest() -> None:
    base = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": "vllm", "isl": 4000, "osl": 1000}
    speed = estimate_speed(SpeedRequest(**base, max_num_seqs=16))  # type: ignore[arg-type]
    assert speed.batch == 16
    asked = estimate_speed(SpeedRequest(**base, max_num_seqs=16, concurrency="40"))  # type: ignore[arg-type]
    assert (asked.batch, asked.queued) == (16, 24)


# --- every face


def test_the_option_reads_the_same_on_the_command_line_the_api_and_the_web() -> None:
    options: dict[str, Any] = {**H100_8K, "max_num_seqs": "16"}
    code, cli = cli_document("plan", options)
    assert code == 0, cli
    document = json.loads(cli)
    assert (document["max_num_seqs"], document["sessions"]) == (16, 16)
    assert "--max-num-seqs 16" in document["commands"]["vllm"]["text"]
    assert api_document("plan", options) == cli
    assert web_document("plan", options, Path()) == (200, cli)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({**H100_8K, "max_num_seqs": "0"}, "--max-num-seqs: 0 is outside 1..1,048,576 running sequences"),
        ({**H100_8K, "max_num_seqs": "64.5"}, "--max-num-seqs: cannot read '64.5' as a whole number"),
        ({**H100_8K, "max_num_seqs": "1048577"}, "outside 1..1,048,576"),
        (
            {**H100_8K, "engine": "sglang", "max_num_seqs": "64"},
            "vLLM's running limit, not SGLang's; give SGLang's own --max-running-requests",
        ),
        (
            {**H100_8K, "engine": "trtllm", "max_num_seqs": "64"},
            "not TensorRT-LLM's; give TensorRT-LLM's own --max-batch-size",
        ),
        ({**H100_8K, "engine": "llamacpp", "max_num_seqs": "64"}, "llama.cpp has no running limit kvbudget models"),
    ],
)
def test_a_bad_or_misplaced_limit_is_one_line_naming_the_option_on_every_face(
    options: dict[str, Any], message: str
) -> None:
    code, cli = cli_document("plan", options)
    error = json.loads(cli)["error"]["message"]
    assert code == 1 and message in error and "\n" not in error
    assert api_document("plan", options) == cli
    assert web_document("plan", options, Path()) == (400, cli)


def test_the_library_refuses_the_limit_with_another_engine() -> None:
    with pytest.raises(InputError, match="--max-num-seqs 8: vLLM's running limit, not SGLang's"):
        plan_deployment(
            PlanRequest(model="llama-3.1-8b", gpu="h100", engine="sglang", context=Tokens("8k"), max_num_seqs=8)
        )
