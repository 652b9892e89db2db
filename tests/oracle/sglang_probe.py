"""SGLang's own KV-cache sizing, run inside the oracle environment (scripts/setup-oracles).

Reads a JSON list of cases on stdin and writes one ``ORACLE {json}`` line per case on stdout. For each
case it does what an SGLang server does at start-up, with SGLang's own code, from its arguments to
the pool sizes it logs:

1. ``ServerArgs(...).resolve_once()``: SGLang's defaults for this model on this GPU
   (``mem_fraction_static``, ``chunked_prefill_size``, page size, the radix-cache strategy for
   hybrid Mamba models, the attention backend), then ``publish`` as the scheduler does;
2. ``ModelConfig.from_server_args``: the architecture flags (``is_hybrid_swa``, MLA, Mamba layers);
3. a ``KVCacheConfigurator`` built as ``ModelRunner.init_kv_cache_configurator`` builds it (the
   model's layer range stands in for the model object: no weights are loaded), then for each KV
   budget the steps of ``_resolve_memory_pool_config`` after the GPU memory read: the Mamba
   carve-out (``_handle_max_mamba_cache``), ``config_from_budget`` (the pool configurator's
   ``max_total_num_tokens`` and the full / sliding split), ``resolve_max_num_reqs`` and the
   configurator's ``finalize_with_max_running_requests``.

The budget is SGLang's ``rest_memory`` in bytes: free memory after the weights minus the slack
``pre_load_free x (1 - mem_fraction_static)``, which is GPU bookkeeping, not sizing. Only the GPU's
answers are stood in (``torch.cuda`` reports an H100-class device: see oracle_standin.py).
"""

from __future__ import annotations

import json
import sys
import tempfile
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import oracle_standin

oracle_standin.cuda_device_answers()

import torch  # noqa: E402
from sglang.srt.arg_groups.model_override_base import resolving_view  # noqa: E402
from sglang.srt.configs.model_config import ModelConfig  # noqa: E402
from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator  # noqa: E402
from sglang.srt.model_executor.model_runner_components.layer_setup import resolve_layer_indices  # noqa: E402
from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (  # noqa: E402
    SpecAuxHiddenStateConfig,
)
from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator  # noqa: E402
from sglang.srt.runtime_context import get_parallel, get_schedule, publish  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

