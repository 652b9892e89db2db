"""Every figure plan, compare, size, speed and simulate give carries one label of kvbudget.provenance.LABELS (the four
kinds, or ``given`` for the user's input): a new label word fails here. The derived rule takes the weakest input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.provenance import KINDS, LABELS, derived
from tests.helpers import run_cli
from tests.test_schemas import CASES

LOG = "tests/data/logs/vllm/v0-0.6.4fmt-llama31-8b-rtx3090-20k.log"
QUESTIONS = [(c, argv) for c, argv in CASES if c in ("plan", "compare", "size", "speed", "simulate", "gpus")] + [
    ("plan", ("llama-3.1-8b", "--gpu-memory", "24GiB", "--engine", "vllm", "--context", "8k")),
    ("plan", ("llama-3.1-8b", "--gpu", "mi300x", "--engine", "vllm", "--context", "32k")),  # a nominal card
    ("plan", ("llama-3.1-8b", "--gpu", "dgx-spark", "--engine", "llamacpp", "--context", "32k")),
    ("plan", ("llama-3.1-8b", "--from-log", LOG, "--engine", "vllm", "--context", "20k")),
    ("compare", ("llama-3.1-8b", "--gpu", "mi300x,h100-sxm", "--engine", "vllm,trtllm", "--context", "32k")),
]


def _labels(node: object, key: str = "") -> list[tuple[str, object]]:
    """(key, value) of every provenance label in the document: a ``provenance`` / ``*_provenance`` string, or each
    value of a ``provenance`` object (compare's, one per figure)."""
    found: list[tuple[str, object]] = []
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "provenance" or k.endswith("_provenance"):
                found += [(k, x) for x in v.values()] if isinstance(v, dict) else [(k, v)]
            else:
                found += _labels(v, k)
    elif isinstance(node, list):
        for item in node:
            found += _labels(item, key)
    return found


@pytest.mark.parametrize(("command", "argv"), QUESTIONS, ids=[f"{c}-{i}" for i, (c, _) in enumerate(QUESTIONS)])
def test_every_label_is_one_of_the_set(capsys: pytest.CaptureFixture[str], command: str, argv: tuple[str, ...]) -> None:
    code, out, err = run_cli(capsys, command, *argv, "--json")
    assert code == 0, err
    labels = _labels(json.loads(out))
    assert labels, "the document carries no label"
    assert [(k, v) for k, v in labels if v not in LABELS and v is not None] == []


def _lines(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, str]:
    code, out, err = run_cli(capsys, "plan", *argv, "--json")
    assert code == 0, err
    return {line["label"]: line["provenance"] for line in json.loads(out)["ledger"]}


def test_a_pool_takes_the_weakest_label_of_its_inputs(capsys: pytest.CaptureFixture[str]) -> None:
    # --gpu-memory and --overhead given, the weights computed from the architecture: a computed pool
    given = _lines(capsys, "llama-3.1-8b", "--gpu-memory", "24GiB", "--overhead", "2GiB", "--context", "8k")
    assert given["GPU memory"] == "given" and given["runtime overhead"] == "measured"
    assert given["usable by the engine"] == "exact"  # 24 GiB x vLLM's default 0.9: exact arithmetic on an input
    assert given["weights"] == "computed" and given["KV pool"] == "computed"
    # the overhead heuristic (no --overhead): the pool is heuristic, whatever else is exact
    assert _lines(capsys, "llama-3.1-8b", "--gpu-memory", "24GiB", "--context", "8k")["KV pool"] == "heuristic"
    # a nominal card (MI250X: 128 GB x 10^9, no driver or CUDA total read) is a heuristic GPU total
    nominal = _lines(capsys, "llama-3.1-8b", "--gpu", "mi250x", "--overhead", "2GiB", "--context", "8k")
    assert nominal["GPU memory"] == "heuristic" and nominal["usable by the engine"] == "heuristic"


def test_derived_takes_the_weakest_and_given_counts_as_exact() -> None:
    assert KINDS == ("exact", "measured", "computed", "heuristic") and (*KINDS, "given") == LABELS
    assert derived("given", "exact") == "exact"
    assert derived("given", "measured", "exact") == "measured"
    assert derived("measured", "computed") == "computed"
    assert derived("exact", "heuristic", "measured") == "heuristic"


def test_an_overhead_says_which_sizes_the_config_lacks(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A config that writes no vocab_size nor intermediate_size (Llama-3.1-8B's geometry without them): the overhead
    reads 128,000 and 4 x hidden (16,384) in their place, and its basis says so (it stays heuristic); the catalog's
    Llama-3.1-8B gives both."""
    fields = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096}
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16", **fields}
    (tmp_path / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 131072}))
    argv = ("--gpu", "h100-sxm", "--engine", "vllm", "--context", "32k", "--weights-size", "15GB", "--json")
    code, out, err = run_cli(capsys, "plan", str(tmp_path / "config.json"), *argv)
    assert code == 0, err
    line = next(x for x in json.loads(out)["ledger"] if x["label"] == "runtime overhead")
    assert line["provenance"] == "heuristic"
    assert line["basis"].endswith(
        "MLP width not in the config: 16,384 assumed; vocabulary not in the config: 128,000 assumed"
    )
    code, out, err = run_cli(capsys, "plan", "llama-3.1-8b", *argv)
    assert "not in the config" not in out
