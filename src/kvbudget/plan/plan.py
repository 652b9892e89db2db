"""The capacity plan: per-GPU ledger → KV pool → sessions at a cap, as the engine itself would size it.

total memory → the engine's usable share → minus weights (per GPU: total / (tp x pp)) → minus
runtime overhead (measured, or a labelled heuristic range) → the KV pool → sessions reserved for
the worst case, the largest cap for N sessions, the token budget the scheduler allocates, and the
engine's own start-up numbers reproduced from the same inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from kvbudget.engines import EngineRef, engine_names, rules_class
from kvbudget.engines.base import EngineOptions, cdiv
from kvbudget.engines.capability import compute_capability
from kvbudget.engines.evidence import layout_label
from kvbudget.engines.llamacpp_offload import AUTO
from kvbudget.engines.overhead import Overhead, Site, assumed_dims, measured_overhead
from kvbudget.engines.records import Deployment, MemoryShape, RunningLimit, Share, StartUp
from kvbudget.errors import InputError
from kvbudget.model.architectures import architecture_of
from kvbudget.model.spec import LatentAttention, ModelSpec
from kvbudget.plan import gpu_layers
from kvbudget.plan.capacity import StagedLayout, max_context_for, sessions_at, stage_specs, staged_layout
from kvbudget.plan.edge import edge_warning
from kvbudget.plan.ledger import LedgerLine
from kvbudget.plan.sharing import PrefixSharing, prefix_sharing
from kvbudget.precision import CacheDType
from kvbudget.provenance import Label, derived
from kvbudget.units import a_or_an, counted_verb, format_bytes, format_tokens
from kvbudget.weights.checkpoint import quantization_config
from kvbudget.weights.sources import WeightSize

if TYPE_CHECKING:
    from kvbudget.plan.alerts import AlertRules
    from kvbudget.plan.gpu_layers import LayerSplit
    from kvbudget.plan.offload import Offload
    from kvbudget.plan.reproduce import LogCheck
    from kvbudget.plan.speeds import PlanSpeeds

SCHEMA_VERSION = 1
GiB = 2**30


@dataclass(frozen=True)
class PlanInputs:
    spec: ModelSpec
    engine: EngineRef
    k: CacheDType
    v: CacheDType
    gpu_memory_bytes: int
    gpu_label: str
    weights: WeightSize
    context: int
    gpus: int = 1
    tp: int = 1
    pp: int = 1
    overhead: int | None = None
    utilization: float | None = None
    sessions: int | None = None
    prefix: int = 0
    options: EngineOptions = field(default_factory=EngineOptions)
    gpu_memory_basis: str | None = None  # where a catalog or logged GPU total comes from
    gpu_memory_provenance: Label | None = None
    overhead_basis: str | None = None  # set when the overhead was measured by the engine (plan --from-log)
    gpu_id: str | None = None  # the GPU catalog id (None for a bare --gpu-memory)
    weights_precision: str | None = None  # --weights when it asks for a precision other than the checkpoint's
    overhead_provenance: Label | None = None  # set when plan --from-log took it as the remainder (reproduce.py)
    log_check: LogCheck | None = None  # plan --from-log: the log's KV figures beside the plan's (plan.reproduce)

    @property
    def kv_dtype_label(self) -> str:
        return self.k.name if self.k == self.v else f"{self.k.name}/{self.v.name}"


@dataclass(frozen=True)
class CapSessions:
    """Sessions of one deployment at one cap."""

    cap: int
    sessions: int  # per replica
    total_sessions: int
    per_session_bytes: int
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    inputs: PlanInputs
    layout: StagedLayout
    share: Share
    weights_per_gpu: int
    overhead: Overhead
    kv_pool_bytes: int
    per_session_bytes: int
    sessions: int
    replicas: int
    token_budget: int
    token_budget_basis: str
    max_context_for_sessions: int | None
    statement: str
    engine_lines: tuple[str, ...]
    warnings: tuple[str, ...]
    prefix: PrefixSharing | None
    options: EngineOptions = field(default_factory=EngineOptions)  # as the engine derived them for the GPU
    offload: Offload | None = None  # the offload tier, when the request gives its memory (plan/build.py)
    alerts: AlertRules | None = None  # the alerting rules, when the request asks (plan/alerts.py)
    speeds: PlanSpeeds | None = None  # a load test's measured speeds at the plan (plan/speeds.py, --speed-from)
    layer_split: LayerSplit | None = None  # llama.cpp --n-gpu-layers / --tensor-split: each device (plan/gpu_layers.py)
    engine_refused: bool = False  # the engine's own start-up check refuses (vLLM: admission), whatever the sessions

    @property
    def total_sessions(self) -> int:
        return self.sessions * self.replicas

    def to_dict(self) -> dict[str, object]:
        """The ``kvbudget plan --json`` document."""
        from kvbudget.plan.report import plan_json

        return plan_json(self, self.offload)

    def largest_cap(self, sessions: int = 1) -> int:
        """The largest cap at which the engine serves ``sessions`` sessions on this deployment (0: none)."""
        top = max_context_for(self.layout, self.kv_pool_bytes, sessions, self.inputs.spec.max_position_embeddings)
        lo, hi = 0, top
        while lo < hi:  # the bytes bound the cap; the engine's own rules (pools, admission) may lower it
            mid = (lo + hi + 1) // 2
            if self.at_cap(mid).sessions >= sessions:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def at_cap(self, cap: int) -> CapSessions:
        """The same deployment at another context cap: the pool, overhead and layout do not depend on the cap,
        so only the engine's session count (and its start-up check) is evaluated again."""
        warnings: list[str] = []
        sessions, _ = _capacity(self.inputs, self.layout, self.options, self.kv_pool_bytes, cap, warnings)
        return CapSessions(cap, sessions, sessions * self.replicas, self.layout.sequence_bytes(cap), tuple(warnings))

    def running_limit(self) -> RunningLimit | None:
        """The engine's own limit on the requests one replica runs at once (its scheduler's, not its pool's), and
        where it comes from; None: none modelled (engines/contract.py ``running_limit``). ``kvbudget speed`` caps
        its batch with it and the simulator its admission."""
        i = self.inputs
        stage = stage_specs(i.spec, i.pp)[0]
        d = Deployment(
            stage, self.layout.first, i.k, i.v, i.tp, i.pp, i.context, self.options, self.kv_pool_bytes, self.sessions
        )
        return i.engine.rules.running_limit(d, i.gpu_memory_bytes, i.gpu_label)

    @property
    def gpu_memory_provenance(self) -> Label:
        i = self.inputs
        return i.gpu_memory_provenance or ("given" if i.gpu_label == "given" else "measured")

    @property
    def weights_provenance(self) -> Label:
        return self.layer_split.weights.provenance if self.layer_split else self.inputs.weights.provenance

    @property
    def usable_provenance(self) -> Label:
        """The GPU's total (and the weights and overhead where the engine's share is sized from them) by the
        engine's exact rule: the weakest of those labels (kvbudget.provenance.derived)."""
        read = {"weights": self.weights_provenance, "overhead": self.overhead.provenance}
        return derived(self.gpu_memory_provenance, *(read[r] for r in self.share.reads))

    @property
    def ledger(self) -> tuple[LedgerLine, ...]:
        """The first GPU's lines; with a llama.cpp layer split, every other device's after them."""
        more = self.layer_split.ledger(self.inputs.context, self.sessions) if self.layer_split else ()
        return self._first_gpu_ledger() + more

    def _first_gpu_ledger(self) -> tuple[LedgerLine, ...]:
        i = self.inputs
        w = i.weights
        weights_basis = w.basis + (f"; / {i.tp * i.pp} GPUs (tp x pp)" if i.tp * i.pp > 1 else "")
        if self.layer_split:
            first = self.layer_split.gpus[0]
            weights_basis = self.layer_split.weights_basis(first)
        return (
            LedgerLine(
                "GPU memory",
                i.gpu_memory_bytes,
                self.gpu_memory_provenance,
                i.gpu_memory_basis
                or (f"{i.gpu_label}: bytes the driver reports" if i.gpu_label != "given" else "--gpu-memory"),
            ),
            LedgerLine("usable by the engine", self.share.usable_bytes, self.usable_provenance, self.share.basis),
            LedgerLine(
                "weights",
                self.weights_per_gpu,
                self.weights_provenance,
                weights_basis,
            ),
            LedgerLine(
                "runtime overhead",
                self.overhead.bytes,
                self.overhead.provenance,
                self.overhead.basis,
                self.overhead.low,
                self.overhead.high,
            ),
            LedgerLine(
                "KV pool",
                self.kv_pool_bytes,
                derived(self.usable_provenance, self.weights_provenance, self.overhead.provenance),
                "usable - weights - overhead" + (f"; the log's pool: {i.log_check.pool_basis}" if i.log_check else ""),
            ),
            LedgerLine(
                "one session at the cap",
                self.per_session_bytes,
                _layout_provenance(i),
                f"{i.engine.label} layout, {i.context:,} tokens, {i.kv_dtype_label}",
            ),
        )


