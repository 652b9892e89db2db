"""Reverse reading of a vendor claim: from a memory budget and an advertised context, the per-token
KV cost and the attention geometry they imply, compared with a dense transformer of the same size.

The arithmetic (all integers, bytes):

* weights    = ceil(params x weight_bits / 8)  (or a given --weights-size)
* kv_budget  = memory - weights - overhead     (or a given --kv-budget)
* per token  = kv_budget // context
* layers[d]  = per_token // (2 x kv_heads x row_bytes_d(head_dim)), for each cache dtype d, where
  row_bytes is the real storage of one head vector (precision.CacheDType: bf16 2 B/element,
  fp8/int8 1 B, int4 = KIVI-style groups of 64 with an fp16 scale and zero point, 72 B at 128).

Dense equivalent: the catalog's dense full-attention models (every layer full attention, no
experts, parameters counted from their configs) form the reference set, and the one nearest in
log-parameter count stands in for "a dense transformer of this size"; its bf16 per-token cost is
the comparison. Real dense models of one size differ in geometry, so a named real model is more
honest than a scaling rule: 74B picks Qwen2.5-72B (80 layers x 8 KV heads x 128 = 327,680
B/token, the seed's own 70B-class example).

The seed (Nemotron 3.5 Bolt 74B-A9B-24GB, 256K context), reproduced in its own units:

* 74e9 params x 2 bits / 8 = 18.5e9 B: "18.5 GB" is decimal.
* 24 GB - 18.5 GB = 5.5 GB. The seed's "something under 4 GB" for the cache needs runtime overhead
  of at least 1.5 GB: ``--memory 24GB --overhead 1.5GB`` leaves exactly 4.0e9 B, the seed's upper
  bound. Any larger overhead leaves less.
* "4 GB / 262,144 tokens ~ 16 KB/token" only holds in binary units: 4 GiB / 2^18 = 16,384 B
  exactly, hence L = 16,384 / 512 = 32 at int8 and 16,384 / 1,024 = 16 at bf16 (2 KV heads x 128).
  Read in decimal, 4.0e9 // 262,144 = 15,258 B/token, which gives 29 layers at int8 and 14 at bf16.
  Both readings are reproducible: ``--kv-budget 4GiB`` gives the seed's 16,384 / 32 / 16, and the
  decimal chain gives 15,258 / 29 / 14. Either way the implied cost is about 20x below a dense 74B
  transformer, which is the seed's conclusion.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache

from kvbudget.errors import InputError, KvBudgetError
from kvbudget.precision import parse_cache_dtype
from kvbudget.units import format_bytes, in_range, parse_decimal, parse_memory, shown

SCHEMA_VERSION = 1
DEFAULT_CACHE_DTYPES = ("bf16", "fp8", "int8", "int4")

_PARAMS = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)(?:[eE]\+?([0-9]{1,2}))?\s*([kKmMbBgGtT]?)\s*$", re.ASCII)
MAX_PARAMS = 10**15  # a thousand times the largest published model
_ZERO = re.compile(r"^\s*0+(\.0*)?\s*([kKmMgGtT]i?)?[bB]?\s*$")
_PARAM_SCALE = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}  # model-card convention


def parse_params(text: str, *, what: str = "--params") -> int:
    """A parameter count: ``74B``, ``74e9``, ``8.03B``, ``500M``, ``1.5T`` (decimal multiples)."""
    if text.strip().startswith("-"):
        raise InputError(f"{what}: {text!r} is negative; give a parameter count such as 74B")
    match = _PARAMS.match(text) if len(text) <= 64 else None
    if match is None:
        raise InputError(f"{what}: cannot read {shown(text)} as a parameter count; write e.g. 74B, 74e9 or 8.03B")
    num, den = parse_decimal(match.group(1), what=what, example="74B")  # exact: no float, no 28-digit Decimal
    num *= 10 ** int(match.group(2) or 0) * _PARAM_SCALE[match.group(3).lower()]
    if num % den:
        raise InputError(f"{what}: {shown(text)} is not a whole positive number of parameters")
    return in_range(num // den, what, 1, MAX_PARAMS, "parameters")


def parse_size(text: str, *, what: str, allow_zero: bool = False) -> int:
    """A memory size with units (``24GB``, ``4GiB``); negative sizes get their own message.
    ``allow_zero`` accepts ``0`` (an overhead may be nil; a memory or budget may not)."""
    if text.strip().startswith("-"):
        raise InputError(f"{what}: {text!r} is negative; give a positive size such as 24GB")
    if allow_zero and _ZERO.match(text):
        return 0
    return parse_memory(text, what=what)


@dataclass(frozen=True)
class DenseReference:
    """A real dense full-attention model standing in for 'a dense transformer of this size'."""

    name: str
    params: int
    layers: int
    kv_heads: int
    head_dim: int
    bytes_per_token: int  # bf16 K and V over every layer


@lru_cache(maxsize=1)
def dense_references() -> tuple[DenseReference, ...]:
    """The catalog's dense full-attention models, with their bf16 per-token KV cost."""
    from kvbudget.model import catalog
    from kvbudget.model.families import read_spec
    from kvbudget.model.spec import FullAttention
    from kvbudget.weights.params import count_params

    out = []
    for entry in catalog.entries():
        spec = read_spec(entry.config, name=entry.name, source=entry.source)
        states = [state for _, state in spec.primitives()]
        if not states or not all(isinstance(s, FullAttention) for s in states) or len(states) != len(spec.layers):
            continue
        try:
            count = count_params(spec)
        except KvBudgetError:  # a catalog entry whose config lacks a field the count needs
            continue
        if count.active != count.total:  # experts: not dense
            continue
        first = states[0]
        assert isinstance(first, FullAttention)
        per_token = sum(s.kv_heads * (s.k_dim + s.v_dim) * 2 for s in states if isinstance(s, FullAttention))
        out.append(DenseReference(entry.name, count.total, len(states), first.kv_heads, first.k_dim, per_token))
    return tuple(out)


