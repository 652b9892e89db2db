"""Serving precisions for weights: real storage bits per weight, scales included, and which tensors
stay unquantized.

Bits per weight count everything a format stores per group of weights:

* bf16 / fp16: 16. fp8 (e4m3) and int8: 8; their scales are one per tensor, per output channel or
  per 128x128 block (DeepSeek-V3 fp8: 32 bits per 16,384 weights = 0.002 bits) — under 0.01 bits
  per weight at serving sizes, so not counted.
* int4 with group scales, ``g`` weights per group (default 128): symmetric w4a16
  (compressed-tensors ``pack-quantized``): 4 + 16/g (one fp16 scale); GPTQ and AWQ: 4 + 16/g + 4/g
  (fp16 scale + a packed 4-bit zero point per group; AutoGPTQ's format stores qzeros even for
  symmetric quantization). GPTQ's ``g_idx`` (one int32 per input channel, 32/out_features bits per
  weight) is not counted.
* nvfp4: 4 + 8/16 = 4.5 (an fp8 e4m3 scale per 16 values; the fp32 per-tensor scale is not
  counted). mxfp4: 4 + 8/32 = 4.25 (an e8m0 scale per 32 values, OCP Microscaling spec).
* GGUF types: bytes per block x 8 / elements per block, from the ggml block structs
  (ggml/src/ggml-common.h; the same sizes as gguf-py ``GGML_QUANT_SIZES``). A GGUF "Q4_K_M" file
  mixes types per tensor; give the file itself for its exact size.
* ``2bit``: exactly 2 bits, no scales — the seeds' "native 2-bit". Real 2-bit formats add scales
  (IQ2_XXS 2.0625, Q2_K 2.625 bits).

By default the token embeddings, lm_head, norms, routers, biases and SSM vectors stay at bf16
(16 bits), as GPTQ/AWQ/FP8/NVFP4 checkpoints keep them; ``quantize_embeddings`` puts the
embeddings and lm_head at the serving precision too (as llama.cpp does). Bytes are integers:
ceil(params x bits / 8) per tensor group.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from dataclasses import dataclass
from fractions import Fraction

from kvbudget.errors import InputError
from kvbudget.weights.blocks import TensorKind
from kvbudget.weights.params import ParamCount

DEFAULT_GROUP = 128  # GPTQ/AWQ/compressed-tensors default group size

# (bytes per block, elements per block, struct layout) from ggml/src/ggml-common.h block_* structs.
GGUF_BLOCKS: dict[str, tuple[int, int, str]] = {
    "q8_0": (34, 32, "fp16 d + 32 x int8"),
    "q6_k": (210, 256, "ql[128] + qh[64] + int8 scales[16] + fp16 d"),
    "q5_k": (176, 256, "fp16 d, dmin + scales[12] + qh[32] + qs[128]"),
    "q4_k": (144, 256, "fp16 d, dmin + scales[12] + qs[128]"),
    "q3_k": (110, 256, "hmask[32] + qs[64] + scales[12] + fp16 d"),
    "q2_k": (84, 256, "scales[16] + qs[64] + fp16 d, dmin"),
    "iq2_xxs": (66, 256, "fp16 d + uint16 qs[32]"),
    "iq2_xs": (74, 256, "fp16 d + uint16 qs[32] + scales[8]"),
    "iq3_xxs": (98, 256, "fp16 d + qs[96]"),
    "iq4_xs": (136, 256, "fp16 d + uint16 scales_h + scales_l[4] + qs[128]"),
    "q4_0": (18, 32, "fp16 d + qs[16]"),
    "q4_1": (20, 32, "fp16 d, m + qs[16]"),
    "q5_0": (22, 32, "fp16 d + qh[4] + qs[16]"),
    "q5_1": (24, 32, "fp16 d, m + qh[4] + qs[16]"),
}

KEPT_KINDS: frozenset[TensorKind] = frozenset({"norm", "router", "vector", "vision"})
EMBEDDING_KINDS: frozenset[TensorKind] = frozenset({"embedding", "lm_head"})
KEEP_BITS = Fraction(16)  # bf16


@dataclass(frozen=True)
class WeightPrecision:
    """A storage format for quantized weights: ``bits`` per weight, scales included."""

    name: str
    bits: Fraction
    description: str
    group_size: int | None = None

    @property
    def bits_text(self) -> str:
        """Bits per weight as a short exact decimal (4.15625, 6.5625, 16)."""
        return f"{float(self.bits):g}"


def _fixed(name: str, bits: int, description: str) -> WeightPrecision:
    return WeightPrecision(name, Fraction(bits), description)


_FIXED = {
    "fp32": _fixed("fp32", 32, "float32 (unquantized checkpoints saved in full precision)"),
    "bf16": _fixed("bf16", 16, "bfloat16"),
    "fp16": _fixed("fp16", 16, "float16"),
    "fp8": _fixed("fp8", 8, "fp8 e4m3; per-tensor/channel/block scales not counted (<0.01 bit)"),
    "int8": _fixed("int8", 8, "int8 weights; per-channel scales not counted (<0.01 bit)"),
    "2bit": _fixed("2bit", 2, "exactly 2 bits per weight, no scales (the seeds' 'native 2-bit')"),
    "nvfp4": WeightPrecision("nvfp4", Fraction(4) + Fraction(8, 16), "fp4 e2m1 + fp8 scale per 16"),
    "mxfp4": WeightPrecision("mxfp4", Fraction(4) + Fraction(8, 32), "fp4 e2m1 + e8m0 scale per 32"),
}
_ALIASES = {
    "float32": "fp32",
    "f32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "f16": "fp16",
    "half": "fp16",
    "fp8_e4m3": "fp8",
    "e4m3": "fp8",
    "w8a8": "int8",
    "w8a16": "int8",
    "int2": "2bit",
    "2_bit": "2bit",
    "w4a16": "int4",
}
_GROUPED = ("int4", "gptq", "awq")
KNOWN_NAMES = sorted([*_FIXED, *_GROUPED, *GGUF_BLOCKS])
_NUMBER = re.compile(r"^\d+(\.\d+)?$")


def weight_precision(text: str, *, group_size: int = DEFAULT_GROUP, what: str = "--precision") -> WeightPrecision:
    """Resolve a precision name (``bf16``, ``fp8``, ``awq``, ``q4_k``, ``2bit``) or a bit count (``2``, ``4.5``)."""
    key = text.strip().lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    if key in _FIXED:
        return _FIXED[key]
    if key in GGUF_BLOCKS:
        size, elems, layout = GGUF_BLOCKS[key]
        return WeightPrecision(key, Fraction(size * 8, elems), f"GGUF {key.upper()}: {size} B per {elems} ({layout})")
    if key in _GROUPED:
        if group_size < 1:
            raise InputError(f"--group-size: {group_size} must be a positive number of weights")
        if key == "int4":  # compressed-tensors symmetric: one fp16 scale per group
            return WeightPrecision(
                "int4", Fraction(4) + Fraction(16, group_size), f"int4 + fp16 scale per {group_size}", group_size
            )
        return WeightPrecision(
            key,
            Fraction(4) + Fraction(16 + 4, group_size),
            f"{key.upper()} int4 + fp16 scale + 4-bit zero per {group_size}",
            group_size,
        )
    if _NUMBER.match(key):
        bits = Fraction(key)
        if not 0 < bits <= 32:
            raise InputError(f"{what}: {text!r} bits per weight must be above 0 and at most 32")
        return WeightPrecision(f"{float(bits):g}-bit", bits, f"{float(bits):g} bits per weight, as given")
    names = ", ".join(KNOWN_NAMES)
    raise InputError(f"{what}: unknown weight precision {text!r}; choose one of: {names}, or a bit count")


@dataclass(frozen=True)
class WeightGroup:
    """One (component, tensor kind) group at the bits it is stored with."""

    component: str
    kind: TensorKind
    params: int
    bits: Fraction
    quantized: bool
    bytes: int


@dataclass(frozen=True)
class WeightEstimate:
    """Weight bytes of a parameter count at one serving precision (provenance: computed)."""

    model: str
    precision: WeightPrecision
    groups: tuple[WeightGroup, ...]
    quantize_embeddings: bool
    kept_components: tuple[str, ...] = ()

    @property
    def total_bytes(self) -> int:
        return sum(g.bytes for g in self.groups)

    @property
    def unquantized_bytes(self) -> int:
        return sum(g.bytes for g in self.groups if not g.quantized)

    @property
    def unquantized_params(self) -> int:
        return sum(g.params for g in self.groups if not g.quantized)

    def unquantized(self) -> list[str]:
        """What stays at bf16, in words (empty when the precision is bf16/fp16 itself)."""
        if self.precision.bits >= KEEP_BITS:
            return []
        kept = {g.kind for g in self.groups if not g.quantized and g.params}
        words = {
            "embedding": "embeddings",
            "lm_head": "lm_head",
            "norm": "norms",
            "router": "MoE routers",
            "vector": "biases, sinks, conv1d and SSM vectors",
            "vision": "the vision tower",
        }
        out = [text for kind, text in words.items() if kind in kept]
        return out + [f"{c} (kept by request)" for c in self.kept_components]

    @property
    def basis(self) -> str:
        """One line: what was computed and at which bits."""
        quantized = self.total_params - self.unquantized_params
        text = f"computed from the config: {self.total_params:,} parameters"
        if self.precision.bits >= KEEP_BITS:
            return f"{text} at {self.precision.name} ({self.precision.bits_text} bits each)"
        return (
            f"{text}; {quantized:,} at {self.precision.name} ({self.precision.bits_text} bits each), "
            f"{self.unquantized_params:,} kept at bf16 ({', '.join(self.unquantized())})"
        )

    @property
    def total_params(self) -> int:
        return sum(g.params for g in self.groups)


def _bytes(params: int, bits: Fraction) -> int:
    return math.ceil(params * bits / 8)


def estimate_weights(
    count: ParamCount,
    precision: WeightPrecision,
    *,
    quantize_embeddings: bool = False,
    keep_components: Collection[str] = (),
) -> WeightEstimate:
    """Bytes of every tensor group of ``count`` at ``precision``; see the module doc for what stays bf16.

    ``keep_components`` names components to keep at bf16 as well (gpt-oss keeps ``attention``)."""
    known = {c.name for c in count.components()}
    unknown = sorted(set(keep_components) - known)
    if unknown:
        raise InputError(f"--keep: {', '.join(unknown)} not among this model's components: {', '.join(sorted(known))}")
    groups = []
    for p in count.parts:
        kept = p.kind in KEPT_KINDS or p.component in keep_components
        if p.kind in EMBEDDING_KINDS and not quantize_embeddings:
            kept = True
        quantized = not kept and precision.bits < KEEP_BITS
        bits = precision.bits if quantized or precision.bits >= KEEP_BITS else KEEP_BITS
        groups.append(WeightGroup(p.component, p.kind, p.params, bits, quantized, _bytes(p.params, bits)))
    return WeightEstimate(count.model, precision, tuple(groups), quantize_embeddings, tuple(keep_components))
