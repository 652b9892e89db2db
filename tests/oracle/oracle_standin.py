"""The few answers a GPU would give, stood in so that vLLM's and SGLang's own planning code runs on a CPU.

Runs only inside the oracle environment (scripts/setup-oracles), never in kvbudget's own. vLLM loads
it as an out-of-tree platform plugin (entry point ``vllm.platform_plugins``: the environment carries a
dist-info that points here, and the oracle tests put this folder on PYTHONPATH), so vLLM's own
subprocesses (model inspection) see the same stand-ins. Every stand-in is listed in docs/engines.md:

* the device: an NVIDIA GPU of compute capability ``KVBUDGET_ORACLE_SM`` (default 90, H100/H200),
  named ``KVBUDGET_ORACLE_GPU_NAME``, with ``KVBUDGET_ORACLE_GPU_BYTES`` of memory and
  ``KVBUDGET_ORACLE_SMS`` multiprocessors, ``KVBUDGET_ORACLE_DEVICES`` of them in the node (default 8),
  fully connected, with CUDA runtime 13 (the vLLM 0.33 wheels'); the tensor-parallel group answers as rank 0
  of N and the pipeline group as stage k of N (vllm_probe.py); tensors a layer allocates while it is built go
  to the meta device;
* the compiled kernels a CUDA build of the wheel carries, whose import needs a CUDA runtime:
  ``vllm._C_stable_libtorch`` (custom ops, registered but never called: nothing runs a forward pass)
  FlashAttention 2/3 (``_vllm_fa2_C``, ``_vllm_fa3_C``) and FlashMLA (``_flashmla_C``,
  ``_flashmla_extension_C``), all shipped in the wheel, so that backend selection sees them present as
  on a real H100; their capability queries answer by compute capability. FlashAttention 4 (CuTe DSL)
  imports on its own. FlashInfer (flashinfer-python, a separate CUDA wheel vLLM 0.33 depends on) is absent:
  off Blackwell 10.x FlashAttention precedes it (where FlashAttention cannot run a model, as gpt-oss's sinks
  on 12.x, a real server may take FlashInfer where the stand-in takes Triton: 16-token blocks either way);
  on 10.x it heads vLLM's list, so those cells say what they run (src/kvbudget/coverage_oracle.py).

Nothing else is replaced: engine arguments, defaults, model classes, KV-cache specs, block sizes,
grouping and capacity are the engines' own code.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

ENABLE = "KVBUDGET_ORACLE_GPU"


def _stub(name: str) -> None:
    if name not in sys.modules:
        sys.modules[name] = types.ModuleType(name)


def install_kernel_stubs() -> None:
    """Compiled CUDA extensions: present as modules, never called (no forward pass runs)."""
    for name in (
        "vllm._C_stable_libtorch",
        "vllm.vllm_flash_attn._vllm_fa2_C",
        "vllm.vllm_flash_attn._vllm_fa3_C",
        "vllm._flashmla_C",
        "vllm._flashmla_extension_C",
    ):
        _stub(name)
    _capability_queries()


# vLLM's _custom_ops answers these from the compiled _C library; some run at import time.
_QUERIES = {
    "cutlass_scaled_mm_supports_fp8": 89,
    "cutlass_scaled_mm_supports_block_fp8": 90,
    "cutlass_scaled_mm_supports_fp4": 100,
    "mxfp4_experts_quant_supported": 100,
    "cutlass_group_gemm_supported": 90,
}
_LIBRARY: list[Any] = []


class _NotRun:
    """A compiled op that a model class holds a handle to; the oracle never runs a forward pass."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError(f"oracle stand-in: the compiled op {self.name} cannot run on a CPU")

    def __getattr__(self, name: str) -> _NotRun:
        if name.startswith("__"):
            raise AttributeError(name)
        return _NotRun(f"{self.name}.{name}")  # an overload: op.default


class _LenientNamespace:
    """``torch.ops.<ns>`` of a CUDA build: every op exists (handles only), the queries answer."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(self._real, name)
        except (AttributeError, RuntimeError):
            return _NotRun(f"{self._real.name}.{name}")


def _no_aux_stream() -> None:
    """No auxiliary CUDA stream (MoE shared-expert overlap): a speed choice, no memory effect."""


def runtime_stand_ins() -> None:
    """Model classes take handles to compiled ops in ``__init__``; give them handles that never run,
    and no auxiliary CUDA stream (its events need a CUDA runtime).

    Called once vLLM's ``_custom_ops`` is imported: it registers fake kernels for the ops that exist,
    and must see the real (empty) namespaces while it does."""
    import torch
    import vllm._custom_ops
    import vllm.utils.torch_utils

    vllm.utils.torch_utils.aux_stream = _no_aux_stream

    for ns in ("_C", "_moe_C", "_C_cache_ops", "_C_custom_ar", "_vllm_fa2_C", "_vllm_fa3_C"):
        real = getattr(torch.ops, ns)
        if not isinstance(real, _LenientNamespace):
            setattr(torch.ops, ns, _LenientNamespace(real))


def _capability_queries() -> None:
    """The kernel-capability queries of vLLM's compiled ``_C`` ops, answered by compute capability."""
    if _LIBRARY:
        return
    import torch

    lib = torch.library.Library("_C", "FRAGMENT")  # type: ignore[no-untyped-call]
    _LIBRARY.append(lib)
    for op, since in _QUERIES.items():
        lib.define(f"{op}(int cuda_device_capability) -> bool")  # type: ignore[no-untyped-call]

        def answer(cap: int, since: int = since) -> bool:
            return cap >= since

        lib.impl(op, answer, "CompositeExplicitAutograd")  # type: ignore[no-untyped-call]


