"""vLLM's own KV-cache planning, run inside the oracle environment (scripts/setup-oracles).

Reads a JSON list of cases on stdin and writes one JSON object per case on stdout. For each case it
does what a vLLM server does at start-up, with vLLM's own code, up to the capacity log line:

1. ``EngineArgs(...).create_engine_config()``: vLLM's defaults for this model (block size, prefix
   caching, ``mamba_cache_mode``, batch sizes, the attention backend's block-size rules);
2. the model built on torch's meta device through vLLM's own model class (the loader's ``create_model``),
   so every attention / Mamba layer registers itself as it does on a GPU, then the executor's
   ``update_block_size_for_backend`` (backend block sizes, hybrid Mamba alignment);
3. ``get_kv_cache_spec`` (the V2 runner's helper, the same loop as the V1 runner's method),
   ``resolve_kv_cache_layout``, ``get_global_kv_cache_groups``, ``get_kv_cache_configs`` (the
   admission check with the null block, then ``num_blocks``), ``generate_scheduler_kv_cache_config``
   and ``update_kv_cache_capacity`` (the "KV cache size ... Maximum concurrency" line, captured
   from vLLM's logger) for each KV budget in bytes.

Only the GPU's answers are stood in (oracle_standin.py). Not a test module: the oracle tests
(test_vllm_oracle.py) run it as a subprocess with the oracle environment's interpreter.
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import oracle_standin

oracle_standin.install_kernel_stubs()

import torch  # noqa: E402
import vllm.logger  # noqa: E402
from vllm.config import set_current_vllm_config  # noqa: E402
from vllm.distributed import parallel_state  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.utils import get_current_attn_backends  # noqa: E402
from vllm.distributed.parallel_state import (  # noqa: E402
    destroy_model_parallel,
    ensure_model_parallel_initialized,
    init_distributed_environment,
    model_parallel_is_initialized,
)
from vllm.engine.arg_utils import EngineArgs  # noqa: E402
from vllm.model_executor.model_loader import get_model_loader  # noqa: E402
from vllm.platforms import current_platform  # noqa: E402
from vllm.usage.usage_lib import UsageContext  # noqa: E402
from vllm.utils.torch_utils import set_default_torch_dtype  # noqa: E402
from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts, resolve_kv_cache_layout  # noqa: E402
from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs  # noqa: E402
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    generate_scheduler_kv_cache_config,
    get_kv_cache_capacity,
    update_kv_cache_capacity,
)
from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs  # noqa: E402
from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec  # noqa: E402

oracle_standin.runtime_stand_ins()

CAPACITY_PREFIX = "KV cache size:"
MARK = "ORACLE "  # the probe's result lines, apart from anything the engine prints on stdout


class _Lines(logging.Handler):
    """vLLM's own capacity log line, as its logger formats it."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if CAPACITY_PREFIX in text:
            self.lines.append(text)


DIST_DIR = tempfile.mkdtemp(prefix="kvbudget-oracle-")
LINES = _Lines()


def _listen() -> None:
    """vLLM re-applies its logging config (replacing the handlers) when it builds a config."""
    logger = logging.getLogger("vllm")
    if LINES not in logger.handlers:
        logger.addHandler(LINES)


def _engine_config(case: dict[str, Any], folder: str) -> Any:
    (Path(folder) / "config.json").write_text(json.dumps(case["config"]))
    kwargs: dict[str, Any] = {
        "model": folder,
        "skip_tokenizer_init": True,
        "load_format": "dummy",
        "max_model_len": case["max_model_len"],
        "kv_cache_dtype": case.get("kv_cache_dtype", "auto"),
    }
    for key in (
        "enable_prefix_caching",
        "block_size",
        "max_num_batched_tokens",
        "max_num_seqs",
        "tensor_parallel_size",
        "pipeline_parallel_size",
    ):
        if case.get(key) is not None:
            kwargs[key] = case[key]
    # what `vllm serve` builds: the API server's batch defaults
    return EngineArgs(**kwargs).create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)


def _answer_as_rank_zero(tp: int) -> None:
    """The tensor-parallel group answers as rank 0 of ``tp``: model classes size their per-rank heads and
    state from ``get_tensor_model_parallel_world_size()``; no collective ever runs (no forward pass)."""
    group = parallel_state.get_tp_group()
    group.world_size = tp
    group.rank_in_group = 0


def _kind(spec: Any) -> str:
    return type(spec).__name__


def _answer_as_stage(pp_rank: int, pp: int) -> None:
    """The pipeline group answers as stage ``pp_rank`` of ``pp``: ``make_layers`` builds that stage's layers
    (``get_pp_indices``, vLLM's own split); the other layers are missing, as on that stage's GPU."""
    group = parallel_state.get_pp_group()
    group.world_size = pp
    group.rank_in_group = pp_rank


