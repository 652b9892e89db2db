"""plan --from-log reproduces the log's own KV pool, tokens and blocks.

The engine sized its pool from what it counted before it: the GPU total x its memory fraction, less
the weights, less everything else (activation peak, non-torch memory, CUDA graphs where that version
subtracts them). The log prints the result (vLLM "Available KV cache memory", "GPU KV cache size",
"# GPU blocks"; SGLang "#tokens"; TensorRT-LLM "primary blocks"), rounded. So the plan takes the pool
the log printed (the pools that give its exact token or block count, within its printed bytes) and the
overhead as what remains: usable - weights - pool. Where the log also itemized its overhead, that
remainder is checked against it; where a figure is not in the log (a V1 log prints no GPU total), the
check says which one was assumed, and why the pool is the log's regardless.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from kvbudget.engines.base import cdiv
from kvbudget.errors import InputError
from kvbudget.measure.logs.record import Figure
from kvbudget.plan.capacity import largest
from kvbudget.plan.from_log import LogInputs
from kvbudget.plan.plan import PlanInputs, engine_start_up, sized, usable_share
from kvbudget.precision import parse_cache_dtype
from kvbudget.provenance import Label, derived
from kvbudget.units import format_bytes
from kvbudget.weights.sources import WeightSize

GiB = 2**30
PRINTED = GiB // 200  # vLLM and TensorRT-LLM print GiB with two decimals: each figure is within +-0.005 GiB
SEARCH = 2**50  # bytes: far above any GPU, the bound of the pool search
MATCH_LOW, MATCH_HIGH = 0.9, 1.1  # the pool a logged count needs over the pool printed: 0.989-1.001 in tests/data/logs


@dataclass(frozen=True)
class Reproduced:
    """One capacity figure the log printed beside the plan's for the log's own deployment."""

    figure: str  # kv_pool_bytes, kv_tokens, kv_blocks
    logged: Figure
    planned: int

    @property
    def exact(self) -> bool:
        return self.logged.low <= self.planned <= self.logged.high

    @property
    def diff_pct(self) -> float:
        if self.exact:
            return 0.0
        return round(100 * (self.planned - float(self.logged.value)) / (abs(float(self.logged.value)) or 1.0), 3)

    def to_json(self) -> dict[str, object]:
        return {
            "figure": self.figure,
            "logged": self.logged.value,
            "logged_text": self.logged.text,
            "line": self.logged.line,
            "planned": self.planned,
            "exact": self.exact,
            "diff_pct": self.diff_pct,
        }


@dataclass(frozen=True)
class LogCheck:
    """What plan --from-log took from the log, what it could not, and how the plan's pool compares."""

    log: str
    figures: tuple[Reproduced, ...]
    not_from_log: tuple[str, ...]  # each figure the log does not give, and what stood for it
    pool_basis: str
    refusal: str | None = None

    @property
    def reproduced(self) -> bool:
        return bool(self.figures) and all(f.exact for f in self.figures)

    def to_json(self) -> dict[str, object]:
        return {
            "log": self.log,
            "reproduced": self.reproduced,
            "figures": [f.to_json() for f in self.figures],
            "not_from_log": list(self.not_from_log),
            "pool_basis": self.pool_basis,
            "refusal": self.refusal,
        }


