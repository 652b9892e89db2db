"""Derived layouts (model/derive.py): a model type no hand-written reader knows is sized from transformers' own
implementation, run on the meta device. Checked three ways: for model types kvbudget does not read, the derived
layout equals the cache a real transformers model allocates on CPU (tiny configs of those types); for types it
does read, the derived layout costs the same as the hand-written reader's on every engine that accepts it; and
every cache kvbudget cannot place fails closed, in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kvbudget.engines import parse_engine
from kvbudget.engines.base import EngineOptions
from kvbudget.errors import UnknownArchitectureError
from kvbudget.model import catalog
from kvbudget.model.derive import derive_spec
from kvbudget.model.families import read_spec
from kvbudget.model.sources import resolve
from kvbudget.precision import parse_cache_dtype

BF16 = parse_cache_dtype("bf16")
# Model types transformers 5.24 implements and kvbudget has no reader for, at a CPU-sized geometry.
TINY: dict[str, dict[str, object]] = {
    # 3 sliding layers (window 8) and 1 full: the 24-token prompt passes the window
    "olmo3": {
        "num_hidden_layers": 4,
        "hidden_size": 64,
        "intermediate_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "sliding_window": 8,
    },
    "gpt2": {"n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 128},
    "phi": {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 64, "num_attention_heads": 4},
    "falcon_mamba": {"num_hidden_layers": 2, "hidden_size": 64, "state_size": 8, "expand": 2, "conv_kernel": 4},
    "bamba": {
        "num_hidden_layers": 4,
        "hidden_size": 64,
        "intermediate_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "mamba_d_state": 8,
        "mamba_d_head": 8,
        "mamba_n_heads": 16,
        "mamba_n_groups": 1,
        "attn_layer_indices": [1],
    },
}


def _config(model_type: str, **fields: object) -> dict[str, Any]:
    from transformers import AutoConfig

    cfg: dict[str, Any] = AutoConfig.for_model(model_type, **fields).to_dict()
    cfg["model_type"] = model_type
    return cfg


@pytest.mark.usefixtures("torch_installed")
@pytest.mark.parametrize("model_type", list(TINY))
def test_derived_layout_is_what_transformers_allocates(model_type: str) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from kvbudget.measure.skeleton import measure_model

    assert catalog.lookup(model_type) is None
    cfg = {**_config(model_type, vocab_size=256, **TINY[model_type]), "torch_dtype": "float32"}
    spec = read_spec(cfg, name=model_type, source="test")  # no reader: read_spec derives it
    assert any("derived from transformers" in note for note in spec.notes)
    torch.manual_seed(0)
    auto_model: Any = AutoModelForCausalLM
    model = auto_model.from_config(AutoConfig.for_model(**cfg), dtype=torch.float32).eval()
    measured = measure_model(spec, model, 24)
    assert measured.unclassified_bytes == 0
    assert [(g.kind, g.measured_bytes) for g in measured.groups] == [
        (g.kind, g.predicted_bytes) for g in measured.groups
    ]
    assert measured.measured_bytes > 0


ATTENTION_ONLY = ["llama-3.1-8b", "gemma-3-27b", "gpt-oss-120b", "llama-4-scout"]
WITH_STATE = ["deepseek-v3", "deepseek-v3.2", "Nemotron-H-8B-Base-8K", "qwen3-next-80b-a3b"]


@pytest.mark.usefixtures("torch_installed")
@pytest.mark.parametrize("name", ATTENTION_ONLY + WITH_STATE)
def test_derived_equals_the_hand_written_reader(name: str) -> None:
    entry = catalog.lookup(name)
    assert entry is not None
    hand = resolve(name)
    derived = derive_spec(entry.config, name=name, source="test", where=name)
    engines = ["transformers", "ideal", "vllm", "sglang", "trtllm", "llamacpp", "ollama"]
    for engine in engines if name in ATTENTION_ONLY else ["transformers"]:
        rules = parse_engine(engine).rules
        a = rules.layout(hand, BF16, BF16, 1, EngineOptions())
        b = rules.layout(derived, BF16, BF16, 1, EngineOptions())
        for tokens in (1, 100, 5000, 40_000):
            for sequences in (1, 3):
                assert a.total_bytes(tokens, sequences) == b.total_bytes(tokens, sequences), (engine, tokens)
    if name in ATTENTION_ONLY:
        assert derived.primitives() == hand.primitives()


@pytest.mark.usefixtures("torch_installed")
@pytest.mark.parametrize(
    ("model_type", "reason"),
    [
        ("minimax", "returns a MiniMaxCache"),  # lightning-attention state outside DynamicCache layers
        ("deepseek_v4", "DeepseekV4HCACache, a cache class kvbudget has never seen"),
        ("rwkv", "returns no cache"),
    ],
)
def test_caches_it_cannot_place_fail_closed(model_type: str, reason: str) -> None:
    with pytest.raises(UnknownArchitectureError, match=reason) as err:
        read_spec(_config(model_type), name=model_type, source="test")
    assert f"model_type {model_type!r} is not an architecture kvbudget can read" in str(err.value)


def test_a_type_unknown_to_transformers_too_fails_closed() -> None:
    with pytest.raises(UnknownArchitectureError, match="known neither to kvbudget nor to transformers"):
        read_spec({"model_type": "not_a_model", "num_hidden_layers": 2}, name="x", source="test")


def test_without_the_measure_extra_it_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    with pytest.raises(UnknownArchitectureError, match=r"install 'kvbudget\[measure\]'"):
        read_spec({"model_type": "olmo3", "num_hidden_layers": 2}, name="x", source="test")


@pytest.mark.usefixtures("torch_installed")
def test_cli_costs_a_derived_model_and_serving_engines_refuse_its_state(tmp_path: Path) -> None:
    olmo = tmp_path / "olmo3" / "config.json"
    olmo.parent.mkdir()
    olmo.write_text(json.dumps(_config("olmo3", vocab_size=256, **TINY["olmo3"])))
    run = [sys.executable, "-m", "kvbudget", "cost", str(olmo), "--tokens", "32", "--engine", "vllm", "--json"]
    out = subprocess.run(run, capture_output=True, text=True, check=True)
    data = json.loads(out.stdout)
    assert any("derived from transformers" in note for note in data["notes"])
    assert [g["kind"] for g in data["groups"]] == ["sliding_window", "full_attention"]
    mamba = tmp_path / "falcon_mamba.json"
    mamba.write_text(json.dumps(_config("falcon_mamba", vocab_size=256, **TINY["falcon_mamba"])))
    refused = subprocess.run(
        [sys.executable, "-m", "kvbudget", "cost", str(mamba), "--engine", "vllm"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "only --engine transformers (or ideal) sizes it" in refused.stderr
