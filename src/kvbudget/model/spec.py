"""ModelSpec: one entry per decoder layer, each a tuple of *state primitives*.

A primitive says what a layer keeps per sequence, independent of any engine:

* ``FullAttention``: K and V for every token (``kv_heads`` heads of ``k_dim`` / ``v_dim``).
* ``SlidingWindow``: the same, but only the last ``window`` tokens matter.
* ``ChunkedLocal``: attention inside fixed chunks of ``chunk`` tokens (Llama 4 RoPE layers).
* ``LatentAttention``: multi-head latent attention; a ``kv_lora_rank + rope_dim`` latent per token,
  or, for engines that expand it, per-head K (``qk_nope + rope``) and V (``v_head_dim``).
* ``Recurrent``: a fixed-size per-sequence state (Mamba-1, Mamba-2, gated delta net, Kimi delta
  attention, short convolution).
* ``IndexerKeys``: the key cache of a sparse-attention (DSA) lightning indexer, one ``head_dim`` key
  per token, kept beside the layer's MLA latent (DeepSeek-V3.2, GLM-5).
* ``CrossAttention``: K and V over a fixed-length source (image tokens), independent of text length.
* ``SharedKV``: reuses the cache of an earlier layer; stores nothing itself.

A layer with no primitive holds no state (MLP/MoE-only layers). Falcon-H1 layers hold two.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvbudget.frozen import FrozenRecord

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from typing import Literal

    # The one vocabulary of cache kinds: each primitive's ``kind``, and the kind of every engine group
    # (engines/base.Group) and vLLM bucket. mypy checks every spelling against it. A name for the type checker
    # only (import it under TYPE_CHECKING): the answer's start-up imports no typing.
    CacheKind = Literal[
        "full_attention",
        "sliding_window",
        "chunked_local",
        "latent_attention",
        "recurrent",
        "indexer",
        "cross_attention",
        "shared_kv",
    ]
    RecurrentVariant = Literal["mamba1", "mamba2", "gated_delta_net", "kda", "short_conv"]

# CacheKind's values, in its order (tests/model/test_spec.py checks the two agree).
CACHE_KINDS: tuple[CacheKind, ...] = (
    "full_attention",
    "sliding_window",
    "chunked_local",
    "latent_attention",
    "recurrent",
    "indexer",
    "cross_attention",
    "shared_kv",
)


@dataclass(frozen=True, repr=False, eq=False)
class FullAttention(FrozenRecord):
    """K and V of every token: ``kv_heads`` heads of ``k_dim`` / ``v_dim`` elements."""

    kv_heads: int
    k_dim: int
    v_dim: int
    kind: Literal["full_attention"] = "full_attention"


@dataclass(frozen=True, repr=False, eq=False)
class SlidingWindow(FrozenRecord):
    """Attention over the last ``window`` tokens only: K and V stop growing at the window."""

    kv_heads: int
    k_dim: int
    v_dim: int
    window: int
    kind: Literal["sliding_window"] = "sliding_window"


@dataclass(frozen=True, repr=False, eq=False)
class ChunkedLocal(FrozenRecord):
    """Attention inside fixed chunks of ``chunk`` tokens (Llama 4 RoPE layers)."""

    kv_heads: int
    k_dim: int
    v_dim: int
    chunk: int
    kind: Literal["chunked_local"] = "chunked_local"


@dataclass(frozen=True, repr=False, eq=False)
class LatentAttention(FrozenRecord):
    """Multi-head latent attention: a ``kv_lora_rank + rope_dim`` latent per token, or per-head K and V
    for engines that expand it."""

    kv_lora_rank: int
    rope_dim: int
    num_heads: int
    qk_nope_dim: int
    v_head_dim: int
    kind: Literal["latent_attention"] = "latent_attention"

    @property
    def latent_dim(self) -> int:
        """Elements of the cached latent per token per layer (576 for DeepSeek-V3)."""
        return self.kv_lora_rank + self.rope_dim


# Variants whose state has the gated-delta-net geometry: conv over q, k and v; state (v heads, v dim, k dim).
DELTA_VARIANTS = ("gated_delta_net", "kda")


@dataclass(frozen=True, repr=False, eq=False)
class Recurrent(FrozenRecord):
    """Fixed per-sequence state of one linear-attention / SSM layer.

    Shapes follow vLLM's MambaStateShapeCalculator (mamba_utils.py) at tp=1:

    * mamba1: conv channels ``d_inner``; ssm ``(d_inner, d_state)``.
    * mamba2: conv channels ``d_inner + 2*n_groups*d_state``; ssm ``(num_heads, head_dim, d_state)``.
    * gated_delta_net: conv channels ``2*num_k_heads*head_k_dim + num_v_heads*head_v_dim``;
      ssm ``(num_v_heads, head_v_dim, head_k_dim)``.
    * kda (Kimi delta attention): the gated-delta-net geometry with ``num_k_heads = num_v_heads`` and
      ``head_k_dim = head_v_dim`` (vLLM ``kda_state_shape``: three conv states of ``H*D`` channels and a
      ``(H, D, D)`` state).
    * short_conv (LFM2): conv channels ``d_inner`` (the hidden size) and no SSM state
      (vLLM ``short_conv_state_shape``).

    ``conv_dtype`` / ``ssm_dtype`` of None mean "the model dtype"; a config may pin the SSM state
    (``mamba_ssm_cache_dtype: float32``).
    """

    variant: RecurrentVariant
    conv_kernel: int
    d_inner: int = 0
    d_state: int = 0
    n_groups: int = 0
    num_heads: int = 0
    head_dim: int = 0
    num_k_heads: int = 0
    head_k_dim: int = 0
    num_v_heads: int = 0
    head_v_dim: int = 0
    conv_dtype: str | None = None
    ssm_dtype: str | None = None
    kind: Literal["recurrent"] = "recurrent"

    def conv_channels(self, tp: int = 1) -> int:
        """Channels of the conv state on one tensor-parallel rank."""
        if self.variant in ("mamba1", "short_conv"):
            return self.d_inner // tp
        if self.variant == "mamba2":
            # vLLM mamba2: groups are replicated up to tp when n_groups % tp != 0.
            groups = self.n_groups + (tp - self.n_groups if self.n_groups % tp else 0)
            return (self.d_inner + 2 * groups * self.d_state) // tp
        return (2 * self.num_k_heads * self.head_k_dim + self.num_v_heads * self.head_v_dim) // tp

    def ssm_shape(self, tp: int = 1) -> tuple[int, ...]:
        """Shape of the SSM / recurrent state on one tensor-parallel rank."""
        if self.variant == "mamba1":
            return (self.d_inner // tp, self.d_state)
        if self.variant == "mamba2":
            return (self.num_heads // tp, self.head_dim, self.d_state)
        if self.variant == "short_conv":
            return ()
        return (self.num_v_heads // tp, self.head_v_dim, self.head_k_dim)

    def ssm_elems(self, tp: int = 1) -> int:
        """Values of the SSM / recurrent state on one rank; 0 for a conv-only state."""
        shape = self.ssm_shape(tp)
        out = 1 if shape else 0
        for dim in shape:
            out *= dim
        return out


@dataclass(frozen=True, repr=False, eq=False)
class CrossAttention(FrozenRecord):
    """K and V over a fixed-length source (vision tokens); the length is a cost-time parameter."""

    kv_heads: int
    k_dim: int
    v_dim: int
    kind: Literal["cross_attention"] = "cross_attention"


@dataclass(frozen=True, repr=False, eq=False)
class IndexerKeys(FrozenRecord):
    """Key cache of a sparse-attention (DSA) lightning indexer: one ``head_dim`` key per token.

    It sits beside the layer's latent (or attention) primitive: the indexer scores every cached token
    with these keys and picks the top-k the attention then reads, so the keys grow with the sequence
    like a K cache with one head and no V. Each engine stores them its own way (fp8 + scales, f16, ...).
    """

    head_dim: int
    kind: Literal["indexer"] = "indexer"


@dataclass(frozen=True, repr=False, eq=False)
class MeasuredState(FrozenRecord):
    """Fixed per-sequence state a reference implementation was measured to keep (a derived layout,
    ``model/derive.py``): ``tensors`` are (name, shape of one sequence, dtype), as transformers holds them.
    Only the engines that are that implementation (transformers) or follow it (ideal) size it; the
    serving engines refuse it, since each keeps recurrent state in its own shape and dtype."""

    tensors: tuple[tuple[str, tuple[int, ...], str], ...]
    kind: Literal["recurrent"] = "recurrent"


@dataclass(frozen=True, repr=False, eq=False)
class SharedKV(FrozenRecord):
    """The layer reads the cache of layer ``target`` and allocates nothing."""

    target: int
    kind: Literal["shared_kv"] = "shared_kv"


Primitive = (
    FullAttention
    | SlidingWindow
    | ChunkedLocal
    | LatentAttention
    | Recurrent
    | CrossAttention
    | SharedKV
    | IndexerKeys
    | MeasuredState
)


@dataclass(frozen=True, repr=False, eq=False)
class LayerSpec(FrozenRecord):
    """One decoder layer; ``states`` is empty for layers that keep nothing per sequence."""

    index: int
    states: tuple[Primitive, ...]
    label: str = ""


@dataclass(frozen=True, repr=False, eq=False)
class ModelSpec(FrozenRecord):
    """Everything kvbudget needs to know about a model's per-sequence state, engine-independent."""

    name: str
    model_type: str
    layers: tuple[LayerSpec, ...]
    dtype: str = "bf16"
    max_position_embeddings: int | None = None
    source: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    config: dict[str, object] = field(default_factory=dict, compare=False, repr=False)
    # What a serving engine loads it by: a Hub repo id, a model directory or a .gguf file (serve commands)
    model_id: str | None = field(default=None, compare=False)

    def primitives(self) -> list[tuple[int, Primitive]]:
        """Every (layer index, primitive) pair, in layer order."""
        return [(layer.index, state) for layer in self.layers for state in layer.states]

    def count(self, kind: str) -> int:
        """Number of primitives of one kind."""
        return sum(1 for _, state in self.primitives() if state.kind == kind)
