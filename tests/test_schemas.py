"""The JSON contract: every document validates against its shipped schema (kvbudget/schemas), the engine is
{name, version} in each, and errors under --json are the error document with exit code 1."""

from __future__ import annotations

import json

import jsonschema
import pytest

from kvbudget.schemas import NAMES, schema
from tests.helpers import run_cli

CASES = [
    ("cost", ("llama-3.1-70b", "--tokens", "32k")),
    ("cost", ("qwen3-next-80b-a3b", "--engine", "vllm")),
    ("cost", ("gemma-3-27b", "--engine", "ollama", "--sequences", "3")),
    ("plan", ("llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "32k")),
    ("plan", ("gpt-oss-120b", "--gpu", "h200", "--engine", "trtllm", "--context", "64k", "--prefix", "4096")),
    ("plan", ("deepseek-v3", "--gpu", "h200", "--gpus", "8", "--tp", "8", "--engine", "sglang", "--context", "32k")),
    ("plan", ("llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "vllm", "--context", "128k")),  # not served
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
    ("calibrate", ("tests/data/logs/vllm/v0-0.6.4fmt-llama31-8b-rtx3090-20k.log", "--model", "llama-3.1-8b")),
    ("table", ("llama-3.1-70b",)),
    ("table", ("gemma-3-27b", "--engine", "vllm", "--tokens", "4k,128k", "--sequences", "1,3")),
    ("models", ()),
    ("models", ("--engine", "llamacpp", "--kv-dtype", "q8_0")),
    ("gpus", ()),
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
