"""llama.cpp's own allocation for the GGUF architectures added for issue 7, against kvbudget's prediction.

Each case writes a tiny GGUF with a real model's cache geometry (``tiny_arch_gguf``), starts the real
llama-server on it (scripts/build-llama-server), and compares every cache line llama.cpp logs at
start-up (``llama_kv_cache: size = ...``, the iSWA ``creating ... cells`` lines, ``llama_memory_recurrent:
size = ...``) with ``engines.llamacpp.logged_caches`` for the same ``-c``/``-np``/cache types, read from
the same file by kvbudget's GGUF reader. The expected cells and layers beside each case are worked by
hand from llama.cpp's hard-coded rules; the attention-only cases also go through ``kvbudget calibrate``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvbudget.engines.base import EngineOptions
from kvbudget.engines.llamacpp import LoggedCache, kv_cache_log_lines, logged_caches
from kvbudget.measure.calibrate import calibrate
from kvbudget.measure.logs import read_log
from kvbudget.model.sources import resolve
from kvbudget.precision import parse_cache_dtype
from tests.live.server import llama_server
from tests.live.tiny_arch_gguf import WRITERS

CACHE_LINE = re.compile(
    r"(llama_kv_cache(?:_iswa|_dsa)?: (?:size = .*|creating .*)|llama_memory_recurrent: size = .*)$"
)
# The pinned llama.cpp logs its recurrent memory as "(N cells, L layers, S seqs  R rs_seq), R ..., S ..., P ...";
# kvbudget's log_line keeps the earlier format, so the recurrent line is compared figure by figure.
RECURRENT = re.compile(
    r"llama_memory_recurrent: size = +(?P<size>[\d.]+) MiB \( *(?P<cells>\d+) cells, +(?P<layers>\d+) layers, +"
    r"(?P<seqs>\d+) seqs +0 rs_seq\), R \(f32\): +(?P<r>[\d.]+) MiB, S \(f32\): +(?P<s>[\d.]+) MiB"
)
Q4 = ("-ctk", "q4_0", "-ctv", "q4_0", "-fa", "on")  # quantized caches keep the long-context cases small


@dataclass(frozen=True)
class Case:
    arch: str
    args: tuple[str, ...]
    caches: tuple[tuple[str, int, int], ...]  # (kind, cells per stream, layers) as llama.cpp logs them


CASES = {
    # Llama 4 Scout: no sliding_window key, so llama.cpp chunks 36 of 48 layers at its hard-coded 8192:
    # SWA cells pad(8192 + 512 ubatch, 256) = 8704 < the 9216-cell context; 12 global layers keep 9216.
    "llama4-chunked-8192": Case("llama4", ("-c", "9216", "-np", "1", *Q4), (("kv", 9216, 12), ("swa", 8704, 36))),
    "smollm3": Case("smollm3", ("-c", "2048", "-np", "2"), (("kv", 1024, 36),)),
    # GLM-4.5-Air: block_count 47 with 1 MTP layer; the main context caches the 46 trunk layers.
    "glm4moe-mtp-holds-no-kv": Case("glm4moe", ("-c", "1024", "-np", "1"), (("kv", 1024, 46),)),
    # EXAONE 4 with 64 layers: llama.cpp slides 48 of them at a hard-coded 4096: pad(4096 + 512, 256) = 4608.
    "exaone4-64-layers-slide": Case("exaone4", ("-c", "5120", "-np", "1", *Q4), (("kv", 5120, 16), ("swa", 4608, 48))),
    # Command R7B: every 4th of 32 layers global (hard-coded period 4), window 4096 from the GGUF.
    "cohere2-every-4th-global": Case("cohere2", ("-c", "5120", "-np", "1", *Q4), (("kv", 5120, 8), ("swa", 4608, 24))),
    # Gemma 3n E4B: only the first 20 of 35 layers keep KV (4 full, 16 sliding at window 512: pad(512 + 512, 256)).
    "gemma3n-20-kv-layers": Case("gemma3n", ("-c", "4096", "-np", "2"), (("kv", 2048, 4), ("swa", 1024, 16))),
    # LFM2-350M: 6 attention layers; 16 layers' short-conv rows (R only: 1,024 x 2 values, f32), one per sequence.
    "lfm2-short-conv": Case("lfm2", ("-c", "2048", "-np", "2"), (("kv", 1024, 6), ("recurrent", 2, 16))),
    # Falcon-H1-0.5B: attention and Mamba-2 on all 36 layers.
    "falcon-h1-parallel-hybrid": Case("falcon-h1", ("-c", "1024", "-np", "2"), (("kv", 512, 36), ("recurrent", 2, 36))),
    # NVIDIA-Nemotron-3-Nano: 6 attention layers, 23 Mamba-2 layers (the recurrent line counts all 52).
    "nemotron-h-moe": Case("nemotron_h_moe", ("-c", "1024", "-np", "2"), (("kv", 512, 6), ("recurrent", 2, 52))),
    # DeepSeek-V3.2 (61 trunk layers + 1 MTP): the V-less MLA cache, then the indexer's K-only cache of 128 f16
    # values per cell (llama_kv_cache_dsa), both over the trunk layers.
    "deepseek32-indexer-cache": Case("deepseek32", ("-c", "2048", "-np", "2"), (("kv", 1024, 61), ("kv", 1024, 61))),
    "glm5-indexer-cache": Case("glm-dsa", ("-c", "2048", "-np", "1"), (("kv", 2048, 78), ("kv", 2048, 78))),
    # GLM-5.2's context: llama.cpp's built-in pattern gives 21 of 78 layers an indexer cache.
    "glm5.2-default-indexer-types": Case(
        "glm-dsa-5.2", ("-c", "2048", "-np", "1"), (("kv", 2048, 78), ("kv", 2048, 21))
    ),
    # MiniCPM3: no MLA cache in llama.cpp: 40 KV heads x (K 96 + V 64) per layer.
    "minicpm3-per-head-kv": Case("minicpm3", ("-c", "1024", "-np", "1"), (("kv", 1024, 62),)),
    # Kimi Linear: 7 MLA layers (V-less latent) and KDA rows on all 27 (R 3 x 3 x 4,096, S 128 x 128 x 32, f32).
    "kimi-linear-kda-mla": Case("kimi-linear", ("-c", "1024", "-np", "2"), (("kv", 512, 7), ("recurrent", 2, 27))),
    # Gemma 4 26B: 5 full layers (2 KV heads x 512) and 25 sliding (8 x 256) at window 1024: pad(1024 + 512, 256).
    "gemma4-per-type-heads": Case("gemma4", ("-c", "4096", "-np", "1"), (("kv", 4096, 5), ("swa", 1536, 25))),
    # The last 20 of 35 layers reuse KV: 3 full and 12 sliding layers keep a cache.
    "gemma4-shared-kv": Case("gemma4-shared-kv", ("-c", "4096", "-np", "1"), (("kv", 4096, 3), ("swa", 1536, 12))),
    # Phi-3-mini: sliding_window 2047 in the GGUF, but llama.cpp disables Phi SWA: all 32 layers keep the whole
    # 4096-cell context (with SWA they would hold pad(2047 + 512, 256) = 2560).
    "phi3-swa-disabled": Case("phi3", ("-c", "4096", "-np", "1", *Q4), (("kv", 4096, 32),)),
    # Command R (c4ai-command-r-08-2024): 40 full layers, 2 streams of 1024 cells.
    "command-r": Case("command-r", ("-c", "2048", "-np", "2"), (("kv", 1024, 40),)),
    # GLM-4-9B-0414: 40 full layers.
    "glm4": Case("glm4", ("-c", "1024", "-np", "1"), (("kv", 1024, 40),)),
    # The same with one MTP layer appended (block_count 41): the main context caches the 40 trunk layers.
    "glm4-mtp-holds-no-kv": Case("glm4-mtp", ("-c", "1024", "-np", "1"), (("kv", 1024, 40),)),
    # OLMo-2-1124-7B: no window, 32 full layers.
    "olmo2": Case("olmo2", ("-c", "1024", "-np", "1"), (("kv", 1024, 32),)),
    # OLMo 3 7B (architecture olmo2): window 4096 on 24 of 32 layers (every 4th full): pad(4096 + 512, 256) = 4608.
    "olmo3-every-4th-global": Case("olmo3", ("-c", "5120", "-np", "1", *Q4), (("kv", 5120, 8), ("swa", 4608, 24))),
    # granite-3.3-8b-instruct: 40 full layers, 2 streams of 1024 cells.
    "granite": Case("granite", ("-c", "2048", "-np", "2"), (("kv", 1024, 40),)),
    # granite-3.1-3b-a800m: 32 full layers.
    "granitemoe": Case("granitemoe", ("-c", "1024", "-np", "1"), (("kv", 1024, 32),)),
    # starcoder2-15b: 40 full layers (no window in llama.cpp).
    "starcoder2": Case("starcoder2", ("-c", "1024", "-np", "1"), (("kv", 1024, 40),)),
    # ERNIE-4.5-21B-A3B: 28 full layers, MoE and dense.
    "ernie4_5-moe": Case("ernie4_5-moe", ("-c", "1024", "-np", "1"), (("kv", 1024, 28),)),
    "ernie4_5": Case("ernie4_5", ("-c", "1024", "-np", "1"), (("kv", 1024, 28),)),
    # Seed-OSS-36B: 64 full layers of 8 KV heads x 128 (hidden 5,120 narrower than the 80 query heads).
    "seed_oss": Case("seed_oss", ("-c", "1024", "-np", "1"), (("kv", 1024, 64),)),
    # Hunyuan-7B: 32 full layers.
    "hunyuan-dense": Case("hunyuan-dense", ("-c", "1024", "-np", "1"), (("kv", 1024, 32),)),
    # MiniMax-M2: 62 full layers of 8 KV heads x 128.
    "minimax-m2": Case("minimax-m2", ("-c", "1024", "-np", "1"), (("kv", 1024, 62),)),
    # OLMo-1.7-7B: 32 full layers of 32 KV heads x 128.
    "olmo": Case("olmo", ("-c", "1024", "-np", "1"), (("kv", 1024, 32),)),
    # glm-4-9b-chat-hf (architecture chatglm): 40 full layers of 2 KV heads x 128.
    "chatglm": Case("chatglm", ("-c", "1024", "-np", "1"), (("kv", 1024, 40),)),
}


def _arg(args: tuple[str, ...], flag: str, default: str) -> str:
    return args[args.index(flag) + 1] if flag in args else default


def _logged(log: Path) -> list[str]:
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    return [m.group(1) for m in map(CACHE_LINE.search, lines) if m]


def _recurrent_figures(cache: LoggedCache) -> dict[str, str]:
    mib = cache.log_line()  # the earlier format carries the same figures, formatted as llama.cpp does
    figures = re.search(r"size = +(?P<size>[\d.]+) MiB.*R \(f32\): +(?P<r>[\d.]+) MiB, S \(f32\): +(?P<s>[\d.]+)", mib)
    assert figures is not None
    return {
        "size": figures["size"],
        "cells": str(cache.cells),
        "layers": str(cache.layers),
        "seqs": str(cache.n_seq),
        "r": figures["r"],
        "s": figures["s"],
    }


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_llama_server_allocates_what_kvbudget_predicts(tmp_path: Path, case: Case) -> None:
    model = WRITERS[case.arch](tmp_path / f"{case.arch}.gguf")
    log = tmp_path / "llama-server.log"
    with llama_server(model, log, *case.args):
        pass
    spec = resolve(str(model))
    k = parse_cache_dtype(_arg(case.args, "-ctk", "f16"))
    v = parse_cache_dtype(_arg(case.args, "-ctv", "f16"))
    n_ctx, n_seq = int(_arg(case.args, "-c", "0")), int(_arg(case.args, "-np", "1"))
    predicted = logged_caches(spec, k, v, n_ctx, n_seq, EngineOptions())
    assert [(c.kind, c.cells, c.layers) for c in predicted] == list(case.caches)
    logged = _logged(log)
    expected_kv = [line for line in kv_cache_log_lines(spec, k, v, n_ctx, n_seq) if "recurrent" not in line]
    assert [line for line in logged if "recurrent" not in line] == expected_kv
    recurrent = [c for c in predicted if c.kind == "recurrent"]
    logged_recurrent = [m.groupdict() for m in map(RECURRENT.match, logged) if m]
    assert logged_recurrent == [_recurrent_figures(c) for c in recurrent]
    assert len(logged_recurrent) == sum("recurrent" in line for line in logged)


@pytest.mark.parametrize("case", ["llama4-chunked-8192", "exaone4-64-layers-slide", "gemma3n-20-kv-layers"])
def test_calibrate_reconciles_the_live_log(tmp_path: Path, case: str) -> None:
    """kvbudget calibrate reads the log, finds the GGUF it names, and every cache figure agrees."""
    spec = CASES[case]
    model = WRITERS[spec.arch](tmp_path / f"{spec.arch}.gguf")
    log_path = tmp_path / "llama-server.log"
    with llama_server(model, log_path, *spec.args):
        pass
    cal = calibrate(read_log(log_path))
    caches = cal.predicted["caches"]
    assert isinstance(caches, list)
    assert [c["cells"] for c in caches] == [cells for _, cells, _ in spec.caches]
    assert cal.rows and all(row.agrees for row in cal.rows)
