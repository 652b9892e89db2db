"""A llama.cpp plan with some layers on the GPU (``--n-gpu-layers``) or its layers split over several GPUs
(``--tensor-split``): each device's weights, compute buffer and KV cache, the layouts the capacity search holds every
GPU to, and the largest ``-ngl`` that fits. The rules are llama.cpp's (engines/llamacpp_offload.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kvbudget.engines import build_layout
from kvbudget.engines.llamacpp_cells import NAME
from kvbudget.engines.llamacpp_offload import (
    ALL,
    AUTO,
    LayerWeights,
    Placement,
    device_name,
    gpu_compute,
    host_compute,
    layer_cpu_note,
    output_first,
    place,
    spread_weights,
)
from kvbudget.engines.overhead import Overhead, measured_overhead
from kvbudget.plan.capacity import StagedLayout, largest, sessions_at
from kvbudget.plan.ledger import LedgerLine
from kvbudget.units import counted

if TYPE_CHECKING:
    from kvbudget.engines.base import EngineOptions, Layout
    from kvbudget.engines.overhead import Site
    from kvbudget.plan.plan import PlanInputs


def applies(i: PlanInputs, options: EngineOptions) -> bool:
    """Whether the plan places llama.cpp's layers itself (an -ngl or a split over more than one GPU was given)."""
    return i.engine.rules.places_layers and (options.n_gpu_layers is not None or len(options.tensor_split) > 1)


def gpus_of(options: EngineOptions) -> int:
    """The GPUs one llama.cpp server spans (one per --tensor-split proportion)."""
    return max(1, len(options.tensor_split))


@dataclass(frozen=True)
class Device:
    """One device of the split: its repeating layers, whether it holds the output layer, its model buffer, its
    compute buffer and the layout of its layers' KV cache."""

    device: int  # GPU index, or -1 for the CPU (host memory)
    layers: int
    output: bool
    weights: int
    compute: Overhead
    layout: Layout

    @property
    def name(self) -> str:
        return device_name(self.device)


@dataclass(frozen=True)
class LayerSplit:
    """Where llama.cpp puts a plan's layers, and what each device holds."""

    asked: int  # --n-gpu-layers as given (-1 auto, -2 all; a count)
    placement: Placement
    weights: LayerWeights
    gpus: tuple[Device, ...]
    host: Device
    largest: int | None  # the most layers (output included) that fit with one session at the cap; None: none do

    @property
    def n_gpu_layers(self) -> int:
        return self.placement.n_gpu_layers

    def staged(self) -> StagedLayout:
        """Every GPU's layout, each held to its own pool through ``reserved``, and the host's, unbounded."""
        first = self.gpus[0]
        reserved = tuple(g.weights + g.compute.bytes - first.weights - first.compute.bytes for g in self.gpus)
        return StagedLayout(tuple(g.layout for g in self.gpus), reserved, self.host.layout)

    def kv_bytes(self, device: Device, cap: int, sessions: int) -> int:
        return device.layout.total_bytes(cap, sessions) if sessions > 0 else 0

    def ledger(self, cap: int, sessions: int) -> tuple[LedgerLine, ...]:
        """Each device's lines beyond the first GPU's weights and compute (which the plan's own lines are)."""
        lines: list[LedgerLine] = []
        for g in self.gpus:
            if g.device > 0:
                lines.append(LedgerLine(f"{g.name} weights", g.weights, self.weights.provenance, self._basis(g)))
                lines.append(
                    LedgerLine(
                        f"{g.name} compute buffer",
                        g.compute.bytes,
                        g.compute.provenance,
                        g.compute.basis,
                        g.compute.low,
                        g.compute.high,
                    )
                )
            lines.append(self._kv_line(g, cap, sessions))
        h = self.host
        lines.append(LedgerLine("host (CPU) weights", h.weights, self.weights.provenance, self._basis(h)))
        lines.append(self._kv_line(h, cap, sessions))
        lines.append(LedgerLine("host (CPU) compute buffer", h.compute.bytes, "heuristic", h.compute.basis))
        return tuple(lines)

    def _kv_line(self, d: Device, cap: int, sessions: int) -> LedgerLine:
        where = "host (CPU)" if d.device < 0 else d.name
        basis = (
            f"the KV cache of the {counted(d.layers, 'layer')} on {where} for {counted(sessions, 'session')} of "
            f"{cap:,} tokens "
            "(src/llama-kv-cache.cpp: each layer's cache on its layer's device)"
        )
        return LedgerLine(f"{where} KV of the plan's sessions", self.kv_bytes(d, cap, sessions), "computed", basis)

    def weights_basis(self, d: Device) -> str:
        return self._basis(d)

    def shortfall(self, usable: int, cap: int) -> str | None:
        """Why this split does not serve one session of ``cap`` tokens (None: it does), and the -ngl that would."""
        if fits(self, usable, cap, 1):
            return None
        from kvbudget.units import format_bytes

        p = self.placement
        worst = max(self.gpus, key=lambda g: g.weights + g.compute.bytes + self.kv_bytes(g, cap, 1))
        held = worst.weights + worst.compute.bytes + self.kv_bytes(worst, cap, 1)
        fix = (
            f"--n-gpu-layers {self.largest} (the most that fit; the rest in host memory)"
            if self.largest is not None
            else "no --n-gpu-layers fits: even with every layer on the CPU the GPU's compute buffer does not; a "
            "larger GPU, a smaller --ubatch or a shorter --context"
        )
        return (
            f"{NAME}: with {p.n_gpu_layers} of {p.n_layer + 1} layers on the GPU ({format_bytes(worst.weights)} of "
            f"weights, a {format_bytes(worst.compute.bytes)} compute buffer and one {cap:,}-token session's "
            f"{format_bytes(self.kv_bytes(worst, cap, 1))} of KV on {worst.name}, {format_bytes(held)} in all), "
            f"{worst.name} holds more than the {format_bytes(usable)} llama.cpp can use; smallest fix: {fix}"
        )

    def _basis(self, d: Device) -> str:
        where = "the CPU (with the input layer, token_embd)" if d.device < 0 else d.name
        parts = f"{d.layers} repeating layers" + (" and the output layer" if d.output else "")
        return f"{parts} on {where}: {self.weights.basis}"

    def to_json(self, cap: int, sessions: int) -> dict[str, object]:
        p = self.placement
        devices = [
            {
                "device": d.name,
                "layers": d.layers,
                "output_layer": d.output,
                "weights_bytes": d.weights,
                "compute_bytes": d.compute.bytes,
                "kv_bytes": self.kv_bytes(d, cap, sessions),
            }
            for d in (*self.gpus, self.host)
        ]
        return {
            "n_gpu_layers": p.n_gpu_layers,
            "asked": {AUTO: "auto", ALL: "all"}.get(self.asked, str(self.asked)),
            "offloaded": f"{p.n_gpu_layers}/{p.n_layer + 1}",
            "largest_that_fits": self.largest,
            "devices": devices,
            "weights_provenance": self.weights.provenance,
        }

    def warnings(self) -> tuple[str, ...]:
        if self.placement.full and len(self.gpus) == 1:
            return ()
        return (layer_cpu_note(),) if self.host.layers or not self.placement.full else ()


