"""Weights at the precision the checkpoint ships (quantization_config), and float32 checkpoints in the dtype each
engine runs them in (weights, and the cache with --kv-dtype auto)."""

from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest

from kvbudget.cost import compute_cost
from kvbudget.engines import parse_engine, served_spec
from kvbudget.errors import ConfigError
from kvbudget.model import catalog
from kvbudget.model.families import read_spec
from kvbudget.model.sources import resolve
from kvbudget.model.spec import ModelSpec
from kvbudget.plan.inputs import weights_figure
from kvbudget.weights.checkpoint import checkpoint_precision
from kvbudget.weights.params import count_params
from kvbudget.weights.precision import estimate_weights, weight_precision
from tests.helpers import run_cli

GiB = 2**30


def _llama(**quantization: object) -> ModelSpec:
    entry = catalog.lookup("llama-3.1-8b")
    assert entry is not None
    cfg = dict(entry.config)
    if quantization:
        cfg["quantization_config"] = quantization
    return read_spec(cfg, name="llama-q", source="test")


def test_gpt_oss_ships_mxfp4_with_bf16_attention_and_fits_one_h100() -> None:
    spec = resolve("gpt-oss-120b")
    weights = weights_figure(spec, "gpt-oss-120b", None, None)
    expected = estimate_weights(count_params(spec), weight_precision("mxfp4"), keep_components=("attention",))
    assert weights.bytes == expected.total_bytes
    assert 60 * GiB < weights.bytes < 62 * GiB  # not the 217.6 GiB of bf16
    assert "quantization_config: mxfp4" in weights.basis
    assert weights_figure(spec, "gpt-oss-120b", "bf16", None).bytes > 200 * GiB  # --weights still overrides


def test_deepseek_v3_ships_fp8() -> None:
    spec = resolve("deepseek-v3")
    weights = weights_figure(spec, "deepseek-v3", None, None)
    assert weights.bytes == estimate_weights(count_params(spec), weight_precision("fp8")).total_bytes
    assert 620 * GiB < weights.bytes < 640 * GiB


@pytest.mark.parametrize(
    ("quantization", "name", "bits", "keep"),
    [
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, "awq", Fraction(4) + Fraction(20, 128), ()),
        ({"quant_method": "gptq", "bits": 4, "group_size": 32}, "gptq", Fraction(4) + Fraction(20, 32), ()),
        ({"quant_method": "gptq", "bits": 8}, "int8", Fraction(8), ()),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}},
                "ignore": ["lm_head", "re:.*self_attn.*"],
            },
            "fp8",
            Fraction(8),
            ("attention",),
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int", "group_size": 64}}},
            },
            "int4",
            Fraction(4) + Fraction(16, 64),
            (),
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}}},
            },
            "nvfp4",
            Fraction(9, 2),
            (),
        ),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4", Fraction(9, 2), ()),
        (  # Qwen3 MoE FP8 checkpoints list every layer's norms and router: no attention module is kept
            {
                "quant_method": "fp8",
                "weight_block_size": [128, 128],
                "modules_to_not_convert": [
                    "lm_head",
                    "model.layers.0.post_attention_layernorm",
                    "model.layers.0.mlp.gate",
                ],
            },
            "fp8",
            Fraction(8),
            (),
        ),
        (
            {"quant_method": "fp8", "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]},
            "fp8",
            8,
            ("attention",),
        ),
        ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "int8", Fraction(8), ()),
        (
            {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_use_double_quant": True},
            "nf4",
            Fraction(4) + Fraction(8, 64) + Fraction(32, 64 * 256),
            (),
        ),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "nf4", Fraction(9, 2), ()),
    ],
)
def test_quantization_configs(
    quantization: dict[str, object], name: str, bits: Fraction, keep: tuple[str, ...]
) -> None:
    shipped = checkpoint_precision(_llama(**quantization))
    assert shipped is not None
    assert (shipped.precision.name, shipped.precision.bits, shipped.keep) == (name, bits, keep)


def test_an_unknown_method_is_one_line_naming_it() -> None:
    with pytest.raises(ConfigError, match="quant_method 'hqq' is not one kvbudget sizes; give the serving precision"):
        checkpoint_precision(_llama(quant_method="hqq"))


def _fp32(model: str = "llama-3.1-8b") -> ModelSpec:
    entry = catalog.lookup(model)
    assert entry is not None
    return read_spec({**entry.config, "torch_dtype": "float32"}, name=f"{model}-fp32", source="test")


