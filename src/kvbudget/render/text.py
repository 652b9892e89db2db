"""Plain-text rendering of cost reports and tables, units always labelled."""

from __future__ import annotations

from collections.abc import Sequence

from kvbudget.cost import CostReport
from kvbudget.units import counted, exact_bytes, format_bytes, format_int, format_tokens

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.tables import CatalogCosts
    from kvbudget.units import UnitSystem


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool] | None = None) -> str:
    """A fixed-width table; columns flagged in ``right`` are right-aligned."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    align = right or [False] * len(headers)

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, align, strict=True)).rstrip()

    lines = [fmt(headers), "  ".join("-" * w for w in widths)]
    lines += [fmt(row) for row in rows]
    return "\n".join(lines)


def both(value: int, units: UnitSystem) -> str:
    """Exact bytes plus a labelled human unit."""
    return exact_bytes(value, units)


def render_cost(report: CostReport, units: UnitSystem) -> str:
    spec = report.model
    layout = report.layout
    engine = report.engine.label + (f", block {layout.block_size}" if layout.block_size else "")
    lines = [
        f"{spec.name}  ({spec.model_type}, {len(spec.layers)} layers; source: {spec.source})",
        f"engine {engine} · cache {report.kv_dtype_label} · tp {layout.tp} · "
        f"{format_int(report.tokens)} tokens x {counted(report.sequences, 'sequence')} · bytes per GPU",
        "",
        f"  per token (past every window): {both(report.kv_bytes_per_token, units)}",
        f"  fixed state per sequence:      {both(report.state_bytes, units)}",
        f"  one sequence of {format_tokens(report.tokens)} tokens: {both(report.sequence_bytes, units)}",
        f"  {counted(report.sequences, 'sequence')}:                {both(report.total_bytes, units)}",
        "",
        "How it adds up (per group of identical layers):",
    ]
    rows = []
    for g in report.groups():
        rows.append([g.label, str(g.layers), format_int(g.per_token_bytes), format_bytes(g.bytes_at_tokens, units)])
    lines.append(
        table(
            ["group", "layers", "B/token", f"at {format_tokens(report.tokens)} x {report.sequences}"],
            rows,
            [False, True, True, True],
        )
    )
    lines.append("")
    for g in report.groups():
        lines.append(f"  {g.label}: {g.explain()} = {format_int(g.bytes_at_tokens)} B")
    for note in (*spec.notes, *layout.notes):
        lines.append(f"note: {note}")
    for warning in report.warnings:
        lines.append(f"warning: {warning}")
    return "\n".join(lines)


def render_context_table(
    name: str,
    engine: str,
    dtype: str,
    tokens: Sequence[int],
    sequences: Sequence[int],
    cells: dict[tuple[int, int], int],
    units: UnitSystem,
) -> str:
    headers = ["context"] + [f"{s} sequence{'s' if s > 1 else ''}" for s in sequences]
    rows = [[format_int(n)] + [format_bytes(cells[(n, s)], units) for s in sequences] for n in tokens]
    unit = "GB = 10^9 B" if units == "si" else "GiB = 2^30 B"
    title = f"{name} · {engine} · cache {dtype} · KV cache per GPU ({unit})"
    return title + "\n" + table(headers, rows, [True] * len(headers))


def render_catalog(answer: CatalogCosts, units: UnitSystem) -> str:
    """``kvbudget models``: one line per catalog model (a refused one says why)."""
    rows = []
    for row in answer.rows:
        if row.report is None:
            rows.append([row.name, row.model_type, "-", "-", "-", f"refused: {row.refused}"])
            continue
        report = row.report
        rows.append(
            [
                row.name,
                row.model_type,
                format_int(report.kv_bytes_per_token),
                format_int(report.state_bytes),
                format_bytes(report.sequence_bytes, units),
                ", ".join(row.kinds),
            ]
        )
    head = f"Built-in catalog · engine {answer.engine_text} · cache {answer.kv_dtype} · bytes per GPU at tp 1"
    headers = ["model", "model_type", "B/token", "state B/seq", f"1 seq @{format_tokens(answer.tokens)}", "layer kinds"]
    return head + "\n" + table(headers, rows, [False, False, True, True, True, False])
