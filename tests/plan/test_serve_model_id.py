"""Serve commands name the model the way each engine loads it: a catalog model by its Hub repo id, a local model
by its directory (vLLM, SGLang, TensorRT-LLM) or its .gguf file (llama.cpp)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kvbudget.engines import parse_engine
from kvbudget.model import catalog
from kvbudget.model.sources import resolve
from kvbudget.plan.flags import all_engine_flags
from kvbudget.plan.plan import PlanInputs, make_plan
from kvbudget.precision import parse_cache_dtype
from kvbudget.weights.sources import WeightSize

GiB = 2**30
BF16 = parse_cache_dtype("bf16")


def _flags(ref: str) -> dict[str, str]:
    spec = resolve(ref)
    weights = WeightSize(16 * GiB, "measured", "given")
    inputs = PlanInputs(spec, parse_engine("vllm"), BF16, BF16, 80 * GiB, "given", weights, 8192)
    return all_engine_flags(make_plan(inputs))


def test_catalog_models_are_served_by_their_repo_id() -> None:
    flags = _flags("llama-3.1-8b")
    assert flags["vllm"].startswith("vllm serve meta-llama/Llama-3.1-8B ")
    assert "--model-path meta-llama/Llama-3.1-8B " in flags["sglang"]
    assert flags["trtllm"].startswith("trtllm-serve meta-llama/Llama-3.1-8B ")
    assert flags["llamacpp"].startswith("llama-server -m MODEL.gguf ")  # a repo id is not a GGUF file


def test_a_model_directory_is_served_from_that_directory(tmp_path: Path) -> None:
    entry = catalog.lookup("llama-3.1-8b")
    assert entry is not None
    model = tmp_path / "my-llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(entry.config))
    assert _flags(str(model))["vllm"].startswith(f"vllm serve {model} ")
    assert _flags(str(model / "config.json"))["vllm"].startswith(f"vllm serve {model} ")


def test_a_gguf_is_served_from_its_file(tmp_path: Path) -> None:
    source = Path(__file__).parent.parent / "data" / "gguf"
    ggufs = sorted(source.glob("*.gguf")) if source.is_dir() else []
    if not ggufs:
        from tests.live.tiny_gguf import write_llama

        gguf = write_llama(tmp_path / "tiny.gguf")
    else:
        gguf = tmp_path / ggufs[0].name
        shutil.copy(ggufs[0], gguf)
    assert f"llama-server -m {gguf} " in _flags(str(gguf))["llamacpp"]
