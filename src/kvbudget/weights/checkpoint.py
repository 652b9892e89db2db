"""The precision a checkpoint really ships its weights in, from its config's ``quantization_config``.

A config without one ships in its ``torch_dtype``. With one (transformers' quantizer configs, as the serving
engines read them):

* ``fp8`` / ``fbgemm_fp8`` (DeepSeek-V3, Kimi-K2, MiniMax-M2: e4m3 with 128x128 block scales): fp8;
* ``mxfp4`` (gpt-oss): fp4 e2m1 + an e8m0 scale per 32;
* ``awq`` / ``gptq``: ``bits`` (``w_bit``) with ``group_size`` (``q_group_size``) scales and zero points;
* ``compressed-tensors``: the weights of its first config group — float 8 bits: fp8; float 4 bits in groups of
  16: nvfp4; int 8: int8; int 4: symmetric int4 with one fp16 scale per group;
* ``modelopt`` (``quant_algo`` FP8, NVFP4, W4A16_AWQ);
* ``bitsandbytes``: 8-bit (int8), or 4-bit NF4 with an fp32 absmax per 64 weights (4.5 bits), 4.127 bits with
  double quantization (8-bit absmax + an fp32 scale per 256 blocks).

Modules the config keeps unquantized (``modules_to_not_convert``, compressed-tensors ``ignore``) that match
attention stay at bf16 (gpt-oss keeps its attention); embeddings, lm_head, norms and routers stay at bf16 as
every one of these formats keeps them. An unknown method is refused with its name, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from kvbudget.errors import ConfigError
from kvbudget.model.spec import ModelSpec
from kvbudget.weights.precision import DEFAULT_GROUP, WeightPrecision, weight_precision


@dataclass(frozen=True)
class CheckpointPrecision:
    precision: WeightPrecision
    keep: tuple[str, ...]  # components kept at bf16 besides embeddings, lm_head, norms and routers
    basis: str


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def _keep(patterns: object) -> tuple[str, ...]:
    """Components named by a config's unquantized-module patterns (only attention is a separate component).

    A pattern names attention when it says ``attn`` or ``attention`` and is not a norm: Qwen3 MoE FP8 checkpoints list
    every ``post_attention_layernorm`` (a norm, bf16 anyway) and quantize the attention projections."""
    if not isinstance(patterns, list):
        return ()
    names = [str(p) for p in patterns]
    return ("attention",) if any(("attn" in p or "attention" in p) and "norm" not in p for p in names) else ()


def _compressed_tensors(q: dict[str, object], where: str) -> tuple[WeightPrecision, tuple[str, ...], str]:
    groups = q.get("config_groups")
    first = next(iter(groups.values()), None) if isinstance(groups, dict) and groups else None
    weights = first.get("weights") if isinstance(first, dict) else None
    if not isinstance(weights, dict):
        raise ConfigError(f"{where}: quantization_config (compressed-tensors) has no config_groups[...].weights")
    bits, kind = _int(weights.get("num_bits"), 0), str(weights.get("type", "int"))
    group = _int(weights.get("group_size"), DEFAULT_GROUP)
    keep = _keep(q.get("ignore"))
    if kind == "float" and bits == 8:
        return weight_precision("fp8"), keep, "compressed-tensors float 8-bit weights"
    if kind == "float" and bits == 4:
        return weight_precision("nvfp4"), keep, f"compressed-tensors float 4-bit weights in groups of {group}"
    if kind == "int" and bits == 8:
        return weight_precision("int8"), keep, "compressed-tensors int8 weights"
    if kind == "int" and bits == 4:
        return weight_precision("int4", group_size=group), keep, f"compressed-tensors int4, groups of {group}"
    raise ConfigError(f"{where}: compressed-tensors {kind} {bits}-bit weights are not a format kvbudget sizes")


def _bitsandbytes(q: dict[str, object]) -> tuple[WeightPrecision, tuple[str, ...], str]:
    if q.get("load_in_8bit"):
        return weight_precision("int8"), (), "bitsandbytes LLM.int8"
    double = bool(q.get("bnb_4bit_use_double_quant"))
    # NF4: 4 bits + an fp32 absmax per 64; double quantization stores it in 8 bits + an fp32 per 256 blocks
    bits = Fraction(4) + (Fraction(8, 64) + Fraction(32, 64 * 256) if double else Fraction(32, 64))
    what = "NF4 + 8-bit absmax per 64 (double quant)" if double else "NF4 + fp32 absmax per 64"
    return WeightPrecision("nf4", bits, what), (), f"bitsandbytes 4-bit {what}"


# Where a config names its quantization: ``quantization_config``, else ``compression_config`` (llm-compressor's first
# FP8 checkpoints, e.g. Meta-Llama-3.1-8B-Instruct-FP8), as vLLM reads them (vllm/config/model.py
# ModelConfig._parse_quant_hf_config: "compressed-tensors uses a compression_config key"; model_loader/weight_utils.py
# get_quant_config). A multimodal config keeps them beside its text_config (model/families read_spec carries them).
QUANTIZATION_KEYS = ("quantization_config", "compression_config")


def quantization_config(config: dict[str, object]) -> object:
    """The config's quantization section (None: an unquantized checkpoint), under either key vLLM reads."""
    return next((config[key] for key in QUANTIZATION_KEYS if config.get(key) is not None), None)