def _stage(case: dict[str, Any], folder: str, pp_rank: int) -> tuple[Any, dict[str, Any], Any, Any]:
    """One pipeline stage's worker up to its KV-cache specs: (vllm_config, specs, attention backends, model)."""
    vllm_config = _engine_config(case, folder)
    with set_current_vllm_config(vllm_config):
        # the parallel groups depend on the model (an expert-parallel group only for MoE models)
        if model_parallel_is_initialized():
            destroy_model_parallel()
        init_distributed_environment(
            world_size=1, rank=0, local_rank=0, distributed_init_method=f"file://{DIST_DIR}/store", backend="gloo"
        )
        ensure_model_parallel_initialized(1, 1)
        _answer_as_rank_zero(case.get("tensor_parallel_size") or 1)
        _answer_as_stage(pp_rank, case.get("pipeline_parallel_size") or 1)
    # BaseModelLoader.load_model without the weights: the model's dtype, on the meta device
    loader = get_model_loader(vllm_config.load_config)
    with set_default_torch_dtype(vllm_config.model_config.dtype), torch.device("meta"):
        model = loader.create_model(vllm_config=vllm_config, model_config=vllm_config.model_config)
    with set_current_vllm_config(vllm_config):
        # the executor's step after load_model: block size for the backends, hybrid Mamba alignment
        current_platform.update_block_size_for_backend(vllm_config)
        register_all_kvcache_specs(vllm_config)
        specs = get_kv_cache_spec(vllm_config)
        backends = get_current_attn_backends(vllm_config)
    return vllm_config, specs, backends, model


def run_case(case: dict[str, Any], folder: str) -> dict[str, Any]:
    pp = case.get("pipeline_parallel_size") or 1
    # every stage's worker, as the engine core gathers them (rank 0's config plans for all)
    stages = [_stage(case, folder, rank) for rank in range(pp)]
    vllm_config, specs, backends, model = stages[0]
    worker_specs = [stage[1] for stage in stages]
    cache = vllm_config.cache_config
    out: dict[str, Any] = {
        "id": case["id"],
        "enable_prefix_caching": bool(cache.enable_prefix_caching),
        "mamba_cache_mode": str(cache.mamba_cache_mode),
        "max_num_batched_tokens": vllm_config.scheduler_config.max_num_batched_tokens,
        "max_in_flight_tokens": vllm_config.max_in_flight_tokens,
        "model_dtype": str(vllm_config.model_config.dtype).removeprefix("torch."),
        "block_size": cache.block_size,
        "mamba_block_size": cache.mamba_block_size,
        "mamba_page_size_padded": cache.mamba_page_size_padded,
        "stage_layers": [len(s) for s in worker_specs],
        "attention_backends": sorted({b.get_name() for b in backends}),
    }
    with set_current_vllm_config(vllm_config):
        resolve_kv_cache_layout(
            vllm_config, [[m.name for m in get_supported_kv_cache_layouts(backends)]], list(specs.values())
        )
        groups = get_global_kv_cache_groups(vllm_config, worker_specs)
    out["layers"] = len(specs)
    out["groups"] = [
        {
            "kind": _kind(g.kv_cache_spec),
            "layers": len(g.layer_names),
            "block_size": g.kv_cache_spec.block_size,
            "page_size_bytes": g.kv_cache_spec.page_size_bytes,
        }
        for g in groups
    ]
    results = []
    for available in case["available"]:
        entry: dict[str, Any] = {"available": available}
        _listen()
        vllm.logger._print_info_once.cache_clear()  # info_once drops a line equal to an earlier case's
        before = len(LINES.lines)
        try:
            with set_current_vllm_config(vllm_config):
                configs = get_kv_cache_configs(vllm_config, worker_specs, [available] * pp, groups)
                scheduler = generate_scheduler_kv_cache_config(configs)
                participating = [
                    g.kv_cache_spec.block_size for g in scheduler.kv_cache_groups if g.kv_cache_spec.prefix_cacheable
                ]
                cache.block_size = min(participating or [g.kv_cache_spec.block_size for g in scheduler.kv_cache_groups])
                update_kv_cache_capacity(vllm_config, scheduler)
                tokens, concurrency = get_kv_cache_capacity(vllm_config, scheduler)
        except ValueError as exc:
            entry["error"] = str(exc)
            results.append(entry)
            continue
        entry.update(
            stage_num_blocks=[c.num_blocks for c in configs],
            num_blocks=scheduler.num_blocks,
            tokens=tokens,
            concurrency=concurrency,
            block_size=cache.block_size,
            line=LINES.lines[-1] if len(LINES.lines) > before else None,
        )
        results.append(entry)
    out["results"] = results
    del model, stages
    return out


def main() -> int:
    cases = json.load(sys.stdin)
    for case in cases:
        with tempfile.TemporaryDirectory() as folder:
            try:
                result = run_case(case, folder)
            except ImportError:
                raise  # the oracle environment lacks a module: a setup error, not a refusal
            except Exception as exc:  # the engine refused the model or the settings: report it
                traceback.print_exc()
                result = {"id": case["id"], "refused": f"{type(exc).__name__}: {exc}"}
        print(MARK + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
