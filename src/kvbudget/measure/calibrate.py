"""Reconcile what an engine logged with what kvbudget predicts for the same model and settings.

Each prediction is fed the log's own measured inputs (the GPU total the engine saw, the weights as
loaded, the activation peak, the KV memory it said it had), so that a difference isolates one rule.
Printed figures are rounded (``11.12 GiB``, ``512.00 MiB``): a prediction agrees when it lies inside
the printed value's interval, and ``diff_pct`` is then 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from kvbudget.engines import version_tuple
from kvbudget.engines.base import EngineOptions
from kvbudget.errors import KvBudgetError
from kvbudget.measure.logs.record import EngineLog, Figure, Setting, SettingValue
from kvbudget.model.spec import FullAttention, ModelSpec
from kvbudget.precision import CacheDType, parse_cache_dtype
from kvbudget.units import counted

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.measure.calibrate_speeds import CalibratedSpeeds

SCHEMA_VERSION = 1
VLLM_GRAPHS_SUBTRACTED_SINCE = (0, 21)  # vLLM V1 gpu_worker: KV memory excludes CUDA graph memory from 0.21


@dataclass(frozen=True)
class Row:
    """One logged figure beside kvbudget's prediction. ``predicted`` is (low, high) when inputs were rounded."""

    figure: str
    logged: Figure
    predicted: tuple[float, float]
    note: str
    derived: bool = False  # computed from the log's own figures alone: a consistency check, not a comparison

    @property
    def consistent(self) -> bool:
        """The prediction lies inside the printed value's interval."""
        low, high = self.predicted
        return high >= self.logged.low - 1e-9 and low <= self.logged.high + 1e-9

    @property
    def agrees(self) -> bool:
        """kvbudget's model agrees with the engine: never said of a figure derived from the log itself."""
        return self.consistent and not self.derived

    @property
    def diff_pct(self) -> float:
        if self.consistent:
            return 0.0
        mid = (self.predicted[0] + self.predicted[1]) / 2
        base = abs(float(self.logged.value)) or 1.0
        return round(100 * (mid - float(self.logged.value)) / base, 3)

    def to_json(self) -> dict[str, object]:
        low, high = self.predicted
        return {
            "figure": self.figure,
            "logged": self.logged.value,
            "logged_text": self.logged.text,
            "line": self.logged.line,
            "predicted": _num(low) if low == high else [_num(low), _num(high)],
            "diff_pct": self.diff_pct,
            "kind": "derived" if self.derived else "compared",
            "agrees": None if self.derived else self.agrees,
            "consistent": self.consistent,
            "note": self.note,
        }


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() else round(x, 6)


@dataclass
class Calibration:
    log: EngineLog
    spec: ModelSpec | None
    model_source: str | None
    predicted: dict[str, object] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    speeds: CalibratedSpeeds | None = None  # from the log's serving lines (simulate/measured_calibration.py)

    @property
    def compared(self) -> list[Row]:
        """The rows that test kvbudget's model (not derived from the log's own figures)."""
        return [r for r in self.rows if not r.derived]

    def summary(self) -> dict[str, int]:
        derived = [r for r in self.rows if r.derived]
        return {
            "compared": len(self.compared),
            "agree": sum(r.agrees for r in self.compared),
            "derived": len(derived),
            "derived_consistent": sum(r.consistent for r in derived),
        }


def _int(log: EngineLog, name: str, default: int) -> int:
    value = log.setting(name)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def _dtype(text: str | None, spec: ModelSpec) -> CacheDType:
    name = (text or "auto").lower()
    return parse_cache_dtype({"fp8_e4m3fn": "fp8_e4m3"}.get(name, name), model_dtype=spec.dtype, what="cache dtype")


def model_reference(log: EngineLog, given: str | None) -> str | None:
    """The model to predict for: ``--model``, else the log's model when kvbudget can resolve it offline."""
    if given:
        return given
    for key in ("model", "model_name"):
        value = log.setting(key)
        if isinstance(value, str) and value:
            from kvbudget.model import catalog

            if Path(value).exists() or catalog.lookup(value) is not None:
                return value
    return None


