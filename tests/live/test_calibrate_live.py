"""calibrate on a real llama-server's own start-up log: kvbudget reproduces its KV bytes exactly.

Each case starts the real binary (scripts/build-llama-server) on a tiny GGUF with Llama-3.1-8B's KV
geometry (32 layers x 8 KV heads x 128), reads the log it wrote with ``-lv 4`` and reconciles it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.measure.calibrate import calibrate
from kvbudget.measure.logs import read_log
from tests.helpers import run_cli
from tests.live.server import llama_server
from tests.live.tiny_gguf import write_llama

MiB = 2**20
PER_CELL = 32 * 2 * 8 * 128 * 2  # 32 layers x (K, V) x 8 KV heads x 128 x f16 = 131,072 B


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_llama(tmp_path_factory.mktemp("gguf") / "llama-3.1-8b-tiny.gguf")


@pytest.mark.parametrize(
    ("args", "cells", "streams", "kv_bytes"),
    [
        (("-c", "4096", "-np", "4"), 1024, 4, 4096 * PER_CELL),  # 512.00 MiB
        (("-c", "9300", "-np", "4"), 2560, 4, 4 * 2560 * PER_CELL),  # each stream padded to 256 cells
        (("-c", "9300", "-np", "4", "--kv-unified"), 9472, 1, 9472 * PER_CELL),  # one stream, padded once
        (("-c", "2048", "-np", "1", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"), 2048, 1, 2048 * PER_CELL * 34 // 64),
    ],
    ids=["np4", "np4-padded", "unified", "q8_0"],
)
def test_llama_server_log_reconciles_exactly(
    model: Path, tmp_path: Path, args: tuple[str, ...], cells: int, streams: int, kv_bytes: int
) -> None:
    log_path = tmp_path / "llama-server.log"
    with llama_server(model, log_path, *args) as server:
        props = server.get_json("/props")
    log = read_log(log_path)
    assert log.engine == "llamacpp"
    assert log.model is not None and log.model.value == str(model)  # the model is read from the log itself
    [cache] = log.caches
    assert (cache.cells, cache.layers, cache.streams) == (cells, 32, streams)
    assert abs(int(cache.size.value) - kv_bytes) <= cache.size.resolution
    cal = calibrate(log)  # no --model: the log names the GGUF it loaded
    assert cal.predicted["caches"] == [{"kind": "kv", "bytes": kv_bytes, "cells": cells, "layers": 32}]
    assert [(r.figure, r.agrees) for r in cal.rows] == [("kv cache bytes", True), ("kv cache cells", True)]
    assert isinstance(props, dict) and props["total_slots"] == int(args[args.index("-np") + 1])


def test_calibrate_cli_on_a_live_log(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_path = tmp_path / "llama-server.log"
    with llama_server(model, log_path, "-c", "4096", "-np", "4"):
        pass
    code, out, _ = run_cli(capsys, "calibrate", str(log_path), "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["engine"]["name"] == "llamacpp" and doc["engine"]["version"].startswith("b")
    assert doc["settings"]["n_seq"]["value"] == 4 and doc["settings"]["context"]["value"] == 4096
    assert doc["measured"]["kv_cache_bytes"]["value"] == 512 * MiB
    assert doc["predicted"]["log_lines"] == [
        "llama_kv_cache: size =  512.00 MiB (  1024 cells,  32 layers,  4/4 seqs), K (f16):  256.00 MiB, "
        "V (f16):  256.00 MiB"
    ]
    assert all(r["agrees"] for r in doc["reconciliation"])


def test_plan_from_a_live_log(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The server's own model and compute buffers become the ledger's measured weights and overhead."""
    log_path = tmp_path / "llama-server.log"
    with llama_server(model, log_path, "-c", "4096", "-np", "4"):
        pass
    log = read_log(log_path)
    weights, compute = log.measured["weights_bytes"], log.measured["compute_buffer_bytes"]
    code, out, err = run_cli(
        capsys, "plan", str(model), "--from-log", str(log_path), "--gpu-memory", "2GiB", "--context", "1024", "--json"
    )
    assert code == 0, err
    doc = json.loads(out)
    ledger = {line["label"]: line for line in doc["ledger"]}
    assert (ledger["weights"]["provenance"], ledger["weights"]["bytes"]) == ("measured", weights.value)
    assert (ledger["runtime overhead"]["provenance"], ledger["runtime overhead"]["bytes"]) == (
        "measured",
        compute.value,
    )
    # 2 GiB - 1 GiB fit margin - weights - compute buffers leaves room for 7 slots of 1,024 cells (128 MiB each)
    pool = 2**30 - int(weights.value) - int(compute.value)
    assert doc["sessions"] == pool // (1024 * PER_CELL)
