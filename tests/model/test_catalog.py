"""Every catalog model read by kvbudget agrees with the independent hand arithmetic kept beside its
config (``derived_kv``, done by the researcher who verified the config), and the catalog resolves
names and aliases."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kvbudget.cost import compute_cost
from kvbudget.model import catalog
from kvbudget.model.families import read_spec
from kvbudget.model.sources import resolve
from kvbudget.model.spec import (
    ChunkedLocal,
    FullAttention,
    IndexerKeys,
    LatentAttention,
    ModelSpec,
    Recurrent,
    SlidingWindow,
)

ENTRIES = catalog.entries()


def _spec(entry: catalog.CatalogEntry) -> ModelSpec:
    return read_spec(entry.config, name=entry.name, source=entry.source)


def _attention_bytes_bf16(spec: ModelSpec) -> int:
    """Per-token bytes over every self-attention layer and indexer, windows ignored (how derived_kv counts)."""
    total = 0
    for _, state in spec.primitives():
        if isinstance(state, FullAttention | SlidingWindow | ChunkedLocal):
            total += state.kv_heads * (state.k_dim + state.v_dim) * 2
        elif isinstance(state, LatentAttention):
            total += state.latent_dim * 2
        elif isinstance(state, IndexerKeys):
            total += state.head_dim * 2
    return total


def test_catalog_has_every_verified_model() -> None:
    assert len(ENTRIES) == 88
    assert all(entry.source for entry in ENTRIES)


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_spec_matches_independent_arithmetic(entry: catalog.CatalogEntry) -> None:
    derived: dict[str, Any] = entry.derived_kv
    spec = _spec(entry)
    attention = [
        s
        for _, s in spec.primitives()
        if s.kind in ("full_attention", "sliding_window", "chunked_local", "latent_attention")
    ]
    assert len(attention) == derived["attention_layers"]
    assert _attention_bytes_bf16(spec) == derived["bytes_per_token_bf16"]
    windows = derived.get("window_structure")
    if windows and "window" in windows:
        sliding = [s for s in attention if isinstance(s, SlidingWindow)]
        assert len(sliding) == windows["sliding_layers"]
        assert all(s.window == windows["window"] for s in sliding)
    if windows and "chunk" in windows:
        chunked = [s for s in attention if isinstance(s, ChunkedLocal)]
        assert len(chunked) == windows["chunked_local_layers"]
        assert len(attention) - len(chunked) == windows["global_NoPE_layers"]
        assert all(s.chunk == windows["chunk"] for s in chunked)
    indexer = derived.get("indexer")
    keys = [s for _, s in spec.primitives() if isinstance(s, IndexerKeys)]
    assert len(keys) == (indexer["layers"] if indexer else 0)
    assert all(k.head_dim == indexer["index_head_dim"] for k in keys) if indexer else True
    state = derived.get("recurrent_state")
    if state:
        recurrent = [s for _, s in spec.primitives() if isinstance(s, Recurrent)]
        count = state.get("mamba_layers", state.get("linear_attention_layers"))
        assert len(recurrent) == count
        ssm = state.get("ssm_values_per_layer", state.get("recurrent_values_per_layer"))
        assert all(r.ssm_elems() == ssm for r in recurrent)
        if "conv_values_per_layer" in state:
            assert all((r.conv_kernel - 1) * r.conv_channels() == state["conv_values_per_layer"] for r in recurrent)


def test_no_window_models_cost_the_derived_bytes_on_the_ideal_engine() -> None:
    for entry in ENTRIES:
        spec = _spec(entry)
        if any(s.kind in ("sliding_window", "chunked_local") for _, s in spec.primitives()):
            continue
        assert compute_cost(spec, tokens=1).kv_bytes_per_token == entry.derived_kv["bytes_per_token_bf16"], entry.name


@pytest.mark.parametrize(
    "ref",
    ["llama-3.1-70b", "Llama-3.1-70B", "meta-llama/Llama-3.1-70B", "meta-llama/Meta-Llama-3.1-70B", "LLAMA_3.1_70B"],
)
def test_names_and_aliases_resolve(ref: str) -> None:
    assert resolve(ref).name == "Llama-3.1-70B"


@pytest.mark.parametrize("ref", ["llama-3.3-70b", "meta-llama/Llama-3.3-70B-Instruct", "Llama-3.3-70B-Instruct"])
def test_a_model_with_another_entrys_geometry_says_so_in_its_name(ref: str) -> None:
    """Llama 3.3 70B has Llama 3.1 70B's config: it is served by its own id and every output names it, with the
    substitution in the name itself (never printed as Llama-3.1-70B)."""
    spec = resolve(ref)
    base = resolve("llama-3.1-70b")
    assert spec.name == "Llama-3.3-70B-Instruct (same geometry as Llama-3.1-70B)"
    assert spec.model_id == "meta-llama/Llama-3.3-70B-Instruct" and base.model_id == "meta-llama/Llama-3.1-70B"
    assert spec.source.startswith("Llama-3.1-70B's config: ")
    assert any("same layers, heads, KV heads" in note for note in spec.notes)
    assert compute_cost(spec, tokens=32768).total_bytes == compute_cost(base, tokens=32768).total_bytes == 10 * 2**30


def test_same_geometry_names_show_in_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.helpers import run_cli

    name = "Llama-3.3-70B-Instruct (same geometry as Llama-3.1-70B)"
    code, out, _ = run_cli(capsys, "cost", "llama-3.3-70b", "--tokens", "32k")
    assert code == 0 and out.startswith(name) and "Llama-3.1-70B  (" not in out
    code, out, _ = run_cli(capsys, "cost", "llama-3.3-70b", "--tokens", "32k", "--json")
    assert code == 0 and json.loads(out)["model"] == name
    argv = ("plan", "llama-3.3-70b", "--gpu", "h200", "--engine", "vllm", "--context", "32k", "--weights", "fp8")
    code, out, _ = run_cli(capsys, *argv, "--json")
    plan = json.loads(out)
    assert code == 0 and plan["model"] == name
    assert plan["commands"]["vllm"]["argv"][2] == "meta-llama/Llama-3.3-70B-Instruct"


def test_multimodal_configs_use_their_text_config() -> None:
    spec = resolve("gemma-3-4b-it")
    assert spec.model_type == "gemma3_text"
    assert spec.count("sliding_window") == 29 and spec.count("full_attention") == 5
    vision = resolve("llama-3.2-11b-vision")
    assert vision.count("cross_attention") == 8 and vision.count("full_attention") == 32


def test_recurrent_state_dtype_pins_are_kept() -> None:
    nano = resolve("nemotron-3-nano")
    states = [s for _, s in nano.primitives() if isinstance(s, Recurrent)]
    assert states and all(s.ssm_dtype == "float32" for s in states)