def checkpoint_precision(spec: ModelSpec) -> CheckpointPrecision | None:
    """The precision the checkpoint's ``quantization_config`` names, or None for an unquantized checkpoint."""
    q = quantization_config(spec.config)
    if q is None:
        return None
    where = f"{spec.name}: quantization_config"
    if not isinstance(q, dict):
        raise ConfigError(f"{where} must be an object")
    method = str(q.get("quant_method", "")).lower().replace("_", "-")
    keep = _keep(q.get("modules_to_not_convert"))
    if method in ("fp8", "fbgemm-fp8"):
        block = q.get("weight_block_size")
        what = f"fp8 {q.get('fmt', 'e4m3')}" + (
            f", {block[0]}x{block[1]} block scales" if isinstance(block, list) else ""
        )
        precision, basis = weight_precision("fp8"), what
    elif method == "mxfp4":
        precision, basis = weight_precision("mxfp4"), "mxfp4 (fp4 e2m1 + e8m0 scale per 32)"
    elif method in ("awq", "gptq"):
        bits = _int(q.get("bits", q.get("w_bit")), 4)
        group = _int(q.get("group_size", q.get("q_group_size")), DEFAULT_GROUP)
        if bits == 8:
            precision = weight_precision("int8")
        elif bits == 4:
            precision = weight_precision(method, group_size=group)
        else:
            raise ConfigError(f"{where}: {method} with {bits}-bit weights is not a format kvbudget sizes")
        basis = f"{method.upper()} {bits}-bit, groups of {group}"
    elif method == "compressed-tensors":
        precision, keep, basis = _compressed_tensors(q, where)
    elif method == "modelopt":
        algo = str(q.get("quant_algo", "")).upper()
        names = {"FP8": "fp8", "NVFP4": "nvfp4", "W4A16-AWQ": "awq", "W4A16_AWQ": "awq"}
        if algo not in names:
            raise ConfigError(f"{where}: modelopt quant_algo {algo!r} is not a format kvbudget sizes")
        precision, basis = weight_precision(names[algo]), f"modelopt {algo}"
    elif method == "bitsandbytes":
        precision, keep, basis = _bitsandbytes(q)
    else:
        raise ConfigError(
            f"{where}: quant_method {method!r} is not one kvbudget sizes; give the serving precision with --weights "
            "or the measured size with --weights-size"
        )
    return CheckpointPrecision(precision, keep, f"the checkpoint's quantization_config: {basis}")
