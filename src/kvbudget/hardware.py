"""GPUs and interconnects, with the memory the driver really reports.

``memory_bytes`` is what a capacity plan must start from: nvidia-smi's ``memory.total`` in MiB x
2^20 (an "80 GB" H100 SXM reports 81,559 MiB = 85,520,809,984 B = 79.65 GiB), the CUDA-visible
total for the DGX Spark and the GH200 144G HBM3e, and only where neither is known the vendor's
marketing figure in decimal GB, labelled ``memory_source = "nominal"``. Bandwidths are bytes/s
(published GB/s x 10^9); links give bytes/s per direction. Every entry carries the source it was read from
(``kvbudget/data/gpus.json``, built from the project's research notes).

Names are matched case-insensitively on id, alias or full name, ignoring spaces, underscores and
a vendor prefix ("NVIDIA H100 SXM" = "h100-sxm", "NVIDIA GeForce RTX 4080" = "rtx-4080", "Tesla
V100-SXM2-32GB" = "v100-sxm2-32gb"), so the names nvidia-smi and torch print resolve. A name that fits
more than one card (``ambiguous_names`` in gpus.json: ``h100``, ``h100-80gb``, ``a100``, ``a100-80gb``,
``a100-80``, ``v100-32gb``, ``v100-16gb``) is read as the card most deployments of that name are, the SXM
part of an HGX/DGX board (the PCIe card is ``h100-pcie``, ``a100-80gb-pcie``, ``v100-pcie-32gb``), and
``gpu()`` returns it with that choice in its ``name``, so every output that labels the GPU says which
card was planned and names the others. A printed name that two memory sizes share (``rtx-3080``: 10 and
12 GB; ``rtx-4060-ti``: 8 and 16 GB; bare ``gh200``, ``v100``) has no such reading and is refused with
the ids to choose from.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, replace
from decimal import Decimal
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from kvbudget.errors import InputError
from kvbudget.provenance import Kind

if TYPE_CHECKING:
    from kvbudget.requests.cost import GpusRequest

MemorySource = Literal["nvidia-smi", "cuda-deviceQuery", "nominal"]
MiB = 2**20
GiB = 2**30
# What CUDA reports as total (cudaMemGetInfo, the figure vLLM multiplies by gpu_memory_utilization) is
# below nvidia-smi's memory.total by what the driver keeps: measured 430 MiB (RTX 3090), 438 (H100 SXM),
# 484 (RTX 5090), 512 (A100-40GB), 582 (L40S) from vLLM logs (data/gpus.json cuda_total_source). Where no
# log measured a card, its CUDA total is estimated as nvidia-smi minus the median, with that range.
CUDA_RESERVE_MIB = 484
CUDA_RESERVE_RANGE_MIB = (430, 582)


# GPUs whose memory is one pool shared with the host CPU (DGX Spark's GB10: 128 GB LPDDR5x, "unified" in its
# catalog name): what the operating system and the page cache hold is memory the GPU reports used
UNIFIED_MEMORY = frozenset({"dgx-spark"})


@dataclass(frozen=True)
class Gpu:
    """One accelerator. ``memory_bytes`` is the driver-reported total where known (see module doc)."""

    id: str
    name: str
    aliases: tuple[str, ...]
    vendor: str
    memory_bytes: int
    memory_source: MemorySource
    memory_gb_nominal: int
    nvidia_smi_mib: int | None
    bandwidth_bytes_per_s: int | None
    source: str
    notes: str
    cuda_total_printed: str | None = None  # GiB as an engine log printed it ("23.58")
    cuda_total_source: str | None = None
    # dense (not "with sparsity") tensor-core peak per compute precision, TFLOPS, from the datasheet in
    # compute_source; the speed model (kvbudget.speed) divides FLOPs by it
    dense_tflops: tuple[tuple[str, float], ...] = ()
    compute_source: str | None = None
    interconnect: str | None = None  # the link id between GPUs of one server (tensor parallelism's all-reduce)

    def peak_flops(self, precision: str) -> float | None:
        """Dense FLOP/s at ``precision`` (bf16, fp8, fp4), None where the card has no such tensor cores."""
        rate = dict(self.dense_tflops).get(precision)
        return None if rate is None else rate * 1e12

    @property
    def cuda_total_bytes(self) -> int:
        """Total memory as CUDA reports it: what vLLM, SGLang and llama.cpp size from (see CUDA_RESERVE_MIB)."""
        if self.cuda_total_printed is not None:
            return int(Decimal(self.cuda_total_printed) * GiB)
        if self.memory_source == "nvidia-smi":
            return self.memory_bytes - CUDA_RESERVE_MIB * MiB
        return self.memory_bytes

    @property
    def cuda_provenance(self) -> Kind:
        """``measured`` where a real run read it (an engine log's CUDA total, deviceQuery's); ``heuristic`` where
        it stands in for a figure not read on this card: nvidia-smi's total less the median driver reserve of
        five other cards (430-582 MiB), or the datasheet's decimal GB (the driver's total differs by a few
        percent either way: an "80 GB" H100 reports 85.5 x 10^9 B). The detail is in ``cuda_basis``."""
        if self.cuda_total_printed is not None or self.memory_source == "cuda-deviceQuery":
            return "measured"
        return "heuristic"

    @property
    def cuda_basis(self) -> str:
        """One line saying where ``cuda_total_bytes`` comes from, with nvidia-smi's figure beside it."""
        smi = f"nvidia-smi {self.nvidia_smi_mib:,} MiB" if self.nvidia_smi_mib else self.memory_basis
        if self.cuda_total_printed is not None:
            return f"CUDA total {self.cuda_total_printed} GiB measured: {self.cuda_total_source}; {smi}"
        if self.memory_source == "nvidia-smi":
            low, high = CUDA_RESERVE_RANGE_MIB
            return (
                f"CUDA total estimated: {smi} - {CUDA_RESERVE_MIB} MiB driver reserve (measured {low}-{high} MiB "
                "on 5 cards); calibrate a start-up log to measure it"
            )
        return self.memory_basis

    @property
    def memory_basis(self) -> str:
        """One line saying where ``memory_bytes`` comes from."""
        if self.memory_source == "nvidia-smi":
            return f"nvidia-smi memory.total {self.nvidia_smi_mib:,} MiB x 2^20"
        if self.memory_source == "cuda-deviceQuery":
            return f"CUDA-visible total {self.memory_bytes // 2**20:,} MiB x 2^20"
        return f"nominal: marketing {self.memory_gb_nominal} GB x 10^9 (driver total not verified)"

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "name": self.name,
            "aliases": list(self.aliases),
            "vendor": self.vendor,
            "memory_bytes": self.memory_bytes,
            "memory_source": self.memory_source,
            "memory_basis": self.memory_basis,
            "memory_gb_nominal": self.memory_gb_nominal,
            "nvidia_smi_memory_total_mib": self.nvidia_smi_mib,
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "cuda_total_bytes": self.cuda_total_bytes,
            "cuda_total_provenance": self.cuda_provenance,
            "cuda_total_basis": self.cuda_basis,
            "source": self.source,
            "notes": self.notes,
            "dense_tflops": dict(self.dense_tflops) or None,
            "compute_source": self.compute_source,
            "interconnect": self.interconnect,
        }


