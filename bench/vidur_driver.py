"""Runs Vidur (Microsoft's per-iteration serving simulator) on a request trace and prints its figures.

This module runs under *Vidur's* Python (its own virtual environment, outside this repository), never
under kvbudget's: it imports only Vidur and the standard library. ``bench/vidur_compare.py`` writes
the trace, calls this with Vidur's interpreter and puts the result next to kvbudget's simulator.

Set-up, as issue 20's comparison: one replica of Llama-3-8B on an A100 (the only device Vidur ships a
Llama-3-8B profile for), tensor parallel 1, Vidur's vLLM replica scheduler (recompute preemption of
the newest request, vLLM V0's 1% watermark), ``--num-blocks`` blocks of 16 tokens (2,799: the issue's
pool), the trace replayed open-loop (``trace_replay`` generator: arrival, prompt and output tokens per
request).

Vidur's attention profile (``data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/attention.csv``)
is stored with Git LFS and may be absent from a checkout; then ``attention_profile`` writes a stand-in
from a roofline whose constants were read off that file's own rows (see there). It changes only the
iteration times Vidur predicts, not the work Vidur does per iteration, which is what the CPU seconds
measure.

CPU seconds are split: ``setup_cpu_s`` (loading or training the execution-time models, cached by
Vidur under ``cache/`` after the first run, and reading the trace) and ``run_cpu_s`` (the event loop:
the per-iteration simulation itself).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from importlib import import_module
from pathlib import Path
from typing import Any

N_EMBD, N_Q_HEAD, N_KV_HEAD, HEAD_DIM = 4096, 32, 8, 128  # Llama-3-8B
KV_BYTES_PER_TOKEN_LAYER = 2 * N_KV_HEAD * HEAD_DIM * 2  # K and V, bf16: 4,096 bytes
# Fitted to Vidur's A100 Llama-3-8B attention.csv (FlashInfer rows): decode at 4 GPUs, 104 requests of
# 6,400 tokens, 0.429 ms (681 MB of KV a GPU: 1.6 TB/s) and one request of 6,656 tokens 0.024 ms (the
# fixed launch floor); prefill at 1 GPU, a 64-token chunk on 0 cached tokens 0.011 ms and on 4,096
# cached tokens 0.064 ms (4.3 GFLOP in 0.053 ms over the floor: 82 TFLOP/s at 64 tokens, rising with
# the chunk; capped at 180 TFLOP/s, FlashAttention-2's published A100 forward throughput).
DECODE_FLOOR_MS, DECODE_BYTES_PER_S = 0.02, 1.6e12
PREFILL_FLOOR_MS, PREFILL_FLOPS_64, PREFILL_FLOPS_MAX = 0.011, 82e12, 180e12
HEADER = (
    "time_stats.attn_prefill.median,time_stats.attn_decode.median,time_stats.attn_kv_cache_save.median,"
    "n_embd,n_q_head,n_kv_head,block_size,num_tensor_parallel_workers,max_model_len,batch_size,"
    "prefill_chunk_size,kv_cache_size,is_prefill,attention_backend"
)


def attention_profile(path: Path, max_tokens: int, max_batch: int) -> None:
    """A stand-in for Vidur's Llama-3-8B A100 attention profile, one GPU, blocks of 16 (see above)."""
    rows = [HEADER]
    tail = f"{N_EMBD},{N_Q_HEAD},{N_KV_HEAD},16,1,{max_tokens}"
    for chunk in (16, 32, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384):
        if chunk > max_tokens:
            break
        for kv in range(0, max_tokens - chunk + 1, 256):
            flops = 4 * chunk * (kv + chunk / 2) * N_Q_HEAD * HEAD_DIM  # QK^T and PV, causal half
            rate = min(PREFILL_FLOPS_MAX, PREFILL_FLOPS_64 * chunk / 64)
            ms = PREFILL_FLOOR_MS + flops / rate * 1e3
            save = 0.005 + chunk * KV_BYTES_PER_TOKEN_LAYER / DECODE_BYTES_PER_S * 1e3
            rows.append(f"{ms:.5f},0.0,{save:.5f},{tail},1,{chunk},{kv},True,AttentionBackend.FLASHINFER")
    batches = sorted({*range(1, 33), *range(40, max_batch + 1, 8), max_batch})
    for batch in batches:
        for kv in range(0, max_tokens + 1, 256):
            ms = DECODE_FLOOR_MS + batch * kv * KV_BYTES_PER_TOKEN_LAYER / DECODE_BYTES_PER_S * 1e3
            save = 0.003 + batch * KV_BYTES_PER_TOKEN_LAYER / DECODE_BYTES_PER_S * 1e3
            rows.append(f"0.0,{ms:.5f},{save:.5f},{tail},{batch},0,{kv},False,AttentionBackend.FLASHINFER")
    path.write_text("\n".join(rows) + "\n")


