"""Rendering a calibration: the JSON contract (docs/measure.md) and the text a person reads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbudget.measure.calibrate import SCHEMA_VERSION, Calibration, Row
from kvbudget.measure.logs.record import Figure
from kvbudget.render.text import fit, table
from kvbudget.units import format_bytes, format_int

if TYPE_CHECKING:
    from kvbudget.units import UnitSystem

SETTING_ORDER = (
    "model",
    "tp",
    "pp",
    "context",
    "n_seq",
    "n_ctx_seq",
    "utilization",
    "cache_dtype",
    "block_size",
    "max_num_batched_tokens",
    "max_num_seqs",
    "n_batch",
    "n_ubatch",
    "flash_attn",
    "kv_unified",
)


def calibration_json(cal: Calibration) -> dict[str, object]:
    doc = _document(cal)
    if cal.speeds is not None:  # only a log with serving lines that give speeds (simulate/measured_calibration.py)
        doc["speeds"] = cal.speeds.to_dict()
    return doc


def _document(cal: Calibration) -> dict[str, object]:
    log = cal.log
    return {
        "schema_version": SCHEMA_VERSION,
        "log": log.path,
        "lines_read": log.lines_read,
        "engine": {
            "name": log.engine,
            "version": log.version,
            "version_line": log.version_line,
            "generation": log.generation,
        },
        "model": {
            "logged": log.model.value if log.model else None,
            "resolved": cal.model_source,
            "name": cal.spec.name if cal.spec else None,
        },
        "settings": {k: v.to_json() for k, v in log.settings.items()},
        "measured": {k: v.to_json() for k, v in log.measured.items()},
        "caches": [c.to_json() for c in log.caches],
        "ranks": sorted(log.ranks),
        "refusal": log.refusal.to_json() if log.refusal else None,
        "predicted": cal.predicted,
        "reconciliation": [r.to_json() for r in cal.rows],
        "summary": cal.summary(),
        "notes": cal.notes,
    }


def _value(fig: Figure, units: UnitSystem) -> str:
    if fig.unit == "bytes":
        return f"{format_int(int(fig.value))} B ({format_bytes(int(fig.value), units)}; printed {fig.text})"
    if fig.unit == "ratio":
        return fig.text
    return f"{format_int(int(fig.value))} {fig.unit}"


def _logged(fig: Figure) -> str:
    """A logged figure in the table: a count written as every count is (1,952), a size or ratio as printed."""
    if fig.unit in ("bytes", "ratio") or not float(fig.value).is_integer():
        return fig.text
    return format_int(int(fig.value))


def _setting(value: object) -> str:
    """A setting's value: a whole number with thousands separators (20,000), anything else as read."""
    return format_int(value) if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _pred(row_figure: Figure, low: float, high: float, units: UnitSystem) -> str:
    def one(x: float) -> str:
        if row_figure.unit == "bytes":
            return format_bytes(int(x), units)
        if row_figure.unit == "ratio":
            return f"{x:.2f}x"
        return format_int(int(x))

    return one(low) if one(low) == one(high) else f"{one(low)} .. {one(high)}"


def _summary(cal: Calibration) -> str:
    """How many figures were truly compared with kvbudget's model, and how many only derived from the log."""
    n = cal.summary()
    text = (
        f"{n['agree']} of {n['compared']} compared figures agree"
        if n["compared"]
        else "no figure compared with kvbudget's model"
    )
    if n["derived"]:
        text += (
            f"; {n['derived']} derived from the log's own figures ({n['derived_consistent']} consistent), "
            "not counted as agreement"
        )
    return text


def _diff(r: Row) -> str:
    if r.derived:
        return "derived" if r.consistent else f"derived {r.diff_pct:+.2f}%"
    return "agrees" if r.agrees else f"{r.diff_pct:+.2f}%"


def render_calibration(cal: Calibration, units: UnitSystem) -> str:
    log = cal.log
    version = f" {log.version}" if log.version else " (version not in the log)"
    gen = f", {log.generation}" if log.generation and log.engine == "vllm" else ""
    out = [f"{log.path}: {log.engine}{version}{gen}; {format_int(log.lines_read)} lines read"]
    if log.ranks:
        out.append(f"  ranks seen: {', '.join(sorted(log.ranks))} (per-GPU capacity figures: the smallest governs)")
    names = [k for k in SETTING_ORDER if k in log.settings] + sorted(set(log.settings) - set(SETTING_ORDER))
    if names:
        out += ["", "settings"]
        for k in names:
            s = log.settings[k]
            where = f"line {s.line}" if s.line else "given"
            out.append(f"  {k}: {_setting(s.value)}  ({where})")
    if log.measured or log.caches:
        out += ["", "measured"]
        for k, fig in log.measured.items():
            how = f"derived from line {fig.line}" if fig.derived else f"line {fig.line}"
            out.append(f"  {k}: {_value(fig, units)}  ({how})")
        for c in log.caches:
            out.append(
                f"  {c.kind} cache: {c.size.text} ({_setting(c.cells)} cells, {c.layers} layers, "
                f"{c.seqs}/{c.streams} seqs)"
                f"  (line {c.size.line})"
            )
    if log.refusal:
        r = log.refusal
        out += ["", f"the engine refused to start: {r.reason[:400]}"]
    if cal.rows:
        out += ["", f"reconciliation with kvbudget ({cal.spec.name if cal.spec else '?'}): {_summary(cal)}"]
        rows = [
            [
                r.figure,
                _logged(r.logged),
                _pred(r.logged, *r.predicted, units),
                _diff(r),
                r.note,
            ]
            for r in cal.rows
        ]
        out.append(table(["figure", "logged", "kvbudget", "diff", "how"], rows))
    out += _speeds(cal)
    for note in cal.notes:
        out.append(f"note: {note}")
    return fit("\n".join(out))


def _speeds(cal: Calibration) -> list[str]:
    """The "Speeds (measured)" lines: what the log's serving lines say the server did (none without them)."""
    if cal.speeds is None:
        return []
    m, c = cal.speeds.speeds, cal.speeds
    rates = ", ".join(f"{rate:,.1f} at {k}" for k, rate in m.points)
    return [
        "",
        f"Speeds (measured, from {format_int(c.stats_lines)} serving lines, lines {format_int(c.first_line)}"
        f"-{format_int(c.last_line)}; --speed-from takes this log or its --json)",
        f"  decode tokens/s per session, by sessions running: {rates}",
        f"  prefill: {m.prefill_tokens_per_s:,.0f} tokens/s",
        f"  decode from: {m.decode_basis}",
        f"  prefill from: {m.prefill_basis}",
    ]
