"""Capacity plans: the seeds' worked budgets, vLLM issue #12330, engine start-up numbers, and
bad input, through the library and the real CLI entry point."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kvbudget.errors import InputError
from tests.helpers import run_cli

GiB = 2**30


def _plan(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, "plan", *argv, "--json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


SEED_BUDGET = ("llama-3.1-70b", "--gpu-memory", "80GB", "--weights-size", "42GB", "--overhead", "4GB")


def test_seed_worked_budget_on_one_80gb_card(capsys: pytest.CaptureFixture[str]) -> None:
    """70B-class at 4-bit (42 GB), 4 GB runtime, 80 GB card: 34 GB headroom, three 32K sessions fit,
    four do not, one 128K session does not."""
    plan = _plan(capsys, *SEED_BUDGET, "--context", "32k")
    assert plan["kv_pool_bytes"] == 34_000_000_000
    assert plan["per_session_bytes"] == 10_737_418_240
    assert plan["sessions"] == 3
    assert 4 * plan["per_session_bytes"] > plan["kv_pool_bytes"]
    assert "32K-context, three-concurrent-session server, not a 128K-context one" in plan["statement"]
    assert _plan(capsys, *SEED_BUDGET, "--context", "128k")["sessions"] == 0
    ledger = {line["label"]: line for line in plan["ledger"]}
    assert ledger["weights"]["provenance"] == "measured"
    assert ledger["runtime overhead"]["provenance"] == "measured"


def test_seed_levers_weights_once_versus_context_per_session(capsys: pytest.CaptureFixture[str]) -> None:
    """Quantizing weights 4->2-bit frees 21 GB once; doubling the cap costs 10 GiB per session."""
    code, out, err = run_cli(capsys, "levers", *SEED_BUDGET, "--weight-bits", "4", "--context", "32k", "--json")
    assert code == 0, err
    levers = {lv["lever"]: lv for lv in json.loads(out)["levers"]}
    assert levers["weights 4->2-bit"]["memory_effect"] == "frees 21,000,000,000 B (19.56 GiB) once per GPU"
    assert levers["weights 4->2-bit"]["total_sessions"] == 5
    assert levers["cap x2"]["memory_effect"] == "costs 10,737,418,240 B (10.00 GiB) per session"
    assert levers["cap x2"]["total_sessions"] == 1  # raising 32K to 64K halves (and floors) the agents served
    assert levers["cap x1/2"]["total_sessions"] == 6


@pytest.mark.parametrize(("context", "sessions"), [("2k", 245), ("8k", 61), ("32k", 15)])
def test_seed_token_budget(capsys: pytest.CaptureFixture[str], context: str, sessions: int) -> None:
    """80 GB, 8 GB weights, 6 GB workspace, 128 KiB/token: 503K tokens; 245 at 2K, 61 at 8K, 15 at 32K."""
    plan = _plan(
        capsys,
        "llama-3.1-8b",
        "--gpu-memory",
        "80GB",
        "--weights-size",
        "8GB",
        "--overhead",
        "6GB",
        "--context",
        context,
    )
    assert plan["kv_bytes_per_token"] == 128 * 1024
    assert plan["token_budget"] == 503_540
    assert plan["sessions"] == sessions


def test_vllm_issue_12330(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3-8B on A100-40GB (39.5 GiB seen by torch), utilization 0.9: 35.55 GiB requested; weights 14.96,
    non-torch 0.10, activation peak 9.37 GiB -> KV 11.12 GiB, "Maximum concurrency for 8192 tokens: 11.12x".
    The inputs are the log's 2-decimal GiB figures, so the block count lands within rounding of 5,691."""
    plan = _plan(
        capsys,
        "llama-3.1-8b",
        "--engine",
        "vllm@0.7.0",
        "--gpu-memory",
        "39.5GiB",
        "--utilization",
        "0.9",
        "--weights-size",
        "14.96GiB",
        "--overhead",
        "9.47GiB",
        "--context",
        "8192",
    )
    assert round(plan["usable_bytes"] / GiB, 2) == 35.55
    assert round(plan["kv_pool_bytes"] / GiB, 2) == 11.12
    assert plan["engine_log"][1] == "Maximum concurrency for 8,192 tokens per request: 11.12x"
    blocks = plan["token_budget"] // 16
    assert abs(blocks - 5_691) <= 3
    assert plan["sessions"] == 11
    assert "--kv-cache-memory-bytes" in plan["flags"]["vllm"]


