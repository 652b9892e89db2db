"""NCCL's own device memory at tensor parallelism > 2 on NVSwitch GPUs: the NVLink SHARP (NVLS) buffers.

vLLM measures everything outside torch's allocator as non-torch memory before it sizes the KV cache (V0 worker.py
and V1 gpu_worker.py determine_*: the snapshot is taken before the distributed environment is initialised), so
NCCL's buffers come out of the KV pool. The largest of them on an HGX board is NVLS:

* NCCL enables NVLS only with more than 2 GPUs (nvls.cc ncclNvlsInit: ``gpuCount <= 2`` returns without it) whose
  NVSwitch supports multicast (CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: Hopper and Blackwell SXM boards, the
  catalog's ``nvlink4`` / ``nvlink5`` interconnects; not A100's NVLink3, not PCIe cards or NVLink bridges).
* Each communicator allocates ``nvlsTotalSize = nHeads x nChannels x 2 x buffSize`` on every GPU, nHeads being the
  GPUs of the node in the communicator (the TP size on one node):
  - NCCL 2.19-2.21 (torch <= 2.6, vLLM < 0.9) at communicator init: ``buffSize`` = the SIMPLE protocol buffer
    (4 MiB) + NVLS_MEM_ALIGN_SIZE (2 MiB); vLLM issue #9699 (vLLM 0.6.3, 8 x H200) logged the line
    ``NVLS comm ... nHeads 8 buffSize 4194304 memSize 2097152 nvlsPerRankSize 301989888 nvlsTotalSize
    2415919104``: 24 channels x 2 x 6 MiB = 288 MiB per head;
  - NCCL >= 2.22 (torch >= 2.7, vLLM >= 0.9; vLLM 0.10.1.1 logs ``vLLM is using nccl==2.26.2``,
    github.com/dennislee22/vLLM-benchmarking log/vllm.log) lazily, on the first NVLS collective (ncclNvlsBufferSetup):
    ``buffSize`` = NVLS_CHUNKSIZE 128 KiB x NCCL_STEPS 8 = 1 MiB on NVLS_NCHANNELS_SM90 = 16 channels: 32 MiB per
    head, rounded up to the multicast granularity the driver recommends (not known offline: the unrounded size is
    counted, a lower bound).
* vLLM keeps two NCCL communicators on the TP group and both run collectives while profiling: its own
  PyNcclCommunicator (the all-reduce of the dummy batch) and torch's ProcessGroupNCCL on the group's
  ``device_group`` (the all-gather of the logits). Two communicators x 2.25 GiB at TP 8 = 4.50 GiB; issue #9699
  measured NVLS on vs off at 17,595 vs 227xx GPU blocks of 1,032,192 B (Llama-3.1-405B, TP 8): 4.91-5.00 GiB.
* SGLang sets NCCL_NVLS_ENABLE=0 unless ``--enable-nccl-nvls`` (sgl-project/sglang PR #631, then PR #3502's flag,
  default off): no NVLS term there.
"""

from __future__ import annotations

from kvbudget.engines.base import version_tuple

MiB = 2**20
NVLS_LINKS = ("nvlink4", "nvlink5")  # NVSwitch with multicast (NVLink SHARP): Hopper and Blackwell HGX boards
NVLS_MIN_GPUS = 3  # nvls.cc ncclNvlsInit: no NVLS with gpuCount <= 2
EAGER_PER_HEAD = 24 * 2 * (4 * MiB + 2 * MiB)  # NCCL 2.19-2.21: 301,989,888 B per head, logged in vLLM issue #9699
LAZY_PER_HEAD = 16 * 2 * 128 * 1024 * 8  # NCCL >= 2.22: 16 channels x 2 x (128 KiB chunk x 8 steps) = 32 MiB
LAZY_SINCE = (0, 9)  # vLLM 0.9 moved to torch 2.7 (nvidia-nccl-cu12 2.26); 0.8 pinned torch 2.6 (NCCL 2.21.5)
COMMUNICATORS = 2  # vLLM's PyNcclCommunicator + torch's ProcessGroupNCCL on the TP group's device_group


def nvls_bytes(tp: int, interconnect: str | None, version: str) -> tuple[int, str]:
    """NCCL's NVLS buffers per GPU for vLLM ``version`` at ``tp`` on this interconnect, and why (0, "" if none)."""
    if tp < NVLS_MIN_GPUS or interconnect not in NVLS_LINKS:
        return 0, ""
    lazy = version_tuple(version)[:2] >= LAZY_SINCE
    per_head = LAZY_PER_HEAD if lazy else EAGER_PER_HEAD
    total = COMMUNICATORS * tp * per_head
    how = (
        "NCCL >= 2.22, set up on the first NVLS collective: 16 channels x 2 x 1 MiB per GPU, before the multicast "
        "granularity's rounding"
        if lazy
        else "NCCL 2.19-2.21, at init: 24 channels x 2 x 6 MiB per GPU (vLLM issue #9699's NCCL line)"
    )
    return total, (
        f"NCCL NVLS buffers {total / 2**30:.2f} GiB ({COMMUNICATORS} communicators x {tp} GPUs x "
        f"{per_head // MiB} MiB; {how})"
    )
