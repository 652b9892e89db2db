"""Serve commands carry every non-default setting the plan used, and leave the concurrency cap to the engine (the
plan explains how to set it) instead of throttling to the worst-case count."""

from __future__ import annotations

import pytest

from tests.helpers import run_cli

BASE = ("plan", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "32k")


def _flags(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *BASE, *argv)
    assert code == 0, err
    return out


def test_non_default_settings_reach_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    out = _flags(capsys, "--engine", "vllm", "--block-size", "32", "--max-num-batched-tokens", "4096")
    vllm = next(line for line in out.splitlines() if line.strip().startswith("vllm: "))
    assert "--block-size 32" in vllm and "--max-num-batched-tokens 4096" in vllm
    assert "--max-num-seqs" not in vllm
    assert "--max-num-seqs" in out.splitlines()[-1] or any("set --max-num-seqs" in line for line in out.splitlines())
    sglang = next(line for line in out.splitlines() if line.strip().startswith("sglang: "))
    assert "--page-size 32" in sglang and "--chunked-prefill-size 4096" in sglang


def test_enforce_eager_reaches_vllms_command_and_frees_its_graph_reserve(capsys: pytest.CaptureFixture[str]) -> None:
    eager = _flags(capsys, "--engine", "vllm@0.20", "--enforce-eager")
    vllm = next(line for line in eager.splitlines() if line.strip().startswith("vllm: "))
    assert "--enforce-eager" in vllm
    graphs = _flags(capsys, "--engine", "vllm@0.20")
    assert "--enforce-eager" not in graphs
    # SGLang's own spelling pastes and reaches its command; TensorRT-LLM has no such switch in kvbudget
    out = _flags(capsys, "--engine", "sglang", "--disable-cuda-graph")
    sglang = next(line for line in out.splitlines() if line.strip().startswith("sglang: "))
    assert "--mem-fraction-static 0.841" in sglang and sglang.endswith("--disable-cuda-graph")
    code, _, err = run_cli(capsys, *BASE, "--engine", "trtllm", "--enforce-eager")
    assert code == 1 and "not a switch kvbudget models for TensorRT-LLM" in err


def test_the_flashinfer_sampler_reaches_vllms_command_as_its_variable(capsys: pytest.CaptureFixture[str]) -> None:
    for value, variable in (("on", "VLLM_USE_FLASHINFER_SAMPLER=1"), ("off", "VLLM_USE_FLASHINFER_SAMPLER=0")):
        out = _flags(capsys, "--engine", "vllm@0.10.1", "--flashinfer-sampler", value)
        vllm = next(line for line in out.splitlines() if line.strip().startswith("vllm: "))
        assert vllm.strip().startswith(f"vllm: {variable} vllm serve "), vllm
    plain = _flags(capsys, "--engine", "vllm@0.10.1")
    assert "VLLM_USE_FLASHINFER_SAMPLER" not in plain


def test_llamacpp_flags_follow_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    out = _flags(capsys, "--engine", "llamacpp", "--no-flash-attn", "--ubatch", "1024", "--kv-unified")
    line = next(line for line in out.splitlines() if line.strip().startswith("llamacpp: "))
    assert "-fa off" in line and "-ub 1024" in line and "--kv-unified" in line


