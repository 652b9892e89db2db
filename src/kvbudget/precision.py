"""Cache element types and their real storage cost.

Every type is described the way the hardware stores it: ``block_bytes`` bytes hold ``block_elems``
consecutive elements of one head vector (a "row"), plus an optional fixed ``row_extra_bytes`` per row
(a per-token-per-head scale). Plain floats are blocks of one element. This one rule covers:

* floats: bf16/fp16 (2 B), fp32 (4 B), fp8 e4m3/e5m2 and int8 (1 B);
* NVFP4: 16 fp4 values (8 B) + one fp8 scale (1 B) = d/2 + d/16 bytes per head
  (vLLM ``nvfp4_kv_cache_full_dim``, vllm/utils/torch_utils.py, newest);
* llama.cpp block quants, 32 elements per block (ggml/src/ggml.c type traits): q8_0 34 B, q5_1 24 B,
  q5_0 22 B, q4_1 20 B, q4_0 and iq4_nl 18 B;
* KIVI-style grouped int4/int2: ``group`` values at ``bits`` each, plus a scale and a zero point in the
  scale dtype per group (asymmetric quantization, as in KIVI and transformers' quanto/HQQ caches);
* vLLM per-token-head int8/fp8 (newest ``CacheDType``): 1 B per element + one fp32 scale per row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvbudget.errors import InputError
from kvbudget.frozen import FrozenRecord


@dataclass(frozen=True, repr=False, eq=False)
class CacheDType(FrozenRecord):
    """One cache element type. ``row_bytes(n)`` is the exact bytes of one head vector of n elements."""

    name: str
    block_elems: int
    block_bytes: int
    row_extra_bytes: int = 0
    description: str = ""

    @property
    def is_float(self) -> bool:
        """True for plain floating-point storage (no block scales): f32, f16, bf16."""
        return self.block_elems == 1 and self.block_bytes >= 2 and self.row_extra_bytes == 0

    @property
    def is_quantized(self) -> bool:
        """True when the type is not a plain 16/32-bit float (fp8, int8, block and grouped quants)."""
        return not self.is_float

    def row_bytes(self, elems: int) -> int:
        """Bytes of one row (one head vector) of ``elems`` elements; the row must fill whole blocks."""
        if elems % self.block_elems:
            raise InputError(
                f"cache dtype {self.name}: a head vector of {elems} elements does not fill whole blocks "
                f"of {self.block_elems}; choose another --kv-dtype"
            )
        return elems // self.block_elems * self.block_bytes + self.row_extra_bytes

    def per_element(self) -> str:
        """Human-readable cost per element, e.g. ``2 B`` or ``34 B per 32 elements``."""
        if self.block_elems == 1 and not self.row_extra_bytes:
            return f"{self.block_bytes} B"
        text = f"{self.block_bytes} B per {self.block_elems} elements"
        if self.row_extra_bytes:
            text += f" + {self.row_extra_bytes} B per head vector"
        return text


def _float(name: str, size: int, description: str) -> CacheDType:
    return CacheDType(name, 1, size, 0, description)


_BASE: dict[str, CacheDType] = {
    "fp32": _float("fp32", 4, "32-bit float"),
    "fp16": _float("fp16", 2, "16-bit float"),
    "bf16": _float("bf16", 2, "bfloat16"),
    "fp8": _float("fp8", 1, "8-bit float (e4m3 by default)"),
    "fp8_e4m3": _float("fp8_e4m3", 1, "8-bit float e4m3"),
    "fp8_e5m2": _float("fp8_e5m2", 1, "8-bit float e5m2"),
    "int8": _float("int8", 1, "8-bit integer, scale folded into the tensor"),
    # vLLM newest CacheDType: int8/fp8 per token-head, fp32 scale per row (kv_cache_interface.py).
    "int8_per_token_head": CacheDType("int8_per_token_head", 1, 1, 4, "int8 + fp32 scale per token-head"),
    "fp8_per_token_head": CacheDType("fp8_per_token_head", 1, 1, 4, "fp8 + fp32 scale per token-head"),
    # vLLM nvfp4_kv_cache_full_dim: d//2 + d//16 bytes (16 fp4 values + 1 fp8 scale per 16).
    "nvfp4": CacheDType("nvfp4", 16, 9, 0, "NVFP4: 16 x 4-bit + fp8 scale per 16"),
    # ggml type traits (ggml/src/ggml.c); every block covers 32 elements.
    "q8_0": CacheDType("q8_0", 32, 34, 0, "llama.cpp q8_0: 32 x int8 + fp16 scale"),
    "q5_1": CacheDType("q5_1", 32, 24, 0, "llama.cpp q5_1"),
    "q5_0": CacheDType("q5_0", 32, 22, 0, "llama.cpp q5_0"),
    "q4_1": CacheDType("q4_1", 32, 20, 0, "llama.cpp q4_1"),
    "q4_0": CacheDType("q4_0", 32, 18, 0, "llama.cpp q4_0: 32 x 4-bit + fp16 scale"),
    "iq4_nl": CacheDType("iq4_nl", 32, 18, 0, "llama.cpp iq4_nl"),
}

_ALIASES = {
    "float32": "fp32",
    "f32": "fp32",
    "float16": "fp16",
    "f16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "e4m3": "fp8_e4m3",
    "e5m2": "fp8_e5m2",
    "float8_e4m3fn": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2",
}

# Compiled on first use, by re's own cache: an answer that reads no such value does not pay for the pattern.
_GROUPED_PATTERN = r"^int(4|2)(?::g?(\d+))?(?::(fp16|bf16|fp32))?$"
DEFAULT_GROUP = 64  # transformers QuantizedCache q_group_size default (cache_utils.py)

KNOWN_NAMES = sorted([*_BASE, "int4[:gG[:fp16|bf16|fp32]]", "int2[:gG[:...]]", "auto"])


def parse_cache_dtype(text: str, *, model_dtype: str = "bf16", what: str = "--kv-dtype") -> CacheDType:
    """Resolve a cache dtype name. ``auto`` means the model's own dtype (as vLLM and SGLang do).

    Grouped integer types are written ``int4``, ``int4:g32`` or ``int2:g128:fp32`` (group size and the
    dtype of the per-group scale and zero point).
    """
    key = text.strip().lower().replace("-", "_")
    if key == "auto":
        return parse_cache_dtype(model_dtype, what=what)
    key = _ALIASES.get(key, key)
    if key in _BASE:
        return _BASE[key]
    grouped = re.match(_GROUPED_PATTERN, key)
    if grouped is not None:
        bits = int(grouped.group(1))
        group = int(grouped.group(2) or DEFAULT_GROUP)
        scale = grouped.group(3) or "fp16"
        if group < 1 or (group * bits) % 8:
            raise InputError(f"{what}: group size {group} for int{bits} must pack into whole bytes")
        scale_bytes = _BASE[scale].block_bytes
        return CacheDType(
            f"int{bits}:g{group}:{scale}",
            group,
            group * bits // 8 + 2 * scale_bytes,
            0,
            f"KIVI-style int{bits}, group {group}, {scale} scale + zero point per group",
        )
    raise InputError(f"{what}: unknown cache dtype {text!r}; choose one of: " + ", ".join(KNOWN_NAMES))