@pytest.mark.parametrize(
    ("engine", "capability", "dtype", "per_token"),
    [
        ("vllm", None, "bf16", 131_072),  # vLLM 0.33: the platform's preferred dtype
        ("vllm", 75, "fp16", 131_072),  # a T4 has no bf16
        ("sglang", None, "fp16", 131_072),  # SGLang: float16, "the common practice"
        ("llamacpp", None, "fp16", 131_072),  # -ctk/-ctv f16 by default
        ("transformers", None, "fp32", 262_144),  # transformers keeps the checkpoint's float32
        ("ideal", None, "fp32", 262_144),
    ],
)
def test_float32_checkpoints_run_in_the_engines_dtype(
    engine: str, capability: int | None, dtype: str, per_token: int
) -> None:
    spec = served_spec(_fp32(), parse_engine(engine), capability)
    assert spec.dtype in (dtype, "float32")
    if engine in ("vllm", "sglang", "llamacpp"):
        assert spec.dtype == dtype and any("float32 checkpoint" in n or "caches f16" in n for n in spec.notes)
    if capability is None:
        assert compute_cost(_fp32(), engine=engine, tokens=1024).layout.kv_bytes_per_token == per_token


def test_sglang_runs_a_float32_gemma_in_bf16() -> None:
    assert served_spec(_fp32("gemma-3-27b"), parse_engine("sglang")).dtype == "bf16"


def test_plan_weighs_a_float32_checkpoint_as_the_engine_loads_it(
    capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:

    entry = catalog.lookup("llama-3.1-8b")
    assert entry is not None
    path = Path(str(tmp_path)) / "config.json"
    path.write_text(json.dumps({**entry.config, "torch_dtype": "float32"}))
    code, out, _ = run_cli(
        capsys, "plan", str(path), "--gpu", "h100-sxm", "--engine", "vllm", "--context", "8k", "--json"
    )
    assert code == 0
    doc = json.loads(out)
    spec = replace(_fp32(), dtype="bf16")
    assert doc["weights_bytes"] == estimate_weights(count_params(spec), weight_precision("bf16")).total_bytes
    assert doc["kv_dtype"] == "bf16"


FP8_GROUPS = {
    "group_0": {
        "targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True, "dynamic": False},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False},
    }
}
FP8_CT = {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
          "config_groups": FP8_GROUPS}  # fmt: skip


def test_a_compression_config_is_read_as_vllm_reads_it() -> None:
    """llm-compressor's first FP8 checkpoints (Meta-Llama-3.1-8B-Instruct-FP8) name it ``compression_config``: the
    weights were counted at bf16 (16.06 GB where vLLM loads 9.08 GB); vLLM reads that key when quantization_config is
    absent (vllm/config/model.py ``_parse_quant_hf_config``: "compressed-tensors uses a compression_config key")."""
    entry = catalog.lookup("llama-3.1-8b")
    assert entry is not None
    named = read_spec({**entry.config, "compression_config": FP8_CT}, name="llama-fp8", source="test")
    quantized = _llama(**FP8_CT)
    found = checkpoint_precision(named)
    assert found is not None and found.precision == weight_precision("fp8")
    assert weights_figure(named, "x", None, None).bytes == weights_figure(quantized, "x", None, None).bytes


def test_a_multimodal_checkpoints_quantization_is_kept_with_its_text_config() -> None:
    """A VLM's quantization_config sits beside its text_config (Gemma 3 and Llama 4 FP8/AWQ checkpoints, as vLLM reads
    it from the top-level config): it was dropped with the rest of the top level, and the weights counted at bf16."""
    entry = catalog.lookup("gemma-3-27b")
    assert entry is not None
    top = {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"], "torch_dtype": "bfloat16"}
    plain = read_spec({**top, "text_config": dict(entry.config)}, name="g", source="test")
    awq = {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": True}
    quantized = read_spec({**top, "text_config": dict(entry.config), "quantization_config": awq}, name="g", source="t")
    found = checkpoint_precision(quantized)
    assert found is not None and found.precision == weight_precision("awq", group_size=128)
    assert weights_figure(quantized, "x", None, None).bytes < weights_figure(plain, "x", None, None).bytes / 3


def test_another_precision_over_a_quantized_checkpoint_is_flagged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """plan --weights fp8 on an AWQ checkpoint planned 8.11 GiB of fp8 weights with no word: vLLM refuses a
    --quantization that does not match the checkpoint's ("Quantization method specified in the model config (awq) does
    not match the quantization method specified in the `quantization` argument (fp8)", vllm/config ModelConfig
    _verify_quantization), as SGLang does; it quantizes only a 16-bit checkpoint at load."""
    entry = catalog.lookup("llama-3.1-8b")
    assert entry is not None
    awq = {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": True}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**entry.config, "quantization_config": awq}), encoding="utf-8")
    base = ("plan", str(path), "--gpu", "h100-sxm", "--context", "32k")
    for engine in ("vllm", "sglang"):
        code, out, err = run_cli(capsys, *base, "--engine", engine, "--weights", "fp8", "--json")
        assert code == 0, err
        warnings = " ".join(json.loads(out)["warnings"])
        assert "--weights fp8: the checkpoint ships awq (its quantization_config)" in warnings, warnings
        code, out, err = run_cli(capsys, *base, "--engine", engine, "--weights", "awq", "--json")
        assert code == 0 and "--weights" not in " ".join(json.loads(out)["warnings"])
