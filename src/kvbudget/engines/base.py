"""What every engine produces: a Layout of layer groups, each with its exact byte rule.

An engine turns a ModelSpec's primitives into *groups* of identical layers. For each group it says:

* ``slot_bytes``: bytes one token slot costs in one layer on one GPU (all KV heads of that rank);
* ``slots``: how many token slots one layer allocates for S sequences of N tokens (blocks, windows,
  padding, streams: this is where engines differ);
* ``state_bytes``: fixed bytes per sequence per layer (recurrent state, cross-attention source);
* ``alloc_layers``: how many layers the engine allocates for the group (vLLM pads groups).

Bytes of a group for S sequences of N tokens = alloc_layers * (slot_bytes * slots(N, S) + state_bytes * S).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from kvbudget.frozen import FrozenRecord
from kvbudget.precision import CacheDType

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from typing import Literal

    from kvbudget.model.spec import CacheKind

    MlaStorage = Literal["latent", "latent+v", "expanded"]  # for the type checker only: no typing at start-up


def version_tuple(version: str) -> tuple[int, ...]:
    """'0.25.1' -> (0, 25, 1); non-numeric parts are dropped ('b7800' -> (7800,))."""
    return tuple(int(p) for p in re.findall(r"\d+", version))


def cdiv(a: int, b: int) -> int:
    """Ceiling division for non-negative integers."""
    return -(-a // b)


def pad(x: int, multiple: int) -> int:
    """Round ``x`` up to a multiple of ``multiple``."""
    return cdiv(x, multiple) * multiple


@dataclass(frozen=True, repr=False, eq=False)
class Slots(FrozenRecord):
    """Token slots one layer allocates for (tokens N, sequences S), with the rule in words."""

    text: str
    fn: Callable[[int, int], int] = field(compare=False)

    def __call__(self, tokens: int, sequences: int) -> int:
        return self.fn(tokens, sequences)


def exact_slots() -> Slots:
    return Slots("N x S", lambda n, s: n * s)


def capped_slots(cap: int, why: str) -> Slots:
    return Slots(f"min(N, {cap:,}) x S  ({why})", lambda n, s: min(n, cap) * s)


NO_SLOTS = Slots("0", lambda n, s: 0)


@dataclass(frozen=True, repr=False, eq=False)
class Group(FrozenRecord):
    """A set of layers that cost the same on this engine."""

    kind: CacheKind
    label: str
    layers: int
    slot_bytes: int
    slot_formula: str
    slots: Slots
    grows: bool
    state_bytes: int = 0
    state_formula: str = ""
    alloc_layers: int = 0
    layer_indices: tuple[int, ...] = ()

    @property
    def allocated_layers(self) -> int:
        return self.alloc_layers or self.layers

    @property
    def per_token_bytes(self) -> int:
        """Bytes every further token adds to this group once past any cap (0 for capped groups)."""
        return self.allocated_layers * self.slot_bytes if self.grows else 0

    def token_bytes(self, tokens: int, sequences: int) -> int:
        return self.allocated_layers * self.slot_bytes * self.slots(tokens, sequences)

    def fixed_bytes(self, sequences: int) -> int:
        return self.allocated_layers * self.state_bytes * sequences

    def bytes_at(self, tokens: int, sequences: int = 1) -> int:
        """Bytes the group holds for ``sequences`` sequences of ``tokens`` tokens each, on one GPU."""
        return self.token_bytes(tokens, sequences) + self.fixed_bytes(sequences)


@dataclass(frozen=True, repr=False, eq=False)
class Layout(FrozenRecord):
    """One model on one engine, cache precision and tensor-parallel size: every group's byte rule."""

    engine: str
    version: str
    k_dtype: CacheDType
    v_dtype: CacheDType
    tp: int
    groups: tuple[Group, ...]
    block_size: int | None = None
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes each further token adds once past every window, per GPU."""
        return sum(g.per_token_bytes for g in self.groups)

    @property
    def state_bytes(self) -> int:
        """Fixed bytes per sequence (recurrent state, cross-attention source), per GPU."""
        return sum(g.fixed_bytes(1) for g in self.groups)

    def sequence_bytes(self, tokens: int) -> int:
        """Bytes for one sequence of ``tokens`` tokens, windows and fixed state included, per GPU."""
        return self.total_bytes(tokens, 1)

    def total_bytes(self, tokens: int, sequences: int) -> int:
        """Bytes for ``sequences`` sequences of ``tokens`` tokens each, per GPU."""
        return sum(g.bytes_at(tokens, sequences) for g in self.groups)


@dataclass(frozen=True, repr=False, eq=False)
class EngineOptions(FrozenRecord):
    """Serving settings that change the cache layout. None means "the engine's default"."""

    block_size: int | None = None
    max_num_batched_tokens: int | None = None
    image_tokens: int = 6404  # Llama 3.2 Vision: one image, 4 tiles x 1601 patches (560 px / 14 px + CLS)
    mla_storage: MlaStorage | None = None
    swa_full: bool = False  # llama.cpp --swa-full
    n_ubatch: int | None = None  # llama.cpp -ub / Ollama num_batch; None: the engine's default (llama.cpp 512)
    flash_attn: bool = True  # llama.cpp -fa (auto turns it on where supported)
    kv_unified: bool = False  # llama.cpp --kv-unified
    disable_hybrid_kv_cache_manager: bool = False  # vLLM
    chunked_hybrid: bool | None = None  # vLLM VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE; None: its default
    enforce_eager: bool = False  # no CUDA graphs (vLLM --enforce-eager, SGLang --disable-cuda-graph): none reserved
    flashinfer_sampler: bool | None = None  # vLLM VLLM_USE_FLASHINFER_SAMPLER (FlashInfer installed); None: default
    attn_backend: str | None = None  # TensorRT-LLM attn_backend ("trtllm", "flashinfer"); None: its default TRTLLM
    prefix_caching: bool | None = None  # vLLM --[no-]enable-prefix-caching, SGLang radix cache; None: the default
    max_batch_size: int | None = None  # TensorRT-LLM max_batch_size (recurrent slots reserved); None: 2,048
    gpu_capability: int | None = None  # compute capability x 10 (90 = Hopper) of the plan's GPU; None: SM90
    max_running_requests: int | None = None  # SGLang --max-running-requests; None: derived from the pool
    max_num_seqs: int | None = None  # vLLM --max-num-seqs; None: vLLM's default for the GPU (vllm_memory.max_num_seqs)
    dp_attention: int | None = None  # SGLang --enable-dp-attention --dp N (attention data-parallel size); None: off
    n_gpu_layers: int | None = None  # llama.cpp -ngl: layers on the GPU, -1 auto (fit), -2 all; None: all
    tensor_split: tuple[float, ...] = ()  # llama.cpp --tensor-split (split-mode layer): one proportion per GPU
    pipeline_parallel: int = 1  # the plan's --pp: vLLM keeps pp + 1 batches in flight (engines/vllm_batches.py)
