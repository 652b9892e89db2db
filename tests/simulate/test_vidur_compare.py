"""bench/vidur_compare.py's own side, without Vidur (which lives in an environment of its own): the trace
it hands Vidur is the simulator's requests, its stand-in attention profile reproduces the rows of
Vidur's Llama-3-8B profile it was fitted to, and without Vidur it says how to install it."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from bench.fidelity import sessions
from bench.vidur_compare import main, write_trace
from bench.vidur_driver import KV_BYTES_PER_TOKEN_LAYER, attention_profile


def test_the_trace_is_the_simulators_requests(tmp_path: Path) -> None:
    path = tmp_path / "chat.csv"
    assert write_trace("chat", 200, path) == 200
    with path.open() as f:
        rows = list(csv.DictReader(f))
    plans = list(sessions("chat", 200))
    assert len(rows) == len(plans) == 200
    for row, plan in zip(rows, plans, strict=True):
        (step,) = list(plan.steps)
        assert float(row["arrived_at"]) == plan.arrival_s
        assert int(row["num_prefill_tokens"]) == step.append_tokens
        assert int(row["num_decode_tokens"]) == step.output_tokens


def test_the_stand_in_profile_meets_vidurs_own_rows(tmp_path: Path) -> None:
    path = tmp_path / "attention.csv"
    attention_profile(path, 8192, 256)
    with path.open() as f:
        rows = list(csv.DictReader(f))
    decode = {(int(r["batch_size"]), int(r["kv_cache_size"])): float(r["time_stats.attn_decode.median"]) for r in rows}
    prefill = {
        (int(r["prefill_chunk_size"]), int(r["kv_cache_size"])): float(r["time_stats.attn_prefill.median"])
        for r in rows
        if r["is_prefill"] == "True"
    }
    # Vidur's A100 Llama-3-8B attention.csv: 104 requests of 6,400 tokens decode in 0.429 ms on 4 GPUs
    # (2 of the 8 KV heads each); one GPU reads 4x the KV, so the same batch at 1 GPU, less the launch
    # floor, is 4x that time less its floor
    four_gpu = 0.02 + (decode[104, 6400] - 0.02) / 4
    assert four_gpu == pytest.approx(0.429, rel=0.05)
    assert decode[1, 6400] == pytest.approx(0.02 + 6400 * KV_BYTES_PER_TOKEN_LAYER / 1.6e9, rel=1e-3)
    # one GPU, a 64-token chunk: 0.011 ms on no cache, 0.064 ms on 4,096 cached tokens
    assert prefill[64, 0] == pytest.approx(0.011, abs=0.002)
    assert prefill[64, 4096] == pytest.approx(0.064, rel=0.05)


def test_without_vidur_it_says_how_to_install_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KVBUDGET_VIDUR_ROOT", raising=False)
    monkeypatch.delenv("KVBUDGET_VIDUR_PYTHON", raising=False)
    assert main(["--vidur-root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "github.com/microsoft/vidur" in err and "--vidur-python" in err
