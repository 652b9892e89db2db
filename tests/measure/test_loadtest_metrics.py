"""The loadtest's metric readers on real /metrics and /slots answers (tests/data/metrics/SOURCES.md,
tests/data/loadtest/README.md): vLLM published samples, a llama-server captured under load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.measure.loadtest.metrics import NAMES, parse_values, slot_occupancy, snapshot
from kvbudget.measure.loadtest.reply import classify_http
from kvbudget.measure.loadtest.server import engine_from_metrics

DATA = Path(__file__).resolve().parent.parent / "data"
LLAMA_METRICS = DATA / "loadtest" / "llamacpp-metrics-deferred.txt"
LLAMA_SLOTS = DATA / "loadtest" / "llamacpp-slots.json"
VLLM = DATA / "metrics"


def _sample(name: str) -> str:
    path = VLLM / name
    if not path.is_file():
        pytest.skip(f"{path.name} is not in tests/data/metrics")
    return path.read_text(encoding="utf-8")


def test_llama_server_under_load() -> None:
    text = LLAMA_METRICS.read_text(encoding="utf-8")
    assert engine_from_metrics(text) == "llamacpp"
    values = parse_values(text, "llamacpp")
    assert values == {
        "running": 4.0,
        "waiting": 1.0,
        "hits": 12149.0,
        "processed": 6973.0,
        "n_tokens_max": 255.0,
    }
    held = slot_occupancy(json.loads(LLAMA_SLOTS.read_text(encoding="utf-8")))
    assert held == (124 + 120 + 83 + 127, 4 * 256)
    snap = snapshot(1.0, values, "llamacpp", held)
    assert snap.kv_usage == 454 / 1024
    assert snap.waiting == 1.0 and snap.running == 4.0
    assert snap.prefix_hits == 12149.0 and snap.prefix_queries == 12149.0 + 6973.0  # processed excludes cached
    assert snap.preemptions == 0.0  # fixed slots: llama.cpp never preempts


def test_vllm_older_names_production_stack() -> None:
    text = _sample("vllm-production-stack-318.txt")
    assert engine_from_metrics(text) == "vllm"
    values = parse_values(text, "vllm")
    assert values == {"kv_usage": 0.0, "running": 0.0, "waiting": 0.0}  # gpu_cache_usage_perc, pre-V1 name


def test_vllm_026_exposes_every_name_read() -> None:
    text = _sample("vllm-0.26.0-inference-perf-families.txt")
    families = {line.split()[0] for line in text.splitlines() if line.startswith("vllm:")}
    for quantity, aliases in NAMES["vllm"].items():
        assert aliases[0] in families, f"{quantity}: {aliases[0]} is not a vLLM 0.26.0 family"
    assert "vllm:gpu_cache_usage_perc" not in families  # why the older alias comes second


def test_vllm_cache_config_info_is_not_a_wanted_family() -> None:
    text = _sample("vllm-pr3100-cache_config_info.txt")
    assert engine_from_metrics(text) == "vllm"
    assert parse_values(text, "vllm") == {}


def test_labels_sum_counters_and_keep_the_highest_usage() -> None:
    # Two data-parallel engines, in vLLM's V1 exposition form (names from tests/data/metrics).
    text = "\n".join(
        [
            "# TYPE vllm:num_preemptions counter",
            'vllm:num_preemptions_total{engine="0",model_name="m"} 3.0',
            'vllm:num_preemptions_total{engine="1",model_name="m"} 2.0',
            'vllm:num_preemptions_created{engine="0",model_name="m"} 1.7e9',
            "# TYPE vllm:kv_cache_usage_perc gauge",
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25',
            'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75',
            "# TYPE vllm:num_requests_waiting gauge",
            'vllm:num_requests_waiting{engine="0",model_name="m"} 1.0',
            'vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 1.0',
            "# TYPE vllm:num_requests_waiting gauge",
        ]
    )
    values = parse_values(text, "vllm")
    assert values == {"preemptions": 5.0, "kv_usage": 0.75, "waiting": 1.0}


def test_sglang_names() -> None:
    # SGLang's names as registered (the families list cited in tests/data/metrics/SOURCES.md).
    text = "\n".join(
        [
            "# TYPE sglang:token_usage gauge",
            'sglang:token_usage{model_name="m"} 0.5',
            "# TYPE sglang:num_queue_reqs gauge",
            'sglang:num_queue_reqs{model_name="m"} 2',
            "# TYPE sglang:num_retracted_requests counter",
            'sglang:num_retracted_requests_total{model_name="m"} 7',
            "# TYPE sglang:cached_tokens counter",
            'sglang:cached_tokens_total{model_name="m"} 300',
            "# TYPE sglang:prompt_tokens counter",
            'sglang:prompt_tokens_total{model_name="m"} 1200',
        ]
    )
    assert engine_from_metrics(text) == "sglang"
    snap = snapshot(0.0, parse_values(text, "sglang"), "sglang")
    assert (snap.kv_usage, snap.waiting, snap.preemptions) == (0.5, 2.0, 7.0)
    assert (snap.prefix_hits, snap.prefix_queries) == (300.0, 1200.0)


def test_unknown_engine_and_bad_slots() -> None:
    assert engine_from_metrics("# HELP x y\nprocess_cpu_seconds_total 1\n") is None
    assert parse_values("anything", "openai-compatible") == {}
    assert slot_occupancy({"error": "no slots"}) is None
    assert slot_occupancy([{"id": 0}]) is None
    assert slot_occupancy([{"id": 0, "n_ctx": 512}]) == (0, 512)  # a slot that never ran


def test_http_refusals() -> None:
    # llama-server's own answer to a prompt past its slot (captured from the live server).
    body = (
        '{"error":{"code":400,"message":"request (601 tokens) exceeds the available context size (512 tokens), '
        'try increasing it","type":"exceed_context_size_error","n_prompt_tokens":601,"n_ctx":512}}'
    )
    kind, message = classify_http(400, body)
    assert kind == "context"
    assert message.startswith("HTTP 400: request (601 tokens) exceeds the available context size (512 tokens)")
    assert classify_http(503, '{"detail": "overloaded"}') == ("http_5xx", "HTTP 503: overloaded")
    page = classify_http(404, "<!DOCTYPE html><html>nope</html>")
    assert page == ("http_4xx", "HTTP 404: an HTML page, not an API answer")