def calibrate(log: EngineLog, model: str | None = None, given: dict[str, SettingValue] | None = None) -> Calibration:
    """Read the model, predict every figure the log states, and pair them up.

    ``given`` fills settings the log does not state (``tp``, ``context``, ``cache_dtype``, ``block_size``);
    where the log states one, the log wins (it is what the engine ran with) and a differing value is noted.
    """
    ref = model_reference(log, model)
    cal = Calibration(log, None, ref)
    for name, value in (given or {}).items():
        stated = log.settings.get(name)
        if stated is None:
            log.settings[name] = Setting(value, 0)
        elif stated.value != value:
            cal.notes.append(f"the log says {name} = {stated.value} (line {stated.line}); the given {value} is ignored")
    if ref is None:
        named = log.setting("model") or log.setting("model_name")
        cal.notes.append(
            f"no prediction: the log names {named!r}, which kvbudget cannot resolve offline; pass --model "
            "(a catalog name, config.json or .gguf)"
            if named
            else "no prediction: the log names no model; pass --model"
        )
        return cal
    from kvbudget.model.sources import resolve

    cal.spec = resolve(ref)
    if model:  # a model given for the log: the log must be of it (measure/belong.py)
        from kvbudget.measure import belong

        belong.check_model(log, cal.spec, model, "calibrate")
        weights = log.figure("weights_bytes")
        if weights is not None:
            tp = log.setting("tp")
            # a log that prints its arguments omits a default tp of 1 (plan/from_log.py); an excerpt does not say
            logged_tp = tp if isinstance(tp, int) and not isinstance(tp, bool) and tp > 0 else None
            parallel = logged_tp or (1 if log.model is not None else None)
            belong.check_weights(log, weights, parallel, cal.spec, model, "calibrate")
    try:
        if log.engine == "vllm":
            _vllm(cal)
        elif log.engine == "sglang":
            _sglang(cal)
        elif log.engine == "trtllm":
            _trtllm(cal)
        else:
            _llamacpp(cal)
    except KvBudgetError as e:
        cal.notes.append(f"no prediction: {e}")
    return cal


# ---- vLLM ----------------------------------------------------------------------------------------


def _vllm(cal: Calibration) -> None:
    from kvbudget.engines import vllm

    log, spec = cal.log, cal.spec
    assert spec is not None
    version = log.version or vllm.DEFAULT_VERSION
    if not log.version:
        cal.notes.append(f"the log states no vLLM version: rules of {version} assumed")
    v0 = log.generation == "V0"
    if v0:
        if any(not isinstance(p, FullAttention) for _, p in spec.primitives()):
            cal.notes.append(
                "vLLM V0 engine: kvbudget implements V1 rules (vLLM >= 0.8); V0 sized non-dense models differently "
                "(e.g. a block for every cross-attention layer), so block figures are not predicted"
            )
            return
        cal.notes.append("vLLM V0 engine: for a model with only full attention V0's block arithmetic equals V1's")
    k = v = _dtype(str(log.setting("cache_dtype") or "auto"), spec)
    options = EngineOptions(
        block_size=_int(log, "block_size", 0) or None,
        max_num_batched_tokens=_int(log, "max_num_batched_tokens", 0) or None,
    )
    tp = _int(log, "tp", 1)
    pool = vllm.pool(spec, k, v, tp, options, version)
    context = _int(log, "context", spec.max_position_embeddings or 0)
    cal.predicted.update(
        {"engine": f"vllm {version}", "block_bytes": pool.block_bytes, "block_size": pool.min_block_size, "tp": tp}
    )
    _vllm_budget(cal, version)
    avail = log.figure("available_kv_bytes")
    if avail is not None:
        lo, hi = max(int(avail.low), 0), max(int(avail.high), 0)
        blocks = (vllm.num_blocks(pool, lo), vllm.num_blocks(pool, hi))
        cal.predicted["kv_blocks"] = list(blocks)
        _add(cal, "kv_blocks", blocks, f"available KV memory {avail.text} // {pool.block_bytes:,} B per block")
        if context:
            if v0:
                tokens = (blocks[0] * pool.min_block_size, blocks[1] * pool.min_block_size)
            else:
                tokens = (
                    vllm.kv_cache_size_tokens(pool, lo, context),
                    vllm.kv_cache_size_tokens(pool, hi, context),
                )
            cal.predicted["kv_tokens"] = list(tokens)
            _add(cal, "kv_tokens", tokens, f"vLLM {version} 'GPU KV cache size' rule at max_model_len {context:,}")
            conc = (vllm.max_concurrency(pool, lo, context), vllm.max_concurrency(pool, hi, context))
            _add(cal, "max_concurrency", conc, f"blocks / {pool.blocks_per_request(context):,} blocks per request")
    elif (blocks_fig := log.figure("kv_blocks")) is not None and context:
        n = int(blocks_fig.value)
        tokens_exact = n * pool.min_block_size
        _add(
            cal,
            "kv_tokens",
            (tokens_exact, tokens_exact),
            f"{n:,} logged blocks x block {pool.min_block_size}",
            derived=True,
        )
        per_request = pool.blocks_per_request(context)
        _add(
            cal,
            "max_concurrency",
            (n / per_request, n / per_request),
            f"{n:,} logged blocks / {per_request:,} per request",
            derived=True,
        )
    elif (tokens_fig := log.figure("kv_tokens")) is not None and context and log.figure("max_concurrency"):
        n = int(tokens_fig.value) // pool.min_block_size
        per_request = pool.blocks_per_request(context)
        _add(
            cal,
            "max_concurrency",
            (n / per_request, n / per_request),
            f"{tokens_fig.text} logged tokens / block {pool.min_block_size} / {per_request:,} blocks per request",
            derived=True,
        )
    _vllm_refusal(cal, pool, context)