def test_past_the_native_window_the_command_carries_the_override(capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3-8B's config stops at 40,960 tokens: a 128K cap needs each engine's long-context switch and YaRN over
    the trained window (131,072 / 40,960 = 3.2), spelled for each engine."""
    code, out, _ = run_cli(capsys, "plan", "qwen3-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "128k")
    assert code == 0
    lines = {line.split(": ", 1)[0].strip(): line.split(": ", 1)[1] for line in out.splitlines() if ": " in line}
    rope = '\'{"rope_scaling": {"rope_type": "yarn", "factor": 3.2, "original_max_position_embeddings": 40960}}\''
    assert lines["vllm"].startswith("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vllm serve Qwen/Qwen3-8B ")
    assert lines["vllm"].endswith(f"--hf-overrides {rope}")
    assert lines["sglang"].startswith("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 python -m sglang.launch_server ")
    assert lines["llamacpp"].endswith("--rope-scaling yarn --rope-scale 3.2 --yarn-orig-ctx 40960")


def test_weights_the_checkpoint_does_not_ship_are_quantized_at_load_or_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = ("plan", "qwen3-32b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "32k")
    _, out, _ = run_cli(capsys, *base, "--weights", "fp8")
    vllm = next(line for line in out.splitlines() if line.strip().startswith("vllm: "))
    sglang = next(line for line in out.splitlines() if line.strip().startswith("sglang: "))
    assert vllm.endswith("--quantization fp8") and sglang.endswith("--quantization fp8")
    _, out, _ = run_cli(capsys, *base, "--weights", "int4")
    assert "--quantization" not in out
    assert "warning: --weights int4: the checkpoint does not ship in it" in out
    _, out, _ = run_cli(capsys, "plan", "gpt-oss-120b", "--gpu", "h100-sxm", "--context", "32k", "--weights", "mxfp4")
    assert "--quantization" not in out and "does not ship" not in out  # what the checkpoint ships: nothing to do
    _, out, _ = run_cli(
        capsys, "plan", "qwen3-32b", "--gpu", "h100-sxm", "--engine", "trtllm", "--weights", "fp8", "--context", "32k"
    )
    assert "warning: --weights fp8: the checkpoint does not ship in it, and TensorRT-LLM does not quantize" in out


ROPE = '{"rope_scaling": {"rope_type": "yarn", "factor": 3.2, "original_max_position_embeddings": 40960}}'


@pytest.mark.parametrize(
    ("engine", "needs"),
    [
        (
            "vllm",
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, and the model needs rope scaling over its window: "
            f"--hf-overrides '{ROPE}'",
        ),
        (
            "sglang",
            f"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1, and the model needs rope scaling over its window: "
            f"--json-model-override-args '{ROPE}'",
        ),
        ("trtllm", f"takes rope scaling from the checkpoint's config.json only: add {ROPE[1:-1]} to a local copy's"),
        ("llamacpp", "--rope-scaling yarn --rope-scale 3.2 --yarn-orig-ctx 40960"),
        ("ollama", "cannot: it clamps num_ctx to the training context 40,960"),
        ("transformers", f"set in the config before loading: {ROPE}"),
        ("ideal", f"YaRN factor 3.2: {ROPE}"),
    ],
)
def test_cost_and_plan_past_the_window_say_what_the_engine_needs(
    capsys: pytest.CaptureFixture[str], engine: str, needs: str
) -> None:
    """131,072 tokens of Qwen3-8B (trained window 40,960): `cost` and `plan` both name the engine's own switches
    (or why it cannot), with the same YaRN factor the serve commands carry."""
    code, out, err = run_cli(capsys, "cost", "qwen3-8b", "--engine", engine, "--tokens", "128k")
    assert code == 0, err
    warning = next(line for line in (out + err).splitlines() if "is beyond Qwen3-8B's max_position_embeddings" in line)
    assert needs in warning
    if engine in ("ideal", "transformers"):
        return
    code, out, err = run_cli(capsys, "plan", "qwen3-8b", "--gpu", "h200", "--engine", engine, "--context", "128k")
    assert code == 0, err
    warning = next(line for line in out.splitlines() if "--context 131,072 is beyond" in line)
    assert needs in warning


def test_trtllm_command_past_the_window_says_the_config_edit_first(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "plan", "qwen3-8b", "--gpu", "h200", "--engine", "trtllm", "--context", "128k")
    assert code == 0
    line = next(line for line in out.splitlines() if line.strip().startswith("trtllm: "))
    assert line.strip() == (
        "trtllm: trtllm-serve Qwen/Qwen3-8B --backend pytorch --max_seq_len 131072 "
        f"--kv_cache_free_gpu_memory_fraction 0.9  # first add {ROPE[1:-1]} to the checkpoint's config.json "
        "(a local copy)"
    )