def _log_deployment(inputs: PlanInputs, logged: LogInputs, missing: list[str]) -> PlanInputs:
    """The deployment the log ran: its tp/pp, context, cache dtype, GPU total, fraction and weights."""
    k, v = inputs.k, inputs.v
    if logged.cache_dtype:
        name = {"fp8_e4m3fn": "fp8_e4m3"}.get(logged.cache_dtype.lower(), logged.cache_dtype.lower())
        k = v = parse_cache_dtype(name, model_dtype=inputs.spec.dtype, what="the log's cache dtype")
    tp, pp = logged.tp or inputs.tp, logged.pp or inputs.pp
    if logged.tp is None and inputs.tp > 1:
        missing.append(f"tp: not in the log; the plan's {inputs.tp} stands for it")
    total = inputs.gpu_memory_bytes
    if logged.gpu_memory is not None:
        total = logged.gpu_memory.bytes
    else:
        missing.append(f"GPU total: not in the log; {inputs.gpu_label}'s {format_bytes(total)} stands for it")
    weights = inputs.weights
    if logged.weights_per_gpu is not None:
        w = logged.weights_per_gpu
        weights = WeightSize(w.bytes * tp * pp, "measured", w.basis)
    else:
        missing.append(f"weights: not in the log; the plan's {inputs.weights.provenance} figure stands for them")
    if logged.context is None:
        missing.append(f"context: not in the log; the plan's {inputs.context:,} stands for it")
    options = replace(
        inputs.options,
        block_size=logged.block_size or inputs.options.block_size,
        max_num_batched_tokens=logged.max_num_batched_tokens or inputs.options.max_num_batched_tokens,
    )
    return replace(
        inputs,
        k=k,
        v=v,
        tp=tp,
        pp=pp,
        gpus=tp * pp,
        context=logged.context or inputs.context,
        gpu_memory_bytes=total,
        utilization=logged.utilization if logged.utilization is not None else inputs.utilization,
        weights=weights,
        options=options,
        sessions=None,
        prefix=0,
    )


def _per_gpu_weights(inputs: PlanInputs, logged: LogInputs) -> PlanInputs:
    """A log that does not state its tp printed one GPU's weights: the whole model is that x the plan's tp x pp."""
    w = logged.weights_per_gpu
    parallel = inputs.tp * inputs.pp
    if w is None or logged.tp is not None or parallel == 1 or inputs.weights.bytes != w.bytes * logged.parallel:
        return inputs
    basis = f"{w.basis} x {parallel} GPUs (the plan's tp x pp: the log does not state its own)"
    return replace(inputs, weights=WeightSize(w.bytes * parallel, "measured", basis))


def _counter(log_i: PlanInputs, generation: str | None) -> Callable[[int], dict[str, int]]:
    """The engine's printed capacity figures for a pool of ``bytes`` per GPU at the log's deployment (each engine's
    ``printed_capacity``: the figures its start-up log prints)."""
    from kvbudget.engines.records import PoolShape

    _, _, options, _ = sized(log_i)
    rules = log_i.engine.rules
    shape = PoolShape(log_i.spec, log_i.k, log_i.v, log_i.tp, options, log_i.context)

    def count(pool: int) -> dict[str, int]:
        return rules.printed_capacity(shape, pool, lambda: engine_start_up(log_i, pool).token_budget, generation)

    return count


def _first(count: Callable[[int], dict[str, int]], name: str, target: int) -> int:
    """The smallest pool whose ``name`` figure is at least ``target`` (the figures grow with the pool)."""
    lo, hi = 0, SEARCH
    while lo < hi:
        mid = (lo + hi) // 2
        if count(mid)[name] >= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _belongs(log_i: PlanInputs, logged: LogInputs, pool: Figure, counted: Figure, need: int) -> None:
    """The log's KV memory holds its token (block) count at the planned model's bytes per token, or InputError.

    Both figures are the engine's own for one pool; the model's layout fixes the bytes a token takes to within a
    block's rounding (the logs of tests/data/logs need 0.989-1.001 of what they print). A pool that needs less than
    0.9 or more than 1.1 of the printed memory for the printed count is another model's, cache dtype's or tp's (a
    Llama-3.1-8B log for Llama-3.1-70B: 2.5x; for Qwen3-8B: 1.125x)."""
    printed = int(pool.value)
    if printed <= 0 or MATCH_LOW * printed <= need <= MATCH_HIGH * printed:
        return
    raise InputError(
        f"--from-log {logged.path}: the engine's {pool.text} of KV memory (line {pool.line:,}) holds "
        f"{counted.text} {counted.unit} (line {counted.line:,}); {log_i.spec.name} at {log_i.kv_dtype_label}, "
        f"tp {log_i.tp} needs {format_bytes(need)} for them ({need / printed:.2f}x): the log is of another model, "
        "cache dtype or tp; give the log's model as --model, or --tp / --kv-dtype as the log ran"
    )


