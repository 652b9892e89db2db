"""Small builders shared by tests: configs with a chosen geometry, and the CLI runner."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kvbudget.cli.main import main
from kvbudget.errors import InputError
from kvbudget.model.families import read_spec
from kvbudget.model.spec import ModelSpec
from kvbudget.plan.plan import Plan

# TinyLlama-1.1B's config.json: the geometry the TensorRT-LLM excerpt's 22,528 B per token implies
# (tests/data/logs/SOURCES.md: 22 layers x 4 KV heads x 64 dims x K and V x 2 bytes = 22,528)
TINYLLAMA: dict[str, Any] = {
    "model_type": "llama",
    "num_hidden_layers": 22,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "max_position_embeddings": 2048,
    "vocab_size": 32000,
    "torch_dtype": "bfloat16",
}


def dense_config(layers: int, heads: int, kv_heads: int, head_dim: int, **extra: Any) -> dict[str, Any]:
    """A Llama-style config with the given attention geometry."""
    cfg: dict[str, Any] = {
        "model_type": "llama",
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "hidden_size": heads * head_dim,
        "head_dim": head_dim,
        "torch_dtype": "bfloat16",
    }
    cfg.update(extra)
    return cfg


def spec_of(cfg: dict[str, Any], name: str = "test") -> ModelSpec:
    return read_spec(cfg, name=name, source="test")


def write_config(tmp_path: Path, cfg: object, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(cfg), encoding="utf-8")
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the real entry point; return (exit code, stdout, stderr)."""
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def refused_in_one_line(
    capsys: pytest.CaptureFixture[str], path: Path, text: str, read: Callable[[Path], object], message: str, *argv: str
) -> str:
    """Write ``text`` at ``path``: ``read(path)`` raises InputError matching ``message``, and ``kvbudget ARGV`` (which
    names the file) exits 1 with one line on stderr, no traceback; that line."""
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=message):
        read(path)
    code, _, err = run_cli(capsys, *argv)
    assert code == 1 and err.count("\n") == 1 and err.startswith("Error: ") and "Traceback" not in err
    return err


def plan_from_argv(argv: list[str]) -> Plan:
    """The plan a ``kvbudget plan ...`` command line asks for, through the CLI's own parser and request mapping."""
    from kvbudget.cli.main import build_parser
    from kvbudget.cli.options import request_from
    from kvbudget.plan.build import plan_deployment
    from kvbudget.requests.plan import PlanRequest

    return plan_deployment(request_from(PlanRequest, build_parser().parse_args(argv)))
