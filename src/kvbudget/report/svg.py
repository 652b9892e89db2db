"""Inline SVG charts, drawn in Python: horizontal bars, one stacked bar, and a line chart with markers.

Every chart is an ``<svg class="chart" data-chart=NAME viewBox=...>`` that scales to its container (the
page's CSS sets its width), with a ``<title>`` for screen readers, axis labels that name their units, and
the exact values as ``data-*`` attributes on the marks, so a test (or a reader's tools) can check each
mark against the CLI's JSON. Nothing is fetched: no fonts, no scripts, no images.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

WIDTH = 420  # viewBox units; the page scales the chart to its column (about 360 px on a phone, at most 520 px)
TICK_FONT = 13
LABEL_FONT = 14
INK = "#1f2933"
MUTED = "#52606d"
GRID = "#d9dee3"
PALETTE = ("#2f6fb3", "#e07b39", "#3a9d5d", "#8e5bb5", "#c0392b", "#7f8c8d", "#d4a017", "#16a3a3")


def attr(value: object) -> str:
    return escape(str(value), quote=True)


def fmt_number(value: float) -> str:
    """A tick label: whole numbers with separators, others with up to two decimals."""
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.2f}".rstrip("0").rstrip(".")


def nice_ticks(high: float, count: int = 5) -> list[float]:
    """Ticks from 0 to at least ``high`` in steps of 1, 2, 2.5 or 5 x 10^k (about ``count`` of them)."""
    if high <= 0:
        return [0.0, 1.0]
    raw = high / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    n = math.ceil(high / step - 1e-9)
    return [float(k * step) for k in range(n + 1)]


def _open(name: str, title: str, height: float, extra: str = "") -> list[str]:
    return [
        f'<svg class="chart" data-chart="{attr(name)}" viewBox="0 0 {WIDTH} {math.ceil(height)}" '
        f'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{attr(title)}"{extra}>',
        f"<title>{escape(title)}</title>",
    ]


def _text(
    x: float, y: float, text: str, *, size: int = TICK_FONT, anchor: str = "start", fill: str = INK, halo: bool = False
) -> str:
    """A label; ``halo`` outlines it in white so it stays legible where it crosses a line."""
    outline = ' stroke="#ffffff" stroke-width="4" paint-order="stroke"' if halo else ""
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{fill}"{outline}>'
        f"{escape(text)}</text>"
    )


@dataclass(frozen=True)
class Bar:
    label: str
    value: float  # in axis units
    text: str  # the value as shown at the bar's end
    data: dict[str, object] = field(default_factory=dict)  # exact values, as data-* attributes
    colour: str = PALETTE[0]


def _data(data: dict[str, object]) -> str:
    return "".join(f' data-{key.replace("_", "-")}="{attr(value)}"' for key, value in data.items())


def bar_chart(name: str, title: str, bars: Sequence[Bar], axis_label: str, *, baseline: float | None = None) -> str:
    """Horizontal bars, each with its label above it and its value after it; ticks and ``axis_label`` below.
    ``baseline`` draws a dashed reference line (the plan's sessions on the levers chart)."""
    left, right, row = 8.0, 8.0, 44.0
    value_room = 120.0
    top = 8.0
    plot_w = WIDTH - left - right - value_room
    high = max([b.value for b in bars] + [baseline or 0.0, 0.0])
    ticks = nice_ticks(high)
    scale = plot_w / ticks[-1]
    height = top + row * len(bars) + 52
    out = _open(name, title, height)
    axis_y = top + row * len(bars) + 4
    for t in ticks:
        x = left + t * scale
        out.append(f'<line x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{axis_y:.1f}" stroke="{GRID}"/>')
        out.append(_text(x, axis_y + 16, fmt_number(t), anchor="middle", fill=MUTED))
    if baseline is not None:
        x = left + baseline * scale
        out.append(
            f'<line class="baseline" x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{axis_y:.1f}" stroke="{MUTED}" '
            f'stroke-dasharray="4 3" data-value="{attr(baseline)}"/>'
        )
    for k, b in enumerate(bars):
        y = top + k * row
        out.append(_text(left, y + 14, b.label, size=LABEL_FONT))
        w = max(b.value * scale, 0.0)
        out.append(
            f'<rect class="bar" x="{left:.1f}" y="{y + 20:.1f}" width="{w:.2f}" height="18" fill="{b.colour}"'
            f"{_data({'label': b.label, **b.data})}/>"
        )
        out.append(_text(left + w + 6, y + 34, b.text, size=LABEL_FONT))
    out.append(_text(left, axis_y + 36, axis_label, size=LABEL_FONT, fill=MUTED))
    out.append("</svg>")
    return "\n".join(out)


@dataclass(frozen=True)
class Segment:
    label: str
    value: int  # exact (bytes)
    text: str  # the value as shown in the legend
    colour: str
    pattern: bool = False  # drawn hatched (a share of the segment before it, e.g. free KV pool)


def stacked_bar(name: str, title: str, segments: Sequence[Segment], divisor: int, axis_label: str) -> str:
    """One bar split into ``segments`` (exact integers, summing to the whole), a scale in ``divisor`` units
    below it and a legend with each segment's value."""
    left, right = 8.0, 16.0
    plot_w = WIDTH - left - right
    total = sum(s.value for s in segments)
    ticks = nice_ticks(total / divisor)
    scale = plot_w / (ticks[-1] * divisor)
    legend_top = 104.0
    height = legend_top + 24 * len(segments) + 8
    out = _open(name, title, height, f' data-total="{total}"')
    out.append(
        '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
        f'<rect width="6" height="6" fill="{PALETTE[2]}"/><line x1="0" y1="0" x2="0" y2="6" stroke="#ffffff" '
        'stroke-width="3"/></pattern></defs>'
    )
    x = left
    for s in segments:
        w = s.value * scale
        fill = "url(#hatch)" if s.pattern else s.colour
        out.append(
            f'<rect class="segment" x="{x:.2f}" y="8" width="{w:.2f}" height="40" fill="{fill}" '
            f'data-label="{attr(s.label)}" data-bytes="{s.value}"/>'
        )
        x += w
    for t in ticks:
        tx = left + t * divisor * scale
        out.append(f'<line x1="{tx:.1f}" y1="50" x2="{tx:.1f}" y2="56" stroke="{MUTED}"/>')
        out.append(_text(tx, 70, fmt_number(t), anchor="middle", fill=MUTED))
    out.append(_text(left, 90, axis_label, size=LABEL_FONT, fill=MUTED))
    for k, s in enumerate(segments):
        y = legend_top + 24 * k
        fill = "url(#hatch)" if s.pattern else s.colour
        out.append(f'<rect x="{left:.1f}" y="{y:.1f}" width="14" height="14" fill="{fill}"/>')
        out.append(_text(left + 22, y + 12, s.label, size=LABEL_FONT))
        out.append(_text(WIDTH - right, y + 12, s.text, size=LABEL_FONT, anchor="end"))
    out.append("</svg>")
    return "\n".join(out)


@dataclass(frozen=True)
class Marker:
    """A vertical line at ``x`` (axis units), labelled."""

    x: float
    label: str
    colour: str
    name: str  # data-marker, e.g. "cap"
    value: int  # the exact value (tokens)


@dataclass(frozen=True)
class Axis:
    label: str
    ticks: tuple[float, ...]
    tick_labels: tuple[str, ...]
    log2: bool = False

    def position(self, value: float, length: float) -> float:
        lo, hi = self.ticks[0], self.ticks[-1]
        if self.log2:
            return length * (math.log2(value) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
        return length * (value - lo) / (hi - lo)


def line_chart(
    name: str,
    title: str,
    points: Sequence[tuple[float, float]],
    x_axis: Axis,
    y_axis: Axis,
    *,
    markers: Sequence[Marker] = (),
    step: bool = False,
    point_data: Sequence[dict[str, object]] | None = None,
    path_data: dict[str, object] | None = None,
) -> str:
    """A line through ``points`` (a step line for a CDF), with dots carrying ``point_data`` when given, and
    labelled vertical ``markers``."""
    left, right, top, bottom = 56.0, 12.0, 12.0 + 18.0 * len(markers), 58.0
    plot_h = 220.0
    plot_w = WIDTH - left - right
    height = top + plot_h + bottom
    out = _open(name, title, height)

    def px(v: float) -> float:
        return left + x_axis.position(v, plot_w)

    def py(v: float) -> float:
        return top + plot_h - y_axis.position(v, plot_h)

    for t, label in zip(y_axis.ticks, y_axis.tick_labels, strict=True):
        y = py(t)
        out.append(f'<line x1="{left:.1f}" y1="{y:.1f}" x2="{WIDTH - right:.1f}" y2="{y:.1f}" stroke="{GRID}"/>')
        out.append(_text(left - 6, y + 4, label, anchor="end", fill=MUTED))
    for k, (t, label) in enumerate(zip(x_axis.ticks, x_axis.tick_labels, strict=True)):
        x = px(t)
        tick_anchor = "end" if k == len(x_axis.ticks) - 1 else "middle"
        out.append(
            f'<line x1="{x:.1f}" y1="{top + plot_h:.1f}" x2="{x:.1f}" y2="{top + plot_h + 5:.1f}" stroke="{MUTED}"/>'
        )
        out.append(
            _text(x + (4 if tick_anchor == "end" else 0), top + plot_h + 20, label, anchor=tick_anchor, fill=MUTED)
        )
    out.append(
        f'<line x1="{left:.1f}" y1="{top + plot_h:.1f}" x2="{WIDTH - right:.1f}" y2="{top + plot_h:.1f}" '
        f'stroke="{MUTED}"/>'
    )
    coords: list[str] = []
    previous: tuple[float, float] | None = None
    for x, y in points:
        if step and previous is not None:
            coords.append(f"{px(x):.1f},{py(previous[1]):.1f}")
        coords.append(f"{px(x):.1f},{py(y):.1f}")
        previous = (x, y)
    if coords:
        out.append(
            f'<polyline class="line" points="{" ".join(coords)}" fill="none" stroke="{PALETTE[0]}" '
            f'stroke-width="2.5"{_data(path_data or {})}/>'
        )
    if point_data is not None:
        for (x, y), data in zip(points, point_data, strict=True):
            out.append(
                f'<circle class="point" cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{PALETTE[0]}"{_data(data)}/>'
            )
    for k, m in enumerate(markers):
        x = px(m.x)
        label_y = 14.0 + 18.0 * k
        out.append(
            f'<line class="marker" x1="{x:.1f}" y1="{label_y + 4:.1f}" x2="{x:.1f}" y2="{top + plot_h:.1f}" '
            f'stroke="{m.colour}" stroke-width="2" stroke-dasharray="6 3" data-marker="{attr(m.name)}" '
            f'data-value="{m.value}"/>'
        )
        anchor = "end" if x > WIDTH / 2 else "start"
        out.append(
            _text(
                x + (-5 if anchor == "end" else 5),
                label_y,
                m.label,
                size=TICK_FONT,
                anchor=anchor,
                fill=m.colour,
                halo=True,
            )
        )
    out.append(_text(left + plot_w / 2, top + plot_h + 40, x_axis.label, size=LABEL_FONT, anchor="middle", fill=MUTED))
    out.append(
        f'<text x="14" y="{top + plot_h / 2:.1f}" font-size="{LABEL_FONT}" text-anchor="middle" fill="{MUTED}" '
        f'transform="rotate(-90 14 {top + plot_h / 2:.1f})">{escape(y_axis.label)}</text>'
    )
    out.append("</svg>")
    return "\n".join(out)
