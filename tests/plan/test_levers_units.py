"""Levers in comparable units: sessions per GPU at the same cap. tp x2 is two GPUs, so it is ranked by what each
holds; a lever that changes the cap, or whose gain is an engine clamping it (Ollama's num_ctx clamp to the trained
window), is listed after the capacity gains, not ranked as one."""

from __future__ import annotations

from typing import TypeVar

from kvbudget.api import LeversRequest, rank_levers
from kvbudget.requests.base import Request

R = TypeVar("R", bound=Request)


def ask(cls: type[R], **options: object) -> R:
    """The request as a face hands it over: named options, text read by each field's kind."""
    return cls.from_options(options)


def test_tp_x2_is_compared_per_gpu() -> None:
    ranking = rank_levers(
        ask(LeversRequest, model="qwen3-32b", gpu="h100-sxm", engine="vllm", context="32k", weights="fp8")
    )
    doc = ranking.to_dict()
    levers = {lv["lever"]: lv for lv in doc["levers"]}  # type: ignore[attr-defined]
    tp2, fp8 = levers["tp x2"], levers["KV fp8"]
    assert (tp2["gpus"], fp8["gpus"]) == (2, 1)
    assert tp2["sessions_per_gpu"] == tp2["total_sessions"] / 2
    # Qwen3-32B fp8 on an H100 at 32K: 4 sessions; fp8 cache 9 on one GPU; tp x2 13 on two, 6.5 each (vLLM 0.33
    # samples with FlashInfer: 3.3 GiB of runtime memory, vllm_profile.sampler_path)
    assert (tp2["total_sessions"], fp8["total_sessions"]) == (13, 9)
    assert (tp2["sessions_per_gpu"], fp8["sessions_per_gpu"]) == (6.5, 9)
    assert (tp2["gain_per_gpu"], fp8["gain_per_gpu"]) == (2.5, 5)
    names = [lv.name for lv in ranking.levers]
    assert names.index("KV fp8") < names.index("tp x2")
    ranked = [lv.per_gpu for lv in ranking.levers if lv.per_gpu is not None and not lv.not_ranked]
    assert ranked == sorted(ranked, reverse=True)
    assert doc["baseline_sessions_per_gpu"] == doc["baseline_total_sessions"]  # one GPU


def test_cap_changes_and_an_engines_clamp_are_not_capacity_gains() -> None:
    # Gemma 3 27B at 256K on llama.cpp: Ollama clamps num_ctx to the trained 131,072 (Ollama llm/server.go)
    ranking = rank_levers(ask(LeversRequest, model="gemma-3-27b", gpu="h100-sxm", engine="llamacpp", context="256k"))
    levers = {lv.name: lv for lv in ranking.levers}
    ollama = levers["engine ollama"]
    assert ollama.gain_per_gpu is not None and ollama.gain_per_gpu > 0  # it "buys" sessions...
    assert "clamps the cap to 131,072" in ollama.not_ranked  # ...by serving half the context
    assert "changes the cap" in levers["cap x1/2"].not_ranked and "changes the cap" in levers["cap x2"].not_ranked
    order = [lv.name for lv in ranking.levers]
    gains = [lv for lv in ranking.levers if lv.per_gpu is not None and not lv.not_ranked]
    assert all(order.index(lv.name) < order.index("engine ollama") for lv in gains)
    assert not levers["KV q8_0"].not_ranked  # a cheaper cache at the same cap is a capacity gain
    doc = {lv["lever"]: lv for lv in ranking.to_dict()["levers"]}  # type: ignore[attr-defined]
    assert doc["engine ollama"]["ranked"] is False and doc["KV q4_0"]["ranked"] is True
