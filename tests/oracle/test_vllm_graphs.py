"""kvbudget's CUDA-graph capture sizes (engines/vllm_profile.capture_sizes, what --max-num-seqs moves in vLLM's
profile) against vLLM 0.33.0's own VllmConfig._set_cudagraph_sizes, run in the oracle environment on a Hopper and
a data-center Blackwell stand-in (vllm_graph_probe.py)."""

from __future__ import annotations

import pytest

from kvbudget.engines.vllm_profile import capture_sizes, graph_ceiling
from tests.oracle.oracle_env import run_probe

# (max_num_seqs, max_num_batched_tokens): set limits on and off the 8-step grid, vLLM's defaults, a batch below
# the ceiling (captured itself) and a limit above the batch
CASES = [(1, 8192), (6, 8192), (16, 8192), (64, 8192), (100, 8192), (160, 8192), (256, 2048), (1024, 8192)]
CASES += [(1024, 300), (300, 256), (1024, 16384), (700, 16384)]


@pytest.mark.parametrize("sm", [90, 100])
def test_capture_sizes_are_vllms_own(sm: int) -> None:
    cases = [{"id": f"{s}-{b}", "max_num_seqs": s, "max_num_batched_tokens": b} for s, b in CASES]
    name = "NVIDIA B200" if sm == 100 else "NVIDIA H100 80GB HBM3"
    results = run_probe("vllm_graph_probe.py", cases, sm=sm, gpu_bytes=80 * 2**30, gpu_name=name)
    for seqs, batched in CASES:
        ours = capture_sizes(seqs, batched, graph_ceiling(sm))
        assert list(ours) == results[f"{seqs}-{batched}"]["sizes"], (seqs, batched, sm)
