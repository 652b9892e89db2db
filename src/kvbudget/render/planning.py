"""Plain-text rendering of the GPU catalog, weight footprints and reverse readings; units labelled."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbudget.hardware import Gpu, Link
from kvbudget.infer import Inference
from kvbudget.render.text import fit, table
from kvbudget.units import format_bytes, format_int
from kvbudget.weights.report import WeightsReport

if TYPE_CHECKING:
    from kvbudget.units import UnitSystem


def _rate(value: int | None) -> str:
    return "?" if value is None else f"{value / 1e9:,.0f} GB/s"


def render_gpus(items: tuple[Gpu, ...], link_items: tuple[Link, ...]) -> str:
    rows = [
        [
            g.id,
            format_int(g.memory_bytes),
            f"{g.memory_bytes / 2**30:.2f}",
            g.memory_source,
            f"{g.cuda_total_bytes / 2**30:.2f}",
            g.cuda_provenance,
            _rate(g.bandwidth_bytes_per_s),
            g.name,
        ]
        for g in items
    ]
    headers = ["id", "memory B", "GiB", "memory figure", "CUDA GiB", "CUDA figure", "bandwidth", "name"]
    lines = [
        "GPUs · memory as the driver reports it (nvidia-smi MiB x 2^20) unless marked nominal (decimal GB x 10^9);",
        "CUDA GiB: the total CUDA reports, which engines size from (measured in an engine log, or nvidia-smi minus",
        "the median driver reserve: heuristic, as is a nominal card's). Plans use the CUDA total.",
        table(headers, rows, [False, True, True, False, True, False, True, False]),
        "",
        "Links · bandwidth per direction (bidirectional is twice this)",
        table(
            ["id", "name", "per direction", "scope"],
            [[x.id, x.name, _rate(x.bytes_per_s), x.scope] for x in link_items],
            [False, False, True, False],
        ),
    ]
    return fit("\n".join(lines))


def render_weights(report: WeightsReport, units: UnitSystem) -> str:
    lines: list[str] = []
    count = report.count
    if count is not None:
        tied = "tied" if count.tied_embeddings else "separate"
        lines += [
            f"{report.model}  ({count.model_type}) · weights at serving precision",
            f"parameters: {format_int(count.total)} total · {format_int(count.active)} active per token "
            f"(routed experts top-k; embeddings and lm_head counted) · lm_head {tied}",
            "",
        ]
        rows = [
            [c.name, format_int(c.params), format_int(c.active), f"{100 * c.params / count.total:.2f}%"]
            for c in count.components()
        ]
        lines.append(table(["component", "params", "active", "share"], rows, [False, True, True, True]))
        lines.append("")
    else:
        lines += [f"{report.model} · weights", ""]
    if report.estimates:
        rows = []
        for e in report.estimates:
            kept = format_bytes(e.unquantized_bytes, units) if e.unquantized() else "-"
            rows.append(
                [
                    e.precision.name,
                    e.precision.bits_text,
                    format_int(e.total_bytes),
                    format_bytes(e.total_bytes, units),
                    kept,
                ]
            )
        lines.append("Computed bytes per precision (bytes = ceil(params x bits / 8) per tensor group):")
        lines.append(
            table(["precision", "bits/weight", "bytes", "size", "of which bf16"], rows, [False, True, True, True, True])
        )
        stays = next((e.unquantized() for e in report.estimates if e.unquantized()), [])
        if stays:
            lines.append(f"Stays at bf16 when quantized: {', '.join(stays)}.")
        for e in report.estimates:
            lines.append(f"  {e.precision.name}: {e.precision.description}")
        lines.append("")
    for label, size in (("exact", report.exact), ("measured", report.measured)):
        if size is not None:
            lines.append(f"{label}: {format_int(size.bytes)} B ({format_bytes(size.bytes, units)}) — {size.basis}")
            for dtype, nbytes in size.by_dtype:
                lines.append(f"  {dtype}: {format_int(nbytes)} B")
    serving = report.serving
    if serving is not None:
        lines.append(
            f"plan with: {format_int(serving.bytes)} B ({format_bytes(serving.bytes, units)}), {serving.provenance}"
        )
    lines += [f"note: {n}" for n in (*(count.notes if count else ()), *report.notes)]
    return fit("\n".join(lines))


def render_inference(result: Inference) -> str:
    geometry = f"{result.kv_heads} KV heads x head_dim {result.head_dim}"
    layers = " · ".join(f"{name} {n}" for name, n in result.implied_attention_layers.items())
    per_token = result.implied_bytes_per_token
    lines = [
        f"Reverse reading · {format_int(result.context)} tokens of context",
        "",
        *(f"  {line}" for line in result.arithmetic),
        "",
        f"implied per-token cost: {format_int(per_token)} B/token "
        f"({format_bytes(per_token, 'si')}, {format_bytes(per_token, 'iec')})",
        f"implied attention layers ({geometry}; {result.geometry_basis}): {layers}",
        f"verdict: {result.verdict}",
    ]
    return fit("\n".join(lines))
