"""Invariants every engine must keep, over generated geometries: monotone in tokens, linear in
sequences, windowed layers flat past the window, tensor parallelism never below replication."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.cost import compute_cost
from kvbudget.engines.base import pad
from kvbudget.model.spec import ModelSpec
from tests.helpers import dense_config, spec_of

ENGINES = ["ideal", "vllm", "sglang", "llamacpp", "transformers"]
TP_ENGINES = ["ideal", "vllm", "sglang"]
SETTINGS = settings(max_examples=40, deadline=None)


@st.composite
def geometries(
    draw: st.DrawFn, kinds: tuple[str, ...] = ("dense", "sliding", "alternating", "chunked", "hybrid", "mla")
) -> dict[str, Any]:
    kind = draw(st.sampled_from(kinds))
    layers = draw(st.integers(1, 12))
    kv = draw(st.sampled_from([1, 2, 4, 8]))
    heads = kv * draw(st.sampled_from([1, 2, 4]))
    head_dim = draw(st.sampled_from([64, 128, 256]))
    window = draw(st.sampled_from([128, 512, 4096]))
    if kind == "dense":
        return dense_config(layers, heads, kv, head_dim)
    if kind == "sliding":
        return dense_config(layers, heads, kv, head_dim, model_type="mistral", sliding_window=window)
    if kind == "alternating":
        return dense_config(layers, heads, kv, head_dim, model_type="gemma2", sliding_window=window)
    if kind == "chunked":
        return dense_config(layers, heads, kv, head_dim, model_type="llama4_text", attention_chunk_size=window)
    if kind == "hybrid":
        pattern = draw(st.text(alphabet="M*-", min_size=layers, max_size=layers).filter(lambda p: p.strip("-")))
        return {
            **dense_config(len(pattern), heads, kv, head_dim, model_type="nemotron_h"),
            "hybrid_override_pattern": pattern,
            "mamba_num_heads": 8,
            "mamba_head_dim": 64,
            "ssm_state_size": 16,
            "n_groups": 2,
            "conv_kernel": 4,
        }
    return {
        "model_type": "deepseek_v3",
        "num_hidden_layers": layers,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "hidden_size": 2048,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
    }


def _total(spec: ModelSpec, engine: str, tokens: int, sequences: int, tp: int = 1) -> int:
    return compute_cost(spec, engine=engine, tokens=tokens, sequences=sequences, tp=tp).total_bytes


@pytest.mark.parametrize("engine", ENGINES)
@SETTINGS
@given(cfg=geometries(), a=st.integers(1, 300_000), b=st.integers(1, 300_000), seqs=st.integers(1, 8))
def test_monotone_in_tokens(engine: str, cfg: dict[str, Any], a: int, b: int, seqs: int) -> None:
    spec = spec_of(cfg)
    lo, hi = sorted((a, b))
    assert _total(spec, engine, lo, seqs) <= _total(spec, engine, hi, seqs)


@pytest.mark.parametrize("engine", ENGINES)
@SETTINGS
@given(cfg=geometries(), blocks=st.integers(1, 1000), seqs=st.integers(1, 16))
def test_linear_in_sequences(engine: str, cfg: dict[str, Any], blocks: int, seqs: int) -> None:
    # llama.cpp pads the whole context to 256 cells before splitting it per stream, so linearity is
    # exact on token counts that are multiples of 256 (what the padding leaves alone).
    spec = spec_of(cfg)
    tokens = blocks * 256
    assert _total(spec, engine, tokens, seqs) == seqs * _total(spec, engine, tokens, 1)


@pytest.mark.parametrize("engine", ENGINES)
@SETTINGS
@given(cfg=geometries(("sliding", "chunked", "alternating")), extra=st.integers(1, 100_000))
def test_windowed_layers_are_flat_past_the_window(engine: str, cfg: dict[str, Any], extra: int) -> None:
    spec = spec_of(cfg)
    if engine == "sglang" and cfg["model_type"] != "llama4_text":
        return  # SGLang caches sliding layers in full outside its is_hybrid_swa_model allow-list (tested there)
    window = max(int(cfg.get("sliding_window") or 0), int(cfg.get("attention_chunk_size") or 0))
    past = pad(window + 40_000, 256)  # beyond every engine's window reserve (vLLM: W-1+2x8192)
    report = compute_cost(spec, engine=engine, tokens=past)
    later = compute_cost(spec, engine=engine, tokens=past + extra * 256)
    for early_group, late_group in zip(report.groups(), later.groups(), strict=True):
        if early_group.kind in ("sliding_window", "chunked_local"):
            assert early_group.bytes_at_tokens == late_group.bytes_at_tokens
            assert early_group.per_token_bytes == 0
    if cfg["model_type"] == "mistral":
        assert report.kv_bytes_per_token == 0
        assert report.total_bytes == later.total_bytes


@pytest.mark.parametrize("engine", TP_ENGINES)
@SETTINGS
@given(
    cfg=geometries(("dense", "sliding", "alternating", "chunked", "mla")),
    tp=st.sampled_from([1, 2, 4, 8, 16, 32]),
    tokens=st.integers(1, 200_000),
)
def test_tensor_parallel_never_below_replication(engine: str, cfg: dict[str, Any], tp: int, tokens: int) -> None:
    spec = spec_of(cfg)
    kv = int(cfg.get("num_key_value_heads", 1))
    if cfg["model_type"] != "deepseek_v3" and (tp % kv if tp >= kv else kv % tp):
        return  # the engines refuse uneven splits (tested elsewhere)
    if int(cfg.get("num_attention_heads", 1)) % tp:
        return  # vLLM and SGLang refuse a tp that does not divide the query heads (tested elsewhere)
    one = _total(spec, engine, tokens, 1, tp=1)
    per_gpu = _total(spec, engine, tokens, 1, tp=tp)
    assert per_gpu * tp >= one  # never below an even split
    assert per_gpu <= one  # never more than one GPU holding everything
    if cfg["model_type"] == "deepseek_v3":
        assert per_gpu == one  # the latent is replicated on every rank
    elif tp >= kv:
        assert per_gpu == _total(spec, engine, tokens, 1, tp=kv)  # one head per GPU, replicated


def test_counted_and_durations_read_as_words() -> None:
    from kvbudget.units import counted, format_duration

    assert [counted(1, "session"), counted(2, "session"), counted(1024, "GPU"), counted(0, "bad row")] == [
        "1 session",
        "2 sessions",
        "1,024 GPUs",
        "0 bad rows",
    ]
    assert counted(1.0, "request") == "1 request" and counted(2.5, "request") == "2.5 requests"
    assert [format_duration(s) for s in (0.4, 119.9, 120, 5400, 7200, 30_888, 172_800)] == [
        "0.4 s",
        "119.9 s",
        "2.0 min",
        "90.0 min",
        "2.0 h",
        "8.6 h",
        "2.0 days",
    ]


def test_the_article_follows_the_spoken_number() -> None:
    """'at a 8K cap' and '1 GPU stay idle' read wrong: 'an' before a number spoken with a vowel sound (eight,
    eleven, eighteen, eighty, eight hundred), the verb agreeing with the count."""
    from kvbudget.units import a_or_an, counted_verb

    spoken = ["8K", "11K", "18K", "80K", "800", "8,192", "11,000", "18,432", "8", "11", "18"]
    assert [a_or_an(label) for label in spoken] == [f"an {label}" for label in spoken]
    plain = ["32K", "1K", "110", "1,100", "128K", "1,800", "16,384", "180K", "1M", "2,048"]
    assert [a_or_an(label) for label in plain] == [f"a {label}" for label in plain]
    spelt = {"fp16": "an", "f16": "an", "mxfp4": "an", "nvfp4": "an", "int4": "an", "bf16": "a", "q8_0": "a"}
    assert [a_or_an(label) for label in spelt] == [f"{article} {label}" for label, article in spelt.items()]
    assert counted_verb(1, "GPU", "stays", "stay") == "1 GPU stays"
    assert counted_verb(3, "GPU", "stays", "stay") == "3 GPUs stay"


def test_sentences_with_a_count_read_as_english(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.helpers import run_cli

    code, out, _ = run_cli(
        capsys, "plan", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "8k", "--gpus", "3", "--tp", "2"
    )
    assert code == 0 and "1 GPU stays idle: 3 is not a multiple of tp x pp = 2" in out
    code, out, _ = run_cli(capsys, "report", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "8k", "--size",
                           "--sessions", "8", "--format", "md")  # fmt: skip
    assert code == 0 and "Sized for 8 concurrent sessions at peak (whole deployment) at an 8K cap" in out
