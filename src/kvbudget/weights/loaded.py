"""Weights as the engine loads them, from the checkpoint's bytes: what the engine keeps on the GPU.

A checkpoint's bytes are what the files hold; an engine may repack them for its kernels and keep more. The one
rule held to a real log so far:

* vLLM 0.10-0.19, an MXFP4 MoE checkpoint (gpt-oss) on a GPU without native FP4 (compute capability < 10.0:
  Hopper, Ada, Ampere) runs the experts through the Marlin FP4 kernel ("Your GPU does not have native support
  for FP4 computation ... leveraging the Marlin kernel", marlin_utils_fp4.py). Mxfp4MoEMethod.create_weights
  (vllm/model_executor/layers/quantization/mxfp4.py, 0.10.1) pads for it: the moe marlin kernel needs
  n % 256 == 0 and k % 128 == 0, so the intermediate size per partition is rounded up to a multiple of 128 and
  the hidden size to a multiple of 256; every expert's gate_up (2 x I x H) and down (H x I) blocks and their
  e8m0 scales (one byte per 32) are allocated at the padded sizes. gpt-oss-120b: I 2880 -> 2944, H 2880 ->
  3072, 60.77 GiB in the checkpoint -> 65.90 GiB as loaded; vLLM 0.10.1.1 logged "Model loading took
  65.9651 GiB" on an H100 (github.com/vllm-project/vllm/issues/23278), 0.1% more than the rule.

Other engines, versions and formats keep the checkpoint's bytes here (``as_loaded`` says which it is).
"""

from __future__ import annotations

from dataclasses import replace

from kvbudget.engines.base import version_tuple
from kvbudget.model.spec import ModelSpec
from kvbudget.weights.sources import WeightSize

# vLLM versions whose Mxfp4MoEMethod pads for Marlin on GPUs below SM 10.0: 0.10-0.11 (issue #23278, H100) and
# through 0.19 (gpt-oss-20b on an A100 with vLLM 0.19.0 logged 13.72 GiB; checkpoint 12.82 + the padding 0.85 GiB)
MARLIN_MXFP4 = ((0, 10), (0, 20))
MARLIN_N, MARLIN_K = 256, 128  # moe marlin kernel: n % 256 == 0 and k % 128 == 0 (mxfp4.py create_weights)
MXFP4_BYTES = (17, 32)  # 4 bits + one e8m0 byte per 32 elements = 17/32 B per element


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _int(cfg: dict[str, object], *keys: str) -> int:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def _quant_method(spec: ModelSpec) -> str:
    q = spec.config.get("quantization_config")
    return str(q.get("quant_method", "")).lower() if isinstance(q, dict) else ""


def marlin_mxfp4_padding(spec: ModelSpec, tp: int) -> int:
    """Bytes vLLM's Marlin MXFP4 path adds over the checkpoint, all GPUs together (0 when it does not apply)."""
    cfg = spec.config
    experts = _int(cfg, "num_local_experts", "num_experts")
    hidden = _int(cfg, "hidden_size")
    inter = _int(cfg, "intermediate_size")
    layers = _int(cfg, "num_hidden_layers")
    if not (experts and hidden and inter and layers) or inter % tp:
        return 0
    part = inter // tp
    padded = _round_up(part, MARLIN_K) * _round_up(hidden, MARLIN_N)
    extra_elements = layers * experts * 3 * (padded - part * hidden) * tp  # gate_up 2 x I x H + down H x I
    num, den = MXFP4_BYTES
    return extra_elements * num // den


def as_loaded(
    spec: ModelSpec, weights: WeightSize, *, engine: str, version: str, capability: int | None, tp: int
) -> tuple[WeightSize, str]:
    """The weights as ``engine`` keeps them on the GPU, and which figure it is ("as loaded" or "checkpoint")."""
    low, high = MARLIN_MXFP4
    if (
        engine == "vllm"
        and _quant_method(spec) == "mxfp4"
        and capability is not None
        and capability < 100
        and low <= version_tuple(version)[:2] < high
    ):
        extra = marlin_mxfp4_padding(spec, tp)
        if extra:
            basis = (
                f"{weights.basis}; as loaded by vLLM {version}: + {extra:,} B of Marlin padding of the MXFP4 "
                "experts (intermediate per GPU to a multiple of 128, hidden to 256; mxfp4.py create_weights)"
            )
            return replace(weights, bytes=weights.bytes + extra, basis=basis), "as loaded"
    return weights, "checkpoint"
