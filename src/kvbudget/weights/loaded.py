"""Weights as the engine loads them, from the checkpoint's bytes: what the engine keeps on the GPU.

A checkpoint's bytes are what the files hold; an engine may repack them for its kernels and keep more. The rules,
read from the engine's wheels and held to real logs on Hopper and Ampere (the SM 12.x case is read, not logged):

* vLLM 0.10-0.19, an MXFP4 MoE checkpoint (gpt-oss) on a GPU without FlashInfer's native FP4 path (Hopper until
  0.11, Ada, Ampere, and the SM 12.x Blackwell GPUs: compute capability outside 10.x) runs the experts through
  the Marlin FP4 kernel ("Your GPU does not have native support for FP4 computation ... leveraging the Marlin
  kernel", marlin_utils_fp4.py). Mxfp4MoEMethod.create_weights
  (vllm/model_executor/layers/quantization/mxfp4.py, 0.10.1) pads for it: the moe marlin kernel needs
  n % 256 == 0 and k % 128 == 0, so the intermediate size per partition is rounded up to a multiple of 128 and
  the hidden size to a multiple of 256; every expert's gate_up (2 x I x H) and down (H x I) blocks and their
  e8m0 scales (one byte per 32) are allocated at the padded sizes. gpt-oss-120b: I 2880 -> 2944, H 2880 ->
  3072, 60.77 GiB in the checkpoint -> 65.90 GiB as loaded; vLLM 0.10.1.1 logged "Model loading took
  65.9651 GiB" on an H100 (github.com/vllm-project/vllm/issues/23278), 0.1% more than the rule.
* vLLM 0.12-0.19 on Hopper (compute capability 9.x) runs the same experts through the Triton backend instead
  ("Using Triton backend", mxfp4.py get_mxfp4_backend: triton_kernels is vendored in vllm/third_party from 0.12,
  whose torch 2.9 passes the >= 2.8.0 check; FlashInfer's SM90 MXFP4 path is off unless
  VLLM_USE_FLASHINFER_MOE_MXFP4_BF16=1). Read in the 0.12.0, 0.13.0 and 0.14.1 wheels: create_weights pads the
  intermediate size per partition to a multiple of 64 only; process_weights_after_loading casts the biases to fp32
  and swizzles the weights and scales for the Hopper matmul (triton_kernels HopperMXValueLayout: the two dims
  rounded to 16 and 32; HopperMXScaleLayout with 8 warps: the non-MX dim rounded to 256, the MX dim to 2) into new
  tensors, freeing the old weights (``del layer.w13_weight``) but not the old ``w13_weight_scale`` /
  ``w2_weight_scale`` parameters, so the e8m0 scales are held twice. gpt-oss-120b: + 3.53 GiB, 64.30 GiB as loaded;
  vLLM 0.14.1 logged "Model loading took 64.38 GiB" on an H100 (github.com/vllm-project/vllm/issues/33155).
  Ampere and Ada (no triton_kernels support below SM 9.0) stay on Marlin, and so do the SM 12.x Blackwell GPUs
  (RTX 5090, RTX PRO 6000, GB10): only SM 10.x takes FlashInfer's native FP4 path.

* vLLM, a DeepSeek-V2/V3-style MLA model (DeepSeek-V2, V3, R1, Kimi K2) at tensor parallelism: the latent
  down-projections are whole on every rank (deepseek_v2.py, read in the 0.9.2 and 0.12.0 wheels: q_a_proj and
  kv_a_proj_with_mqa are ReplicatedLinear, in 0.12 one fused_qkv_a_proj with disable_tp=True), and so is each MoE
  layer's router (``self.gate = ReplicatedLinear(hidden, n_routed_experts, quant_config=None)``, in the model
  dtype). Spread evenly over the ranks they would be 1/tp each; vLLM keeps tp copies: DeepSeek-R1 at TP 8,
  61 x 7,168 x (1,536 + 512 + 64) fp8 bytes + 58 x 7,168 x 256 bf16 routers = 1.14 GB, 0.93 GiB more per GPU.

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
# vLLM versions that run MXFP4 experts through the Triton backend on SM 9.x: 0.12 (triton_kernels vendored, torch
# 2.9) .. 0.14.1 read (issue #33155's log); kept to the Marlin rule's end, 0.19, for want of a later reading
TRITON_MXFP4 = ((0, 12), (0, 20))
# SM 10.x (B200, B300, GB200, GB300) runs MXFP4 natively (FlashInfer); the SM 12.x consumer and workstation
# Blackwell GPUs and the GB10 (SM 12.1) are outside both the FlashInfer checks (is_device_capability(100) in 0.10.1 and
# 0.11.0, is_device_capability_family(100) in 0.14.1) and the Triton range (9.0 <= capability < 11.0), so they take
# Marlin like Ampere and Ada (mxfp4.py _should_use_marlin / get_mxfp4_backend of those wheels)
NATIVE_FP4 = (100, 110)
TRITON_CAPABILITY = (90, 110)  # get_mxfp4_backend: triton_kernels only for (9, 0) <= capability < (11, 0)
TRITON_PAD_I = 64  # create_weights, the non-Marlin CUDA branch: round_up(intermediate_size_per_partition, 64)
HOPPER_VALUE_ALIGN = (16, 32)  # HopperMXValueLayout (mma v3): pack = 1x2x4x2x1 rows, 4x2x4x1x1 columns
HOPPER_SCALE_ALIGN = (2 * 8 * 2 * 8, 2)  # HopperMXScaleLayout, num_warps 8: SWIZZLE_ALIGN_M, SWIZZLE_ALIGN_K


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _int(cfg: dict[str, object], *keys: str) -> int:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def _quant_method(spec: ModelSpec) -> str:
    from kvbudget.weights.checkpoint import quantization_config

    q = quantization_config(spec.config)
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


def triton_mxfp4_extra(spec: ModelSpec, tp: int) -> int:
    """Bytes vLLM 0.12-0.19's Triton MXFP4 path keeps over the checkpoint on Hopper, all GPUs together (0 when it
    does not apply): per layer and GPU, the swizzled values and scales (new tensors, the old scales kept), the fp32
    biases, less the checkpoint's share (mxfp4.py create_weights / process_weights_after_loading, mxfp4_utils.py
    _swizzle_mxfp4)."""
    cfg = spec.config
    experts = _int(cfg, "num_local_experts", "num_experts")
    hidden = _int(cfg, "hidden_size")
    inter = _int(cfg, "intermediate_size")
    layers = _int(cfg, "num_hidden_layers")
    if not (experts and hidden and inter and layers) or inter % tp or hidden % 32:
        return 0
    part = _round_up(inter // tp, TRITON_PAD_I)
    rows, cols = HOPPER_VALUE_ALIGN
    values = _round_up(2 * part, rows) * _round_up(hidden // 2, cols) + _round_up(hidden, rows) * _round_up(
        part // 2, cols
    )
    scales = 2 * part * (hidden // 32) + hidden * (part // 32)  # the checkpoint-shaped scale parameters, kept
    m, k = HOPPER_SCALE_ALIGN
    swizzled = _round_up(2 * part, m) * _round_up(hidden // 32, k) + _round_up(hidden, m) * _round_up(part // 32, k)
    bias = (2 * part + hidden) * 4  # w13_bias and w2_bias cast to fp32 (the w2 bias is whole on every GPU)
    num, den = MXFP4_BYTES
    checkpoint = 3 * inter * hidden * num // den + (2 * inter + hidden) * 2  # the layer's experts, all GPUs
    loaded = experts * (values + scales + swizzled + bias) * tp
    return max(layers * (loaded - experts * checkpoint), 0)


MLA_REPLICATED_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2")  # vLLM DeepseekV2/V3ForCausalLM (deepseek_v2.py)
MODEL_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def mla_replicated_bytes(spec: ModelSpec) -> int:
    """Bytes vLLM keeps whole on every tensor-parallel rank of a DeepSeek-V2/V3-style MLA model (0 otherwise): the
    latent down-projections of every layer (hidden x (q_lora_rank + kv_lora_rank + qk_rope_head_dim); fp8 in an
    fp8 checkpoint, their 128 x 128 block scales left out, 4 B per 16,384 weights) and the router of every MoE layer
    (hidden x n_routed_experts in the model dtype). A checkpoint in another quantization is not ruled on (0)."""
    cfg = spec.config
    if spec.model_type not in MLA_REPLICATED_TYPES:
        return 0
    hidden, kv_lora, layers = _int(cfg, "hidden_size"), _int(cfg, "kv_lora_rank"), _int(cfg, "num_hidden_layers")
    quant = _quant_method(spec)
    dtype = MODEL_DTYPE_BYTES.get(spec.dtype, 0)
    if not (hidden and kv_lora and layers and dtype) or quant not in ("", "fp8"):
        return 0
    projections = layers * hidden * (_int(cfg, "q_lora_rank") + kv_lora + _int(cfg, "qk_rope_head_dim"))
    experts = _int(cfg, "n_routed_experts")
    first_dense = cfg.get("first_k_dense_replace", 0)
    moe_layers = max(0, layers - (first_dense if isinstance(first_dense, int) else 0)) if experts else 0
    return projections * (1 if quant == "fp8" else dtype) + moe_layers * hidden * experts * dtype


def _mxfp4_rule(version: str, capability: int) -> str:
    """Which MXFP4 MoE backend vLLM ``version`` runs on a GPU of this compute capability ("" when no rule)."""
    v = version_tuple(version)[:2]
    if NATIVE_FP4[0] <= capability < NATIVE_FP4[1]:
        return ""  # native FP4 (datacenter Blackwell, FlashInfer's backends): the checkpoint's layout
    if TRITON_MXFP4[0] <= v < TRITON_MXFP4[1] and TRITON_CAPABILITY[0] <= capability < TRITON_CAPABILITY[1]:
        return "triton"
    return "marlin" if MARLIN_MXFP4[0] <= v < MARLIN_MXFP4[1] else ""


def as_loaded(
    spec: ModelSpec, weights: WeightSize, *, engine: str, version: str, capability: int | None, tp: int
) -> tuple[WeightSize, str]:
    """The weights as ``engine`` keeps them on the GPU, and which figure it is ("as loaded" or "checkpoint")."""
    if engine == "vllm" and tp > 1 and (replicated := mla_replicated_bytes(spec)):
        # tp copies where an even split counts one: (total - R) / tp + R per GPU = (total + R x (tp - 1)) / tp
        extra = replicated * (tp - 1)
        basis = (
            f"{weights.basis}; as loaded by vLLM at TP {tp}: + {extra:,} B, the MLA down-projections and MoE routers "
            f"({replicated:,} B) kept whole on every rank (deepseek_v2.py ReplicatedLinear)"
        )
        return replace(weights, bytes=weights.bytes + extra, basis=basis), "as loaded"
    rule = _mxfp4_rule(version, capability) if capability is not None else ""
    if engine != "vllm" or _quant_method(spec) != "mxfp4" or not rule:
        return weights, "checkpoint"
    if rule == "triton":
        extra = triton_mxfp4_extra(spec, tp)
        what = (
            "of the Triton MXFP4 backend on Hopper (scales swizzled into new tensors beside the loaded ones, biases "
            "in fp32; mxfp4.py)"
        )
    else:
        extra = marlin_mxfp4_padding(spec, tp)
        what = (
            "of Marlin padding of the MXFP4 experts (intermediate per GPU to a multiple of 128, hidden to 256; "
            "mxfp4.py create_weights)"
        )
    if extra:
        basis = f"{weights.basis}; as loaded by vLLM {version}: + {extra:,} B {what}"
        return replace(weights, bytes=weights.bytes + extra, basis=basis), "as loaded"
    return weights, "checkpoint"