@dataclass(frozen=True)
class Link:
    """A host or GPU interconnect; ``bytes_per_s`` is per direction (published, theoretical)."""

    id: str
    name: str
    aliases: tuple[str, ...]
    scope: str
    bytes_per_s: int
    source: str
    notes: str

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "name": self.name,
            "aliases": list(self.aliases),
            "scope": self.scope,
            "bytes_per_s_per_direction": self.bytes_per_s,
            "source": self.source,
            "notes": self.notes,
        }


@lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    text = resources.files("kvbudget.data").joinpath("gpus.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


@lru_cache(maxsize=1)
def gpus() -> tuple[Gpu, ...]:
    """Every GPU in the catalog, in file order."""
    return tuple(
        Gpu(
            id=g["id"],
            name=g["name"],
            aliases=tuple(g["aliases"]),
            vendor=g["vendor"],
            memory_bytes=int(g["memory_bytes"]),
            memory_source=g["memory_source"],
            memory_gb_nominal=int(g["memory_gb_nominal"]),
            nvidia_smi_mib=g["nvidia_smi_memory_total_mib"],
            bandwidth_bytes_per_s=g["bandwidth_bytes_per_s"],
            source=g["source"],
            notes=g["notes"],
            cuda_total_printed=g.get("cuda_total_gib_printed"),
            cuda_total_source=g.get("cuda_total_source"),
            dense_tflops=tuple((k, float(v)) for k, v in (g.get("dense_tflops") or {}).items()),
            compute_source=g.get("compute_source"),
            interconnect=g.get("interconnect"),
        )
        for g in _data()["gpus"]
    )


@lru_cache(maxsize=1)
def links() -> tuple[Link, ...]:
    """Every interconnect row (PCIe generations, NVLink generations, InfiniBand)."""
    return tuple(
        Link(
            id=item["id"],
            name=item["name"],
            aliases=tuple(item["aliases"]),
            scope=item["scope"],
            bytes_per_s=int(item["bytes_per_s_per_direction"]),
            source=item["source"],
            notes=item["notes"],
        )
        for item in _data()["links"]
    )


_T = TypeVar("_T", Gpu, Link)
_PREFIX = re.compile(r"^(nvidia|amd|apple|geforce|instinct|tesla)-")


def _key(text: str) -> str:
    """Lookup key: lower case, runs of space/underscore/hyphen -> '-', vendor prefixes dropped."""
    key = re.sub(r"[\s_\-]+", "-", text.strip().lower())
    previous = None
    while previous != key:
        previous, key = key, _PREFIX.sub("", key)
    return key


def _labels(entry: Gpu | Link) -> list[str]:
    return [entry.id, entry.name, *entry.aliases]


def _lookup(name: str, items: tuple[_T, ...], what: str) -> _T:
    index: dict[str, _T] = {}
    for entry in items:
        for label in _labels(entry):
            index.setdefault(_key(label), entry)
    key = _key(name)
    if key in index:
        return index[key]
    ids = [e.id for e in items]
    close = difflib.get_close_matches(key, list(index), n=6, cutoff=0.5)
    hint = sorted({index[c].id for c in close} | {i for i in ids if key and (key in i or i in key)})[:5]
    listing = f"close names: {', '.join(hint)}" if hint else f"known: {', '.join(ids)}"
    raise InputError(f"{what} {name!r} is not in the catalog; {listing} (list them with `kvbudget gpus`)")


def gpu(name: str) -> Gpu:
    """The GPU with this id, alias or name (case-insensitive); InputError listing close names otherwise.

    A name that fits more than one card comes back as the card ``ambiguous_names`` reads it as, its ``name``
    saying so: "NVIDIA H100 SXM5 80GB (HBM3) [h100-80gb read as h100-sxm, 79.6 GiB, 3.35 TB/s; also h100-pcie: 79.6 GiB,
    2 TB/s]". A name ``ambiguous_names`` reads as no card (``means`` null: one printed name for two memory sizes,
    "NVIDIA GeForce RTX 3080" for 10 and 12 GB) is an InputError naming each card's id."""
    choice = _data().get("ambiguous_names", {}).get("names", {}).get(_key(name))
    if choice is not None and choice["means"] is None:
        cards = "; ".join(f"{g.id} ({_figures(g)})" for g in map(_by_id, choice["others"]))
        why = f" ({choice['why']})" if choice.get("why") else ""
        raise InputError(
            f"GPU {name!r} fits more than one card: {cards}; name the one you have{why}, or give --gpu-memory"
        )
    entry = _lookup(name, gpus(), "GPU")
    if choice is None or choice["means"] != entry.id:
        return entry
    others = [_by_id(other) for other in choice["others"]]
    also = "; ".join(f"{g.id}: {_figures(g)}" for g in others)
    return replace(entry, name=f"{entry.name} [{_key(name)} read as {entry.id}, {_figures(entry)}; also {also}]")


def _by_id(gpu_id: str) -> Gpu:
    return next(g for g in gpus() if g.id == gpu_id)


def _figures(g: Gpu) -> str:
    """Memory (as the driver reports it, else nominal) and bandwidth: '79.6 GiB, 3.35 TB/s'."""
    memory = f"{g.memory_bytes / GiB:.1f} GiB" + (" nominal" if g.memory_source == "nominal" else "")
    return memory + (f", {g.bandwidth_bytes_per_s / 1e12:g} TB/s" if g.bandwidth_bytes_per_s else "")


def link(name: str) -> Link:
    """The interconnect with this id, alias or name (``pcie-gen5-x16``, ``nvlink4``, ``ib-ndr``)."""
    return _lookup(name, links(), "link")


@dataclass(frozen=True)
class GpuCatalog:
    """The built-in GPUs and links (``kvbudget gpus``)."""

    gpus: tuple[Gpu, ...]
    links: tuple[Link, ...]

    def to_dict(self) -> dict[str, object]:
        """The ``kvbudget gpus --json`` document."""
        return {
            "schema_version": 1,
            "gpus": [g.to_json() for g in self.gpus],
            "links": [x.to_json() for x in self.links],
        }


def gpu_catalog(request: GpusRequest | None = None) -> GpuCatalog:
    """Every catalog GPU and link, in catalog order."""
    return GpuCatalog(gpus(), links())
