"""Plain-text rendering of trace statistics and of what a cap does (``kvbudget trace stats``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvbudget.render.text import fit, table
from kvbudget.units import counted, format_bytes, format_tokens
from kvbudget.workload.record import BadRow
from kvbudget.workload.stats import Distribution, TraceStats

if TYPE_CHECKING:
    from kvbudget.plan.caps import CapAnalysis
    from kvbudget.units import UnitSystem

SHOWN_BAD_ROWS = 10


def _tok(value: float | None) -> str:
    return "-" if value is None else f"{int(value):,}"


def _sec(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _row(label: str, d: Distribution, fmt: str = "tok") -> list[str]:
    show = {"tok": _tok, "sec": _sec, "pct": _pct}[fmt]
    return [label, f"{d.count:,}", show(d.p50), show(d.p90), show(d.p99), show(d.max)]


def render_trace_stats(stats: TraceStats, bad: Sequence[BadRow], files: int) -> str:
    formats = Counter(source.split(":", 1)[0] for source in stats.sources)
    kinds = ", ".join(f"{name} {count}" for name, count in formats.items())
    lines = [
        f"Trace statistics · {counted(files, 'file')}, {len(stats.sources)} with steps ({kinds or 'none'}) · "
        "nearest-rank percentiles",
        f"  {counted(stats.sessions, 'session')} + {counted(stats.subagents, 'sub-agent')} · {stats.steps:,} steps · "
        f"{counted(stats.bad_rows, 'bad row')} skipped",
        "",
    ]
    rows = [
        _row("steps per session", stats.steps_per_session),
        _row("context per step (tokens)", stats.context_tokens),
        _row("session end (tokens)", stats.session_end_tokens),
        _row("session peak (tokens)", stats.session_peak_tokens),
        _row("growth per step (tokens)", stats.growth_tokens_per_step),
        _row("new tokens per step", stats.new_tokens_per_step),
        _row("output per step (tokens)", stats.output_tokens_per_step),
        _row("pause after a step (s)", stats.pause_seconds, "sec"),
        _row("prefix reuse vs previous step", stats.prefix_reuse, "pct"),
    ]
    lines.append(table(["", "count", "p50", "p90", "p99", "max"], rows, [False, True, True, True, True, True]))
    few = stats.session_peak_tokens.count
    if 0 < few < 100:  # nearest rank: below 100 values the 99th percentile is the largest one
        lines.append(
            f"  with {counted(few, 'session')} the p99 is the largest session: "
            "a cap read from it is that session's size"
        )
    lines.append("")
    lines.append(
        "context = prompt + output of a step; session counts include sub-agents (each holds its own cache); "
        f"{counted(stats.compacting_steps, 'step')} shrank the context (compaction)"
    )
    if stats.paused_share is not None:
        lines.append(f"paused share of session time: {_pct(stats.paused_share)} (pauses / first-to-last step start)")
    if stats.prefix_reuse_blocks_share is not None:
        lines.append(f"prefix reuse over all blocks: {_pct(stats.prefix_reuse_blocks_share)} (block-hash prefixes)")
    if stats.cached_share is not None:
        lines.append(f"cached prompt tokens reported by the serving side: {_pct(stats.cached_share)}")
    if bad:
        lines.append("")
        lines.append(f"bad rows ({len(bad):,}; skipped, use --strict to stop at the first):")
        lines += [f"  {row}" for row in bad[:SHOWN_BAD_ROWS]]
        if len(bad) > SHOWN_BAD_ROWS:
            lines.append(f"  ... and {len(bad) - SHOWN_BAD_ROWS:,} more")
    return fit("\n".join(lines))


def render_cap(cap: CapAnalysis, units: UnitSystem) -> str:
    from kvbudget.plan.caps import MARGIN_TEXT

    plan = cap.plan
    i = plan.inputs
    lines = [
        f"What a cap does · {i.spec.name} on {i.engine.label} · {i.gpus:,} x {i.gpu_label} · cache {i.kv_dtype_label}",
        f"  recommended cap: {cap.recommended:,} tokens ({format_tokens(cap.recommended)}) = {MARGIN_TEXT} "
        f"(p99 = {cap.p99_tokens:,})",
        f"  KV pool {format_bytes(plan.kv_pool_bytes, units)}; one session at the recommended cap "
        f"{format_bytes(plan.per_session_bytes, units)}",
        "",
    ]
    past = cap.recommended_past_window
    if past:
        lines.insert(
            2,
            f"  past the model's trained window ({cap.window:,} tokens): the traces need it all the same; "
            "what serving it takes is below",
        )
    label = "recommended (p99 + margin), past the window" if past else "recommended (p99 + margin)"
    rows = [[label, f"{cap.recommended:,}", f"{plan.total_sessions:,}"]]
    if cap.at_current is not None:
        rows.append(["in use (--context)", f"{cap.at_current.cap:,}", f"{cap.at_current.total_sessions:,}"])
    if cap.at_window is not None:
        rows.append(
            [
                "advertised window" + (" (trained), below the traces" if past else ""),
                f"{cap.at_window.cap:,}",
                f"{cap.at_window.total_sessions:,}",
            ]
        )
    lines.append(table(["cap", "tokens", "sessions"], rows, [False, True, True]))
    lines.append("")
    lines.append(cap.reading)
    for warning in plan.warnings:
        lines.append(f"warning: {warning}")
    return fit("\n".join(lines))
