"""SGLang start-up logs (srt/model_executor/model_runner.py, srt/managers/scheduler.py).

* ``Load weight begin. avail mem=X GB`` / ``Load weight end. type=..., dtype=..., avail mem=X GB,
  mem usage=Y GB`` (Y: the weights as loaded);
* ``KV Cache is allocated. #tokens: N, K size: X GB, V size: X GB`` (one per TP rank); an MLA model's one
  latent buffer ``#tokens: N, KV size: X GB`` (0.4.x-0.5.x mem_cache/memory_pool.py MLATokenToKVPool); releases
  after 0.5.10 (the 0.5.18-era log in tests/data/logs) print the cache dtype first,
  ``KV Cache is allocated. dtype: torch.bfloat16, #tokens: N, ...``;
* ``max_total_num_tokens=N, chunked_prefill_size=..., max_prefill_tokens=..., max_running_requests=R,
  context_len=L, available_gpu_mem=X GB``;
* ``server_args=ServerArgs(...)`` with the user's settings.
"GB" is 2^30 bytes throughout: SGLang's get_available_gpu_memory divides by 1 << 30 (srt/utils).
"""

from __future__ import annotations

import re

from kvbudget.measure.logs.record import EngineLog, Figure
from kvbudget.measure.logs.rules import Rule, bytes_figure, count_rule, literal_pairs, put, rule, set_setting, size_rule
from kvbudget.measure.logs.text import number

NAME = "sglang"
NUM = r"(?P<num>\d+(?:\.\d+)?)"
DETECT = (
    "KV Cache is allocated",
    "max_total_num_tokens=",
    "Load weight begin",
    "Load weight end",
    "sglang",
    "ServerArgs(",
    "Memory pool end",
)

CONFIG_KEYS = {
    "model_path": "model",
    "tp_size": "tp",
    "pp_size": "pp",
    "context_length": "context",
    "mem_fraction_static": "utilization",
    "kv_cache_dtype": "cache_dtype",
    "page_size": "block_size",
    "chunked_prefill_size": "max_num_batched_tokens",
    "max_running_requests": "max_num_seqs",
    "disable_radix_cache": "disable_radix_cache",
    "disable_cuda_graph": "enforce_eager",  # no CUDA graphs: kvbudget's --enforce-eager / --disable-cuda-graph
    "quantization": "quantization",
    "dtype": "dtype",
}


def _config(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    for key, value in literal_pairs(m.group("body")).items():
        name = CONFIG_KEYS.get(key)
        if name:
            set_setting(log, name, value, line)
    if log.model is None and "model" in log.settings:
        log.model = log.settings["model"]


def _version(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    if log.version is None:
        log.version, log.version_line = m.group("v"), line


def _kv_allocated(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    put(log, "kv_tokens", Figure(number(m.group("tokens")), "tokens", line, m.group("tokens"), 0, rank), "min")
    if m.group("kv"):  # MLA: K and V are one latent buffer (MLATokenToKVPool)
        put(log, "kv_bytes", bytes_figure(m, "kv", None, line, rank, unit_text="GB", binary_gb=True), "min")
        return
    put(log, "k_bytes", bytes_figure(m, "k", None, line, rank, unit_text="GB", binary_gb=True), "min")
    put(log, "v_bytes", bytes_figure(m, "v", None, line, rank, unit_text="GB", binary_gb=True), "min")


def _summary(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    put(log, "max_total_num_tokens", Figure(int(m.group("tokens")), "tokens", line, m.group("tokens"), 0, rank), "min")
    for key, name in (("chunked", "max_num_batched_tokens"), ("running", "max_num_seqs"), ("ctx", "context")):
        if m.group(key):
            set_setting(log, name, int(m.group(key)), line, override=True)
    if m.group("running"):
        put(log, "max_running_requests", Figure(int(m.group("running")), "requests", line, m.group("running")), "min")
    if m.group("num"):
        put(
            log,
            "available_after_kv_bytes",
            bytes_figure(m, "num", None, line, rank, unit_text="GB", binary_gb=True),
            "min",
        )


RULES: tuple[Rule, ...] = (
    rule("sglang", r"sglang(?:\s+version|==|\s+v)\s*(?P<v>\d+\.\d+[\w.+\-]*)", _version, re.IGNORECASE, once="engine"),
    rule("ServerArgs(", r"ServerArgs\((?P<body>.*)\)?$", _config, once="engine"),
    size_rule(
        "Load weight begin", rf"Load weight begin\. avail mem={NUM} GB", "free_before_load_bytes", "min", binary_gb=True
    ),
    size_rule(
        "Load weight end",
        rf"Load weight end\..*?mem usage={NUM} GB",
        "weights_bytes",
        "max",
        binary_gb=True,
        once="rank",
    ),
    rule(
        "KV Cache is allocated",
        r"KV Cache is allocated\. (?:dtype: [\w.]+, )?#tokens: (?P<tokens>[\d,]+), (?:K size: (?P<k>\d+(?:\.\d+)?) GB, "
        r"V size: (?P<v>\d+(?:\.\d+)?) GB|KV size: (?P<kv>\d+(?:\.\d+)?) GB)",
        _kv_allocated,
        once="rank",
    ),
    size_rule(
        "Memory pool end", rf"Memory pool end\. avail mem={NUM} GB", "available_after_pool_bytes", "min", binary_gb=True
    ),
    size_rule(
        "Capture cuda graph end",
        rf"Capture cuda graph end\..*?mem usage={NUM} GB",
        "cuda_graph_bytes",
        "max",
        binary_gb=True,
    ),
    rule(
        "max_total_num_tokens=",
        r"max_total_num_tokens=(?P<tokens>\d+)(?:, chunked_prefill_size=(?P<chunked>-?\d+))?"
        r"(?:, max_prefill_tokens=\d+)?(?:, max_running_requests=(?P<running>\d+))?(?:, context_len=(?P<ctx>\d+))?"
        rf"(?:, available_gpu_mem={NUM} GB)?",
        _summary,
    ),
    count_rule("#tokens:", r"full_max_total_num_tokens=(?P<num>\d+)", "full_tokens", "tokens", "min"),
)