class _DeviceProperties:
    """What ``torch.cuda.get_device_properties`` reports for the stood-in GPU."""

    def __init__(self) -> None:
        sm = int(os.environ.get("KVBUDGET_ORACLE_SM", "90"))
        self.name = os.environ.get("KVBUDGET_ORACLE_GPU_NAME", "NVIDIA H100 80GB HBM3")
        self.total_memory = int(os.environ.get("KVBUDGET_ORACLE_GPU_BYTES", str(85_520_809_984)))
        self.multi_processor_count = int(os.environ.get("KVBUDGET_ORACLE_SMS", "132"))
        self.major, self.minor = sm // 10, sm % 10
        self.is_integrated = False


def cuda_device_answers() -> None:
    """SGLang asks torch.cuda directly: one device of the stood-in capability and memory, all free
    (the oracle passes SGLang its KV budget itself), CUDA 13 as the wheels are built with."""
    import torch

    props = _DeviceProperties()
    torch.cuda.is_available = lambda: True
    torch.version.cuda = "13.0"
    torch.cuda.device_count = lambda: 1
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_capability = lambda *a, **k: (props.major, props.minor)
    torch.cuda.get_device_properties = lambda *a, **k: props  # type: ignore[assignment]
    torch.cuda.get_device_name = lambda *a, **k: props.name
    torch.cuda.mem_get_info = lambda *a, **k: (props.total_memory, props.total_memory)


def vllm_platform() -> str | None:
    """vLLM platform plugin: the stand-in CUDA platform when the oracle asks for it, else nothing."""
    if not os.environ.get(ENABLE):
        return None
    return "oracle_standin.StandInCudaPlatform"


def _make_platform() -> Any:
    install_kernel_stubs()
    from vllm.platforms import cuda
    from vllm.platforms.interface import DeviceCapability

    sm = int(os.environ.get("KVBUDGET_ORACLE_SM", "90"))
    name = os.environ.get("KVBUDGET_ORACLE_GPU_NAME", "NVIDIA H100 80GB HBM3")
    total = int(os.environ.get("KVBUDGET_ORACLE_GPU_BYTES", str(85_520_809_984)))
    sms = int(os.environ.get("KVBUDGET_ORACLE_SMS", "132"))  # streaming multiprocessors (H100 SXM: 132)

    class StandInCudaPlatform(cuda.NonNvmlCudaPlatform):  # type: ignore[misc]
        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> Any:  # noqa: ARG003
            return DeviceCapability(sm // 10, sm % 10)

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:  # noqa: ARG003
            return name

        @classmethod
        def get_device_total_memory(cls, device_id: int = 0) -> int:  # noqa: ARG003
            return total

        @classmethod
        def is_fully_connected(cls, physical_device_ids: list[int]) -> bool:  # noqa: ARG003
            return True

        @classmethod
        def get_cuda_runtime_major(cls) -> int:
            # the CUDA runtime of vLLM 0.33's CUDA wheels (13), which the CPU torch cannot report; it picks
            # FlashInfer's Gated DeltaNet prefill on Blackwell (qwen_gdn_linear_attn.py)
            return int(os.environ.get("KVBUDGET_ORACLE_CUDA_MAJOR", "13"))

        @classmethod
        def device_count(cls) -> int:
            # one node of this many GPUs (default 8): vLLM checks a tensor-parallel world fits the node
            return int(os.environ.get("KVBUDGET_ORACLE_DEVICES", "8"))

        @classmethod
        def num_compute_units(cls, device_id: int = 0) -> int:  # noqa: ARG003
            return sms

        @classmethod
        def current_device(cls) -> Any:
            import torch

            return torch.device("meta")  # tensors a layer allocates in __init__ land on the meta device

    return StandInCudaPlatform


def __getattr__(attr: str) -> Any:
    if attr == "StandInCudaPlatform":
        cls = _make_platform()
        globals()[attr] = cls
        return cls
    raise AttributeError(attr)
