"""Plain-text rendering of cost reports and tables, units always labelled."""

from __future__ import annotations

from collections.abc import Sequence

from kvbudget.cost import CostReport
from kvbudget.units import counted, exact_bytes, format_bytes, format_int, format_tokens

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.tables import CatalogCosts
    from kvbudget.units import UnitSystem


WIDTH = 100
"""The widest line a command's text output prints by default: a 100-column terminal (tests/test_widths.py)."""

UNDER_INDENT = "    "
"""Indentation of a table's free-text column when it moves under its row."""


def line_width(width: int | None = None) -> int:
    """``width``, else the environment's KVBUDGET_WIDTH, else ``WIDTH``; 0 means lines never wrap (one figure,
    one line: for grep)."""
    if width is None:
        import os

        text = os.environ.get("KVBUDGET_WIDTH", "").strip()
        width = int(text) if text.isdigit() else WIDTH
    return width if width > 0 else 1 << 30


def _lead(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" "))]


def wrap(line: str, width: int | None = None, indent: str | None = None) -> list[str]:
    """``line`` broken at spaces into lines of at most ``width`` columns (``line_width``); continuation lines take
    ``indent`` (default: the line's own indentation plus two spaces). A token longer than the width (a URL, a
    path) stays whole on its own line."""
    width = line_width(width)
    if len(line) <= width:
        return [line]
    import textwrap

    lead = _lead(line)
    return textwrap.wrap(
        line.strip(" "),
        width=width,
        initial_indent=lead,
        subsequent_indent=lead + "  " if indent is None else indent,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [line]


def fit(text: str, width: int | None = None) -> str:
    """Every line of ``text`` at most ``width`` columns (``line_width``): longer lines wrap at spaces, continuation
    lines indented two spaces past the line's own indentation (see ``wrap``). For prose; tables fit through
    ``table``, commands through ``wrap_command``."""
    return "\n".join(out for line in text.split("\n") for out in wrap(line, width))


def wrap_command(line: str, width: int | None = None) -> list[str]:
    """A line holding a shell command, broken at spaces into lines ending in `` \\`` (still one command when
    pasted into a shell), each at most ``width`` columns (``line_width``), continuation lines indented four
    spaces past the line's own. A trailing ``  # comment`` follows on its own ``#`` lines."""
    width = line_width(width)
    if len(line) <= width:
        return [line]
    command, hash_, comment = line.partition("  # ")
    lead = _lead(line)
    more = lead + "    "
    out: list[str] = []
    current = ""
    for word in command.split():
        if current and len(current) + 1 + len(word) + 2 > width:
            out.append(current + " \\")
            current = more + word
        else:
            current = f"{current} {word}" if current else lead + word
    out.append(current)
    if hash_:
        out += wrap(f"{more}# {comment}", width, more + "# ")
    return out


def _grid(headers: Sequence[str], rows: Sequence[Sequence[str]], align: Sequence[bool]) -> list[str]:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, align, strict=True)).rstrip()

    return [fmt(headers), "  ".join("-" * w for w in widths), *(fmt(row) for row in rows)]


def table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool] | None = None, width: int | None = None
) -> str:
    """A fixed-width table; columns flagged in ``right`` are right-aligned.

    A table wider than ``width`` whose last column is left-aligned text (a basis, a note) prints that column on
    its own wrapped lines under each row, indented; its heading sits under the others'. Columns that still do
    not fit continue in a second table, keyed by the first column again."""
    width = line_width(width)
    align = list(right or [False] * len(headers))
    lines = _grid(headers, rows, align)
    if max(len(line) for line in lines) <= width or len(headers) < 2:
        return "\n".join(lines)
    if not align[-1]:
        grid = _grid(headers[:-1], [row[:-1] for row in rows], align[:-1])
        if max(len(line) for line in grid) <= width:
            out = [grid[0], UNDER_INDENT + headers[-1], grid[1]]
            for row, line in zip(rows, grid[2:], strict=True):
                out.append(line)
                if row[-1]:
                    out += wrap(UNDER_INDENT + row[-1], width, UNDER_INDENT)
            return "\n".join(out)
    # Fold: as many columns as fit, then the first column again with the rest.
    used = len(lines[1].split("  ")[0])
    cut = 1
    rule = lines[1].split("  ")
    while cut < len(headers) and used + 2 + len(rule[cut]) <= width:
        used += 2 + len(rule[cut])
        cut += 1
    cut = max(cut, 2)
    first = _grid(headers[:cut], [row[:cut] for row in rows], align[:cut])
    rest = table([headers[0], *headers[cut:]], [[row[0], *row[cut:]] for row in rows], [align[0], *align[cut:]], width)
    return "\n".join([*first, "", rest])


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
    return fit("\n".join(lines))


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
