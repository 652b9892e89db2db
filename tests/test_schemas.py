"""The JSON contract: every document validates against its shipped schema (kvbudget/schemas), the engine is
{name, version} in each, and errors under --json are the error document with exit code 1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from kvbudget.schemas import NAMES, schema
from tests.helpers import run_cli

SPEEDS = "tests/data/loadtest/speeds-llama31-8b-vllm.json"  # a load test's speeds (--speed-from)
CASES = [
    ("cost", ("llama-3.1-70b", "--tokens", "32k")),
    ("cost", ("qwen3-next-80b-a3b", "--engine", "vllm")),
    ("cost", ("gemma-3-27b", "--engine", "ollama", "--sequences", "3")),
    ("plan", ("llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "32k")),
    ("plan", ("gpt-oss-120b", "--gpu", "h200", "--engine", "trtllm", "--context", "64k", "--prefix", "4096")),
    ("plan", ("deepseek-v3", "--gpu", "h200", "--gpus", "8", "--tp", "8", "--engine", "sglang", "--context", "32k")),
    ("plan", ("llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "vllm", "--context", "128k")),  # not served
    ("plan", ("llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "sglang", "--context", "32k", "--alerts")),
    ("plan", ("llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llamacpp", "--context", "128k", "--alerts")),
    ("plan", ("llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "32k", "--speed-from", SPEEDS)),
    ("compare", ("llama-3.1-8b,qwen3-8b", "--gpu", "h100-sxm,l40s", "--context", "32k", "--price", "l40s=0.99/h")),
    (
        "simulate",
        (
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h100-sxm",
            "--engine",
            "vllm",
            "--context",
            "32k",
            "--workload",
            "examples/chat.toml",
            "--sessions",
            "60",
            "--search-sessions",
            "0",
        ),
    ),
    (
        "simulate",
        (
            "llama-3.1-8b",
            "--gpu",
            "l40s",
            "--engine",
            "vllm",
            "--context",
            "16k",
            "--workload",
            "examples/chat.toml",
            "--replicas",
            "1",
            "--sessions",
            "100",
            "--search-sessions",
            "100",
            "--search-probes",
            "3",
            "--itl",
            "45ms",
            "--ttft",
            "2s",
            "--jobs",
            "1",
        ),
    ),
    ("calibrate", ("tests/data/logs/vllm/v0-0.6.4fmt-llama31-8b-rtx3090-20k.log", "--model", "llama-3.1-8b")),
    ("calibrate", ("tests/data/logs/serving/vllm-v1-startup-then-running18.log",)),  # with its speeds
    ("table", ("llama-3.1-70b",)),
    ("table", ("gemma-3-27b", "--engine", "vllm", "--tokens", "4k,128k", "--sequences", "1,3")),
    ("models", ()),
    ("models", ("--engine", "llamacpp", "--kv-dtype", "q8_0")),
    ("gpus", ()),
    ("speed", ("llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--concurrency", "64")),
    ("speed", ("llama-3.1-70b", "--gpu", "h200", "--gpus", "8", "--tp", "4", "--engine", "trtllm", "--weights", "fp8")),
    (
        "size",
        (
            "qwen3-32b,gpt-oss-120b",
            "--gpu",
            "h100-sxm,h200",
            "--engine",
            "vllm,sglang",
            "--context",
            "32k",
            "--price",
            "h100-sxm=2.49/h,h200=3.59/h",
            "--sessions",
            "60",
            "--workload",
            "examples/coding-agent.toml",
            "--ttft",
            "2s",
            "--itl",
            "50ms",
        ),
    ),
    (
        "size",
        ("llama-3.1-8b", "--gpu", "l40s", "--context", "8k", "--rate", "0.1/s", "--workload", "examples/chat.toml"),
    ),
    (
        "size",
        ("llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm,sglang", "--context", "32k", "--sessions", "60"),
    ),
    (
        "size",
        (
            "llama-3.1-8b",
            "--gpu",
            "h100-sxm",
            "--context",
            "32k",
            "--sessions",
            "60",
            "--itl",
            "25ms",
            "--speed-from",
            SPEEDS,
        ),
    ),
    (
        "size",
        ("llama-3.1-8b", "--gpu", "l40s", "--context", "8k", "--rate", "0.1/s", "--workload", "examples/chat.toml"),
    ),
    (
        "size",
        ("llama-3.1-8b", "--gpu", "l40s", "--context", "16k", "--rate", "0.1/s", "--workload", "examples/chat.toml"),
    ),
    (  # a latency-bound count checked by simulation: each row's simulation and its probes
        "size",
        (
            "llama-3.1-8b",
            "--gpu",
            "l40s",
            "--context",
            "16k",
            "--sessions",
            "20",
            "--workload",
            "examples/chat.toml",
            "--ttft",
            "1s",
            "--itl",
            "30ms",
        ),
    ),
    ("weights", ("qwen3-32b",)),
    ("weights", ("deepseek-v3",)),
    (
        "infer",
        (
            "--memory",
            "24GB",
            "--params",
            "74B",
            "--weight-bits",
            "2",
            "--overhead",
            "1.5GB",
            "--context",
            "256k",
            "--kv-heads",
            "2",
            "--head-dim",
            "128",
        ),
    ),
    ("levers", ("qwen3-32b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "32k")),
    ("levers", ("gemma-3-27b", "--gpu", "h100-sxm", "--engine", "llamacpp", "--context", "64k")),
    ("trace stats", ("tests/data/traces/weka_kv_cache_tester/trace_0026.json",)),
    (
        "trace stats",
        (
            "tests/data/traces/tracelab_example/round_trace.sanitized.jsonl",
            "--model",
            "qwen3-32b",
            "--gpu",
            "h200",
            "--engine",
            "sglang",
        ),
    ),
    ("trace stats", ("tests/data/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv",)),
    ("workload check", ("examples/coding-agent.toml",)),
    ("workload check", ("examples/chat.toml",)),
]


def test_every_schema_is_valid_and_every_document_has_one() -> None:
    for name in NAMES:
        jsonschema.Draft202012Validator.check_schema(schema(name))
    # loadtest: validated in the live llama-server tests; report: in tests/report
    assert {c.replace(" ", "-") for c, _ in CASES} | {"loadtest", "report", "error"} == set(NAMES)


@pytest.mark.parametrize(("command", "argv"), CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(CASES)])
def test_documents_follow_their_schema(capsys: pytest.CaptureFixture[str], command: str, argv: tuple[str, ...]) -> None:
    code, out, err = run_cli(capsys, *command.split(), *argv, "--json")
    assert code == 0, err
    doc = json.loads(out)
    jsonschema.validate(doc, schema(command))
    rows = doc["rows"] if command == "compare" else [doc]
    engines = [r["engine"] for r in rows if "engine" in r]
    for engine in engines:
        assert set(engine) >= {"name", "version"}


@pytest.mark.parametrize(
    "argv",
    [
        ("plan", "qwen3-32b", "--gpu", "rtx-4090", "--context", "32k"),
        ("cost", "no-such-model"),
        ("compare", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "32k", "--sort", "vibes"),
    ],
)
def test_errors_are_the_error_document(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 1 and err.startswith("Error: ")
    jsonschema.validate(json.loads(out), schema("error"))


# Objects whose fields are another document's, checked by that document's own schema.
OPEN_OBJECTS = {("report", "plan"), ("report", "levers"), ("report", "sizing")}


def _objects(node: object, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], dict[str, object]]]:
    """Every object schema with known fields (``properties``) inside ``node``, with its path."""
    found: list[tuple[tuple[str, ...], dict[str, object]]] = []
    if isinstance(node, dict):
        if "properties" in node:
            found.append((path, node))
        for key, value in node.items():
            found += _objects(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _objects(value, (*path, str(i)))
    return found


def test_every_object_with_known_fields_rejects_unknown_ones() -> None:
    for name in NAMES:
        for path, node in _objects(schema(name)):
            if (name, path[-1] if path else "") in OPEN_OBJECTS:
                continue
            assert node.get("additionalProperties") is False, f"{name}.json at {'/'.join(path) or 'top'}"


def _minimal(node: dict[str, Any], root: dict[str, Any]) -> Any:
    """The smallest document ``node`` accepts: its required fields only, each the simplest value of its type."""
    if "$ref" in node:
        target: Any = root
        for part in str(node["$ref"]).removeprefix("#/").split("/"):
            target = target[part]
        return _minimal(target, root)
    if "const" in node:
        return node["const"]
    if "enum" in node:
        return node["enum"][0]
    for key in ("anyOf", "oneOf"):
        if key in node:
            return _minimal(node[key][0], root)
    kind = node.get("type", "object")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        props = node.get("properties", {})
        return {k: _minimal(props.get(k, {}), root) for k in node.get("required", [])}
    if kind == "array":
        return [_minimal(node.get("items", {}), root) for _ in range(node.get("minItems", 0))]
    simple = {"string": "x", "integer": node.get("minimum", 0), "number": node.get("minimum", 0), "boolean": False}
    return simple.get(kind)


@pytest.mark.parametrize("name", NAMES)
def test_an_extra_field_is_rejected(name: str) -> None:
    """Every schema: its smallest valid document passes, and the same document with one unknown field fails."""
    s = schema(name)
    doc = _minimal(s, s)
    jsonschema.validate(doc, s)
    with pytest.raises(jsonschema.ValidationError, match="unexpected_field"):
        jsonschema.validate({**doc, "unexpected_field": 1}, s)


LOGS = sorted((Path(__file__).parent / "data" / "logs").rglob("*.log"))


@pytest.mark.parametrize("log", LOGS, ids=[p.name for p in LOGS])
def test_calibrate_documents_every_real_log_as_its_schema_says(capsys: pytest.CaptureFixture[str], log: Path) -> None:
    """Every real log kept for the tests (every engine, every format, TP ranks, refusals, serving lines), read by
    calibrate with the model the log names or none, and with a model given: the document follows calibrate.json
    (each setting the reader names, each figure's rank, the refusal's figures, each engine's predictions), or the
    error document where calibrate refuses the log."""
    assert len(LOGS) >= 40
    for extra in ((), ("--model", "llama-3.1-8b")):
        code, out, err = run_cli(capsys, "calibrate", str(log), *extra, "--json")
        assert code in (0, 1), err
        jsonschema.validate(json.loads(out), schema("calibrate" if code == 0 else "error"))