def is_lfs_pointer(path: Path) -> bool:
    return not path.exists() or path.stat().st_size < 1000


def vidur_args(args: argparse.Namespace, attention: Path, output: Path) -> list[str]:
    max_tokens = args.max_tokens
    return [
        "vidur",
        "--seed",
        "1",
        "--replica_config_device",
        "a100",
        "--replica_config_model_name",
        "meta-llama/Meta-Llama-3-8B",
        "--replica_config_tensor_parallel_size",
        "1",
        "--replica_config_num_pipeline_stages",
        "1",
        "--cluster_config_num_replicas",
        "1",
        "--request_generator_config_type",
        "trace_replay",
        "--trace_request_generator_config_trace_file",
        str(args.trace),
        "--trace_request_generator_config_max_tokens",
        str(max_tokens),
        "--replica_scheduler_config_type",
        "vllm",
        "--vllm_scheduler_config_num_blocks",
        str(args.num_blocks),
        "--vllm_scheduler_config_block_size",
        "16",
        "--vllm_scheduler_config_batch_size_cap",
        str(args.batch_cap),
        "--vllm_scheduler_config_max_tokens_in_batch",
        str(max_tokens),
        "--execution_time_predictor_config_type",
        "random_forrest",
        "--random_forrest_execution_time_predictor_config_attention_input_file",
        str(attention),
        # one point of Vidur's own random-forest grid (250 trees, depth 16, split 2) and 2-fold
        # validation instead of its 27-point, 10-fold search: the search only picks the predictor's
        # hyper-parameters (cached after the first run) and costs hours on two shared cores
        "--random_forrest_execution_time_predictor_config_num_estimators",
        "250",
        "--random_forrest_execution_time_predictor_config_max_depth",
        "16",
        "--random_forrest_execution_time_predictor_config_min_samples_split",
        "2",
        "--random_forrest_execution_time_predictor_config_k_fold_cv_splits",
        "2",
        "--random_forrest_execution_time_predictor_config_prediction_max_prefill_chunk_size",
        str(max_tokens),
        "--random_forrest_execution_time_predictor_config_prediction_max_batch_size",
        str(args.batch_cap),
        "--random_forrest_execution_time_predictor_config_prediction_max_tokens_per_request",
        str(max_tokens),
        "--metrics_config_output_dir",
        str(output),
        "--no-metrics_config_write_metrics",
        "--no-metrics_config_enable_chrome_trace",
        "--no-metrics_config_write_json_trace",
        "--no-metrics_config_store_plots",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trace", type=Path, required=True, help="CSV: arrived_at,num_prefill_tokens,num_decode_tokens"
    )
    parser.add_argument("--workdir", type=Path, required=True, help="for Vidur's output")
    parser.add_argument("--num-blocks", type=int, default=2799)
    parser.add_argument("--max-tokens", type=int, default=8192)
    parser.add_argument("--batch-cap", type=int, default=256)
    args = parser.parse_args(argv)
    os.environ.setdefault("WANDB_MODE", "disabled")
    args.workdir.mkdir(parents=True, exist_ok=True)
    shipped = Path("data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/attention.csv")
    attention = shipped.resolve()
    stand_in = is_lfs_pointer(shipped)
    if stand_in:
        # next to Vidur's own model cache (./cache), at a fixed path: the cache key includes the path
        fit = f"{PREFILL_FLOPS_64:.0e}-{DECODE_BYTES_PER_S:.0e}"  # a new fit is a new file, not a stale one
        attention = Path(f"cache/kvbudget-attention-llama3-8b-a100-{args.max_tokens}-{args.batch_cap}-{fit}.csv")
        attention = attention.resolve()
        attention.parent.mkdir(exist_ok=True)
        if not attention.exists():
            attention_profile(attention, args.max_tokens, args.batch_cap)

    cpu = time.process_time()
    # imported by name: Vidur lives only in its own environment, never in kvbudget's (nor its type check)
    SimulationConfig = import_module("vidur.config").SimulationConfig
    Request = import_module("vidur.entities").Request
    BaseReplicaScheduler = import_module(
        "vidur.scheduler.replica_scheduler.base_replica_scheduler"
    ).BaseReplicaScheduler
    Simulator = import_module("vidur.simulator").Simulator
    set_seeds = import_module("vidur.utils.random").set_seeds

    # Counters Vidur does not keep itself: recomputed tokens at each restart, and the peak of requests
    # holding blocks (admitted, running or preempted-but-resident), one comparison per block allocation.
    recomputed = [0]
    peak = [0]
    restart = Request.restart

    def counting_restart(self: Any) -> bool:
        recomputed[0] += self._num_processed_tokens
        return bool(restart(self))

    allocate = BaseReplicaScheduler.allocate

    def counting_allocate(self: Any, request_id: int, num_blocks: int) -> None:
        allocate(self, request_id, num_blocks)
        peak[0] = max(peak[0], len(self._allocation_map))

    Request.restart = counting_restart
    BaseReplicaScheduler.allocate = counting_allocate

    sys.argv = vidur_args(args, attention, args.workdir / "out")
    config = SimulationConfig.create_from_cli_args()
    set_seeds(config.seed)
    simulator = Simulator(config)
    requests = [event._request for _, event in simulator._event_queue]
    prompts = sum(r.num_prefill_tokens for r in requests)
    setup_s = time.process_time() - cpu

    cpu = time.process_time()
    simulator.run()
    run_s = time.process_time() - cpu

    delays = sorted(r.scheduling_delay for r in requests if r.scheduled or r.completed)
    finished = sum(1 for r in requests if r.completed)

    def quantile(q: float) -> float:
        return delays[min(len(delays) - 1, max(0, math.ceil(q * len(delays)) - 1))] if delays else 0.0

    print(
        json.dumps(
            {
                "requests": len(requests),
                "finished": finished,
                "preemptions": sum(r.num_restarts for r in requests),
                "peak_running": peak[0],
                "prefill_tokens": int(prompts + recomputed[0]),
                "recomputed_tokens": int(recomputed[0]),
                "queue_delay_p50_s": round(quantile(0.5), 6),
                "queue_delay_p99_s": round(quantile(0.99), 6),
                "end_s": round(simulator._time, 3),
                "setup_cpu_s": round(setup_s, 3),
                "run_cpu_s": round(run_s, 3),
                "attention_profile": "roofline stand-in" if stand_in else "shipped",
            }
        ),
        flush=True,
    )
    # the predictor's training workers (joblib's loky pool) would outlive os._exit; Vidur's atexit
    # output writer (plots and CSVs this comparison does not read) is skipped by it
    import_module("joblib.externals.loky").get_reusable_executor().shutdown(wait=True, kill_workers=True)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
