"""The compute capability of a named GPU: it picks engines' attention backends and page sizes."""

from __future__ import annotations

# Compute capability (x10) by GPU name, for the attention backend a plan's GPU gets (vLLM, SGLang):
# the NVIDIA data sheets' figures for the GPUs of kvbudget's catalog.
_CAPABILITY = (
    ("gb10", 121),
    ("spark", 121),
    ("h100", 90),
    ("h200", 90),
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
    ("a10", 86),
    ("rtx 3090", 86),
    ("l40", 89),
    ("l4", 89),
    ("rtx 4090", 89),
    ("rtx 6000 ada", 89),
    ("t4", 75),
)


def compute_capability(gpu_label: str) -> int | None:
    """The compute capability (x10) of a named NVIDIA GPU; None for other vendors or a bare --gpu-memory."""
    label = gpu_label.lower()
    if "nvidia" not in label:
        return None
    for fragment, capability in _CAPABILITY:
        if fragment in label:
            return capability
    return None
