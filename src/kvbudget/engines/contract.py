"""The engine contract: every rule an engine has, in one typed class per engine.

An engine module (``engines/<name>.py``) defines ``class Rules(EngineRules)``, bound to one version of
the engine. The planner (``plan/``) asks it, and nothing else, for:

* the cache layout (``layout``) and the parallel sizes it accepts (``check_parallel``);
* the share of a GPU it lets the instance use (``usable_share``), its default batch (``batched_tokens``),
  the settings it derives from the GPU (``derived_options``) and the runtime overhead (``overhead``);
* how many prompt tokens sessions share (``shared_prefix``);
* the sessions it really serves from a pool (``sessions``), the requests its scheduler runs at once
  (``running_limit``) and the lines it prints at start-up (``start_up``);
* the command that serves a plan (``serve_command``), and cheaper cache dtypes in its own spelling;
* which of its start-up log's figures stand for the GPU total and the overhead (``logged_memory``).

Defaults are the plain-memory behaviour (the whole card, no blocks, nothing shared but the prefix); an
engine overrides what it does differently. Adding an engine is adding its module: the registry in
``engines/__init__`` finds ``Rules`` by module name. The records the planning hooks take and return
(``Share``, ``Deployment``, ``StartUp``, ``ServeSettings``, ``LoggedMemory``) are in ``engines/records.py``.
"""

from __future__ import annotations

from kvbudget.errors import InputError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import ClassVar, Literal

    # The planning records (engines/records.py) and the overhead model load when a planning hook runs, not with
    # the contract: a one-answer cost asks an engine only for its layout (tests/test_startup.py).
    from kvbudget.engines.base import EngineOptions, Layout
    from kvbudget.engines.metrics import EngineMetrics
    from kvbudget.engines.overhead import Overhead, Site
    from kvbudget.engines.records import (
        Deployment,
        LoggedMemory,
        MemoryShape,
        PoolShape,
        RunningLimit,
        ServeSettings,
        Share,
        StartUp,
    )
    from kvbudget.measure.logs.record import EngineLog  # a plain record (kvbudget.measure imports engines)
    from kvbudget.model.spec import ModelSpec
    from kvbudget.precision import CacheDType
    from kvbudget.weights.sources import WeightSize

DEFAULT_BATCHED_TOKENS = 8192  # no engine default: the figure the overhead heuristic profiles


