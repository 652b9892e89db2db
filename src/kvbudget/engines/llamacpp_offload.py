"""llama.cpp's partial offload (``-ngl N``) and its layer split over several GPUs (``--split-mode layer``).

Rules, read from llama.cpp's source (the file and the build or PR next to each):

* **Which layers go to the GPU** (src/llama-model.cpp ``load_tensors``): the model has ``n_layer`` repeating layers
  and one output layer, ``n_layer + 1`` in all; ``act_gpu_layers = min(-ngl, n_layer + 1)`` are offloaded and the
  log says ``offloaded act/n_layer+1 layers to GPU``. Since PR #18148 ("offload output layer to GPU first",
  2025-12-17) ``i_gpu_start = n_layer + 1 - ngl`` counts the output layer first: ``-ngl N <= n_layer`` puts the
  output layer and the last ``N - 1`` repeating layers on the GPU. Before it (``i_gpu_start = n_layer - ngl``, read
  in b5622's load_tensors and the b7003-era source) the last ``N`` repeating layers go first and the output layer only
  when ``N > n_layer``. The PR names no build; b7342 is the newest build read that predates it, so builds up to
  b7342 keep the old order and later ones the new. The input layer (``token_embd``) always stays on the CPU.
* **Which GPU** (same function): the split points are the cumulative ``--tensor-split`` proportions normalised to 1
  (the devices' free memory when none is given), in float32; slot ``il`` of the ``act_gpu_layers`` goes to the first
  device whose split point exceeds ``(il - i_gpu_start) / act_gpu_layers`` (``std::upper_bound``).
* **The KV cache of a layer lives on that layer's device** (src/llama-kv-cache.cpp: ``dev = model.dev_layer(il)``
  when ``offload_kqv``, the default; src/llama-memory-recurrent.cpp the same for R/S state): one ``KV buffer`` line
  per device, ``CPU KV buffer`` for the layers left on the CPU.
* **Defaults** (common/common.h, common/arg.cpp of current master): ``-ngl`` is ``-1`` (``auto``; ``all`` is
  ``-2``); the library reads a negative count as ``n_layer + 1`` (every layer). ``--fit`` is on by default
  (PR #16653, ``llama_params_fit``, in builds from b7003's era on): with ``-ngl auto`` it lowers the layers on each
  GPU until each keeps a 1,024 MiB margin free (``--fit-target``). kvbudget's default (no ``--n-gpu-layers``) is
  every layer on the GPU, as ``-ngl all`` or ``-fit off``; ``--n-gpu-layers auto`` asks for the largest count that
  fits, as ``--fit`` would choose it.

The compute buffer per device is the peak of its part of the reserved graph (llamacpp_compute): a GPU with the output
layer holds the output head's peak, one with repeating layers the attention and feed-forward peaks. Held to a b5622
two-GPU start-up (1,080.00 MiB on each of CUDA0 and CUDA1, tests/data/memory/llamacpp_logs.csv). The host side
(``CUDA_Host compute buffer``) holds the ubatch's input embeddings and its KQ mask in f32; held to the same log
(36.01 MiB). Partial offload grows the GPU's compute buffer further (the scheduler copies CPU-resident weights to the
GPU for batched matrix products); that is not modelled, and the plan says so.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from kvbudget.engines.base import pad
from kvbudget.engines.llamacpp_cells import CELL_PAD, NAME
from kvbudget.engines.llamacpp_compute import compute_buffer_terms
from kvbudget.engines.overhead import Overhead, Site, dims
from kvbudget.errors import InputError

if TYPE_CHECKING:
    from kvbudget.model.spec import ModelSpec

AUTO = -1  # -ngl auto (common/arg.cpp): the largest count that fits (--fit)
ALL = -2  # -ngl all: every layer
MAX_DEVICES = 16  # include/llama.h llama_max_devices(): 16 for the CUDA backend (LLAMA_MAX_DEVICES)
OLD_ORDER_UNTIL = 7342  # the newest build read that offloads repeating layers before the output layer (PR #18148)


def _f32(x: float) -> float:
    """``x`` rounded to float32, as llama.cpp computes its split points and layer fractions."""
    value: float = struct.unpack("<f", struct.pack("<f", x))[0]
    return value


def output_first(version: str) -> bool:
    """Whether ``version`` places the output layer before the repeating layers (PR #18148); unnumbered: the newest."""
    found = re.fullmatch(r"b?(\d+)", version.strip())
    return found is None or int(found.group(1)) > OLD_ORDER_UNTIL


@dataclass(frozen=True)
class Placement:
    """Where llama.cpp puts each layer: ``layer_device[il]`` for repeating layer ``il`` and ``output_device`` for the
    output layer, each a GPU index or -1 for the CPU."""

    n_layer: int
    n_gpu_layers: int  # offloaded layers, output included (llama.cpp's act_gpu_layers)
    gpus: int
    layer_device: tuple[int, ...]
    output_device: int

    @property
    def full(self) -> bool:
        return self.n_gpu_layers == self.n_layer + 1

    def layers_on(self, device: int) -> tuple[int, ...]:
        """The repeating layers on ``device`` (-1: the CPU)."""
        return tuple(il for il, d in enumerate(self.layer_device) if d == device)

    def log_lines(self) -> tuple[str, ...]:
        """load_tensors' lines for this placement (src/llama-model.cpp, the order of builds after PR #18148)."""
        repeating = sum(d >= 0 for d in self.layer_device)
        lines = ["load_tensors: offloading output layer to GPU"] if self.output_device >= 0 else []
        lines.append(f"load_tensors: offloading {repeating} repeating layers to GPU")
        lines.append(f"load_tensors: offloaded {self.n_gpu_layers}/{self.n_layer + 1} layers to GPU")
        return tuple(lines)


def check_split(tensor_split: tuple[float, ...]) -> None:
    if len(tensor_split) > MAX_DEVICES:
        raise InputError(
            f"--tensor-split: llama.cpp takes at most {MAX_DEVICES} devices (llama_max_devices), got "
            f"{len(tensor_split)}; give one proportion per GPU"
        )
    if not tensor_split or not any(x > 0 for x in tensor_split) or any(x < 0 for x in tensor_split):
        raise InputError("--tensor-split: give one non-negative proportion per GPU, at least one above 0, e.g. 3,1")


def place(
    n_layer: int, n_gpu_layers: int, tensor_split: tuple[float, ...] = (1.0,), *, first: bool = True
) -> Placement:
    """llama.cpp's layer placement for ``-ngl n_gpu_layers --tensor-split ...`` (src/llama-model.cpp load_tensors).

    ``first``: the output layer is offloaded first (builds after PR #18148), else last.
    """
    check_split(tensor_split)
    ngl = n_layer + 1 if n_gpu_layers < 0 else n_gpu_layers  # llama_model::n_gpu_layers(): negative = all
    act = min(ngl, n_layer + 1)
    start = max(n_layer + 1 - ngl, 0) if first else max(n_layer - ngl, 0)
    total, splits = 0.0, []
    for x in tensor_split:  # the cumulative sum, then each divided by it, all in float32
        total = _f32(total + _f32(x))
        splits.append(total)
    splits = [_f32(s / total) for s in splits]

    def device(il: int) -> int:
        if il < start or il - start >= act:
            return -1
        fraction = _f32(_f32(float(il - start)) / _f32(float(act)))
        return next((i for i, s in enumerate(splits) if s > fraction), len(splits) - 1)  # std::upper_bound

    return Placement(n_layer, act, len(tensor_split), tuple(device(il) for il in range(n_layer)), device(n_layer))


def device_name(device: int) -> str:
    return "CPU" if device < 0 else f"CUDA{device}"


@dataclass(frozen=True)
class LayerWeights:
    """Bytes of a llama.cpp model by where they can go: the input layer (always the CPU), each repeating layer, and
    the output layer (``output`` with ``output_norm``, or the tied copy of ``token_embd``)."""

    embedding: int
    layers: tuple[int, ...]
    output: int
    provenance: Literal["exact", "computed", "heuristic"]  # the tensor table, a single-type GGUF's rule, spread evenly
    basis: str

    def on(self, placement: Placement, device: int) -> int:
        """The model buffer of ``device`` (-1: the CPU, which also holds the input layer)."""
        total = sum(self.layers[il] for il in placement.layers_on(device))
        total += self.output if placement.output_device == device else 0
        return total + (self.embedding if device < 0 else 0)


def spread_weights(total: int, spec: ModelSpec, basis: str) -> LayerWeights:
    """A weights figure with no per-tensor table (measured, or a mixed-type file without one): the n_layer + 1
    offloadable layers share it evenly, the input layer counted in the output layer's share (heuristic)."""
    n = len(spec.layers)
    each, extra = divmod(total, n + 1)
    return LayerWeights(0, (each,) * n, each + extra, "heuristic", f"{basis}; spread evenly over {n + 1} layers")


def layer_cpu_note() -> str:
    return (
        f"{NAME}: the layers left on the CPU keep their weights, KV cache and part of the compute in host memory; "
        "partial offload also grows the GPU's compute buffer (CPU-resident weights are copied over for batched "
        "matrix products), which the plan does not model: measure it (plan --from-log) or pass --overhead; "
        "kvbudget's speed model assumes every layer on the GPU, so its speeds are too high for such a plan"
    )


def gpu_compute(spec: ModelSpec, site: Site, placement: Placement, device: int) -> Overhead:
    """The compute buffer of GPU ``device``: the peak of its part of the reserved graph (heuristic).

    The output head's peak (the logits of a ubatch) is on the GPU holding the output layer; the attention and
    feed-forward peaks on each GPU holding repeating layers (src/llama-context.cpp graph_reserve; the scheduler gives
    each device the nodes of its layers). A b5622 start-up split over two GPUs logged the attention peak, 1,080.00 MiB,
    on both CUDA0 and CUDA1 (tests/data/memory/llamacpp_logs.csv).
    """
    n_kv = pad(site.context, CELL_PAD) if site.context > 0 else 0
    terms = compute_buffer_terms(spec, ubatch=site.batched, n_kv=n_kv, flash_attn=site.flash_attn)
    if placement.output_device != device:
        terms.pop("output head")
    if not placement.layers_on(device):
        terms = {k: v for k, v in terms.items() if k == "output head"}
    if not terms:
        return Overhead(0, 0, 0, "heuristic", f"heuristic: {device_name(device)} holds no layer: no compute buffer")
    name, peak = max(terms.items(), key=lambda item: item[1])
    high = peak + peak // 20  # the 5% the single-GPU rule reserves (llamacpp_compute)
    basis = (
        f"heuristic: {device_name(device)}'s compute buffer, the peak of its part of the graph reserved for a ubatch "
        f"of {site.batched:,} tokens: {name} ({', '.join(f'{k} {v / 2**20:,.1f} MiB' for k, v in terms.items())})"
    )
    return Overhead(high, peak, high, "heuristic", basis)


def host_compute(spec: ModelSpec, ubatch: int, n_kv: int) -> int:
    """The host's compute buffer (``CUDA_Host compute buffer``) of a fully offloaded model: the ubatch's input
    embeddings (get_rows of token_embd, on the CPU) and its f32 KQ mask, ``ubatch x (n_embd + n_kv) x 4`` B
    (heuristic; 36.01 MiB logged for Qwen3-30B-A3B at -c 16384 on b5622: 512 x (2,048 + 16,384) x 4 B = 36 MiB)."""
    hidden, _, _ = dims(spec)
    return ubatch * (hidden + n_kv) * 4
