"""TensorRT-LLM start-up logs (PyTorch backend: tensorrt_llm/_torch/pyexecutor/_util.py KvCacheCreator,
resource_manager.py; the C++ KV cache manager, batch_manager/kvCacheManager.cpp):

* ``Memory used after loading model weights (inside torch) in memory usage profiling: X GiB`` (the weights);
* ``Memory dynamically allocated during inference (inside torch) ...: X GiB`` and ``Memory used outside torch
  (e.g., NCCL and CUDA graphs) ...: X GiB``;
* ``Peak memory during memory usage profiling (torch + non-torch): P GiB, available KV cache memory when
  calculating max tokens: A GiB, fraction is set F, kv size is K`` (1.2) or ``kv size per token is K bytes/token
  [+ M bytes fixed cost]`` (main), ``. device total memory T GiB, , tmp kv_mem M GiB`` / ``temporary kv cache
  memory during profiling M GiB``;
* ``Estimated max memory in KV cache : X GiB``; ``Both free_gpu_memory_fraction and max_tokens are set (to F and
  N, respectively)``;
* ``Max KV cache blocks per sequence: N [window size=W], tokens per block=B, primary blocks=P, secondary
  blocks=S``; ``Number of tokens per block: B.``; ``[MemUsageChange] Allocated X GiB for max tokens in paged KV
  cache (N).``; ``max_seq_len=L, max_num_requests=R, max_num_tokens=T, max_batch_size=M``.
"""

from __future__ import annotations

import re

from kvbudget.measure.logs.record import EngineLog, Figure
from kvbudget.measure.logs.rules import Rule, bytes_figure, count_rule, put, rule, set_setting, size_rule

NAME = "trtllm"
NUM = r"(?P<num>\d+(?:\.\d+)?)"


def _version(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    if log.version is None:
        log.version, log.version_line = m.group("v"), line


def _peak(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    put(log, "peak_bytes", bytes_figure(m, "peak", None, line, rank), "max")
    put(log, "available_kv_bytes", bytes_figure(m, "avail", None, line, rank), "min")
    set_setting(log, "utilization", float(m.group("fraction")), line)
    put(log, "kv_bytes_per_token", Figure(int(m.group("kv")), "bytes", line, m.group("kv")), "first")
    if m.group("fixed"):
        put(log, "state_fixed_bytes", Figure(int(m.group("fixed")), "bytes", line, m.group("fixed")), "first")
    put(log, "total_gpu_memory_bytes", bytes_figure(m, "total", None, line, rank), "min")
    put(log, "tmp_kv_bytes", bytes_figure(m, "tmp", None, line, rank), "max")


# The KV cache manager is built twice when KvCacheCreator estimates (_util.py try_prepare_estimation, then
# configure_kv_cache_capacity): first the estimation cache the dummy pass runs in, then the pool, each printing its
# blocks and "Allocated ... for max tokens in paged KV cache". The pool is the last of them, as the limits line is;
# the estimation cache is the smaller one before 1.3 (the DGX Spark log: 8,224 tokens, then 86,720), so the lowest
# would read it as the pool.
def _blocks(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    put(log, "blocks_per_sequence", Figure(int(m.group("per")), "blocks", line, m.group("per"), 0, rank), "last")
    put(log, "kv_blocks", Figure(int(m.group("primary")), "blocks", line, m.group("primary"), 0, rank), "last")
    set_setting(log, "block_size", int(m.group("tpb")), line)
    set_setting(log, "window", int(m.group("window")), line, override=True)


def _allocated(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    put(log, "kv_cache_bytes", bytes_figure(m, "num", None, line, rank), "last")
    put(log, "kv_tokens", Figure(int(m.group("tokens")), "tokens", line, m.group("tokens"), 0, rank), "last")


def _limits(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    for key, name in (
        ("seq", "context"),
        ("requests", "max_num_requests"),
        ("tokens", "max_num_batched_tokens"),
        ("batch", "max_batch_size"),
    ):
        set_setting(log, name, int(m.group(key)), line, override=True)


def _both(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    put(log, "estimated_max_tokens", Figure(int(m.group("tokens")), "tokens", line, m.group("tokens"), 0, rank), "min")


GIB = rf"{NUM} GiB"
RULES: tuple[Rule, ...] = (
    rule("TensorRT-LLM version", r"TensorRT-LLM version: (?P<v>\d+\.\d+[\w.+\-]*)", _version),
    size_rule(
        "after loading model weights (inside torch)",
        rf"Memory used after loading model weights \(inside torch\) in memory usage profiling: {GIB}",
        "weights_bytes",
        "max",
    ),
    size_rule(
        "dynamically allocated during inference",
        rf"Memory dynamically allocated during inference \(inside torch\) in memory usage profiling: {GIB}",
        "activation_peak_bytes",
        "max",
    ),
    size_rule(
        "Memory used outside torch",
        rf"Memory used outside torch \(e\.g\., NCCL and CUDA graphs\) in memory usage profiling: {GIB}",
        "non_torch_bytes",
        "max",
    ),
    rule(
        "Peak memory during memory usage profiling",
        r"Peak memory during memory usage profiling \(torch \+ non-torch\): (?P<peak>\d+(?:\.\d+)?) GiB, available KV "
        r"cache memory when calculating max tokens: (?P<avail>\d+(?:\.\d+)?) GiB, fraction is set "
        r"(?P<fraction>\d+(?:\.\d+)?), kv size (?:per token )?is (?P<kv>\d+)(?: bytes/token)?"
        r"(?: \+ (?P<fixed>\d+) bytes fixed cost)?\.? device total memory (?P<total>\d+(?:\.\d+)?) GiB, ,? ?"
        r"(?:tmp kv_mem|temporary kv cache memory during profiling) (?P<tmp>\d+(?:\.\d+)?) GiB",
        _peak,
    ),
    size_rule("Estimated max memory in KV cache", rf"Estimated max memory in KV cache : {GIB}", "estimated_kv_bytes"),
    count_rule(
        "Estimated max tokens in KV cache",
        r"Estimated max tokens in KV cache : (?P<num>\d+)",
        "estimated_max_tokens",
        "tokens",
    ),
    rule(
        "Both free_gpu_memory_fraction and max_tokens are set",
        r"Both free_gpu_memory_fraction and max_tokens are set \(to [\d.]+ and (?P<tokens>\d+), respectively\)",
        _both,
    ),
    rule(
        "Max KV cache blocks per sequence",
        r"Max KV cache blocks per sequence: (?P<per>\d+) \[window size=(?P<window>\d+)\], tokens per block="
        r"(?P<tpb>\d+), primary blocks=(?P<primary>\d+)",
        _blocks,
    ),
    rule(
        "for max tokens in paged KV cache",
        rf"Allocated {GIB} for max tokens in paged KV cache \((?P<tokens>\d+)\)",
        _allocated,
    ),
    rule(
        "max_num_requests=",
        r"max_seq_len=(?P<seq>\d+), max_num_requests=(?P<requests>\d+), max_num_tokens=(?P<tokens>\d+), "
        r"max_batch_size=(?P<batch>\d+)",
        _limits,
    ),
)