def rope_factor(context: int, native: int) -> float:
    """The YaRN factor that stretches a ``native``-token trained window to ``context`` (1 decimal, rounded up)."""
    return -(-context * 10 // native) / 10


def yarn_override(context: int, native: int) -> str:
    """The config.json fragment (JSON) that puts YaRN rope scaling over the trained window."""
    return (
        f'{{"rope_scaling": {{"rope_type": "yarn", "factor": {rope_factor(context, native)}, '
        f'"original_max_position_embeddings": {native}}}}}'
    )


if TYPE_CHECKING:  # for the type checker only: no typing at start-up
    SimPolicy = Literal["reserve", "paged", "watermark"]  # kvbudget simulate --policy
    SimPause = Literal["hold", "evictable"]  # kvbudget simulate --pause


class EngineRules:
    """One engine at one version. Subclasses set the class attributes and override what differs."""

    name: ClassVar[str]
    title: ClassVar[str]  # as the engine calls itself ("vLLM")
    default_version: ClassVar[str]
    order: ClassVar[int] = 100  # position in tables and listings
    aliases: ClassVar[tuple[str, ...]] = ()
    below: ClassVar[Mapping[str, str]] = {}  # "name<major" -> the newest release below it
    server: ClassVar[bool] = False  # a serving engine: it has a serve command and is offered as an alternative
    parallel: ClassVar[bool] = True  # tensor / pipeline parallel plans are modelled
    divides_heads: ClassVar[bool] = False  # the tensor-parallel size must divide the attention heads
    memory_fraction: ClassVar[str | None] = None  # the setting --utilization stands for; None: it has none
    cheaper_kv_dtypes: ClassVar[tuple[str, ...]] = ()  # levers, in kvbudget's dtype vocabulary
    concurrency_flag: ClassVar[str | None] = None  # the flag that would cap running sessions (left unset)
    running_option: ClassVar[str | None] = None  # kvbudget's option for the engine's own running limit, if it has one
    # it places whole layers on the GPU or the CPU and over GPUs itself (llama.cpp -ngl, --tensor-split)
    places_layers: ClassVar[bool] = False
    # its own flag for running without CUDA graphs (kvbudget's --enforce-eager): vLLM --enforce-eager, SGLang
    # --disable-cuda-graph; None: kvbudget models no such switch for it and refuses the option
    eager_flag: ClassVar[str | None] = None
    # it reads --flashinfer-sampler (vLLM: which top-k/top-p sampler its dummy run takes)
    reads_flashinfer_sampler: ClassVar[bool] = False
    # it reads --attn-backend (TensorRT-LLM's attn_backend: FlashInfer's workspace)
    reads_attn_backend: ClassVar[bool] = False
    quantizes_at_load: ClassVar[tuple[str, ...]] = ()  # weight precisions it quantizes a 16-bit checkpoint to
    logs_version: ClassVar[bool] = False  # its start-up log names a release kvbudget's rules are keyed by
    # the simulator's memory policy and tool-pause handling that match the engine (kvbudget simulate's defaults)
    sim_policy: ClassVar[SimPolicy] = "paged"
    sim_pause: ClassVar[SimPause] = "hold"
    sim_basis: ClassVar[str] = "blocks allocated as sessions grow; a paused session keeps its blocks"
    # the KV pool is sized from the memory free after the engine's profile; False: the engine allocates the cache
    # cells it is given whatever is free (llama.cpp's -c), so a start-up log's pool cannot be solved for
    pool_from_free_memory: ClassVar[bool] = True
    # its budget subtracts everything the device reports used (cudaMemGetInfo) beyond what torch holds, so on a
    # unified-memory GPU what the host holds is taken from the pool (a warning names it; the plan cannot know it)
    counts_host_on_unified_memory: ClassVar[bool] = False
    # whom it preempts when a running request's next block cannot be had (simulate/policies.py VICTIMS)
    sim_victim: ClassVar[str] = "newest"

    def __init__(self, version: str) -> None:
        self.version = version

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}".strip()

    # --- what a start-up log prints ---

    def printed_capacity(
        self, shape: PoolShape, pool_bytes: int, token_budget: Callable[[], int], generation: str | None
    ) -> dict[str, int]:
        """The capacity figures the engine's start-up log prints for a KV pool of ``pool_bytes`` bytes per GPU
        (``token_budget()``: the tokens the plan's rules give that pool): by default its tokens."""
        return {"kv_tokens": token_budget() if pool_bytes > 0 else 0}

    # --- the cache ---

    def layout(self, spec: ModelSpec, k: CacheDType, v: CacheDType, tp: int, options: EngineOptions) -> Layout:
        raise NotImplementedError

    def check_parallel(self, spec: ModelSpec, tp: int, pp: int) -> None:
        """Refuse parallel sizes the engine refuses (or kvbudget does not model for it)."""
        if not self.parallel and tp * pp > 1:
            raise InputError(
                f"--engine {self.name}: tensor/pipeline parallel plans are not modelled for this "
                "engine; plan one GPU and use --gpus for replicas"
            )
        self.check_tp(spec, tp)

    def check_tp(self, spec: ModelSpec, tp: int) -> None:
        """vLLM and SGLang refuse a tensor-parallel size that does not divide the query heads
        (vLLM ModelConfig.verify_with_parallel_config; SGLang ModelConfig: num_attention_heads % tp_size)."""
        if tp <= 1 or not self.divides_heads:
            return
        heads = spec.config.get("num_attention_heads")
        if isinstance(heads, int) and not isinstance(heads, bool) and heads > 0 and heads % tp:
            raise InputError(
                f"--tp {tp}: {self.name} needs the tensor-parallel size to divide the {heads} attention heads of "
                f"{spec.name}; use a divisor of {heads}"
            )

    def check_options(self, options: EngineOptions) -> None:
        """Refuse a running limit that is another engine's option (``--max-num-seqs`` is vLLM's), and each switch
        with an engine that does not read it: llama.cpp's layer placement (``--n-gpu-layers``, ``--tensor-split``),
        running without CUDA graphs (vLLM, SGLang), vLLM's ``--flashinfer-sampler``, TensorRT-LLM's
        ``--attn-backend``."""
        if not self.places_layers and (options.n_gpu_layers is not None or options.tensor_split):
            given = "--n-gpu-layers" if options.n_gpu_layers is not None else "--tensor-split"
            raise InputError(
                f"{given}: llama.cpp's layer placement, not {self.title}'s; use --engine llamacpp, or drop it "
                "(the other engines keep every layer on the GPU; --tp/--pp split them)"
            )
        if options.enforce_eager and self.eager_flag is None:
            raise InputError(
                f"--enforce-eager: no CUDA graphs (vLLM --enforce-eager, SGLang --disable-cuda-graph), not a switch "
                f"kvbudget models for {self.title}; use --engine vllm or sglang, or drop it"
            )
        if options.attn_backend is not None and not self.reads_attn_backend:
            raise InputError(
                f"--attn-backend: TensorRT-LLM's attn_backend, not {self.title}'s; use --engine trtllm, or drop it"
            )
        if options.flashinfer_sampler is not None and not self.reads_flashinfer_sampler:
            raise InputError(
                f"--flashinfer-sampler: vLLM's sampler switch (VLLM_USE_FLASHINFER_SAMPLER), not {self.title}'s; use "
                "--engine vllm, or drop it"
            )
        if options.max_num_seqs is None or self.running_option == "--max-num-seqs":
            return
        own = (
            f"give {self.title}'s own {self.running_option}"
            if self.running_option
            else f"{self.title} has no running limit kvbudget models; drop it"
        )
        raise InputError(f"--max-num-seqs {options.max_num_seqs}: vLLM's running limit, not {self.title}'s; {own}")

    def served_dtype(self, spec: ModelSpec, capability: int | None) -> tuple[str, str]:
        """(dtype, why) the engine runs a checkpoint saved in ``spec.dtype`` in: its weights, and its cache with
        --kv-dtype auto. ``why`` is empty when it keeps the checkpoint's dtype."""
        return spec.dtype, ""

    # --- memory ---

    def usable_share(self, m: MemoryShape) -> Share:
        """The bytes of one GPU the engine's memory rule leaves this instance for weights, overhead and KV (the
        plan's KV pool is this less ``weights`` and ``overhead``, both per GPU)."""
        from kvbudget.engines.records import Share

        return Share(m.total_bytes, "the whole card (no engine fraction)")

    def batched_tokens(
        self, total_bytes: int, gpu_label: str, options: EngineOptions, context: int = 0
    ) -> tuple[int, str]:
        """Tokens of the engine's profiling / prefill batch when the user sets none, and why."""
        return DEFAULT_BATCHED_TOKENS, f"{DEFAULT_BATCHED_TOKENS:,} tokens (no engine default)"

    def derived_options(self, options: EngineOptions, batched: int, capability: int | None) -> EngineOptions:
        """The settings the engine derives from the plan's GPU when the user sets none."""
        return options

    def loaded_weights(self, spec: ModelSpec, weights: WeightSize, model_ref: str, precision: str | None) -> WeightSize:
        """The weights figure as the engine keeps it on the GPU (default: the figure as given)."""
        return weights

    def overhead(self, spec: ModelSpec, site: Site) -> Overhead:
        from kvbudget.engines.overhead import activation_overhead

        return activation_overhead(
            spec, tp=site.tp, batched=site.batched, batched_basis=site.batched_basis, graphs=False
        )

    # --- sessions ---

    def shared_prefix(self, prefix: int, block: int | None, unified: bool = False) -> tuple[int, str]:
        """Tokens of a ``prefix``-token common prefix that sessions hold once, and the engine's rule."""
        return prefix, f"{self.name}: the whole prefix is shared"

    def sessions(self, d: Deployment, warnings: list[str]) -> int:
        """Sessions of ``d.context`` tokens the engine serves from ``d.pool_bytes``."""
        return d.sessions

    def running_limit(self, d: Deployment, gpu_memory: int, gpu_label: str) -> RunningLimit | None:
        """The most requests one instance of ``d`` runs at once by its scheduler's own limit, not its memory, and
        where that limit comes from; None: no such limit kvbudget models (its pool or its slots bound it). The
        plan's sessions (``sessions``), ``kvbudget speed``'s batch and the simulator's admission all read it."""
        return None

    def start_up(self, d: Deployment) -> StartUp:
        from kvbudget.engines.records import StartUp

        per_token = d.layout.kv_bytes_per_token
        if per_token:
            return StartUp((), d.pool_bytes // per_token, f"KV pool / {per_token:,} B per token")
        return StartUp((), d.sessions * d.context, "sessions x cap (no growing cache)")

    # --- what it measured ---

    def logged_memory(self, log: EngineLog) -> LoggedMemory:
        """The GPU total and overhead its start-up log measured, as this engine's planner subtracts them."""
        from kvbudget.engines.records import LoggedMemory

        return LoggedMemory()

    # --- serving ---

    def serve_command(self, s: ServeSettings) -> tuple[str, ...] | None:
        """The command line that serves the plan, as arguments; None for engines without a server."""
        return None

    def serve_note(self, s: ServeSettings) -> str | None:
        """A step the serve command needs first that no flag of the engine performs (shown as a shell comment)."""
        return None

    def served_cap(self, spec: ModelSpec, context: int) -> int:
        """The cap the engine actually gives a session asked ``context`` tokens (an engine that clamps a cap past the
        trained window says so here); the asked cap by default."""
        return context

    def alert_metrics(self) -> EngineMetrics | None:
        """The engine's own Prometheus metrics a plan's alerting rules watch (engines/metrics.py); None where it exports
        none kvbudget ties to."""
        return None

    def past_window(self, context: int, native: int) -> str:
        """What this engine needs to serve ``context`` tokens past the model's ``native`` trained window (its
        override switches and the rope scaling), or why it cannot; said wherever a cap passes the window."""
        return (
            f"serving engines refuse it unless the model length is overridden and rope scaling is set over the "
            f"trained window (YaRN factor {rope_factor(context, native)}: {yarn_override(context, native)}); "
            "--engine vllm, sglang, trtllm, llamacpp or ollama names that engine's switches"
        )
