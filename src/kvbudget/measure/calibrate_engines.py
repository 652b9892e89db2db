"""Each engine's predictions of what its start-up log states (measure/calibrate.py pairs them with the logged
figures): vLLM's pool, blocks, budget and refusals, SGLang's cells, TensorRT-LLM's blocks and allocation, and
llama.cpp's (and Ollama's) cache lines, each from the engine's own module fed the log's measured inputs."""

from __future__ import annotations

import re

from kvbudget.engines import version_tuple
from kvbudget.engines.base import EngineOptions
from kvbudget.measure.calibrate import Calibration, add, add_figure, cache_dtype, setting_int
from kvbudget.measure.logs.record import Figure
from kvbudget.model.spec import FullAttention
from kvbudget.precision import parse_cache_dtype
from kvbudget.units import counted

VLLM_GRAPHS_SUBTRACTED_SINCE = (0, 21)  # vLLM V1 gpu_worker: KV memory excludes CUDA graph memory from 0.21


# ---- vLLM ----------------------------------------------------------------------------------------


def predict_vllm(cal: Calibration) -> None:
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
    k = v = cache_dtype(str(log.setting("cache_dtype") or "auto"), spec)
    options = EngineOptions(
        block_size=setting_int(log, "block_size", 0) or None,
        max_num_batched_tokens=setting_int(log, "max_num_batched_tokens", 0) or None,
    )
    tp = setting_int(log, "tp", 1)
    pool = vllm.pool(spec, k, v, tp, options, version)
    context = setting_int(log, "context", spec.max_position_embeddings or 0)
    cal.predicted.update(
        {"engine": f"vllm {version}", "block_bytes": pool.block_bytes, "block_size": pool.min_block_size, "tp": tp}
    )
    _vllm_budget(cal, version)
    avail = log.figure("available_kv_bytes")
    if avail is not None:
        lo, hi = max(int(avail.low), 0), max(int(avail.high), 0)
        blocks = (vllm.num_blocks(pool, lo), vllm.num_blocks(pool, hi))
        cal.predicted["kv_blocks"] = list(blocks)
        add(cal, "kv_blocks", blocks, f"available KV memory {avail.text} // {pool.block_bytes:,} B per block")
        if context:
            if v0:
                tokens = (blocks[0] * pool.min_block_size, blocks[1] * pool.min_block_size)
            else:
                tokens = (
                    vllm.kv_cache_size_tokens(pool, lo, context),
                    vllm.kv_cache_size_tokens(pool, hi, context),
                )
            cal.predicted["kv_tokens"] = list(tokens)
            add(cal, "kv_tokens", tokens, f"vLLM {version} 'GPU KV cache size' rule at max_model_len {context:,}")
            conc = (vllm.max_concurrency(pool, lo, context), vllm.max_concurrency(pool, hi, context))
            add(cal, "max_concurrency", conc, f"blocks / {pool.blocks_per_request(context):,} blocks per request")
    elif (blocks_fig := log.figure("kv_blocks")) is not None and context:
        n = int(blocks_fig.value)
        tokens_exact = n * pool.min_block_size
        add(
            cal,
            "kv_tokens",
            (tokens_exact, tokens_exact),
            f"{n:,} logged blocks x block {pool.min_block_size}",
            derived=True,
        )
        _logged_concurrency(cal, n, pool.blocks_per_request(context), f"{n:,} logged blocks")
    elif (tokens_fig := log.figure("kv_tokens")) is not None and context and log.figure("max_concurrency"):
        n = int(tokens_fig.value) // pool.min_block_size
        what = f"{tokens_fig.text} logged tokens / block {pool.min_block_size}"
        _logged_concurrency(cal, n, pool.blocks_per_request(context), what, " blocks")
    _vllm_refusal(cal, pool, context)


