"""The records the engine contract's planning hooks take and return (``engines/contract.py``): the share of a GPU an
engine leaves an instance, one planned deployment as an engine sees it, what it prints at start-up, the settings
of its serve command, and what its start-up log measured.

Only planning needs them: a one-answer ``cost`` or ``table`` loads the contract without this module (creating a
frozen dataclass is most of a millisecond at start-up on Python 3.11; ``tests/test_startup.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvbudget.engines.base import EngineOptions, Layout
from kvbudget.engines.contract import rope_factor, yarn_override
from kvbudget.model.spec import ModelSpec
from kvbudget.precision import CacheDType
from kvbudget.provenance import Label

if TYPE_CHECKING:  # a plain record, imported for annotations only (kvbudget.measure imports engines)
    from kvbudget.measure.logs.record import EngineLog, Figure


@dataclass(frozen=True)
class Share:
    """The part of one GPU an engine lets this instance use, and why."""

    usable_bytes: int
    basis: str
    fraction: float | None = None
    reads: tuple[str, ...] = ()  # the plan's figures besides the GPU's total it is sized from ("weights", "overhead")


@dataclass(frozen=True)
class Deployment:
    """One planned instance as an engine sees it: one GPU of the first pipeline stage."""

    spec: ModelSpec  # the first stage's layers (the whole model when pp == 1)
    layout: Layout  # that stage on this engine
    k: CacheDType
    v: CacheDType
    tp: int
    pp: int
    context: int
    options: EngineOptions  # as derived for the plan's GPU (derived_options)
    pool_bytes: int
    sessions: int  # sessions at ``context`` by bytes alone (worst case reserved)


@dataclass(frozen=True)
class RunningLimit:
    """The most requests one instance's scheduler runs at once (``EngineRules.running_limit``): the rest wait."""

    requests: int
    basis: str  # where it comes from, in words, with the engine's source
    provenance: Label  # "given" (the option as set), "exact" (the engine's default), "computed" (derived by its rule)


@dataclass(frozen=True)
class MemoryShape:
    """What an engine's memory rule reads of one GPU (``usable_share``): its total bytes, the utilization asked
    (None: the engine's default), the parallel layout, whether the model keeps a latent (MLA), the weights and the
    runtime overhead per GPU, and the engine settings."""

    total_bytes: int
    utilization: float | None
    tp: int = 1
    pp: int = 1
    mla: bool = False
    weights: int = 0
    overhead: int = 0
    options: EngineOptions = field(default_factory=EngineOptions)
    # nvidia-smi's memory.total where the catalog knows the card (SGLang derives its defaults from it, not from the
    # CUDA total); None for a bare --gpu-memory
    smi_total_bytes: int | None = None
    # the config's architectures, and its vision tower's (num_hidden_layers, hidden_size) as the config gives them
    # (None without a vision_config): SGLang keeps back more of a multimodal model's GPU (sglang_memory.vlm_factor)
    architectures: tuple[str, ...] = ()
    vision: tuple[int | None, int | None] | None = None


@dataclass(frozen=True)
class PoolShape:
    """What an engine needs to count the blocks and tokens of a KV pool: the model as served, its cache dtypes,
    tensor parallelism, the engine settings as derived for the GPU, and the context cap."""

    spec: ModelSpec
    k: CacheDType
    v: CacheDType
    tp: int
    options: EngineOptions
    context: int


@dataclass(frozen=True)
class StartUp:
    """What the engine prints at start-up for a deployment, and the token budget its scheduler allocates."""

    lines: tuple[str, ...]
    token_budget: int
    basis: str
    refused: bool = False  # the engine stops before serving (the first line says why)


@dataclass(frozen=True)
class ServeSettings:
    """A plan's settings, for the engine to spell as its own serving command."""

    model: str
    context: int
    sessions: int
    k: CacheDType
    v: CacheDType
    tp: int
    pp: int
    fraction: float | None  # the memory fraction the plan used, when the engine has one
    kv_pool_bytes: int
    overhead_measured: bool
    prefix: int
    options: EngineOptions = field(default_factory=EngineOptions)  # as the user set them
    native_context: int | None = None  # the model's trained window (max_position_embeddings), if it states one
    quantize: str | None = None  # a weight precision the checkpoint does not ship in (--weights), to apply at load

    @property
    def past_native(self) -> bool:
        return self.native_context is not None and self.context > self.native_context

    @property
    def rope_factor(self) -> float:
        """The YaRN factor that stretches the trained window to the cap (1 decimal, rounded up)."""
        assert self.native_context
        return rope_factor(self.context, self.native_context)

    @property
    def yarn_override(self) -> str:
        """The config override (JSON) that puts YaRN rope scaling over the trained window: vLLM --hf-overrides,
        SGLang --json-model-override-args."""
        assert self.native_context
        return yarn_override(self.context, self.native_context)


@dataclass(frozen=True)
class Measured:
    """A byte count an engine measured, with the log lines it came from."""

    bytes: int
    basis: str


@dataclass(frozen=True)
class LoggedMemory:
    """What an engine's start-up log says about the GPU's total and the runtime overhead, in its own terms."""

    gpu_memory: Measured | None = None
    overhead: Measured | None = None
    kv_pool: Figure | None = None  # the KV memory per GPU the engine sized its pool from, as printed


def log_line(log: EngineLog, fig: Figure) -> str:
    return f"{log.path}:{fig.line} '{fig.text}'"


def logged_sum(log: EngineLog, names: tuple[str, ...]) -> Measured | None:
    """The sum of the log's figures ``names`` (those it has), citing each line; None when it has none."""
    figs = [(n, log.measured[n]) for n in names if n in log.measured]
    if not figs:
        return None
    return Measured(sum(int(f.value) for _, f in figs), " + ".join(f"{n} {log_line(log, f)}" for n, f in figs))