def nearest_dense(params: int) -> DenseReference:
    """The dense reference nearest in log-parameter count (ties: fewer parameters, then name)."""
    return min(dense_references(), key=lambda r: (abs(math.log(r.params / params)), r.params, r.name))


@dataclass(frozen=True)
class Inference:
    """What a memory budget and a context imply; every byte count is an integer."""

    context: int
    kv_budget_bytes: int
    implied_bytes_per_token: int
    kv_heads: int
    head_dim: int
    geometry_basis: str
    layer_bytes: dict[str, int]  # bytes per token of one attention layer, per cache dtype
    implied_attention_layers: dict[str, int]
    memory_bytes: int | None = None
    memory_basis: str = ""
    params: int | None = None
    weight_bits: Fraction | None = None
    weights_bytes: int | None = None
    weights_basis: str = ""
    overhead_bytes: int = 0
    dense: DenseReference | None = None
    arithmetic: tuple[str, ...] = field(default=())

    @property
    def dense_ratio(self) -> float | None:
        """Dense bf16 per-token cost divided by the implied cost (how far below dense the claim sits)."""
        if self.dense is None:
            return None
        return self.dense.bytes_per_token / max(self.implied_bytes_per_token, 1)

    @property
    def verdict(self) -> str:
        ratio = self.dense_ratio
        if ratio is None or self.dense is None:
            return "no dense comparison: give --params to compare with a dense transformer of that size"
        dense = f"a dense transformer of this size ({self.dense.name}: {self.dense.bytes_per_token:,} B/token at bf16)"
        if ratio <= 1:
            return f"the budget covers {dense} at bf16: the claim needs no special attention design"
        if ratio <= 2:
            return f"implied per-token cost is {ratio:.1f}x below {dense}: it fits with an 8-bit KV cache"
        if ratio <= 4:
            return (
                f"implied per-token cost is {ratio:.1f}x below {dense}: it needs a 4-bit KV cache "
                "or fewer attention layers — check which"
            )
        return (
            f"implied per-token cost is {ratio:.1f}x below {dense}: a hybrid or aggressive attention variant "
            "— go and find out which"
        )

    def to_json(self) -> dict[str, object]:
        """The versioned JSON contract of ``kvbudget infer --json``."""
        return {
            "schema_version": SCHEMA_VERSION,
            "memory_bytes": self.memory_bytes,
            "memory_basis": self.memory_basis,
            "params": self.params,
            "weight_bits": None if self.weight_bits is None else float(self.weight_bits),
            "weights_bytes": self.weights_bytes,
            "weights_basis": self.weights_basis,
            "overhead_bytes": self.overhead_bytes,
            "context": self.context,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "geometry_basis": self.geometry_basis,
            "kv_budget_bytes": self.kv_budget_bytes,
            "implied_bytes_per_token": self.implied_bytes_per_token,
            "attention_layer_bytes_per_token": dict(self.layer_bytes),
            "implied_attention_layers": dict(self.implied_attention_layers),
            "dense_equivalent": None if self.dense is None else vars(self.dense),
            "dense_equivalent_bytes_per_token": None if self.dense is None else self.dense.bytes_per_token,
            "dense_equivalent_bytes_at_context": None
            if self.dense is None
            else self.dense.bytes_per_token * self.context,
            "ratio_dense_to_implied": None if self.dense_ratio is None else round(self.dense_ratio, 3),
            "verdict": self.verdict,
            "arithmetic": list(self.arithmetic),
        }


