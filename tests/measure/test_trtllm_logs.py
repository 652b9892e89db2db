"""TensorRT-LLM's start-up lines, read and reconciled: a real excerpt (triton-inference-server/tutorials PR #150,
tests/data/logs/SOURCES.md) and lines in the two formats of the peak-memory line (_util.py KvCacheCreator, the
1.2 and main format strings) carrying the figures of a December 2025 gpt-oss-120b log."""

from __future__ import annotations

import json
from pathlib import Path

from kvbudget.measure.calibrate import calibrate
from kvbudget.measure.logs import read_log
from kvbudget.measure.logs.text import size
from kvbudget.plan.from_log import log_inputs
from tests.helpers import TINYLLAMA

LOGS = Path(__file__).parent.parent / "data" / "logs" / "trtllm"
GiB = 2**30
GPT_OSS_1_2 = [
    "[TRT-LLM] [I] Memory used after loading model weights (inside torch) in memory usage profiling: 63.52 GiB",
    "[TRT-LLM] [I] Memory used outside torch (e.g., NCCL and CUDA graphs) in memory usage profiling: 49.28 GiB",
    "[TRT-LLM] [I] Peak memory during memory usage profiling (torch + non-torch): 113.65 GiB, available KV cache "
    "memory when calculating max tokens: 5.95 GiB, fraction is set 0.8999999761581421, kv size is 73728. device "
    "total memory 119.70 GiB, , tmp kv_mem 0.56 GiB",
    "[TRT-LLM] [I] Estimated max memory in KV cache : 5.95 GiB",
    "[TRT-LLM] [W] Both free_gpu_memory_fraction and max_tokens are set (to 0.9 and 86711, respectively). "
    "The smaller value will be used.",
    "[TensorRT-LLM][INFO] Number of tokens per block: 32.",
    "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 5.95 GiB for max tokens in paged KV cache (86720).",
    "[TRT-LLM] [I] max_seq_len=86720, max_num_requests=64, max_num_tokens=8192, max_batch_size=64",
]


def test_the_tutorial_excerpt_reconciles(tmp_path: Path) -> None:
    log = read_log(LOGS / "pytorch-tutorials-pr150-blocks.log")
    assert log.engine == "trtllm"
    assert int(log.measured["kv_blocks"].value) == 116_617 and int(log.measured["kv_tokens"].value) == 3_731_744
    model = tmp_path / "config.json"
    model.write_text(json.dumps(TINYLLAMA))
    cal = calibrate(log, str(model))
    kinds = {row.figure: ("derived" if row.derived else "compared", row.consistent) for row in cal.rows}
    # tokens are the logged blocks x 32 and blocks per sequence the logged window / 32: derived from the log;
    # the allocated bytes test kvbudget's 22,528 B per token
    assert kinds == {
        "kv_tokens": ("derived", True),
        "kv_cache_bytes": ("compared", True),
        "blocks_per_sequence": ("derived", True),
    }
    assert cal.summary() == {"compared": 1, "agree": 1, "derived": 2, "derived_consistent": 2}


def test_the_1_2_peak_line_and_a_gpt_oss_budget_reconcile(tmp_path: Path) -> None:
    path = tmp_path / "trtllm.log"
    path.write_text("\n".join(GPT_OSS_1_2) + "\n")
    log = read_log(path)
    assert log.engine == "trtllm"
    assert int(log.measured["kv_bytes_per_token"].value) == 73_728
    assert log.setting("utilization") == 0.8999999761581421
    assert log.setting("max_batch_size") == 64 and log.setting("context") == 86_720
    cal = calibrate(log, "gpt-oss-120b")
    rows = {row.figure: row for row in cal.rows}
    assert rows["kv_bytes_per_token"].agrees  # every one of the 36 layers at full length: no window on V1
    # the budget printed as 5.95 GiB (± 0.005 GiB) holds 86,711 tokens among its values
    assert rows["estimated_max_tokens"].agrees
    assert rows["kv_tokens"].agrees and rows["kv_cache_bytes"].agrees  # 86,720 = 2,710 x 32


def test_from_log_gives_the_plan_the_profiled_total_and_overhead(tmp_path: Path) -> None:
    path = tmp_path / "trtllm.log"
    path.write_text("\n".join(GPT_OSS_1_2) + "\n")
    inputs = log_inputs(read_log(path))
    assert inputs.engine.name == "trtllm"
    gib = {text: size(text, "GiB")[0] for text in ("119.70", "113.65", "63.52", "0.56")}
    assert inputs.gpu_memory is not None and inputs.gpu_memory.bytes == gib["119.70"]
    assert inputs.overhead is not None  # peak 113.65 - weights 63.52 - temporary KV 0.56
    assert inputs.overhead.bytes == gib["113.65"] - gib["63.52"] - gib["0.56"]
    # the plan's pool is then the fraction of what is left: (119.70 - 63.52 - 49.57) x 0.9 = 5.95 GiB
    left = inputs.gpu_memory.bytes - gib["63.52"] - inputs.overhead.bytes
    assert round(left * 0.9 / GiB, 2) == 5.95


def test_the_pool_is_the_last_allocation_not_the_estimation_cache_before_it(tmp_path: Path) -> None:
    """The DGX Spark log (1.1.0rc3, tests/data/memory/trtllm_logs.csv) allocates twice: the estimation cache the dummy
    pass runs in (8,224 tokens, 0.56 GiB), then, after the profile, the pool (86,720 tokens, 5.95 GiB); its limits
    line is printed after each. The reader takes the pool, and the plan reconciles with it."""
    estimation = [
        "[TRT-LLM] [W] Adjusted max_seq_len to 8224",
        "[TensorRT-LLM][INFO] Number of tokens per block: 32.",
        "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 0.56 GiB for max tokens in paged KV cache (8224).",
        "[TRT-LLM] [I] max_seq_len=8224, max_num_requests=64, max_num_tokens=8192, max_batch_size=64",
    ]
    path = tmp_path / "trtllm.log"
    path.write_text("\n".join(estimation + GPT_OSS_1_2) + "\n")
    log = read_log(path)
    assert int(log.measured["kv_tokens"].value) == 86_720
    assert round(log.measured["kv_cache_bytes"].value / GiB, 2) == 5.95
    assert log.setting("context") == 86_720
    rows = {row.figure: row for row in calibrate(log, "gpt-oss-120b").rows}
    assert rows["kv_tokens"].agrees and rows["kv_cache_bytes"].agrees