def _layout_provenance(i: PlanInputs) -> Label:
    """``exact`` where a test holds this engine's layout for the architecture to the engine's own code or a real
    allocation, else ``computed`` (the rule read from the engine's source; kvbudget.engines.evidence)."""
    arch = architecture_of(i.spec.model_type)
    return "exact" if layout_label(i.engine.name, arch.name if arch else None) == "exact" else "computed"


def _words(n: int) -> str:
    names = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    return names[n] if 0 <= n < len(names) else f"{n:,}"


def statement(spec: ModelSpec, context: int, sessions: int, advertised_sessions: int | None) -> str:
    """The seeds' deployment statement: '... a 32K-context, three-concurrent-session server, not a 128K one'."""
    cap = format_tokens(context)
    text = f"{a_or_an(cap)}-context, {_words(sessions)}-concurrent-session server"
    window = spec.max_position_embeddings
    if window and window > context and advertised_sessions is not None:
        adv = format_tokens(window)
        if advertised_sessions == 0:
            text += f", not {a_or_an(adv)}-context one (one {adv} session does not fit)"
        else:
            text += f"; at the advertised {adv} it serves {_words(advertised_sessions)}"
    return text[0].upper() + text[1:] + "."


def sessions_per_replica(sessions: int, replicas: int) -> int:
    """A deployment's ``sessions`` spread over its ``replicas``: the share the busiest replica holds."""
    return -(-sessions // max(1, replicas))


def _check_parallel(i: PlanInputs) -> tuple[int, list[str]]:
    warnings: list[str] = []
    split = len(i.options.tensor_split) if i.engine.rules.places_layers else 0
    per_replica = i.tp * i.pp * max(1, split)
    if i.gpus < per_replica:
        what = f"the {split} GPUs of --tensor-split" if split > 1 else f"--tp {i.tp} x --pp {i.pp} = {per_replica}"
        raise InputError(f"--gpus {i.gpus} is fewer than {what}; add GPUs or lower --tp/--pp/--tensor-split")
    replicas = i.gpus // per_replica
    if i.gpus % per_replica:
        warnings.append(
            f"{counted_verb(i.gpus % per_replica, 'GPU', 'stays', 'stay')} idle: {i.gpus} is not a multiple of "
            f"{'the GPUs one server spans' if split > 1 else 'tp x pp'} = {per_replica}"
        )
    i.engine.rules.check_parallel(i.spec, i.tp, i.pp)
    return replicas, warnings


def _fractions() -> str:
    """The memory-fraction settings of the engines that have one ("vLLM gpu_memory_utilization, ...")."""
    found = [
        f"{cls.title} {cls.memory_fraction}" for n in engine_names() if (cls := rules_class(n)) and cls.memory_fraction
    ]
    return " and ".join(found) if len(found) < 3 else ", ".join(found[:-1]) + " and " + found[-1]


def _unified_memory_warning(i: PlanInputs) -> str | None:
    """On a unified-memory GPU, an engine whose budget subtracts everything the device reports used loses what the
    host holds at start-up to it, which no plan can know."""
    from kvbudget.hardware import UNIFIED_MEMORY

    if i.gpu_id not in UNIFIED_MEMORY or not i.engine.rules.counts_host_on_unified_memory:
        return None
    return (
        f"{i.gpu_label} shares one memory with the host: {i.engine.rules.title} counts what the host holds (the "
        "operating system, its page cache, other processes) as used GPU memory and takes it from the pool (a "
        "TensorRT-LLM 1.1.0rc3 start-up of gpt-oss-120b on a DGX Spark lost 49.28 GiB so and kept 5.95 GiB, where "
        "this plan's rule gives 51 GiB); boot once and run kvbudget calibrate on its log"
    )


def _interconnect(gpu_id: str | None) -> str | None:
    """The catalog GPU's link between the GPUs of one server (NVSwitch generations decide NCCL's NVLS buffers)."""
    if gpu_id is None:
        return None
    from kvbudget.hardware import gpu

    return gpu(gpu_id).interconnect


def _smi_total(gpu_id: str | None) -> int | None:
    """The catalog GPU's nvidia-smi memory.total in bytes (None where unknown): the figure SGLang's defaults read."""
    if gpu_id is None:
        return None
    from kvbudget.hardware import gpu

    mib = gpu(gpu_id).nvidia_smi_mib
    return None if mib is None else mib * 2**20


def make_plan(i: PlanInputs) -> Plan:
    """The whole plan for one deployment. Raises InputError when the weights do not fit."""
    rules = i.engine.rules
    replicas, warnings = _check_parallel(i)
    batched, batched_basis, options, layout = sized(i)
    warnings += list(dict.fromkeys(w for stage in layout.stages for w in stage.warnings))
    weights_per_gpu = cdiv(i.weights.bytes, i.tp * i.pp)
    overhead = runtime_overhead(i, batched, batched_basis, options)
    share = usable_share(i, overhead.bytes)
    split = None
    if gpu_layers.applies(i, options):
        need = sessions_per_replica(i.sessions, replicas) if i.sessions else 1
        split = gpu_layers.resolve(i, options, _site(i, batched, batched_basis, options), share.usable_bytes, need)
        options = replace(options, n_gpu_layers=split.n_gpu_layers)
        weights_per_gpu, overhead, layout = split.gpus[0].weights, split.gpus[0].compute, split.staged()
        warnings += list(split.warnings())
        short = split.shortfall(share.usable_bytes, i.context)
        if short:
            raise InputError(short)
    if i.utilization is not None and share.fraction is None:
        warnings.append(
            f"--utilization {i.utilization} is ignored: {i.engine.name} has no memory fraction ({_fractions()} do)"
        )
    pool = share.usable_bytes - weights_per_gpu - overhead.bytes
    if pool <= 0:
        raise InputError(_shortfall(i, share, weights_per_gpu, overhead))
    if overhead.last_stage_extra and split is None and len(layout.stages) > 1:
        # the last pipeline stage keeps that much less pool than the first GPU's (vLLM: the sampler runs there only);
        # the engine's block count is the smaller of the stages' (capacity.py StagedLayout.reserved)
        layout = replace(layout, reserved=(0,) * (len(layout.stages) - 1) + (overhead.last_stage_extra,))
    rules = i.engine.rules
    unified = _unified_memory_warning(i)
    if unified:
        warnings.append(unified)
    if rules.server and i.weights_precision is not None:
        mismatch = _shipped_otherwise(i)
        if mismatch:
            warnings.append(
                f"--weights {i.weights_precision}: the checkpoint ships {mismatch} (its quantization_config); "
                f"{rules.title} loads it as shipped and refuses a --quantization that does not match it (vLLM "
                "ModelConfig._verify_quantization, SGLang alike); serve a checkpoint in that precision, or leave "
                "--weights out"
            )
        elif i.weights_precision not in rules.quantizes_at_load:
            warnings.append(
                f"--weights {i.weights_precision}: the checkpoint does not ship in it, and {rules.title} does not "
                "quantize to it at load; serve a checkpoint quantized to it (its repo id instead of the model's)"
            )
    window = i.spec.max_position_embeddings
    if window and i.context > window:
        warnings.append(
            f"--context {i.context:,} is beyond the model's max_position_embeddings {window:,}: "
            f"{i.engine.rules.past_window(i.context, window)}; past it the model runs outside what it was trained for"
        )
    sessions, start = _capacity(i, layout, options, pool, i.context, warnings)
    edge = edge_warning(pool, layout.sequence_bytes(i.context), sessions, overhead)
    if edge:
        warnings.append(edge)
    advertised = _capacity(i, layout, options, pool, window, [])[0] if window and window > i.context else None
    # --sessions is the whole deployment: with --gpus spanning replicas each holds its share, rounded up
    max_ctx = max_context_for(layout, pool, sessions_per_replica(i.sessions, replicas), window) if i.sessions else None
    sharing = prefix_sharing(layout, i.engine, pool, i.context, i.prefix) if i.prefix else None
    return Plan(
        inputs=i,
        layout=layout,
        share=share,
        weights_per_gpu=weights_per_gpu,
        overhead=overhead,
        kv_pool_bytes=pool,
        per_session_bytes=layout.sequence_bytes(i.context),
        sessions=sessions,
        replicas=replicas,
        token_budget=start.token_budget,
        token_budget_basis=start.basis,
        max_context_for_sessions=max_ctx,
        statement=statement(i.spec, i.context, sessions, advertised),
        engine_lines=start.lines,
        warnings=tuple(dict.fromkeys(warnings)),
        prefix=sharing,
        options=options,
        layer_split=split,
        engine_refused=start.refused,
    )


def sized(i: PlanInputs) -> tuple[int, str, EngineOptions, StagedLayout]:
    """The engine's profiling batch (and why), its options as derived for the GPU, and the KV layout."""
    rules = i.engine.rules
    if i.options.max_num_batched_tokens:
        batched, batched_basis = i.options.max_num_batched_tokens, "as set"
    else:
        batched, batched_basis = rules.batched_tokens(i.gpu_memory_bytes, i.gpu_label, i.options, i.context)
    options = rules.derived_options(i.options, batched, compute_capability(i.gpu_label))
    return batched, batched_basis, options, staged_layout(i.spec, i.engine, i.k, i.v, i.tp, i.pp, options)


def runtime_overhead(i: PlanInputs, batched: int, batched_basis: str, options: EngineOptions) -> Overhead:
    """The runtime overhead per GPU: measured when given, else the engine's model of it at this GPU's size."""
    if i.overhead is not None:
        overhead = measured_overhead(i.overhead, i.overhead_basis)
        return overhead if i.overhead_provenance is None else replace(overhead, provenance=i.overhead_provenance)
    overhead = i.engine.rules.overhead(i.spec, _site(i, batched, batched_basis, options))
    stand_ins = assumed_dims(i.spec, overhead.basis) if overhead.bytes else ""
    return replace(overhead, basis=f"{overhead.basis}; {stand_ins}") if stand_ins else overhead


def _site(i: PlanInputs, batched: int, batched_basis: str, options: EngineOptions) -> Site:
    return Site(
        i.tp, batched, batched_basis, i.gpu_memory_bytes, i.gpu_label, _interconnect(i.gpu_id), i.context,
        options.flash_attn, options.max_num_seqs, i.pp, _quantized(i), options.enforce_eager,
        options.flashinfer_sampler, options.attn_backend,
    )  # fmt: skip


def _quantized(i: PlanInputs) -> bool:
    """Whether the served weights are quantized: the checkpoint's quantization_config, or --weights asking for a
    precision other than a 16- or 32-bit float."""
    if quantization_config(i.spec.config) is not None:
        return True
    return i.weights_precision is not None and i.weights_precision not in ("bf16", "fp16", "fp32", "auto")


def usable_share(i: PlanInputs, overhead: int) -> Share:
    """The bytes per GPU the engine's memory rule leaves for weights, ``overhead`` and the KV pool."""
    mla = any(isinstance(state, LatentAttention) for _, state in i.spec.primitives())
    weights = cdiv(i.weights.bytes, i.tp * i.pp)
    names = i.spec.config.get("architectures")
    architectures = tuple(str(a) for a in names) if isinstance(names, list) else ()
    tower = i.spec.config.get("vision_config")
    vision = None
    if isinstance(tower, dict):
        dims = (tower.get("num_hidden_layers"), tower.get("hidden_size"))
        vision = (dims[0] if isinstance(dims[0], int) else None, dims[1] if isinstance(dims[1], int) else None)
    return i.engine.rules.usable_share(
        MemoryShape(
            i.gpu_memory_bytes,
            i.utilization,
            i.tp,
            i.pp,
            mla,
            weights,
            overhead,
            i.options,
            _smi_total(i.gpu_id),
            architectures,
            vision,
        )
    )


def engine_start_up(i: PlanInputs, pool: int) -> StartUp:
    """What the engine prints at start-up for a KV pool of ``pool`` bytes per GPU at ``i.context``."""
    _, _, options, layout = sized(i)
    return _capacity(i, layout, options, pool, i.context, [])[1]


def _capacity(
    i: PlanInputs, layout: StagedLayout, options: EngineOptions, pool: int, context: int, warnings: list[str]
) -> tuple[int, StartUp]:
    """Sessions of ``context`` tokens the engine serves from ``pool`` bytes per GPU, and its start-up lines."""
    rules = i.engine.rules
    stage = stage_specs(i.spec, i.pp)[0]
    by_bytes = sessions_at(layout, pool, context)
    d = Deployment(stage, layout.first, i.k, i.v, i.tp, i.pp, context, options, pool, by_bytes)
    sessions = rules.sessions(d, warnings)
    start = rules.start_up(replace(d, sessions=sessions))
    if start.refused and sessions:
        # e.g. vLLM's admission check holds back the null block: it refuses where the bytes alone fit one session
        warnings.append(start.lines[0])
        sessions = 0
    return sessions, start


def _shortfall(i: PlanInputs, share: Share, weights: int, overhead: Overhead) -> str:
    need = weights + overhead.bytes - share.usable_bytes
    refused = i.log_check.refusal if i.log_check is not None else None
    fixes = []
    for tp in (2, 4, 8):
        if tp > i.tp and cdiv(i.weights.bytes, tp * i.pp) + overhead.bytes < share.usable_bytes:
            fixes.append(f"--tp {tp} --gpus {tp * i.pp}")
            break
    if i.weights.provenance != "measured":
        fixes.append("a lower --weights precision (fp8, int4)")
    fixes += _memory_fixes(i, share, weights)
    fewer = _fewer_layers(i)
    if fewer:
        fixes.insert(0, fewer)
    if refused:
        return (
            f"the engine refused to start: {refused}; 0 sessions: the log's weights {format_bytes(weights)} + "
            f"overhead {format_bytes(overhead.bytes)} per GPU exceed the {format_bytes(share.usable_bytes)} "
            f"{i.engine.name} could use by {format_bytes(need)}; smallest fixes: {'; '.join(fixes)}"
        )
    return (
        f"{i.spec.name}: weights {format_bytes(weights)} + overhead {format_bytes(overhead.bytes)} per GPU exceed "
        f"the {format_bytes(share.usable_bytes)} {i.engine.name} can use on {_gpu_words(i)} by "
        f"{format_bytes(need)}; smallest fixes: {'; '.join(fixes)}"
    )


def _fewer_layers(i: PlanInputs) -> str | None:
    """llama.cpp: the most layers that fit on the GPU with one session (``--n-gpu-layers``), the rest on the CPU."""
    auto = replace(i.options, n_gpu_layers=AUTO)
    if not gpu_layers.applies(i, auto):
        return None
    batched, basis, options, _ = sized(i)
    options = replace(options, n_gpu_layers=AUTO)
    share = usable_share(i, 0)
    split = gpu_layers.resolve(i, options, _site(i, batched, basis, options), share.usable_bytes, 1)
    if split.largest is None:
        return None
    total = len(i.spec.layers) + 1
    return f"--n-gpu-layers {split.largest} ({split.largest} of {total} layers on the GPU, the rest in host memory)"


def _shipped_otherwise(i: PlanInputs) -> str | None:
    """The precision a quantized checkpoint ships when --weights names another (an engine quantizes only a 16-bit
    checkpoint at load), else None."""
    from kvbudget.weights.checkpoint import checkpoint_precision
    from kvbudget.weights.precision import weight_precision

    shipped = checkpoint_precision(i.spec)
    if shipped is None or i.weights_precision is None:
        return None
    asked = weight_precision(i.weights_precision, what="--weights")
    return None if asked.name == shipped.precision.name else shipped.precision.name


def _gpu_words(i: PlanInputs) -> str:
    """The GPU as a sentence names it: the catalog's name, or the size --gpu-memory gave."""
    return i.gpu_label if i.gpu_label != "given" else f"{a_or_an(format_bytes(i.gpu_memory_bytes))} GPU (--gpu-memory)"


def _memory_fixes(i: PlanInputs, share: Share, weights: int) -> list[str]:
    """The smallest --utilization (when one was given and is what holds the engine back) and the smallest GPU
    whose usable share, by the engine's own memory rule and overhead model at that size, holds the weights, the
    overhead and 1 GiB more: a GPU as much larger as the shortfall is not enough under a fraction (vLLM uses 0.9
    of a larger GPU too, whose overhead grows with it)."""

    def fits(**change: object) -> bool:
        try:
            at = replace(i, **change)  # type: ignore[arg-type]
            batched, basis, options, _ = sized(at)
            overhead = runtime_overhead(at, batched, basis, options).bytes
            return usable_share(at, overhead).usable_bytes >= weights + overhead + GiB
        except InputError:
            return False

    fixes = []
    if share.fraction is not None and i.utilization is not None:
        higher = next((f / 100 for f in range(int(i.utilization * 100) + 1, 100) if fits(utilization=f / 100)), None)
        if higher is not None:
            fixes.append(f"--utilization {higher:.2f}")
    low, high = i.gpu_memory_bytes // GiB, max(1, i.gpu_memory_bytes // GiB)
    while not fits(gpu_memory_bytes=high * GiB):
        if high >= 2**20:  # a petabyte GPU would not do: no GPU fix to offer
            return fixes
        low, high = high, high * 2
    while high - low > 1:  # the smallest whole GiB that fits
        mid = (low + high) // 2
        low, high = (low, mid) if fits(gpu_memory_bytes=mid * GiB) else (mid, high)
    return [*fixes, f"a GPU with at least {high:,} GiB"]