def _both(value: int) -> str:
    return f"{value:,} B ({format_bytes(value, 'si')}, {format_bytes(value, 'iec')})"


def infer(
    *,
    context: int,
    memory: int | None = None,
    memory_basis: str = "given",
    params: int | None = None,
    weight_bits: Fraction | None = None,
    weights_bytes: int | None = None,
    weights_basis: str = "",
    overhead: int = 0,
    kv_budget: int | None = None,
    kv_heads: int | None = None,
    head_dim: int | None = None,
    cache_dtypes: tuple[str, ...] = DEFAULT_CACHE_DTYPES,
) -> Inference:
    """Reverse-read a (memory, context) claim; see the module doc for every step."""
    lines: list[str] = []
    if weights_bytes is None and params is not None and weight_bits is not None:
        weights_bytes = math.ceil(params * weight_bits / 8)
        weights_basis = weights_basis or f"{params:,} params x {float(weight_bits):g} bits / 8"
    if weights_bytes is not None:
        lines.append(f"weights   = {weights_basis} = {_both(weights_bytes)}")
    if kv_budget is not None:
        if memory is not None:
            raise InputError("--kv-budget: give either --kv-budget or --memory/--gpu, not both")
        lines.append(f"kv budget = {_both(kv_budget)} (given)")
    else:
        if memory is None or weights_bytes is None:
            raise InputError(
                "--memory: give --memory (or --gpu) with --params and --weight-bits (or --weights-size), or give "
                "--kv-budget"
            )
        kv_budget = memory - weights_bytes - overhead
        if kv_budget <= 0:
            raise InputError(
                f"weights {format_bytes(weights_bytes, 'si')} + overhead {format_bytes(overhead, 'si')} exceed the "
                f"memory {format_bytes(memory, 'si')} by {format_bytes(-kv_budget, 'si')}; nothing is left for the "
                "KV cache"
            )
        lines.append(
            f"kv budget = {memory:,} ({memory_basis}) - {weights_bytes:,} (weights) - {overhead:,} (overhead) "
            f"= {_both(kv_budget)}"
        )
    per_token = kv_budget // context
    lines.append(f"per token = {kv_budget:,} // {context:,} tokens = {per_token:,} B/token")
    dense = nearest_dense(params) if params is not None else None
    if kv_heads is None or head_dim is None:
        if dense is None:
            raise InputError(
                "--kv-heads: give --kv-heads and --head-dim, or --params so a dense reference supplies them"
            )
        kv_heads, head_dim = kv_heads or dense.kv_heads, head_dim or dense.head_dim
        geometry = f"KV heads and head_dim not given: taken from the dense reference {dense.name}"
    else:
        geometry = "given"
    layer_bytes: dict[str, int] = {}
    layers: dict[str, int] = {}
    for name in cache_dtypes:
        dtype = parse_cache_dtype(name, what="--cache-dtypes")
        layer_bytes[name] = 2 * kv_heads * dtype.row_bytes(head_dim)
        layers[name] = per_token // layer_bytes[name]
        lines.append(
            f"layers    = {per_token:,} // (2 x {kv_heads} KV heads x {dtype.row_bytes(head_dim)} B per head vector "
            f"[{dtype.name}, head_dim {head_dim}]) = {layers[name]} at {name}"
        )
    if dense is not None:
        lines.append(
            f"dense     = {dense.name} ({dense.params:,} params, nearest dense catalog model): {dense.layers} layers "
            f"x 2 x {dense.kv_heads} x {dense.head_dim} x 2 B = {dense.bytes_per_token:,} B/token at bf16; "
            f"{_both(dense.bytes_per_token * context)} at {context:,} tokens"
        )
    return Inference(
        context=context,
        kv_budget_bytes=kv_budget,
        implied_bytes_per_token=per_token,
        kv_heads=kv_heads,
        head_dim=head_dim,
        geometry_basis=geometry,
        layer_bytes=layer_bytes,
        implied_attention_layers=layers,
        memory_bytes=memory,
        memory_basis=memory_basis if memory is not None else "",
        params=params,
        weight_bits=weight_bits,
        weights_bytes=weights_bytes,
        weights_basis=weights_basis,
        overhead_bytes=overhead,
        dense=dense,
        arithmetic=tuple(lines),
    )