def _logged_concurrency(cal: Calibration, blocks: int, per_request: int, what: str, unit: str = "") -> None:
    """vLLM's "Maximum concurrency" from the blocks its log states: blocks / blocks one request holds."""
    note = f"{what} / {per_request:,}{unit} per request"
    add(cal, "max_concurrency", (blocks / per_request, blocks / per_request), note, derived=True)


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
    add(cal, "available_kv_bytes", (low, high), what + " (each as logged)", derived=True)


def _vllm_refusal(cal: Calibration, pool: object, context: int) -> None:
    from kvbudget.engines.vllm_pool import VllmPool

    refusal = cal.log.refusal
    if refusal is None or not isinstance(pool, VllmPool) or not context:
        return
    need = pool.blocks_per_request(context) * pool.block_bytes
    cal.predicted["needed_bytes_at_max_model_len"] = need
    if refusal.needed_bytes is not None:
        logged = Figure(refusal.needed_bytes, "bytes", refusal.line, "needed", 2**30 // 200)
        add_figure(
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
        add_figure(
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


def predict_sglang(cal: Calibration) -> None:
    from kvbudget.engines import sglang

    log, spec = cal.log, cal.spec
    assert spec is not None
    tokens, k_fig, v_fig = log.figure("kv_tokens"), log.figure("k_bytes"), log.figure("v_bytes")
    latent = log.figure("kv_bytes")  # an MLA model's one latent buffer ("KV size")
    k = v = cache_dtype(str(log.setting("cache_dtype") or "auto"), spec)
    tp = setting_int(log, "tp", 1)
    page = setting_int(log, "block_size", sglang.DEFAULT_PAGE_SIZE)
    layout = sglang.layout(spec, k, v, tp, EngineOptions(block_size=page), log.version or sglang.DEFAULT_VERSION)
    full, swa = sglang.pool_cells(layout)
    cal.predicted.update({"engine": f"sglang {log.version or sglang.DEFAULT_VERSION}", "cell_bytes": full, "tp": tp})
    if tokens is None or swa or ((k_fig is None or v_fig is None) and latent is None):
        return
    # SGLang MHATokenToKVPool: each layer's K and V buffers hold size + page_size slots; MLATokenToKVPool one latent
    # buffer of kv_lora_rank + qk_rope_head_dim a slot, the same size + page_size slots (mem_cache/memory_pool.py)
    slots = int(tokens.value) + page
    kv = slots * full
    if k_fig is not None and v_fig is not None:
        both = Figure(
            int(k_fig.value + v_fig.value),
            "bytes",
            k_fig.line,
            f"{k_fig.text} + {v_fig.text}",
            k_fig.resolution + v_fig.resolution,
        )
    else:
        assert latent is not None
        both = latent
    cal.predicted["k_plus_v_bytes"] = kv
    add_figure(
        cal, "k_plus_v_bytes", both, (kv, kv), f"({tokens.text} + page {page}) slots x {full:,} B per token per GPU"
    )


# ---- TensorRT-LLM --------------------------------------------------------------------------------


def predict_trtllm(cal: Calibration) -> None:
    """From the KV memory the log says it had: the budget's bytes per token, max_tokens, primary blocks (floor
    since 1.3, ceil before), the GiB allocated and the blocks one sequence may hold."""
    from kvbudget.engines import trtllm

    log, spec = cal.log, cal.spec
    assert spec is not None
    version = re.match(r"\d+(?:\.\d+)*", log.version or "")
    ver = version.group(0) if version else trtllm.DEFAULT_VERSION
    if not log.version:
        cal.notes.append(f"the log states no TensorRT-LLM version: rules of {ver} assumed")
    k = v = cache_dtype(str(log.setting("cache_dtype") or "auto"), spec)
    tp = setting_int(log, "tp", 1)
    batch = setting_int(log, "max_batch_size", trtllm.MAX_BATCH_SIZE)
    built = trtllm.layout(spec, k, v, tp, EngineOptions(max_batch_size=batch), ver)
    slope = trtllm.budget_bytes_per_token(spec, k, tp)
    fixed = (batch * setting_int(log, "pp", 1) + 1) * built.state_bytes
    cal.predicted.update({"engine": f"trtllm {ver}", "kv_bytes_per_token": slope, "tp": tp, "fixed_cost": fixed})
    add(cal, "kv_bytes_per_token", (slope, slope), "get_cache_size_per_token: 2 x layers x kv_heads x head_dim // tp")
    block = trtllm.TOKENS_PER_BLOCK
    available = log.figure("available_kv_bytes") or log.figure("estimated_kv_bytes")
    logged_blocks = log.figure("kv_blocks")
    if available is not None:
        budget = (int(available.low), int(available.high))
        tokens = tuple(max((b - fixed) // slope, 0) for b in budget)
        note = f"(KV memory {available.text} - {fixed:,} B fixed) // {slope:,} B"
        add(cal, "estimated_max_tokens", (tokens[0], tokens[1]), note)
        ceil = version_tuple(ver)[:2] < trtllm.FLOOR_BLOCKS_SINCE
        blocks = tuple(-(-t // block) if ceil else t // block for t in tokens)
        add(cal, "kv_blocks", (blocks[0], blocks[1]), f"max_tokens / {block}, {'rounded up' if ceil else 'floored'}")
        basis = "predicted primary blocks"
    elif logged_blocks is not None:
        blocks = (int(logged_blocks.value), int(logged_blocks.value))
        basis = f"the logged {logged_blocks.text} primary blocks"
    else:
        return
    from_log = available is None  # tokens from the log's own block count: derived, not predicted
    add(cal, "kv_tokens", (blocks[0] * block, blocks[1] * block), f"{basis} x {block}", derived=from_log)
    alloc = tuple(b * block * built.kv_bytes_per_token + fixed for b in blocks)
    note = f"{basis} x {block} x {built.kv_bytes_per_token:,} B allocated per token"
    add(cal, "kv_cache_bytes", (alloc[0], alloc[1]), note)
    window = log.setting("window")
    if isinstance(window, int):
        per = -(-window // block)
        add(cal, "blocks_per_sequence", (per, per), f"ceil(logged window {window:,} / {block})", derived=True)


# ---- llama.cpp / Ollama --------------------------------------------------------------------------


def predict_llamacpp(cal: Calibration) -> None:
    from kvbudget.engines import llamacpp

    log, spec = cal.log, cal.spec
    assert spec is not None
    if not log.caches:
        return
    first = log.caches[0]
    types = [name.split("(")[1].rstrip(")") for name, _ in first.parts] if first.kind != "recurrent" else []
    k = parse_cache_dtype(types[0] if types else "f16", what="log K type")
    v = parse_cache_dtype(types[1] if len(types) > 1 else (types[0] if types else "f16"), what="log V type")
    n_seq = setting_int(log, "n_seq", 1)
    n_ctx = setting_int(log, "context", 0) or (first.cells or 0) * (first.streams or 1)
    cells_from_log = not setting_int(log, "context", 0)  # n_ctx taken from the cache line's own cells
    fa = log.setting("flash_attn")
    options = EngineOptions(
        n_ubatch=setting_int(log, "n_ubatch", 512),
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
        add_figure(cal, f"{label} bytes", logged.size, (mine.bytes, mine.bytes), what)
        if logged.cells is not None:
            add_figure(
                cal,
                f"{label} cells",
                Figure(logged.cells, "tokens", logged.size.line, str(logged.cells)),
                (mine.cells, mine.cells),
                "cells per stream" + (" (n_ctx read from these cells)" if cells_from_log else ""),
                derived=cells_from_log,
            )
    if len(log.caches) != len(predicted):
        cal.notes.append(f"the log has {counted(len(log.caches), 'cache line')}, kvbudget predicts {len(predicted)}")
