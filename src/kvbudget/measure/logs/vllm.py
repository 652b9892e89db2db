"""vLLM start-up logs, V0 and V1, every format kvbudget has seen quoted (tests/data/logs/SOURCES.md).

* V0 0.6.4: ``Loading model weights took X GB`` (GiB despite the label, worker/model_runner.py) and
  one ``Memory profiling results: total_gpu_memory=... peak_torch_memory=... non_torch_memory=...
  kv_cache_size=... gpu_memory_utilization=...`` line (peak_torch includes the weights).
* V0 0.6.5 (PR #10511): the same profile over several lines (``model weights take``,
  ``available_kv_cache_memory``); 0.7-0.8: one sentence (``the current vLLM instance can use
  total_gpu_memory (A) x gpu_memory_utilization (U) = B; model weights take ...; the rest of the
  memory reserved for KV Cache is ...``); ``# GPU blocks`` / ``# CUDA blocks``.
* V1 (default from 0.8): ``Model loading took X GiB``, ``Available KV cache memory: X GiB`` (one
  line per worker; it can be negative), ``GPU KV cache size: N tokens``, ``Maximum concurrency for
  N tokens per request: X.XXx``; refusal ``... (X GiB KV cache is needed, which is larger than the
  available KV cache memory (Y GiB). ... the estimated maximum model length is N``.
"""

from __future__ import annotations

import re

from kvbudget.measure.logs.record import EngineLog, Figure, Refusal
from kvbudget.measure.logs.rules import (
    Rule,
    bytes_figure,
    count_rule,
    literal_pairs,
    put,
    rule,
    set_setting,
    setting_rule,
    size_rule,
)
from kvbudget.measure.logs.text import number, size

NAME = "vllm"
V1_DEFAULT_SINCE = (0, 8)  # vLLM 0.8.0 made the V1 engine the default (VLLM_USE_V1=1)
NUM = r"(?P<num>-?\d+(?:\.\d+)?)"

# Phrases that say which engine wrote a log, and which generation of it.
DETECT = (
    "vLLM",
    "vllm",
    "GPU KV cache size",
    "Available KV cache memory",
    "Memory profiling results",
    "the current vLLM instance",
    "# GPU blocks",
    "# CUDA blocks",
    "Maximum concurrency for",
    "Loading model weights took",
    "Model loading took",
    "estimated maximum model length",
)
V1_MARKS = (
    "V1 LLM engine",
    "EngineCore",
    "gpu_model_runner",
    "kv_cache_utils",
    "Available KV cache memory",
    "GPU KV cache size",
    "gpu_worker.py",
    "Model loading took",
    "KV cache is needed",
)
V0_MARKS = (
    "Memory profiling results",
    "Loading model weights took",
    "executor_base",
    "# CUDA blocks",
    "worker.py:",
    "the current vLLM instance can use",
    "model_runner.py:",
)

CONFIG_KEYS = {  # vLLM argument / config names -> calibrate's setting names
    "model": "model",
    "tensor_parallel_size": "tp",
    "pipeline_parallel_size": "pp",
    "max_model_len": "context",
    "max_seq_len": "context",
    "gpu_memory_utilization": "utilization",
    "kv_cache_dtype": "cache_dtype",
    "block_size": "block_size",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "max_num_seqs": "max_num_seqs",
    "enable_prefix_caching": "prefix_caching",
    "enforce_eager": "enforce_eager",
    "quantization": "quantization",
    "dtype": "dtype",
    "kv_cache_memory_bytes": "kv_cache_memory_bytes",
}