def test_engine_shares_differ(capsys: pytest.CaptureFixture[str]) -> None:
    common = ("llama-3.1-8b", "--gpu", "h100-80gb", "--weights", "bf16", "--overhead", "4GiB", "--context", "32k")
    total = int(79.22 * 2**30)  # the H100 SXM's total as CUDA reports it (vLLM PR #12126 log), not nvidia-smi's
    vllm = _plan(capsys, *common, "--engine", "vllm")
    assert vllm["gpu_memory_bytes"] == total
    assert vllm["usable_bytes"] == int(total * 0.92)  # fraction of TOTAL memory, newest default
    # vllm/config/cache.py of the released wheels: default=0.9 in 0.19.0, default=0.92 from 0.20.0
    assert _plan(capsys, *common, "--engine", "vllm@0.19")["usable_bytes"] == int(total * 0.9)
    assert _plan(capsys, *common, "--engine", "vllm@0.20")["usable_bytes"] == int(total * 0.92)
    sglang = _plan(capsys, *common, "--engine", "sglang")
    assert sglang["engine_log"][0].startswith("max_total_num_tokens=")
    assert sglang["token_budget"] == int(sglang["engine_log"][0].split("=")[1].split(",")[0])
    llama = _plan(capsys, *common, "--engine", "llamacpp")
    assert llama["usable_bytes"] == total - 2**30
    assert any(line.startswith("llama_kv_cache: size =") for line in llama["engine_log"])
    assert "-np" in llama["flags"]["llamacpp"] and "-fa on" in llama["flags"]["llamacpp"]


def test_max_context_for_sessions(capsys: pytest.CaptureFixture[str]) -> None:
    plan = _plan(capsys, *SEED_BUDGET, "--context", "32k", "--sessions", "4")
    cap = plan["max_context_for_sessions"]
    assert 4 * 327_680 * cap <= 34_000_000_000 < 4 * 327_680 * (cap + 1)


