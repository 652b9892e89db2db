"""The oracle matrix: which engine x GPU x parallel-layout cells the test suite runs against the engines' own code.

One declaration, read by two sides: the oracle tests (tests/oracle/test_vllm_matrix.py, test_sglang_matrix.py)
run exactly these models at these GPUs and layouts through vLLM's and SGLang's own planning code, and
``kvbudget.coverage_parallel`` renders them into docs/coverage.md, so the document cannot claim a cell the
tests do not run. A cell the engine's code cannot run on a CPU stand-in is listed here with the reason (read,
not run); a test asserts the stand-in still fails there, so the day it runs the cell must join the matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget import hardware
from kvbudget.engines.capability import compute_capability


@dataclass(frozen=True)
class OracleGpu:
    key: str  # short name in test ids
    entry: str  # kvbudget's GPU catalog entry: the memory CUDA reports, the name (so the compute capability)
    label: str  # the coverage table's row label

    @property
    def capability(self) -> int:
        capability = compute_capability(hardware.gpu(self.entry).name)
        assert capability is not None, self.entry
        return capability


# the GPU generations of the matrix: Ampere, Ada, Hopper (80 and 141 GB), datacenter and consumer Blackwell
GPUS = (
    OracleGpu("a100", "a100-80gb", "A100 (Ampere)"),
    OracleGpu("l40s", "l40s", "L40S (Ada)"),
    OracleGpu("h100", "h100-80gb", "H100 (Hopper)"),
    OracleGpu("h200", "h200", "H200 (Hopper)"),
    OracleGpu("b200", "b200", "B200 (Blackwell)"),
    OracleGpu("rtx5090", "rtx-5090", "RTX 5090 (Blackwell, consumer)"),
)
TPS = (1, 2, 4, 8)
PP = 2  # the pipeline-parallel column: PP 2 at TP 1 (vLLM) or TP 2 (SGLang)


def gpu(key: str) -> OracleGpu:
    return next(g for g in GPUS if g.key == key)


# vLLM 0.33.0 (tests/oracle/requirements-oracle.txt): the models of the matrix, each chosen for a rule
VLLM_MODELS = (
    "Llama-3.1-8B",  # 8 KV heads: 1 per rank at TP 8
    "Qwen3-30B-A3B",  # 4 KV heads: replicated at TP 8
    "DeepSeek-V3",  # MLA: the latent on every rank; FlashMLA / Triton MLA / Blackwell MLA backends
    "gpt-oss-20b",  # sliding 128 + sinks, alternating with full
    "Qwen3-Next-80B-A3B",  # Gated DeltaNet hybrid: the state split by TP, 2 KV heads replicated; head 256 (FA4)
    "gemma-2-9b",  # head 256 with logit soft capping: no FA4 hd256 kernel on Blackwell, blocks of 16
)
# PP 2 (TP 1): each stage builds its own half of the layers; vLLM takes the smaller stage's num_blocks
VLLM_PP_MODELS = ("Llama-3.1-8B", "DeepSeek-V3", "gpt-oss-20b", "Qwen3-Next-80B-A3B")

# Read, not run: (GPU key, model) -> (the reason, shown in docs/coverage.md; the stand-in's error the test expects).
# On datacenter Blackwell vLLM picks FLASHINFER_MLA for DeepSeek-V3 (platforms/cuda.py _get_backend_priorities,
# first for compute capability 10.x). FlashInfer (flashinfer-python 0.7.2.post1, a dependency of vLLM 0.33) is not
# in the oracle environment: its wheel needs the CUDA runtime. A stand-in for it could not stay narrow: FLASHINFER
# also heads Blackwell's list for every other model, and its block sizes ask can_use_trtllm_attention of the GPU.
# Without it selection falls through to a backend that asks CUDA itself. kvbudget's rule (32-token blocks,
# vllm.mla_backend) is read from the priority list and FlashInferMLABackend.get_supported_kernel_block_sizes.
VLLM_READ_NOT_RUN: dict[tuple[str, str], tuple[str, str]] = {
    ("b200", "DeepSeek-V3"): (
        "vLLM picks FLASHINFER_MLA on Blackwell 10.x; FlashInfer's wheel needs the CUDA runtime, so the CPU stand-in "
        "cannot select it (32-token blocks read from FlashInferMLABackend)",
        "Torch not compiled with CUDA enabled",
    ),
}
# Run and agreeing, but not on the backend a real server picks: counted as read in docs/coverage.md. Without
# FlashInfer the stand-in runs FLASH_ATTN (FA4's head-256 kernel, 128-token pages) for Qwen3-Next on a B200;
# vLLM 0.33 as installed (with FlashInfer) puts FLASHINFER first on 10.x (kernel blocks 16/32/64, more only for
# trtllm-gen), so the hybrid block a real B200 server picks is read, not run. The other B200 models keep 16-token
# blocks under either backend (get_preferred_block_size: the default 16 is supported by both).
VLLM_NOT_AS_SERVED: dict[tuple[str, str], str] = {
    ("b200", "Qwen3-Next-80B-A3B"): (
        "run with FLASH_ATTN (FA4 head-256, 128-token pages) for want of FlashInfer; a real B200 server puts "
        "FLASHINFER first, whose hybrid block is read, not run"
    ),
}

# SGLang 0.5.23: the models run at TP 1-8 on every GPU (the settings cases live in test_sglang_matrix.py)
SGLANG_MODELS = (
    "Llama-3.1-8B",  # 8 KV heads: split to 1 per rank at TP 8
    "Qwen3-30B-A3B",  # 4 KV heads: replicated at TP 8
    "DeepSeek-V3",  # MLA: the latent on every rank; 1.5 GiB prefill-graph reserve
    "gpt-oss-20b",  # hybrid SWA pool
    "Qwen3-Next-80B-A3B",  # Gated DeltaNet hybrid, 2 KV heads: the state split by TP, heads replicated
)
# PP 2 at TP 2: SGLang's resolution (memory share, chunk, attention TP) is run; the pools are read, not run
SGLANG_PP_MODELS = ("Llama-3.1-8B", "DeepSeek-V3")
SGLANG_PP_GPUS = ("h100", "b200")
SGLANG_PP_READ = (
    "a pipeline stage's KV configurator needs the stage's process groups, which one process cannot stand in "
    "honestly: SGLang's resolution (mem_fraction_static, chunk, attention TP) is run, the pools are read"
)


def run_models(engine: str, key: str, tp: int) -> tuple[str, ...]:
    """The models whose whole plan (blocks, tokens, concurrency; SGLang's share and pools) the test suite runs
    through ``engine``'s own code on GPU ``key`` at ``tp`` (no pipeline parallelism); none for other engines."""
    if tp not in TPS:
        return ()
    if engine == "vllm":
        return tuple(m for m in VLLM_MODELS if (key, m) not in VLLM_READ_NOT_RUN and (key, m) not in VLLM_NOT_AS_SERVED)
    if engine == "sglang":
        return SGLANG_MODELS
    return ()


def _measured(engine: str, tp: int) -> frozenset[str]:
    """transformers' cache tensors, measured byte for byte on the CPU (no GPU rule: the same on every GPU), TP 1."""
    from kvbudget.engines.evidence import HELD_TO_ENGINE_CODE

    return HELD_TO_ENGINE_CODE["transformers"] if engine == "transformers" and tp == 1 else frozenset()


def run_architectures(engine: str, key: str, tp: int) -> frozenset[str]:
    """``run_models`` as architecture names (kvbudget.model.architectures), the coverage rows they hold."""
    from kvbudget.model import catalog
    from kvbudget.model.architectures import architecture_of

    names = set(_measured(engine, tp))
    for model in run_models(engine, key, tp):
        entry = catalog.lookup(model)
        assert entry is not None, model
        arch = architecture_of(str(entry.config.get("model_type", "")))
        names.add(arch.name if arch else model)
    return frozenset(names)


def _cell(run: int, read: tuple[tuple[str, int], ...], reasons: dict[str, int]) -> str:
    parts = [f"{run} run"] if run else []
    parts += [f"{n} read [{reasons.setdefault(why, len(reasons) + 1)}]" for why, n in read if n]
    return ", ".join(parts) or "-"


def _vllm_cell(key: str, models: tuple[str, ...], reasons: dict[str, int]) -> str:
    read = [VLLM_READ_NOT_RUN[key, m][0] for m in models if (key, m) in VLLM_READ_NOT_RUN]
    read += [VLLM_NOT_AS_SERVED[key, m] for m in models if (key, m) in VLLM_NOT_AS_SERVED]
    counted = [(why, read.count(why)) for why in dict.fromkeys(read)]
    return _cell(len(models) - len(read), tuple(counted), reasons)


def render_oracle(reasons: dict[str, int]) -> list[str]:
    """The oracle matrix as markdown lines: per engine and GPU, the models run at each TP and at PP 2."""
    lines = [
        "## The oracle matrix: the engines' own code, run",
        "",
        "The cells above marked `exact` for vLLM and SGLang come from this matrix: vLLM 0.33.0's and SGLang",
        "0.5.23's own planning code, run on a CPU with the GPU's answers stood in (tests/oracle/oracle_standin.py:",
        "device properties; the parallel groups answering as rank 0 of N; compiled kernels present, never called),",
        "on every model below at every layout, with kvbudget agreeing to the block, token and request",
        "(tests/oracle/test_vllm_matrix.py, test_sglang_matrix.py). `n run`: models run and agreeing; `n read",
        "[k]`: models whose cell the stand-in cannot run, or runs on another backend than a real server picks,",
        "for reason k, with the rule read from the engine's source.",
        "",
        f"* vLLM: {', '.join(VLLM_MODELS)};",
        f"  PP {PP} at TP 1 (each stage built, the smaller num_blocks taken): {', '.join(VLLM_PP_MODELS)}.",
        f"* SGLang: {', '.join(SGLANG_MODELS)};",
        "  plus DP attention, --chunked-prefill-size and --max-running-requests cases;",
        f"  PP {PP} at TP 2: {', '.join(SGLANG_PP_MODELS)}.",
        "* TensorRT-LLM: its code needs its CUDA build to import, so its cells stay `computed`; its",
        "  32-token blocks (KvCacheConfig.tokens_per_block) do not depend on the GPU generation.",
        "* transformers: the cache tensors measured on the CPU (the same on every GPU), at TP 1 only.",
        "",
        "| engine | GPU | " + " | ".join(f"TP {tp}" for tp in TPS) + f" | PP {PP} |",
        "|" + "---|" * (3 + len(TPS)),
    ]
    for g in GPUS:
        cells = [_vllm_cell(g.key, VLLM_MODELS, reasons) for _ in TPS] + [_vllm_cell(g.key, VLLM_PP_MODELS, reasons)]
        lines.append(f"| vllm | {g.label} | " + " | ".join(cells) + " |")
    for g in GPUS:
        pp = _cell(0, ((SGLANG_PP_READ, len(SGLANG_PP_MODELS)),), reasons) if g.key in SGLANG_PP_GPUS else "-"
        cells = [_cell(len(SGLANG_MODELS), (), reasons) for _ in TPS] + [pp]
        lines.append(f"| sglang | {g.label} | " + " | ".join(cells) + " |")
    return lines
