"""Ollama >= 0.30 runs every GGUF model in an upstream llama-server started with its own arguments
(llm/llama_server.go). kvbudget's ``ollama`` engine builds those arguments from Ollama's rules (num_ctx
clamped to the training context, parallel forced to one slot for some families, the cache type, the automatic
batch); this test starts the real llama-server with exactly them on tiny GGUFs of real geometry and compares
every cache line llama.cpp logs with the lines kvbudget's Ollama engine predicts, and the bytes with its layout.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvbudget.engines import parse_engine
from kvbudget.engines.base import EngineOptions
from kvbudget.engines.ollama import llama_server_args
from kvbudget.engines.records import Deployment
from kvbudget.model.sources import resolve
from kvbudget.precision import parse_cache_dtype
from tests.live.server import llama_server
from tests.live.test_arch_gguf_live import CACHE_LINE, RECURRENT
from tests.live.tiny_arch_gguf import WRITERS
from tests.live.tiny_gguf import LLAMA_31_8B, Geometry, write_llama

SIZE = re.compile(r"(llama_kv_cache(?:_iswa)?: (?:size = .*|creating .*))$")
MiB = 2**20


def _short_llama(path: Path) -> Path:
    """Llama-3.1-8B geometry with a 2,048-token training context: Ollama clamps num_ctx to it."""
    return write_llama(path, Geometry("llama-2k-ctx-tiny", 32, 32, 8, 128, context_length=2048))


@dataclass(frozen=True)
class Case:
    write: Callable[[Path], Path]
    num_ctx: int
    parallel: int
    kv: str
    expected_args: tuple[str, ...]  # worked by hand from Ollama's rules


CASES = {
    # 3 slots of 1,000 tokens: -c 3000; llama.cpp pads to 3072 and gives each stream pad(1024, 256) cells.
    "llama-3-slots": Case(
        lambda p: write_llama(p, LLAMA_31_8B), 1000, 3, "auto", ("-c", "3000", "-np", "3", "--flash-attn", "auto")
    ),
    # num_ctx 8192 above the 2,048-token training context: Ollama clamps it before llama.cpp sees it.
    "num-ctx-clamped": Case(_short_llama, 8192, 2, "auto", ("-c", "4096", "-np", "2", "--flash-attn", "auto")),
    # OLLAMA_KV_CACHE_TYPE=q8_0: one type for K and V, flash attention auto (enabled on CPU).
    "q8_0-cache": Case(
        lambda p: write_llama(p, LLAMA_31_8B),
        2048,
        2,
        "q8_0",
        ("-c", "4096", "-np", "2", "--cache-type-k", "q8_0", "--cache-type-v", "q8_0", "--flash-attn", "auto"),
    ),
    # Gemma 4 (window 1,024): -c 8192 > 4,096 raises num_batch to 1,024, so the SWA cache holds
    # pad(min(4096, 1024 + 1024), 256) = 2,048 cells per stream instead of llama-server's default 1,536.
    "gemma4-auto-batch-swa": Case(
        WRITERS["gemma4"], 4096, 2, "auto", ("-c", "8192", "-np", "2", "--flash-attn", "auto", "-b", "1024")
    ),
    # LFM2 is one of the families Ollama forces to one slot: OLLAMA_NUM_PARALLEL=4 still starts -np 1.
    "lfm2-single-slot": Case(WRITERS["lfm2"], 2048, 4, "auto", ("-c", "2048", "-np", "1", "--flash-attn", "auto")),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_ollama_llama_server_allocates_what_kvbudget_predicts(tmp_path: Path, case: Case) -> None:
    model = case.write(tmp_path / "model.gguf")
    spec = resolve(str(model))
    k = parse_cache_dtype(case.kv, model_dtype="fp16")
    num_ctx, parallel, batch, args = llama_server_args(spec, case.num_ctx, case.parallel, k, EngineOptions())
    joined = " ".join(args)
    assert " ".join(case.expected_args[:4]) in joined and all(a in args for a in case.expected_args)
    log = tmp_path / "llama-server.log"
    with llama_server(model, log, *args):
        pass
    text = log.read_text(encoding="utf-8", errors="replace").splitlines()
    logged = [m.group(1) for m in map(SIZE.search, text) if m]
    cache_lines = [m.group(1) for m in map(CACHE_LINE.search, text) if m]
    engine = parse_engine("ollama").rules
    layout = engine.layout(spec, k, k, 1, EngineOptions())
    d = Deployment(spec, layout, k, k, 1, 1, case.num_ctx, EngineOptions(), 0, case.parallel)
    predicted = engine.start_up(d).lines
    assert predicted[0].endswith(f'{joined}"')  # Ollama's own "starting llama-server" line
    assert [line for line in predicted[1:] if "recurrent" not in line] == logged
    recurrent = [m.groupdict() for m in map(RECURRENT.match, cache_lines) if m]
    assert len(recurrent) == sum("recurrent" in line for line in predicted)
    assert all(r["seqs"] == str(parallel) for r in recurrent)
    # The layout's bytes for the slots Ollama really starts equal the sum of llama.cpp's size lines.
    sizes = [float(m.group(1)) for line in logged if (m := re.search(r"size = +([\d.]+) MiB", line))]
    sizes += [float(r["size"]) for r in recurrent]
    assert layout.total_bytes(num_ctx, parallel) / MiB == pytest.approx(sum(sizes), abs=0.01 * len(sizes))
    assert batch == (1024 if num_ctx * parallel > 4096 else 512)
