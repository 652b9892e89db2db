"""The capacity plan: per-GPU ledger → KV pool → sessions at a cap, as the engine itself would size it.

total memory → the engine's usable share → minus weights (per GPU: total / (tp x pp)) → minus
runtime overhead (measured, or a labelled heuristic range) → the KV pool → sessions reserved for
the worst case, the largest cap for N sessions, the token budget the scheduler allocates, and the
engine's own start-up numbers reproduced from the same inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kvbudget.engines import EngineRef
from kvbudget.engines.base import EngineOptions, cdiv
from kvbudget.errors import EngineRefusalError, InputError
from kvbudget.model.spec import LatentAttention, ModelSpec
from kvbudget.plan.budget import (
    Overhead,
    Share,
    compute_capability,
    default_batched_tokens,
    engine_share,
    heuristic_overhead,
    measured_overhead,
)
from kvbudget.plan.capacity import StagedLayout, max_context_for, sessions_at, stage_specs, staged_layout
from kvbudget.plan.ledger import LedgerLine, LineProvenance
from kvbudget.plan.sharing import PrefixSharing, prefix_sharing
from kvbudget.precision import CacheDType
from kvbudget.units import format_bytes, format_tokens
from kvbudget.weights.sources import WeightSize

SCHEMA_VERSION = 1
GiB = 2**30
LLAMACPP_MAX_SEQ = 256  # llama.cpp src/llama-cparams.h LLAMA_MAX_SEQ


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
    gpu_memory_provenance: LineProvenance | None = None
    overhead_basis: str | None = None  # set when the overhead was measured by the engine (plan --from-log)

    @property
    def kv_dtype_label(self) -> str:
        return self.k.name if self.k == self.v else f"{self.k.name}/{self.v.name}"


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

    @property
    def total_sessions(self) -> int:
        return self.sessions * self.replicas

    @property
    def ledger(self) -> tuple[LedgerLine, ...]:
        i = self.inputs
        w = i.weights
        return (
            LedgerLine(
                "GPU memory",
                i.gpu_memory_bytes,
                i.gpu_memory_provenance or ("given" if i.gpu_label == "given" else "exact"),
                i.gpu_memory_basis
                or (f"{i.gpu_label}: bytes the driver reports" if i.gpu_label != "given" else "--gpu-memory"),
            ),
            LedgerLine("usable by the engine", self.share.usable_bytes, "derived", self.share.basis),
            LedgerLine(
                "weights",
                self.weights_per_gpu,
                w.provenance,
                w.basis + (f"; / {i.tp * i.pp} GPUs (tp x pp)" if i.tp * i.pp > 1 else ""),
            ),
            LedgerLine(
                "runtime overhead",
                self.overhead.bytes,
                self.overhead.provenance,
                self.overhead.basis,
                self.overhead.low,
                self.overhead.high,
            ),
            LedgerLine("KV pool", self.kv_pool_bytes, "derived", "usable - weights - overhead"),
            LedgerLine(
                "one session at the cap",
                self.per_session_bytes,
                "exact",
                f"{i.engine.label} layout, {i.context:,} tokens, {i.kv_dtype_label}",
            ),
        )


def _words(n: int) -> str:
    names = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    return names[n] if 0 <= n < len(names) else f"{n:,}"


def _article(label: str) -> str:
    """'an' before numbers spoken with a vowel sound (8K, 11K, 18K, 80K, 800K), else 'a'."""
    return "an" if label.startswith("8") or (label.startswith(("11", "18")) and not label[2:3].isdigit()) else "a"


def statement(spec: ModelSpec, context: int, sessions: int, advertised_sessions: int | None) -> str:
    """The seeds' deployment statement: '... a 32K-context, three-concurrent-session server, not a 128K one'."""
    cap = format_tokens(context)
    text = f"{_article(cap)} {cap}-context, {_words(sessions)}-concurrent-session server"
    window = spec.max_position_embeddings
    if window and window > context and advertised_sessions is not None:
        adv = format_tokens(window)
        if advertised_sessions == 0:
            text += f", not {_article(adv)} {adv}-context one (one {adv} session does not fit)"
        else:
            text += f"; at the advertised {adv} it serves {_words(advertised_sessions)}"
    return text[0].upper() + text[1:] + "."