def _target(
    logged: LogInputs, count: Callable[[int], dict[str, int]], notes: list[str], log_i: PlanInputs
) -> tuple[int, str, list[tuple[str, Figure]]] | None:
    """The pool to plan with, why, and the logged figures it must reproduce; None when the log has none."""
    checks: list[tuple[str, Figure]] = []
    span: tuple[int, int] | None = None
    counted, name = logged.kv_tokens, "kv_tokens"
    if logged.kv_tokens is not None:
        checks.append(("kv_tokens", logged.kv_tokens))
    if logged.kv_blocks is not None and "kv_blocks" in count(0):
        checks.append(("kv_blocks", logged.kv_blocks))
        counted, name = logged.kv_blocks, "kv_blocks"
    if counted is not None:
        n = int(counted.value)
        low, high = _first(count, name, n), _first(count, name, n + 1) - 1
        if logged.kv_pool is not None:
            _belongs(log_i, logged, logged.kv_pool, counted, low)
        span = (low, high) if count(low)[name] == n else None
        if span is None:
            notes.append(f"no pool gives the log's {counted.text} {counted.unit} with kvbudget's layout")
    pool = logged.kv_pool
    if pool is not None:
        checks.insert(0, ("kv_pool_bytes", pool))
        lo, hi, printed = int(pool.low), int(pool.high), int(pool.value)
        if printed <= 0:
            return printed, f"the log's KV memory {pool.text} (line {pool.line}): the engine had none", checks
        if span is not None and max(lo, span[0]) <= min(hi, span[1]):
            lo, hi = max(lo, span[0]), min(hi, span[1])
            assert counted is not None
            where = f"the log's {pool.text} (line {pool.line}), where it gives its {counted.text} {counted.unit}"
            return (printed if lo <= printed <= hi else (lo + hi) // 2), where, checks
        return printed, f"the log's KV memory {pool.text} (line {pool.line})", checks
    if span is not None and counted is not None:
        mid = (span[0] + span[1]) // 2
        what = f"pools of {span[0]:,}-{span[1]:,} B give the log's {counted.text} {counted.unit}"
        return mid, f"{what} (line {counted.line}); the plan takes the middle", checks
    if logged.refusal is not None and logged.refusal.kind == "no_memory_for_cache":
        return 0, f"the log says the engine had no KV memory (line {logged.refusal.line})", checks
    return None


def _solve_overhead(log_i: PlanInputs, pool: int) -> int:
    """The overhead that leaves exactly ``pool`` (the largest overhead that leaves at least it)."""
    weights = cdiv(log_i.weights.bytes, log_i.tp * log_i.pp)

    def left(overhead: int) -> int:
        return usable_share(log_i, overhead).usable_bytes - weights - overhead

    return largest(-SEARCH, SEARCH, lambda overhead: left(overhead) >= pool)


def reproduce(inputs: PlanInputs, logged: LogInputs) -> PlanInputs:
    """``inputs`` (already holding the log's GPU total, weights and fraction where the user gave none) with the
    overhead that makes the plan's KV pool the log's, and the check that says how close it came."""
    missing: list[str] = []
    inputs = _per_gpu_weights(inputs, logged)
    log_i = _log_deployment(inputs, logged, missing)
    count = _counter(log_i, logged.generation)
    refusal = logged.refusal.reason if logged.refusal is not None else None
    target = _target(logged, count, missing, log_i)
    user_overhead = inputs.overhead is not None and inputs.overhead_basis is None
    if target is None or user_overhead:
        if user_overhead:
            why = "--overhead was given: the plan's pool is usable - weights - that overhead, not the log's"
        elif not logged.engine.rules.pool_from_free_memory:
            why = (
                f"KV pool: {logged.engine.rules.title} allocates the cache cells it is given, not a pool sized from "
                "free memory; the plan's pool is the memory left (calibrate compares the log's cache lines with "
                "kvbudget's)"
            )
        else:
            why = "KV pool: the log prints neither its KV memory nor its tokens or blocks; the plan computes it"
        check = LogCheck(logged.path, (), (*missing, why), "the log's pool is not reproduced", refusal)
        return replace(inputs, log_check=check)
    pool, pool_basis, checks = target
    overhead = _solve_overhead(log_i, pool)
    if overhead < 0:
        missing.append(
            f"overhead: the log's pool is {format_bytes(-overhead)} more than the usable memory less the weights; "
            "the GPU total or fraction that stands for the log's is too small"
        )
        overhead = 0
    weights = cdiv(log_i.weights.bytes, log_i.tp * log_i.pp)
    share = usable_share(log_i, overhead)
    if share.fraction is not None and logged.utilization is None:
        given = "given" if inputs.utilization is not None else f"{inputs.engine.label}'s default"
        missing.append(
            f"memory fraction: not in the log; {share.fraction} ({given}) stands for it (the overhead is the "
            "remainder, so the pool is the log's whatever the fraction was; only the split between fraction and "
            "overhead is assumed)"
        )
    planned_pool = share.usable_bytes - weights - overhead
    figures = count(planned_pool)
    found = [Reproduced(n, fig, planned_pool if n == "kv_pool_bytes" else figures[n]) for n, fig in checks]
    provenance, basis = _overhead_basis(logged, overhead, share.usable_bytes, weights, planned_pool, pool_basis)
    if provenance != "measured":  # the remainder: the weakest of the GPU total, the weights and the log's pool
        provenance = derived(inputs.gpu_memory_provenance or "given", log_i.weights.provenance, "measured")
    for what, mine, theirs in (
        ("tp", inputs.tp, log_i.tp),
        ("pp", inputs.pp, log_i.pp),
        ("cache dtype", inputs.kv_dtype_label, log_i.kv_dtype_label),
        ("GPU total", inputs.gpu_memory_bytes, log_i.gpu_memory_bytes),
        ("weights", inputs.weights.bytes, log_i.weights.bytes),
        ("memory fraction", inputs.utilization, log_i.utilization),
    ):
        if mine != theirs:
            missing.append(f"this plan's {what} ({mine}) is not the log's ({theirs}): its pool is not the log's")
    check = LogCheck(logged.path, tuple(found), tuple(missing), pool_basis, refusal)
    return replace(inputs, overhead=overhead, overhead_basis=basis, overhead_provenance=provenance, log_check=check)


def _overhead_basis(
    logged: LogInputs, overhead: int, usable: int, weights: int, pool: int, pool_basis: str
) -> tuple[Label, str]:
    remainder = f"usable {usable:,} B - weights {weights:,} B - the log's KV pool {pool:,} B"
    profiled = logged.overhead
    if profiled is None:
        return "computed", f"derived from the log: everything the engine counted before the KV pool = {remainder}"
    diff = overhead - profiled.bytes
    terms = profiled.basis.count(" + ") + 4  # each printed term (parts, total, weights, pool) is rounded
    if abs(diff) <= terms * PRINTED:
        return "measured", f"measured: {profiled.basis}; = {remainder} within print rounding ({diff:+,} B)"
    return (
        "computed",
        f"derived from the log: {remainder}; its profile ({profiled.basis}) sums to {format_bytes(profiled.bytes)}, "
        f"{format_bytes(abs(diff))} {'less' if diff > 0 else 'more'}: what the engine counted and the profile does "
        "not itemize",
    )
