"""The report's six charts, drawn from a ``Report`` with the primitives of ``report.svg``.

* ``per_token``: bytes one held token costs in each layer group (allocated layers x slot bytes);
* ``ledger``: the per-GPU memory as one stacked bar: weights, runtime overhead, the sessions at the cap,
  the rest of the KV pool, and what the engine leaves unused (total - usable);
* ``sessions``: sessions per replica as planned, as simulated and as measured;
* ``curve``: sessions of the whole deployment against the cap (log-2 cap axis);
* ``cdf``: the share of traced sessions whose peak context is at or below each length, with the cap, the p99,
  the recommended cap and, when it is below the recommendation, the model's trained window;
* ``levers``: sessions over the deployment with each lever, best first, against today's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbudget.report.data import Report
from kvbudget.report.svg import PALETTE, Axis, Bar, Marker, Segment, bar_chart, line_chart, nice_ticks, stacked_bar
from kvbudget.units import counted, format_bytes, format_int, format_tokens

if TYPE_CHECKING:
    from kvbudget.units import UnitSystem

CAP_COLOUR = "#c0392b"
P99_COLOUR = "#6b4fbb"
RECOMMENDED_COLOUR = "#1e8449"
WINDOW_COLOUR = "#7f8c8d"
_IEC = ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"), (1, "B"))
_SI = ((10**12, "TB"), (10**9, "GB"), (10**6, "MB"), (10**3, "kB"), (1, "B"))
_DEFINITION = {
    "TiB": "2^40 B",
    "GiB": "2^30 B",
    "MiB": "2^20 B",
    "KiB": "2^10 B",
    "TB": "10^12 B",
    "GB": "10^9 B",
    "MB": "10^6 B",
    "kB": "10^3 B",
}


def byte_unit(high: int, units: UnitSystem) -> tuple[int, str]:
    """The largest unit (divisor, label) in which ``high`` bytes is at least 1."""
    for divisor, label in _IEC if units == "iec" else _SI:
        if high >= divisor:
            return divisor, label
    return 1, "B"


def unit_label(label: str) -> str:
    return f"{label} ({'1 ' + label + ' = ' + _DEFINITION[label]})" if label in _DEFINITION else label


def per_token(report: Report) -> str:
    groups = report.groups
    divisor, label = byte_unit(max([g.held_bytes_per_token for g in groups] + [1]), report.units)
    bars = []
    for k, g in enumerate(groups):
        held = g.held_bytes_per_token
        if not held:
            text = f"0 B/token; {format_bytes(g.allocated_layers * g.state_bytes, report.units)}/session fixed"
        elif g.per_token_bytes:
            text = f"{format_int(held)} B/token"
        else:
            text = f"{format_int(held)} B/token, windowed"
        bars.append(
            Bar(
                label=f"{g.label} · {g.layers} layers",
                value=held / divisor,
                text=text,
                data={
                    "held_bytes_per_token": held,
                    "per_token_bytes": g.per_token_bytes,
                    "bytes_at_cap": g.bytes_at_cap,
                },
                colour=PALETTE[k % len(PALETTE)],
            )
        )
    return bar_chart(
        "per-token",
        "KV-cache bytes per token held, by layer group, per GPU",
        bars,
        f"bytes per token held, per GPU, {unit_label(label)}",
    )


def ledger_segments(report: Report) -> list[Segment]:
    plan, units = report.plan, report.units
    total = plan.inputs.gpu_memory_bytes
    reserved = plan.sessions * plan.per_session_bytes
    segments = [
        Segment("weights", plan.weights_per_gpu, format_bytes(plan.weights_per_gpu, units), PALETTE[0]),
        Segment("runtime overhead", plan.overhead.bytes, format_bytes(plan.overhead.bytes, units), PALETTE[1]),
    ]
    if 0 < reserved <= plan.kv_pool_bytes:
        segments.append(
            Segment(
                f"KV: {counted(plan.sessions, 'session')} at {format_tokens(plan.inputs.context)}",
                reserved,
                format_bytes(reserved, units),
                PALETTE[2],
            )
        )
        rest = plan.kv_pool_bytes - reserved
        segments.append(Segment("KV pool left over", rest, format_bytes(rest, units), PALETTE[2], pattern=True))
    else:
        segments.append(Segment("KV pool", plan.kv_pool_bytes, format_bytes(plan.kv_pool_bytes, units), PALETTE[2]))
    unused = total - plan.share.usable_bytes
    segments.append(Segment("not used by the engine", unused, format_bytes(unused, units), "#c7ccd1"))
    return segments


def ledger(report: Report) -> str:
    divisor, label = (2**30, "GiB") if report.units == "iec" else (10**9, "GB")
    return stacked_bar(
        "ledger",
        "Memory ledger per GPU",
        ledger_segments(report),
        divisor,
        f"{unit_label(label)} per GPU, of {format_bytes(report.plan.inputs.gpu_memory_bytes, report.units)}",
    )


def session_bars(report: Report) -> list[Bar]:
    cap = format_tokens(report.plan.inputs.context)
    bars = [
        Bar(
            f"planned at {cap} (worst case reserved)",
            report.plan.sessions,
            f"{report.plan.sessions:,}",
            {"kind": "planned", "sessions": report.plan.sessions},
            PALETTE[0],
        )
    ]
    if report.simulated is not None and report.simulated.sustained_sessions is not None:  # None: no figure to draw
        s = report.simulated
        bars.append(
            Bar(
                f"simulated at {cap} (sustained)",
                report.simulated.sustained_sessions,
                s.sustained_text,
                {"kind": "simulated", "sessions": report.simulated.sustained_sessions},
                PALETTE[1],
            )
        )
    for m in report.measured:
        if m.sessions is None:
            continue
        at = f" at {format_tokens(m.context)}" if m.context else ""
        bars.append(
            Bar(
                f"measured{at} ({m.source})",
                m.sessions,
                f"{m.sessions:,}",
                {"kind": "measured", "source": m.source, "sessions": m.sessions},
                PALETTE[3],
            )
        )
    return bars


def sessions(report: Report) -> str:
    return bar_chart(
        "sessions",
        "Concurrent sessions per replica: planned, simulated, measured",
        session_bars(report),
        f"concurrent sessions per replica ({counted(report.plan.inputs.tp * report.plan.inputs.pp, 'GPU')})",
    )


def _log2_axis(label: str, low: int, high: int) -> Axis:
    ticks = [low]
    while ticks[-1] < high:
        ticks.append(ticks[-1] * 2)
    return Axis(label, tuple(float(t) for t in ticks), tuple(format_tokens(t) for t in ticks), log2=True)


def _count_axis(label: str, high: float) -> Axis:
    ticks = nice_ticks(high, 4)
    return Axis(label, tuple(ticks), tuple(f"{t:,.0f}" if t.is_integer() else f"{t:g}" for t in ticks))


def curve(report: Report) -> str:
    points = report.curve
    low = min(p.cap for p in points)
    x_axis = _log2_axis(
        "cap per session, tokens (log scale, 1K = 1,024)",
        2 ** (low.bit_length() - 1),
        max(p.cap for p in points),
    )
    y_axis = _count_axis("sessions (all replicas)", max([p.total_sessions for p in points] + [1]))
    cap = report.plan.inputs.context
    markers = [Marker(cap, f"cap {format_tokens(cap)}: {report.plan.total_sessions:,}", CAP_COLOUR, "cap", cap)]
    if report.trace is not None:
        rec = report.trace.recommended_cap
        at_rec = next((p.total_sessions for p in points if p.cap == rec), None)
        text = f"recommended {format_tokens(rec)}" + (f": {at_rec:,}" if at_rec is not None else "")
        markers.append(Marker(rec, text, RECOMMENDED_COLOUR, "recommended", rec))
        window = report.trace.window
        if report.trace.recommended_past_window and window is not None:
            at_window = next((p.total_sessions for p in points if p.cap == window), None)
            text = f"trained window {format_tokens(window)}" + (f": {at_window:,}" if at_window is not None else "")
            markers.append(Marker(window, text, WINDOW_COLOUR, "window", window))
    return line_chart(
        "curve",
        "Sessions against the context cap",
        [(p.cap, p.total_sessions) for p in points],
        x_axis,
        y_axis,
        markers=markers,
        point_data=[{"cap": p.cap, "sessions": p.sessions, "total_sessions": p.total_sessions} for p in points],
    )


def cdf(report: Report) -> str | None:
    trace = report.trace
    if trace is None:
        return None
    cap = report.plan.inputs.context
    high = max([trace.cdf[-1][0] if trace.cdf else 0, cap, trace.recommended_cap]) / 1024
    ticks = nice_ticks(high, 5)
    x_axis = Axis(
        "session peak context, K tokens (1K = 1,024)", tuple(ticks), tuple(f"{t:g}K" if t else "0" for t in ticks)
    )
    y_axis = Axis(
        "sessions at or below, %", (0.0, 20.0, 40.0, 60.0, 80.0, 100.0), ("0%", "20%", "40%", "60%", "80%", "100%")
    )
    points = [(0.0, 0.0)] + [(tokens / 1024, share * 100) for tokens, share in trace.cdf]
    markers = [
        Marker(cap / 1024, f"cap {format_tokens(cap)}", CAP_COLOUR, "cap", cap),
        Marker(trace.p99_tokens / 1024, f"p99 {format_int(trace.p99_tokens)}", P99_COLOUR, "p99", trace.p99_tokens),
    ]
    if trace.recommended_cap != cap:
        rec = trace.recommended_cap
        markers.append(Marker(rec / 1024, f"recommended {format_tokens(rec)}", RECOMMENDED_COLOUR, "recommended", rec))
    window = trace.window
    if trace.recommended_past_window and window is not None and window != cap:  # drawn apart, never in its place
        text = f"trained window {format_tokens(window)}"
        markers.append(Marker(window / 1024, text, WINDOW_COLOUR, "window", window))
    return line_chart(
        "cdf",
        "Session peak context from the traces (CDF), with the cap",
        points,
        x_axis,
        y_axis,
        markers=markers,
        step=True,
        path_data={"points": " ".join(f"{tokens}:{share}" for tokens, share in trace.cdf)},
    )


def levers(report: Report) -> str:
    bars = [
        Bar(
            f"{lv.name}: {lv.change}",
            lv.total_sessions,
            (f"{lv.total_sessions:,} ({lv.delta:+,})" if lv.delta is not None else f"{lv.total_sessions:,}")
            + (f", {lv.per_gpu:,.2f}/GPU" if lv.per_gpu is not None else "")
            + (" (changes the cap)" if lv.not_ranked else ""),
            {"lever": lv.name, "total_sessions": lv.total_sessions, "delta": lv.delta},
            PALETTE[2] if (lv.delta or 0) > 0 else (PALETTE[4] if (lv.delta or 0) < 0 else PALETTE[5]),
        )
        for lv in report.levers
        if lv.total_sessions is not None
    ]
    return bar_chart(
        "levers",
        "Sessions with each lever (all replicas), best first per GPU at the same cap; cap changes last",
        bars,
        f"sessions (all replicas); dashed: today's {report.plan.total_sessions:,}",
        baseline=report.plan.total_sessions,
    )