def _engine_lines(
    plan_in: PlanInputs, layout: StagedLayout, pool: int, sessions: int, options: EngineOptions
) -> tuple[tuple[str, ...], int, str]:
    """The engine's own start-up numbers, and the token budget with its basis."""
    i = plan_in
    stage = stage_specs(i.spec, i.pp)[0]
    name = i.engine.name
    if name == "vllm":
        from kvbudget.engines import vllm

        vpool = vllm.pool(stage, i.k, i.v, i.tp, options, i.engine.version)
        try:
            vllm.check_admission(vpool, pool, i.context)
        except EngineRefusalError as refusal:
            # vLLM stops before the capacity line: the refusal (and its estimated length) is what it prints
            return (str(refusal),), 0, f"vLLM {i.engine.version} refuses to start (admission check)"
        tokens = vllm.kv_cache_size_tokens(vpool, pool, i.context)
        return (
            vllm.report_lines(vpool, pool, i.context),
            tokens,
            f'vLLM {i.engine.version} "GPU KV cache size" ({vllm.num_blocks(vpool, pool):,} blocks of '
            f"{vpool.block_size or i.context:,} tokens"
            + (
                f"; MLA backend {vpool.attention_backend} assumed for compute capability "
                f"{(options.gpu_capability or vllm.DEFAULT_GPU_CAPABILITY) / 10:.1f}"
                if vpool.attention_backend
                else ""
            )
            + f"; prefix caching {'on' if vpool.prefix_caching else 'off'})",
        )
    if name == "sglang":
        from kvbudget.engines import sglang

        try:
            pools = sglang.pools(pool, stage, layout.first, i.context, options)
        except EngineRefusalError as refusal:
            return (str(refusal),), 0, f"SGLang {i.engine.version} refuses to start"
        return pools.log_lines(), pools.max_total_num_tokens, "SGLang max_total_num_tokens"
    if name == "llamacpp":
        from kvbudget.engines import llamacpp

        if sessions < 1:
            return (), 0, "llama.cpp cells (no session fits)"
        n_ctx = sessions * i.context
        lines = tuple(llamacpp.kv_cache_log_lines(stage, i.k, i.v, n_ctx, sessions, i.options))
        cells, streams = llamacpp.context_cells(n_ctx, sessions, i.options.kv_unified)
        return (
            lines,
            cells * streams,
            f"llama.cpp cells: {streams} stream(s) x {cells:,} cells (-c {n_ctx} -np {sessions})",
        )
    per_token = layout.kv_bytes_per_token
    if per_token:
        return (), pool // per_token, f"KV pool / {per_token:,} B per token"
    return (), sessions * i.context, "sessions x cap (no growing cache)"


def _check_parallel(i: PlanInputs) -> tuple[int, list[str]]:
    warnings: list[str] = []
    per_replica = i.tp * i.pp
    if i.gpus < per_replica:
        raise InputError(
            f"--gpus {i.gpus} is fewer than --tp {i.tp} x --pp {i.pp} = {per_replica}; add GPUs or lower --tp/--pp"
        )
    replicas = i.gpus // per_replica
    if i.gpus % per_replica:
        warnings.append(
            f"{i.gpus % per_replica} GPU(s) stay idle: {i.gpus} is not a multiple of tp x pp = {per_replica}"
        )
    if i.engine.name in ("llamacpp", "transformers") and per_replica > 1:
        raise InputError(
            f"--engine {i.engine.name}: tensor/pipeline parallel plans are not modelled for this "
            "engine; plan one GPU and use --gpus for replicas"
        )
    return replicas, warnings


def _sglang_sessions(
    i: PlanInputs, layout: StagedLayout, pool: int, options: EngineOptions, by_bytes: int, warnings: list[str]
) -> int:
    """SGLang's sessions at the cap: its pools, not fungible bytes (the Mamba carve-out, the full pool of a
    sliding-window hybrid, the running-request cap)."""
    from kvbudget.engines import sglang

    try:
        pools = sglang.pools(pool, i.spec, layout.first, i.context, options)
    except EngineRefusalError as refusal:
        warnings.append(str(refusal))
        return 0
    if pools.sessions < by_bytes:
        warnings.append(
            f"SGLang serves {pools.sessions} sessions of {i.context:,} tokens, not the {by_bytes} the bytes alone "
            f"would hold: max_total_num_tokens {pools.max_total_num_tokens:,}"
            + (f" (full pool; sliding pool {pools.swa_tokens:,})" if pools.swa_tokens else "")
            + (f", {pools.max_mamba_cache_size} Mamba state slots" if pools.max_mamba_cache_size is not None else "")
            + f", max_running_requests {pools.max_running_requests:,}"
        )
    return pools.sessions


