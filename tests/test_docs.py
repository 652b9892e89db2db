"""The docs name only code that exists: every ``src/kvbudget/...`` path, every ``kvbudget.x.y`` dotted name and
every backticked ``name.py`` in README.md and docs/*.md points at a real file, module or attribute."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "kvbudget"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PY_FILES = {p.name for d in ("src", "bench", "tests") for p in (ROOT / d).rglob("*.py")}
# Files of the engines' own source trees the docs cite (TensorRT-LLM, SGLang), not kvbudget's.
UPSTREAM = {
    "_util.py",
    "modeling_siglip.py",  # transformers models/siglip: the SigLIP tower docs/measure.md counts
    "modeling_pixtral.py",  # transformers models/pixtral: the Pixtral tower docs/measure.md counts
    "modeling_mistral3.py",  # transformers models/mistral3: Mistral 3's projector and patch merger
    "modeling_llama4.py",  # transformers models/llama4: Llama 4's vision model and projector
    "pixtral.py",  # vLLM model_executor/models: Pixtral's tower and its dummy image (docs/measure.md)
    "mllama4.py",  # vLLM model_executor/models: Llama 4's tower and its dummy image (docs/measure.md)
    "resource_manager.py",
    "mxfp4.py",
    "schedule_batch.py",
    "collector.py",
    "topk_topp_sampler.py",  # vLLM v1/sample/ops: the sampler paths of docs/measure.md
    "topk_topp_triton.py",  # vLLM v1/sample/ops (0.17+): the Triton top-k/top-p kernel and its buffer
    "cache.py",  # vLLM config: the gpu_memory_utilization default per version (docs/engines.md, docs/measure.md)
    "fused_moe.py",  # vLLM model_executor/layers/fused_moe
    "gpu_model_runner.py",  # vLLM v1/worker: profile_run samples on the last pipeline stage only
    "gpu_worker.py",  # vLLM v1/worker: determine_available_memory and the line numbers its pool line pins
    "model_runner.py",  # vLLM V0 worker: profile_run samples its dummy prompts with top-k/top-p (docs/measure.md)
    "kv_cache_utils.py",  # vLLM v1/core: the admission check, the hybrid specs unified, the smallest blocks
    "deepseek_v2.py",  # vLLM model_executor/models: the MLA down-projections and routers kept whole per rank
    "envs.py",  # vLLM: VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE's default per release
    "llm_args.py",  # TensorRT-LLM llmapi: CudaGraphConfig's capture sizes, KvCacheConfig (docs/measure.md)
    "logits_processor.py",  # TensorRT-LLM _torch/modules: one logits row per request in the dummy pass
    "sampler.py",  # vLLM v1/sample: the sampler the profile run warms up (docs/measure.md)
    "base_device_communicator.py",  # vLLM distributed/device_communicators: the logits all-gather at TP > 1
    "loggers.py",  # vLLM v1/metrics: the stats line --speed-from LOG reads (docs/speed.md)
    "scheduler_metrics_mixin.py",  # SGLang srt/managers: its Decode / Prefill batch lines
    "server_args.py",  # SGLang srt: the default mem_fraction_static per version (docs/measure.md)
    "kv_cache_configurator.py",  # SGLang 0.5.23 srt/model_executor: its pool rule (docs/measure.md)
    "flashinfer.py",  # TensorRT-LLM _torch/attention_backend: the FlashInfer workspace (docs/measure.md)
    "quickstart_multimodal.py",  # TensorRT-LLM examples/llm-api: a log's launcher (docs/measure.md)
}
PY_PATHS = {p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py")}


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def _missing() -> list[str]:
    bad = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        where = doc.relative_to(ROOT)
        for path in set(re.findall(r"src/kvbudget/[\w/.]*\w", text)):
            if not (ROOT / path).exists():
                bad.append(f"{where}: {path}")
        for dotted in set(re.findall(r"(?<![\w/.-])kvbudget(?:\.[A-Za-z_]\w*)+", text)):
            if not _resolves(dotted.removesuffix(".py")):
                bad.append(f"{where}: {dotted}")
        for name in set(re.findall(r"`([\w/]+\.py)\b", text)):
            known = name in PY_PATHS or name.split("/")[-1] in PY_FILES | UPSTREAM or (ROOT / name).exists()
            if not known:
                bad.append(f"{where}: {name}")
    return sorted(bad)


def test_docs_name_only_code_that_exists() -> None:
    missing = _missing()
    assert not missing, "\n".join(missing)
