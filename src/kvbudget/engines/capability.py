"""The compute capability of a named GPU: it picks engines' attention backends and page sizes."""

from __future__ import annotations

# Compute capability (x10) by GPU name, for the attention backend a plan's GPU gets (vLLM, SGLang):
# the NVIDIA data sheets' figures for the GPUs of kvbudget's catalog.
# The first fragment found in the label wins: longer names before the fragments they contain ("a100" before
# "a10", "rtx a4000" before "a40", "rtx 5000 ada" before any "rtx 50").
_CAPABILITY = (
    ("gb10", 121),
    ("spark", 121),
    ("h100", 90),
    ("h200", 90),  # and the GH200's Hopper GPU
    ("h800", 90),
    ("h20", 90),
    ("gb300", 103),
    ("b300", 103),
    ("gb200", 100),
    ("b200", 100),
    ("rtx 5090", 120),
    ("rtx pro 6000", 120),
    ("a100", 80),
    ("a800", 80),
    ("a30", 80),
    ("a10", 86),
    ("rtx a4000", 86),
    ("rtx a5000", 86),
    ("rtx a6000", 86),
    ("a40", 86),
    ("rtx 3060", 86),
    ("rtx 3080", 86),
    ("rtx 3090", 86),
    ("l40", 89),
    ("l20", 89),
    ("l4", 89),
    ("rtx 4060", 89),
    ("rtx 4070", 89),
    ("rtx 4080", 89),
    ("rtx 4090", 89),
    ("rtx 4000 ada", 89),
    ("rtx 5000 ada", 89),
    ("rtx 6000 ada", 89),
    ("t4", 75),
    ("v100", 70),  # Volta: no bf16 (vLLM serves bf16 checkpoints in fp16), no FP8, below Marlin's 8.0
    ("p100", 60),  # Pascal: no tensor cores
)
# Labels that name an NVIDIA GPU: nvidia-smi and torch print the Volta and Pascal parts as "Tesla V100-SXM2-32GB"
_NVIDIA = ("nvidia", "tesla", "geforce", "quadro")
# Labels that name an AMD GPU (ROCm): the catalog's "AMD Instinct MI300X", "AMD Radeon RX 7900 XTX"
_AMD = ("amd", "instinct", "radeon")
# FlashInfer's kernels need compute capability 7.5 (Turing) or later; they are CUDA-only (no ROCm build)
FLASHINFER_MIN_CAPABILITY = 75


def amd_gpu(gpu_label: str) -> bool:
    """Whether the label names an AMD GPU (vLLM and SGLang run it on ROCm)."""
    label = gpu_label.lower()
    return any(mark in label for mark in _AMD)


def flashinfer_runs(gpu_label: str) -> bool:
    """Whether FlashInfer's kernels can run on this GPU: not on AMD GPUs (CUDA-only), not below SM 7.5; a label
    kvbudget cannot place (a bare --gpu-memory) is taken as one it runs on."""
    capability = compute_capability(gpu_label)
    return not amd_gpu(gpu_label) and (capability is None or capability >= FLASHINFER_MIN_CAPABILITY)


def compute_capability(gpu_label: str) -> int | None:
    """The compute capability (x10) of a named NVIDIA GPU; None for other vendors or a bare --gpu-memory."""
    label = gpu_label.lower()
    if not any(mark in label for mark in _NVIDIA):
        return None
    for fragment, capability in _CAPABILITY:
        if fragment in label:
            return capability
    return None