def test_prefix_sharing_is_block_aligned_and_raises_sessions(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("llama-3.1-8b", "--engine", "vllm", "--gpu-memory", "24GiB", "--weights-size", "16GB", "--overhead", "1GiB")
    base = _plan(capsys, *argv, "--context", "16k")
    shared = _plan(capsys, *argv, "--context", "16k", "--prefix", "8200")
    assert shared["prefix"]["shared_tokens"] == 8192  # whole 16-token blocks only
    assert shared["prefix"]["sessions"] > base["sessions"]
    assert "--enable-prefix-caching" in shared["flags"]["vllm"]


def test_offload_tier(capsys: pytest.CaptureFixture[str]) -> None:
    plan = _plan(capsys, *SEED_BUDGET, "--context", "32k", "--offload-memory", "512GB", "--link", "pcie-gen5-x16")
    off = plan["offload"]
    assert off["sessions_offloaded"] == 512_000_000_000 // 10_737_418_240
    assert off["restore_seconds"] == pytest.approx(10_737_418_240 / 64e9)


def test_multi_gpu_replicas_and_replication_warning(capsys: pytest.CaptureFixture[str]) -> None:
    plan = _plan(
        capsys,
        "llama-3.1-8b",
        "--engine",
        "vllm",
        "--gpu",
        "h100-80gb",
        "--gpus",
        "32",
        "--tp",
        "16",
        "--weights",
        "bf16",
        "--overhead",
        "4GiB",
        "--context",
        "32k",
    )
    assert plan["replicas"] == 2
    assert plan["total_sessions"] == 2 * plan["sessions"]
    assert any("replicated" in w for w in plan["warnings"])
    assert plan["kv_bytes_per_token"] == 16_384


def test_context_beyond_window_warns(capsys: pytest.CaptureFixture[str]) -> None:
    plan = _plan(
        capsys, "qwen3-8b", "--gpu", "h100-80gb", "--weights", "bf16", "--overhead", "4GiB", "--context", "128k"
    )
    assert any("max_position_embeddings 40,960" in w for w in plan["warnings"])


def test_weights_that_do_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys, "plan", "llama-3.1-70b", "--gpu", "h100-80gb", "--weights", "bf16", "--context", "8k"
    )
    assert code == 1 and out == ""
    line = err.strip()
    assert line.count("\n") == 0 and line.startswith("Error: Llama-3.1-70B: weights 131.42 GiB")
    assert "--tp 2" in line and "lower --weights precision" in line


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--gpu-memory", "-24GB"),
        ("--gpu-memory", "lots"),
        ("--overhead", "2XB"),
        ("--weights-size", "-1GB"),
        ("--utilization", "1.5"),
        ("--context", "0"),
    ],
)
def test_bad_sizes(capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    argv = {"--gpu-memory": "80GB", "--context": "8k", "--weights-size": "10GB"}
    argv[flag] = value
    flat = [f"{key}={val}" for key, val in argv.items()]  # '=' lets argparse take a leading '-'
    code, _, err = run_cli(capsys, "plan", "llama-3.1-8b", *flat)
    assert code == 1 and err.startswith("Error: ") and err.count("\n") == 1
    assert flag in err


def test_gpu_choice_is_exclusive() -> None:
    from kvbudget.plan.inputs import gpu_memory

    with pytest.raises(InputError, match="exactly one"):
        gpu_memory("h100-80gb", 80 * 10**9)
    # CUDA's total, as vLLM issue #12330 measured it (35.55 GiB at 0.9), not nvidia-smi's 40,960 MiB
    memory, _, provenance, basis = gpu_memory("a100-40gb", None)
    assert (memory, provenance) == (int(39.5 * 2**30), "measured") and basis is not None and "12330" in basis
    # a card no log measured: nvidia-smi minus the median driver reserve, labelled heuristic (the basis: estimated)
    assert gpu_memory("h200", None)[0] == (143_771 - 484) * 2**20
    h200 = gpu_memory("h200", None)
    assert h200[2] == "heuristic" and h200[3] is not None and "CUDA total estimated" in h200[3]


def test_vllm_refusal_with_its_estimated_length(capsys: pytest.CaptureFixture[str]) -> None:
    """A KV pool of exactly 1 GiB for Llama-3.1-8B at 8,192 tokens: the bytes hold one session (512 blocks of
    2 MiB), but vLLM >= 0.29 holds the null block back and refuses, naming 8,176 tokens; the plan says so and
    prints no capacity line vLLM never reaches."""
    plan = _plan(
        capsys,
        "llama-3.1-8b",
        "--engine",
        "vllm",
        "--gpu-memory",
        "20GiB",
        "--utilization",
        "1",
        "--weights-size",
        "18GiB",
        "--overhead",
        "1GiB",
        "--context",
        "8192",
    )
    assert plan["kv_pool_bytes"] == GiB
    assert plan["sessions"] == 0
    assert plan["token_budget"] == 0
    assert len(plan["engine_log"]) == 1
    assert "estimated maximum model length is 8176" in plan["engine_log"][0]
    # 2 MiB more: one session, and vLLM's one-line capacity report
    plan = _plan(
        capsys,
        "llama-3.1-8b",
        "--engine",
        "vllm",
        "--gpu-memory",
        "20GiB",
        "--utilization",
        "1",
        "--weights-size",
        "18GiB",
        "--overhead",
        str(GiB - 2 * 2**20),
        "--context",
        "8192",
    )
    assert plan["sessions"] == 1
    assert plan["engine_log"] == [
        "GPU KV cache size: 8,208 tokens, Maximum concurrency for 8,192 tokens per request: 1.00x"
    ]


def test_vllm_no_prefix_caching_switch(capsys: pytest.CaptureFixture[str]) -> None:
    """Nemotron-3-Nano on an H100: prefix caching on (vLLM's default) holds 3 Mamba pages per session."""
    args = ("nemotron-3-nano", "--engine", "vllm", "--gpu", "h100-80gb", "--weights", "fp8", "--context", "32k")
    on = _plan(capsys, *args)
    off = _plan(capsys, *args, "--no-prefix-caching")
    assert off["sessions"] > on["sessions"]
    assert off["per_session_bytes"] < on["per_session_bytes"]
    assert "--no-enable-prefix-caching" in off["flags"]["vllm"]
    assert "prefix-caching" not in on["flags"]["vllm"]


SMALL_FRACTION = {"engine": "vllm", "utilization": "0.1", "model": "llama-3.1-8b", "gpu": "h100-sxm"}


@pytest.mark.parametrize(
    ("options", "fixes"),
    [
        # vLLM uses 0.9 of any GPU: the weights and overhead need 0.9 x T to hold them and 1 GiB; the refusal
        # offered the total plus the shortfall (136 GiB), a GPU that refuses the same plan again
        ({"engine": "vllm"}, "a GPU with at least 148 GiB"),
        # the user's own --utilization held the plan back: raising it is the smallest fix, and a GPU must hold the
        # weights at that same fraction (0.1 of 192 GiB), not the total plus the shortfall (97 GiB)
        ({**SMALL_FRACTION}, "--utilization 0.23"),
        ({**SMALL_FRACTION}, "GPU with at least 192 GiB"),
        ({"engine": "ideal"}, "a GPU with at least 135 GiB"),
    ],
)
def test_a_refusal_offers_fixes_that_fit_by_the_engines_own_memory_rule(options: dict[str, str], fixes: str) -> None:
    import kvbudget

    request = kvbudget.PlanRequest.from_options({"model": "llama-3.1-70b", "gpu": "l4", "context": "8k", **options})
    with pytest.raises(InputError) as caught:
        kvbudget.plan_deployment(request)
    assert fixes in str(caught.value), str(caught.value)
    message = str(caught.value)
    gib = int(message.rsplit("at least ", 1)[1].split(" GiB", maxsplit=1)[0].replace(",", ""))
    bigger = {**options, "gpu_memory": f"{gib}GiB"}
    bigger.pop("gpu", None)
    fitted = kvbudget.plan_deployment(
        kvbudget.PlanRequest.from_options({"model": "llama-3.1-70b", "context": "8k", **bigger})
    )
    assert fitted.kv_pool_bytes > 0  # the GPU offered serves (its own overhead model may differ a little)


def test_a_refusal_names_a_gpu_given_by_its_size() -> None:
    # it read "exceed the 1000 B ideal can use on given by 16.41 GiB"
    import kvbudget

    with pytest.raises(InputError) as caught:
        kvbudget.plan_deployment(
            kvbudget.PlanRequest.from_options({"model": "llama-3.1-8b", "gpu_memory": "16GB", "context": "8192"})
        )
    assert "exceed the 14.90 GiB ideal can use on a 14.90 GiB GPU (--gpu-memory) by " in str(caught.value)