def _config(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    for key, value in literal_pairs(m.group("body")).items():
        name = CONFIG_KEYS.get(key)
        if name and not (name == "model" and key == "model_tag"):
            set_setting(log, name, value, line)
    model = log.settings.get("model")
    if model is not None and log.model is None:
        log.model = model


def _version(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    if log.version is None:
        log.version, log.version_line = m.group("v").lstrip("v"), line
    if m.group(0).startswith("Initializing a V1"):
        log.generation = "V1"


def _concurrency(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    text = m.group("x")
    digits = len(text.split(".")[1]) if "." in text else 0
    fig = Figure(float(text), "ratio", line, f"{text}x", 0.5 / 10**digits, rank)
    put(log, "max_concurrency", fig, "min")
    set_setting(log, "concurrency_tokens", number(m.group("tokens")), line)


def _refusal_v1(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    needed, _ = size(m.group("need"), "GiB")
    available, _ = size(m.group("avail"), "GiB")
    set_setting(log, "context", int(m.group("len")), line)
    log.refusal = Refusal(
        "kv_cache_too_small", line, m.group(0), needed, available, int(m.group("max")) if m.group("max") else None
    )


def _refusal_v0(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    set_setting(log, "context", int(m.group("len")), line)
    put(log, "kv_tokens", Figure(int(m.group("tokens")), "tokens", line, m.group("tokens")), "min")
    log.refusal = Refusal("max_seq_len_too_long", line, m.group(0), max_context=int(m.group("tokens")))


def _no_memory(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    log.refusal = Refusal("no_memory_for_cache", line, m.group(0))


def _flashinfer_sampler(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    set_setting(log, "flashinfer_sampler", m.group(0).startswith("Using FlashInfer"), line)


def _peak_torch(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    put(log, "peak_torch_bytes", bytes_figure(m, "num", None, line, rank), "max")


RULES: tuple[Rule, ...] = (
    rule("vLLM API server version", r"vLLM API server version (?P<v>[\w.+\-]+)", _version, once="engine"),
    # 0.7.x V0 prints "Initializing a V0 LLM engine (v0.7.2)", V1 "Initializing a V1 LLM engine (v0.8.5)"
    rule("LLM engine (v", r"Initializing an? (?:V[01] )?LLM engine \((?P<v>v[\w.+\-]+)\)", _version, once="engine"),
    # the API server's banner from 0.10: "▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.16.0"
    rule("█  version ", r"█\s+version (?P<v>\d+\.\d+[\w.+\-]*)", _version, once="engine"),
    rule("with config:", r"with config: (?P<body>.*)$", _config),
    rule("non-default args", r"non-default args: (?P<body>\{.*)$", _config),
    setting_rule("gpu_memory_utilization", r"gpu_memory_utilization[=\s(]+(?P<v>[01]\.\d+)", "utilization", float),
    setting_rule("Resolved architecture", r"Resolved architecture: (?P<v>\w+)", "architecture"),
    setting_rule("Using max model len", r"Using max model len (?P<v>\d+)", "context", int),
    setting_rule(
        "max_num_batched_tokens=",
        r"Chunked prefill is enabled with max_num_batched_tokens=(?P<v>\d+)",
        "max_num_batched_tokens",
        int,
    ),
    setting_rule("Setting attention block size to", r"Setting attention block size to (?P<v>\d+)", "block_size", int),
    size_rule(
        "Loading model weights took",
        rf"Loading model weights took {NUM} ?(?P<unit>GB|GiB)",
        "weights_bytes",
        "max",
        binary_gb=True,
        once="rank",
    ),  # V0 prints GiB labelled GB (float_memory_usage / GiB_bytes)
    size_rule(
        "Model loading took",
        rf"Model loading took {NUM} ?(?P<unit>GiB|GB)",
        "weights_bytes",
        "max",
        binary_gb=True,
        once="rank",
    ),
    size_rule("model weights take", rf"model weights take\s+{NUM}\s*GiB", "weights_bytes", "max"),
    size_rule("total_gpu_memory", rf"total_gpu_memory[\s=(]+{NUM}\s*GiB", "total_gpu_memory_bytes", "min"),
    size_rule(
        "vLLM instance can use",
        rf"the current vLLM instance can use.*?{NUM}\s*GiB\s*$",
        "requested_memory_bytes",
        "min",
    ),
    size_rule("non_torch_memory", rf"non_torch_memory(?: takes|=|\s)+{NUM}\s*GiB", "non_torch_bytes", "max"),
    size_rule(
        "activation peak memory", rf"activation peak memory(?: takes)?\s+{NUM}\s*GiB", "activation_peak_bytes", "max"
    ),
    rule("peak_torch_memory=", rf"peak_torch_memory={NUM}GiB", _peak_torch, once="rank"),
    size_rule("reserved for KV Cache is", rf"reserved for KV Cache is\s+{NUM}\s*GiB", "available_kv_bytes", "min"),
    size_rule("available_kv_cache_memory", rf"available_kv_cache_memory\s+{NUM}\s*GiB", "available_kv_bytes", "min"),
    size_rule("kv_cache_size=", rf"kv_cache_size={NUM}GiB", "available_kv_bytes", "min"),
    size_rule(
        "Available KV cache memory",
        rf"Available KV cache memory: {NUM} GiB",
        "available_kv_bytes",
        "min",
        once="rank",
    ),
    size_rule("took", rf"(?:Graph capturing finished|CUDA graph).*?took {NUM} GiB", "cuda_graph_bytes", "max"),
    count_rule(
        "blocks:",
        r"(?:#\s*)?(?:GPU|CUDA) blocks:\s*(?P<num>\d[\d,]*\d|\d)",
        "kv_blocks",
        "blocks",
        "min",
        re.IGNORECASE,
        once="engine",
    ),
    count_rule(
        "GPU KV cache size",
        r"GPU KV cache size: (?P<num>-?\d[\d,]*\d|\d) tokens",
        "kv_tokens",
        "tokens",
        "min",
        once="engine",
    ),
    rule(
        "Maximum concurrency for",
        r"Maximum concurrency for (?P<tokens>[\d,]+) tokens per request: (?P<x>\d+(?:\.\d+)?)x",
        _concurrency,
        once="engine",
    ),
    rule(
        "KV cache is needed",
        r"max seq len \((?P<len>\d+)\), \((?P<need>[\d.]+) GiB KV cache is needed, which is larger than the "
        r"available KV cache memory \((?P<avail>-?[\d.]+) GiB\)\.(?: Based on the available memory, the "
        r"estimated maximum model length is (?P<max>\d+))?",
        _refusal_v1,
    ),
    rule(
        "is larger than the maximum number of tokens",
        r"max seq len \((?P<len>\d+)\) is larger than the maximum number of tokens that can be stored in KV "
        r"cache \((?P<tokens>\d+)\)",
        _refusal_v0,
    ),
    rule("No available memory for the cache blocks", r"No available memory for the cache blocks.*", _no_memory),
    # the top-k/top-p sampler the engine took (v1/sample/ops/topk_topp_sampler.py TopKTopPSampler.__init__, 0.9+): what
    # --flashinfer-sampler plans; the fallback warning is matched by its second half, which a wrapped copy keeps whole
    rule("Using FlashInfer for top-p", r"Using FlashInfer for top-p & top-k sampling", _flashinfer_sampler),
    rule(
        "Falling back to the PyTorch-native implementation of top-p",
        r"Falling back to the PyTorch-native implementation of top-p & top-k sampling",
        _flashinfer_sampler,
    ),
    # later wordings of the same decision (0.33.0 flashinfer_sampler_supported): unavailable, or turned off
    rule(
        "FlashInfer top-p/top-k sampling",
        r"FlashInfer top-p/top-k sampling (?:unavailable|disabled)",
        _flashinfer_sampler,
    ),
)


def finish(log: EngineLog, v1_marks: int, v0_marks: int) -> None:
    """Derived figures and the generation, after every line was read."""
    if log.generation is None:
        if log.version is not None:
            from kvbudget.engines import version_tuple

            log.generation = "V1" if version_tuple(log.version) >= V1_DEFAULT_SINCE else "V0"
        elif v1_marks or v0_marks:
            log.generation = "V1" if v1_marks >= v0_marks else "V0"
    peak, weights = log.measured.get("peak_torch_bytes"), log.measured.get("weights_bytes")
    if peak is not None and weights is not None and "activation_peak_bytes" not in log.measured:
        # vLLM 0.6.4 peak_torch_memory counts the weights (worker.py determine_num_available_blocks)
        value = int(peak.value) - int(weights.value)
        res = peak.resolution + weights.resolution
        log.measured["activation_peak_bytes"] = Figure(
            value, "bytes", peak.line, f"{peak.text} peak_torch - {weights.text} weights", res, peak.rank, derived=True
        )
    avail = log.measured.get("available_kv_bytes")
    if avail is not None and avail.value <= 0 and (log.refusal is None or log.refusal.kind == "no_memory_for_cache"):
        # V1 gpu_worker.py logs a negative "Available KV cache memory" and kv_cache_utils.py
        # check_enough_kv_cache_memory then raises "No available memory for the cache blocks" (0.10, 0.11)
        text = f"Available KV cache memory: {avail.text}"
        line = avail.line
        if log.refusal is not None:
            text, line = f"{text} (line {avail.line}); {log.refusal.text.strip()}", log.refusal.line
        log.refusal = Refusal("no_memory_for_cache", line, text, available_bytes=int(avail.value))
    ctx, tokens = log.settings.get("context"), log.settings.get("concurrency_tokens")
    if ctx is None and tokens is not None:
        log.settings["context"] = tokens