MARK = "ORACLE "
GiB = 1 << 30
SERVER_ARGS = ("tp_size", "pp_size", "dp_size", "enable_dp_attention", "chunked_prefill_size", "max_running_requests")
KV_DTYPES = {"auto": None, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def _server_args(case: dict[str, Any], folder: str) -> Any:
    (Path(folder) / "config.json").write_text(json.dumps(case["config"]))
    kwargs: dict[str, Any] = {
        "model_path": folder,
        "skip_tokenizer_init": True,
        "context_length": case["context_len"],
        "kv_cache_dtype": case.get("kv_cache_dtype", "auto"),
    }
    if case.get("disable_radix_cache"):
        kwargs["disable_radix_cache"] = True
    if case.get("disable_cuda_graph"):  # --disable-cuda-graph: a field without its own flag in 0.5.23 (no_cli)
        kwargs["disable_cuda_graph"] = True
    # the parallel layout and the memory settings a case sets (SGLang's server arguments, by their own names)
    for name in (
        "tp_size",
        "pp_size",
        "dp_size",
        "enable_dp_attention",
        "chunked_prefill_size",
        "max_running_requests",
    ):
        if case.get(name) is not None:
            kwargs[name] = case[name]
    args = ServerArgs(**kwargs)
    args.resolve_once()
    return args


def _resolved(case: dict[str, Any], args: Any) -> dict[str, Any]:
    """What SGLang's argument resolution decides: the memory share, the batch, the graphs, the parallel widths."""
    schedule = get_schedule()
    view = resolving_view(args)
    parallel = get_parallel()
    graphs = view.cuda_graph_config
    return {
        "id": case["id"],
        "mem_fraction_static": schedule.mem_fraction_static,
        "chunked_prefill_size": schedule.chunked_prefill_size,
        "page_size": schedule.page_size,
        "attention_backend": view.attention_backend,
        "attn_tp_size": parallel.attn_tp_size,
        "attn_dp_size": parallel.attn_dp_size,
        "decode_graph_max_bs": graphs.decode.max_bs,
        "prefill_graph_backend": str(graphs.prefill.backend),
        "prefill_graph_sizes": len(graphs.prefill.bs or []),
    }


def run_case(case: dict[str, Any], folder: str) -> dict[str, Any]:
    args = _server_args(case, folder)
    publish(args, role="scheduler")
    out = _resolved(case, args)
    if case.get("resolution_only"):
        # pipeline stages: the model runner needs the stage's process groups (world_group) to build its
        # configurator, which a single process cannot stand in honestly; the resolution is SGLang's own
        return out
    model_config = ModelConfig.from_server_args(args)
    schedule = get_schedule()
    dtype = model_config.dtype
    kv_dtype = KV_DTYPES[case.get("kv_cache_dtype", "auto")] or dtype
    layers = model_config.num_hidden_layers
    layer_info = resolve_layer_indices(
        model=SimpleNamespace(start_layer=0, end_layer=layers), model_config=model_config, is_draft_worker=False
    )
    parallel = get_parallel()
    out.update(
        model_dtype=str(dtype).removeprefix("torch."),
        context_len=model_config.context_len,
        is_hybrid_swa=bool(model_config.is_hybrid_swa),
        use_mla=bool(model_config.attention_arch.name == "MLA"),
        architectures=list(model_config.hf_config.architectures or []),
        max_running_requests_arg=schedule.max_running_requests,
    )
    results = []
    for rest in case["budgets"]:
        # a fresh start-up per budget: publishing drops the Mamba pool size the last budget derived
        publish(args, role="scheduler")
        kvc = KVCacheConfigurator(
            device="cuda",
            gpu_id=0,
            attn_dp_size=parallel.attn_dp_size,
            pp_size=1,
            pp_group=None,
            model=None,
            model_config=model_config,
            server_args=args,
            kv_cache_dtype=kv_dtype,
            kv_cache_dtype_str=case.get("kv_cache_dtype", "auto"),
            model_dtype=dtype,
            page_size=schedule.page_size,
            sliding_window_size=getattr(model_config, "sliding_window_size", None),
            spec_algorithm=SpeculativeAlgorithm.NONE,
            is_draft_worker=False,
            post_capture_kv_active=False,
            spec_aux_config=SpecAuxHiddenStateConfig(),
            is_hybrid_swa=bool(model_config.is_hybrid_swa),
            is_hybrid_swa_compress=False,
            use_mla_backend=out["use_mla"],
            layer_info=layer_info,
            forward_stream=None,
            req_to_token_pool=None,
            token_to_kv_pool_allocator=None,
            memory_pool_config=None,
        )
        entry: dict[str, Any] = {"rest": rest}
        rest_gib = rest / GiB
        if kvc.mambaish_config is not None:
            rest_gib = kvc._handle_max_mamba_cache(rest_gib)
            entry["max_mamba_cache_size"] = get_schedule().max_mamba_cache_size
            entry["mamba_cache_per_req"] = kvc.mambaish_config.mamba2_cache_params.mamba_cache_per_req
            entry["mamba_ratio"] = kvc._calculate_mamba_ratio()
        available = int(rest_gib * GiB)
        entry["available"] = available
        config = kvc.config_from_budget(available)
        config.max_running_requests = kvc.resolve_max_num_reqs(config.max_total_num_tokens)
        config = create_memory_pool_configurator(kvc).finalize_with_max_running_requests(config)
        entry.update(
            max_total_num_tokens=config.max_total_num_tokens,
            full_max_total_num_tokens=getattr(config, "full_max_total_num_tokens", None),
            swa_max_total_num_tokens=getattr(config, "swa_max_total_num_tokens", None),
            max_running_requests=config.max_running_requests,
        )
        results.append(entry)
    out["results"] = results
    return out


def main() -> int:
    cases = json.load(sys.stdin)
    for case in cases:
        with tempfile.TemporaryDirectory() as folder:
            try:
                result = run_case(case, folder)
            except ImportError:
                raise
            except Exception as exc:  # SGLang refused the model or the settings: report it
                traceback.print_exc()
                result = {"id": case["id"], "refused": f"{type(exc).__name__}: {exc}"}
        print(MARK + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