def layer_weights(i: PlanInputs) -> LayerWeights:
    """Per-layer bytes: the GGUF's tensor table, else a single-type GGUF's rule, else the figure spread evenly."""
    from kvbudget.weights.gguf_loaded import computed_layers, file_layers

    w = i.weights
    if w.provenance == "exact" and i.spec.source:
        found = file_layers(i.spec.source)
        if found is not None and len(found.layers) == len(i.spec.layers):
            return found
    if w.provenance == "computed":
        name = (i.weights_precision or i.spec.dtype).lower()
        name = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}.get(name, name)
        found = computed_layers(i.spec, name)
        if found is not None:
            return found
    return spread_weights(w.bytes, i.spec, w.basis)


def split_at(i: PlanInputs, options: EngineOptions, site: Site, ngl: int, weights: LayerWeights) -> LayerSplit:
    """The split for ``-ngl ngl`` (a count, or -2 for all) over the GPUs of ``--tensor-split``."""
    n_layer = len(i.spec.layers)
    placement = place(n_layer, ngl, options.tensor_split or (1.0,), first=output_first(i.engine.version))

    def device(d: int) -> Device:
        on = placement.layers_on(d)
        spec = replace(i.spec, layers=tuple(i.spec.layers[il] for il in on))
        layout = build_layout(spec, i.engine, i.k, i.v, 1, options)
        if d < 0:
            n_kv = layout_cells(i.context)
            compute = Overhead(0, 0, 0, "heuristic", "")
            host = host_compute(i.spec, site.batched, n_kv)
            basis = (
                f"heuristic: the ubatch's input embeddings and f32 KQ mask, {site.batched:,} x (n_embd + {n_kv:,} "
                "cells) x 4 B, held to a fully offloaded b5622 log; the CPU's layers add their own compute"
            )
            compute = Overhead(host, host, host, "heuristic", basis)
        elif i.overhead is not None:
            compute = measured_overhead(i.overhead, i.overhead_basis)
        else:
            compute = gpu_compute(i.spec, site, placement, d)
        return Device(d, len(on), placement.output_device == d, weights.on(placement, d), compute, layout)

    gpus = tuple(device(d) for d in range(placement.gpus))
    return LayerSplit(options.n_gpu_layers if options.n_gpu_layers is not None else ALL, placement, weights, gpus,
                      device(-1), None)  # fmt: skip


def layout_cells(context: int) -> int:
    from kvbudget.engines.base import pad
    from kvbudget.engines.llamacpp_cells import CELL_PAD

    return pad(context, CELL_PAD) if context > 0 else 0


def fits(split: LayerSplit, usable: int, cap: int, sessions: int) -> bool:
    """Whether every GPU holds its weights, compute buffer and ``sessions`` sessions of ``cap`` tokens."""
    first = split.gpus[0]
    pool = usable - first.weights - first.compute.bytes
    if any(usable - g.weights - g.compute.bytes <= 0 for g in split.gpus):
        return False
    return sessions_at(split.staged(), pool, cap) >= sessions


def resolve(i: PlanInputs, options: EngineOptions, site: Site, usable: int, sessions: int) -> LayerSplit:
    """The plan's split: the asked -ngl (auto: the largest that fits), with the largest that fits beside it."""
    weights = layer_weights(i)
    n_layer = len(i.spec.layers)

    def ok(ngl: int) -> bool:
        return fits(split_at(i, options, site, ngl, weights), usable, i.context, sessions)

    top: int | None = largest(0, n_layer + 1, ok) if ok(0) else None
    asked = options.n_gpu_layers if options.n_gpu_layers is not None else ALL
    ngl = (top if top is not None else 0) if asked == AUTO else asked
    split = split_at(i, options, site, ngl, weights)
    return replace(split, asked=asked, largest=top)