def _engine_options(i: PlanInputs, batched: int) -> EngineOptions:
    """The settings the engine itself derives from the plan's GPU when the user sets none (vLLM: the
    batch that sliding windows reserve, and the GPU generation that picks the attention backend; SGLang:
    the page size of the GPU's attention backend)."""
    if i.engine.name == "sglang":
        return replace(i.options, gpu_capability=i.options.gpu_capability or compute_capability(i.gpu_label))
    if i.engine.name != "vllm":
        return i.options
    return replace(
        i.options,
        max_num_batched_tokens=i.options.max_num_batched_tokens or batched,
        gpu_capability=i.options.gpu_capability or compute_capability(i.gpu_label),
    )


def make_plan(i: PlanInputs) -> Plan:
    """The whole plan for one deployment. Raises InputError when the weights do not fit."""
    replicas, warnings = _check_parallel(i)
    if i.options.max_num_batched_tokens:
        batched, batched_basis = i.options.max_num_batched_tokens, "as set"
    else:
        batched, batched_basis = default_batched_tokens(i.engine, i.gpu_memory_bytes, i.gpu_label, i.options.n_ubatch)
    options = _engine_options(i, batched)
    layout = staged_layout(i.spec, i.engine, i.k, i.v, i.tp, i.pp, options)
    warnings += list(dict.fromkeys(w for stage in layout.stages for w in stage.warnings))
    mla = any(isinstance(state, LatentAttention) for _, state in i.spec.primitives())
    share = engine_share(i.engine, i.gpu_memory_bytes, utilization=i.utilization, tp=i.tp, pp=i.pp, mla=mla)
    if i.utilization is not None and share.fraction is None:
        warnings.append(
            f"--utilization {i.utilization} is ignored: {i.engine.name} has no memory fraction "
            "(vLLM gpu_memory_utilization and SGLang mem_fraction_static do)"
        )
    weights_per_gpu = cdiv(i.weights.bytes, i.tp * i.pp)
    overhead = (
        measured_overhead(i.overhead, i.overhead_basis)
        if i.overhead is not None
        else heuristic_overhead(i.spec, i.engine, tp=i.tp, max_batched_tokens=batched, batched_basis=batched_basis)
    )
    pool = share.usable_bytes - weights_per_gpu - overhead.bytes
    if pool <= 0:
        raise InputError(_shortfall(i, share, weights_per_gpu, overhead))
    window = i.spec.max_position_embeddings
    if window and i.context > window:
        warnings.append(
            f"--context {i.context:,} is beyond the model's max_position_embeddings {window:,}: the "
            "engine will refuse it unless you override the model length"
        )
    sessions = sessions_at(layout, pool, i.context)
    if i.engine.name == "sglang" and i.pp == 1:
        sessions = _sglang_sessions(i, layout, pool, options, sessions, warnings)
    if i.engine.name == "llamacpp" and sessions == LLAMACPP_MAX_SEQ:
        warnings.append(f"llama.cpp serves at most {LLAMACPP_MAX_SEQ} slots (LLAMA_MAX_SEQ); memory would allow more")
    advertised = sessions_at(layout, pool, window) if window and window > i.context else None
    if window and advertised is not None and i.engine.name == "sglang" and i.pp == 1:
        advertised = _sglang_sessions(replace(i, context=window), layout, pool, options, advertised, [])
    max_ctx = max_context_for(layout, pool, i.sessions, window) if i.sessions else None
    lines, budget, basis = _engine_lines(i, layout, pool, sessions, options)
    if i.engine.name == "vllm" and budget == 0 and sessions:
        # vLLM's admission check holds back the null block: it refuses where the bytes alone fit one session
        warnings.append(lines[0])
        sessions = 0
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
        token_budget=budget,
        token_budget_basis=basis,
        max_context_for_sessions=max_ctx,
        statement=statement(i.spec, i.context, sessions, advertised),
        engine_lines=lines,
        warnings=tuple(warnings),
        prefix=sharing,
    )


def _shortfall(i: PlanInputs, share: Share, weights: int, overhead: Overhead) -> str:
    need = weights + overhead.bytes - share.usable_bytes
    fixes = []
    for tp in (2, 4, 8):
        if tp > i.tp and cdiv(i.weights.bytes, tp * i.pp) + overhead.bytes < share.usable_bytes:
            fixes.append(f"--tp {tp} --gpus {tp * i.pp}")
            break
    if i.weights.provenance != "measured":
        fixes.append("a lower --weights precision (fp8, int4)")
    fixes.append(f"a GPU with at least {format_bytes(i.gpu_memory_bytes + need + GiB, 'iec', digits=0)}")
    return (
        f"{i.spec.name}: weights {format_bytes(weights)} + overhead {format_bytes(overhead.bytes)} per GPU exceed "
        f"the {format_bytes(share.usable_bytes)} {i.engine.name} can use on {i.gpu_label} by "
        f"{format_bytes(need)}; smallest fixes: {'; '.join(fixes)}"
    )