def _vllm_budget(cal: Calibration, version: str) -> None:
    """Available KV memory from the log's own measured inputs (vLLM gpu_worker determine_available_memory)."""
    log = cal.log
    parts = [log.figure(n) for n in ("weights_bytes", "activation_peak_bytes", "non_torch_bytes")]
    requested = log.figure("requested_memory_bytes")
    total, util = log.figure("total_gpu_memory_bytes"), log.setting("utilization")
    if requested is None and total is not None and isinstance(util, float):
        requested = Figure(int(total.value * util), "bytes", total.line, f"{total.text} x {util}", total.resolution)
    if requested is None or any(p is None for p in parts) or log.figure("available_kv_bytes") is None:
        return
    used = [p for p in parts if p is not None]
    graphs = log.figure("cuda_graph_bytes")
    subtract_graphs = (
        graphs is not None and version_tuple(version) >= VLLM_GRAPHS_SUBTRACTED_SINCE and log.generation == "V1"
    )
    if subtract_graphs and graphs is not None:
        used.append(graphs)
    low = requested.low - sum(p.high for p in used)
    high = requested.high - sum(p.low for p in used)
    cal.predicted["available_kv_bytes"] = [int(low), int(high)]
    what = "requested - weights - activation peak - non-torch" + (" - CUDA graphs" if subtract_graphs else "")
    _add(cal, "available_kv_bytes", (low, high), what + " (each as logged)", derived=True)


