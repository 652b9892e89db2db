"""The compute buffer kvbudget plans for llama.cpp, held to the real llama-server of the test suite.

The tiny GGUF keeps Llama-3.1-8B's attention geometry (32 query heads x 128, 8 KV heads) with a 64-wide hidden
state and a 259-token vocabulary, so the attention term is the peak and the output head is small: the scores of
one ubatch over one stream's cells without flash attention, the f16 mask with it (engines/llamacpp_compute.py).
llama-server prints the CPU backend's buffer ("CPU compute buffer size = X MiB"), which the same graph reserve
sizes; the CUDA buffers of public logs are held in tests/plan/test_llamacpp_real_logs.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvbudget.engines import llamacpp
from kvbudget.engines.llamacpp_compute import compute_buffer
from kvbudget.model.sources import resolve
from tests.live.server import llama_server
from tests.live.tiny_gguf import write_llama

MiB = 2**20


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_llama(tmp_path_factory.mktemp("gguf") / "llama-3.1-8b-tiny.gguf")


@pytest.mark.parametrize(
    ("n_ctx", "n_seq", "flash_attn"),
    [(8192, 1, False), (16384, 4, False), (32768, 1, True)],
    ids=["fa-off", "fa-off-4-streams", "fa-on"],
)
def test_the_planned_compute_buffer_is_the_logged_one_within_2_percent(
    model: Path, tmp_path: Path, n_ctx: int, n_seq: int, flash_attn: bool
) -> None:
    log_path = tmp_path / "llama-server.log"
    args = ("-c", str(n_ctx), "-np", str(n_seq), "-fa", "on" if flash_attn else "off")
    with llama_server(model, log_path, *args):
        pass
    [logged] = re.findall(r"CPU compute buffer size = +([\d.]+) MiB", log_path.read_text())
    spec = resolve(str(model))
    assert spec.config["vocab_size"] == 259  # read from token_embd's shape: the GGUF writes no vocab_size key
    cells, _ = llamacpp.context_cells(n_ctx, n_seq, unified=False)
    planned = compute_buffer(spec, ubatch=512, n_kv=cells, flash_attn=flash_attn, what="llama.cpp").low
    # measured on llama.cpp b11434: 548.64, 284.64 and 48.64 MiB; planned 544.25, 280.25 and 48.25
    assert abs(planned - float(logged) * MiB) <= 0.02 * float(logged) * MiB
