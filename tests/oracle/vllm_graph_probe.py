"""vLLM's own CUDA-graph capture sizes (VllmConfig._set_cudagraph_sizes), run inside the oracle environment.

Reads a JSON list of cases ``{id, max_num_seqs, max_num_batched_tokens}`` on stdin and prints one ``ORACLE``
line per case with the sizes vLLM captures: the method runs on a stand-in config holding only what it reads
(no speculative decoding, performance mode "balanced", CUDA graphs on), on the stand-in GPU of the run's compute
capability (oracle_standin.py), which picks the 512 or 1,024 ceiling. Not a test module: test_vllm_graphs.py
runs it with the oracle environment's interpreter.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace


def main() -> None:
    import oracle_standin

    oracle_standin.install_kernel_stubs()  # the GPU's answers (compute capability), before vLLM picks a platform
    from vllm.config.compilation import CompilationConfig, CUDAGraphMode
    from vllm.config.vllm import VllmConfig

    for case in json.load(sys.stdin):
        compilation = CompilationConfig()
        compilation.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
        config = SimpleNamespace(
            model_config=SimpleNamespace(enforce_eager=False),
            compilation_config=compilation,
            scheduler_config=SimpleNamespace(
                max_num_seqs=case["max_num_seqs"], max_num_batched_tokens=case["max_num_batched_tokens"]
            ),
            performance_mode="balanced",
            uniform_decode_query_len=1,
            speculative_config=None,
            parallel_config=SimpleNamespace(tensor_parallel_size=1),
        )
        VllmConfig._set_cudagraph_sizes(config)
        print("ORACLE " + json.dumps({"id": case["id"], "sizes": list(compilation.cudagraph_capture_sizes)}))


if __name__ == "__main__":
    main()