def _vllm_refusal(cal: Calibration, pool: object, context: int) -> None:
    from kvbudget.engines.vllm_pool import VllmPool

    refusal = cal.log.refusal
    if refusal is None or not isinstance(pool, VllmPool) or not context:
        return
    need = pool.blocks_per_request(context) * pool.block_bytes
    cal.predicted["needed_bytes_at_max_model_len"] = need
    if refusal.needed_bytes is not None:
        logged = Figure(refusal.needed_bytes, "bytes", refusal.line, "needed", 2**30 // 200)
        _add_fig(
            cal,
            "needed_bytes",
            logged,
            (need, need),
            f"{pool.blocks_per_request(context):,} blocks x {pool.block_bytes:,} B for one {context:,}-token request",
        )
    if refusal.available_bytes is not None and refusal.max_context is not None:
        avail = refusal.available_bytes
        lo, hi = avail - 2**30 // 200, avail + 2**30 // 200
        estimate = (_max_len(pool, lo, context), _max_len(pool, hi, context))
        cal.predicted["estimated_max_model_len"] = list(estimate)
        logged = Figure(refusal.max_context, "tokens", refusal.line, str(refusal.max_context))
        _add_fig(
            cal,
            "estimated_max_model_len",
            logged,
            estimate,
            "largest length whose blocks fit the available memory (vLLM estimate_max_model_len)",
        )


def _max_len(pool: object, available: int, upper: int) -> int:
    """vLLM estimate_max_model_len: binary search for the longest request that fits (kv_cache_utils.py)."""
    from kvbudget.engines.vllm_pool import VllmPool

    assert isinstance(pool, VllmPool)
    lo, hi = 0, upper
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if pool.blocks_per_request(mid) * pool.block_bytes <= available:
            lo = mid
        else:
            hi = mid - 1
    return lo


# ---- SGLang --------------------------------------------------------------------------------------


def _sglang(cal: Calibration) -> None:
    from kvbudget.engines import sglang

    log, spec = cal.log, cal.spec
    assert spec is not None
    tokens, k_fig, v_fig = log.figure("kv_tokens"), log.figure("k_bytes"), log.figure("v_bytes")
    k = v = _dtype(str(log.setting("cache_dtype") or "auto"), spec)
    tp = _int(log, "tp", 1)
    page = _int(log, "block_size", sglang.DEFAULT_PAGE_SIZE)
    layout = sglang.layout(spec, k, v, tp, EngineOptions(block_size=page), log.version or sglang.DEFAULT_VERSION)
    full, swa = sglang.pool_cells(layout)
    cal.predicted.update({"engine": f"sglang {log.version or sglang.DEFAULT_VERSION}", "cell_bytes": full, "tp": tp})
    if tokens is None or k_fig is None or v_fig is None or swa:
        return
    # SGLang MHATokenToKVPool: each layer's K and V buffers hold size + page_size slots (memory_pool.py)
    slots = int(tokens.value) + page
    kv = slots * full
    both = Figure(
        int(k_fig.value + v_fig.value),
        "bytes",
        k_fig.line,
        f"{k_fig.text} + {v_fig.text}",
        k_fig.resolution + v_fig.resolution,
    )
    cal.predicted["k_plus_v_bytes"] = kv
    _add_fig(
        cal, "k_plus_v_bytes", both, (kv, kv), f"({tokens.text} + page {page}) slots x {full:,} B per token per GPU"
    )


# ---- TensorRT-LLM --------------------------------------------------------------------------------


def _trtllm(cal: Calibration) -> None:
    """From the KV memory the log says it had: the budget's bytes per token, max_tokens, primary blocks (floor
    since 1.3, ceil before), the GiB allocated and the blocks one sequence may hold."""
    from kvbudget.engines import trtllm

    log, spec = cal.log, cal.spec
    assert spec is not None
    version = re.match(r"\d+(?:\.\d+)*", log.version or "")
    ver = version.group(0) if version else trtllm.DEFAULT_VERSION
    if not log.version:
        cal.notes.append(f"the log states no TensorRT-LLM version: rules of {ver} assumed")
    k = v = _dtype(str(log.setting("cache_dtype") or "auto"), spec)
    tp = _int(log, "tp", 1)
    batch = _int(log, "max_batch_size", trtllm.MAX_BATCH_SIZE)
    built = trtllm.layout(spec, k, v, tp, EngineOptions(max_batch_size=batch), ver)
    slope = trtllm.budget_bytes_per_token(spec, k, tp)
    fixed = (batch * _int(log, "pp", 1) + 1) * built.state_bytes
    cal.predicted.update({"engine": f"trtllm {ver}", "kv_bytes_per_token": slope, "tp": tp, "fixed_cost": fixed})
    _add(cal, "kv_bytes_per_token", (slope, slope), "get_cache_size_per_token: 2 x layers x kv_heads x head_dim // tp")
    block = trtllm.TOKENS_PER_BLOCK
    available = log.figure("available_kv_bytes") or log.figure("estimated_kv_bytes")
    logged_blocks = log.figure("kv_blocks")
    if available is not None:
        budget = (int(available.low), int(available.high))
        tokens = tuple(max((b - fixed) // slope, 0) for b in budget)
        note = f"(KV memory {available.text} - {fixed:,} B fixed) // {slope:,} B"
        _add(cal, "estimated_max_tokens", (tokens[0], tokens[1]), note)
        ceil = version_tuple(ver)[:2] < trtllm.FLOOR_BLOCKS_SINCE
        blocks = tuple(-(-t // block) if ceil else t // block for t in tokens)
        _add(cal, "kv_blocks", (blocks[0], blocks[1]), f"max_tokens / {block}, {'rounded up' if ceil else 'floored'}")
        basis = "predicted primary blocks"
    elif logged_blocks is not None:
        blocks = (int(logged_blocks.value), int(logged_blocks.value))
        basis = f"the logged {logged_blocks.text} primary blocks"
    else:
        return
    from_log = available is None  # tokens from the log's own block count: derived, not predicted
    _add(cal, "kv_tokens", (blocks[0] * block, blocks[1] * block), f"{basis} x {block}", derived=from_log)
    alloc = tuple(b * block * built.kv_bytes_per_token + fixed for b in blocks)
    note = f"{basis} x {block} x {built.kv_bytes_per_token:,} B allocated per token"
    _add(cal, "kv_cache_bytes", (alloc[0], alloc[1]), note)
    window = log.setting("window")
    if isinstance(window, int):
        per = -(-window // block)
        _add(cal, "blocks_per_sequence", (per, per), f"ceil(logged window {window:,} / {block})", derived=True)


# ---- llama.cpp / Ollama --------------------------------------------------------------------------


def _llamacpp(cal: Calibration) -> None:
    from kvbudget.engines import llamacpp

    log, spec = cal.log, cal.spec
    assert spec is not None
    if not log.caches:
        return
    first = log.caches[0]
    types = [name.split("(")[1].rstrip(")") for name, _ in first.parts] if first.kind != "recurrent" else []
    k = parse_cache_dtype(types[0] if types else "f16", what="log K type")
    v = parse_cache_dtype(types[1] if len(types) > 1 else (types[0] if types else "f16"), what="log V type")
    n_seq = _int(log, "n_seq", 1)
    n_ctx = _int(log, "context", 0) or (first.cells or 0) * (first.streams or 1)
    cells_from_log = not _int(log, "context", 0)  # n_ctx taken from the cache line's own cells
    fa = log.setting("flash_attn")
    options = EngineOptions(
        n_ubatch=_int(log, "n_ubatch", 512),
        kv_unified=bool(log.setting("kv_unified")) if log.setting("kv_unified") is not None else n_seq == 1,
        swa_full=bool(log.setting("swa_full")),
        flash_attn=fa not in (False, "disabled", "off", 0),
    )
    if log.generation == "llama_new_context_with_model":
        options = EngineOptions(n_ubatch=options.n_ubatch, kv_unified=True, flash_attn=options.flash_attn)
        n_seq = 1  # before the per-sequence streams, one cache of n_ctx cells served every sequence
    predicted = llamacpp.logged_caches(spec, k, v, n_ctx, n_seq, options)
    cal.predicted.update(
        {
            "engine": f"llamacpp {llamacpp.DEFAULT_VERSION}",
            "settings": {
                "n_ctx": n_ctx,
                "n_seq": n_seq,
                "kv_unified": options.kv_unified,
                "n_ubatch": options.n_ubatch,
            },
            "log_lines": [c.log_line() for c in predicted],
            "caches": [{"kind": c.kind, "bytes": c.bytes, "cells": c.cells, "layers": c.layers} for c in predicted],
        }
    )
    for logged, mine in zip(log.caches, predicted, strict=False):
        label = f"{logged.kind} cache"
        dtypes = f"{mine.first_type}/{mine.second_type}"
        what = f"{mine.layers} layers x {mine.cells:,} cells x {counted(mine.streams, 'stream')} ({dtypes})"
        _add_fig(cal, f"{label} bytes", logged.size, (mine.bytes, mine.bytes), what)
        if logged.cells is not None:
            _add_fig(
                cal,
                f"{label} cells",
                Figure(logged.cells, "tokens", logged.size.line, str(logged.cells)),
                (mine.cells, mine.cells),
                "cells per stream" + (" (n_ctx read from these cells)" if cells_from_log else ""),
                derived=cells_from_log,
            )
    if len(log.caches) != len(predicted):
        cal.notes.append(f"the log has {counted(len(log.caches), 'cache line')}, kvbudget predicts {len(predicted)}")


def _add(cal: Calibration, name: str, predicted: tuple[float, float], note: str, *, derived: bool = False) -> None:
    fig = cal.log.figure(name)
    if fig is not None:
        _add_fig(cal, name, fig, predicted, note, derived=derived)


def _add_fig(
    cal: Calibration, name: str, fig: Figure, predicted: tuple[float, float], note: str, *, derived: bool = False
) -> None:
    lo, hi = sorted(predicted)
    cal.rows.append(Row(name, fig, (lo, hi), note, derived or fig.derived))
