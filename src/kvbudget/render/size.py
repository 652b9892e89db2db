"""Text of ``kvbudget size``: the deployments that meet the load, cheapest first, what the columns mean, the ones
that cannot with their reason, and the recommendation."""

from __future__ import annotations

from kvbudget.plan.sizing_table import (
    load_notes,
    load_phrase,
    refusal_note,
    simulation_notes,
    sizing_cells,
    sizing_key,
    speeds_notes,
    unmet_line,
)
from kvbudget.render.text import table, wrap
from kvbudget.units import format_tokens

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.plan.sizing import Sizing

HEAD = [
    "deployment", "GPUs", "mem/lat", "repl.", "count", "binds", "spare", "refused", "TTFT s", "ITL ms", "$/h",
    "$/sess-h",
]  # fmt: skip
RIGHT = [False, False, True, True, False, False, True, True, True, True, True, True]
# the key: what the text's abbreviated headings mean (plan/sizing_table.py MEANINGS)
KEY = {
    "per_replica": "mem/lat",
    "replicas": "repl.",
    "count": "count",
    "binds": "binds",
    "spare": "spare",
    "refused": "refused",
    "latency": "TTFT, ITL",
    "cost_per_session_hour": "$/sess-h",
}


def _latency(value: float | None, scale: float, digits: int) -> str:
    return "-" if value is None else f"{value * scale:,.{digits}f}"


def render_size(s: Sizing) -> str:
    p99 = "p99 " if s.shape.percentile == "p99" else ""
    targets = [f"{p99}TTFT <= {s.ttft_s:g} s" for _ in [0] if s.ttft_s is not None] + [
        f"{p99}inter-token <= {s.itl_s * 1000:g} ms" for _ in [0] if s.itl_s is not None
    ]
    if targets:
        targets[-1] += " per step, as simulate holds them" if p99 else " (one request shape: every request's)"
    lines = [
        *wrap(
            f"Sizing for {load_phrase(s)} (whole deployment), cap {format_tokens(s.context)}"
            + (f", {', '.join(targets)}" if targets else ", no latency targets"),
            indent="  ",
        ),
        *wrap(f"request shape: {s.shape.basis}", indent="  "),
        *[line for note in [refusal_note(s)] if note for line in wrap(note, indent="  ")],
        "",
    ]
    body = []
    for c in s.met:
        cells = sizing_cells(c)
        body.append(
            [
                cells.deployment,
                cells.gpus,
                cells.per_replica,
                cells.replicas,
                cells.count,
                cells.binds,
                cells.spare,
                cells.refused,
                _latency(cells.ttft_s, 1, 2),
                _latency(cells.itl_s, 1000, 1),
                cells.cost_per_hour,
                cells.cost_per_session_hour,
            ]
        )
    if body:
        lines += [table(HEAD, body, RIGHT), "", *wrap(sizing_key(KEY), indent="  ")]
        notes = speeds_notes(s)
        lines += [line for note in notes[:1] for line in wrap(note, indent="  ")]
        lines += [line for note in notes[1:] for line in wrap(f"  {note}", indent="    ")]
        lines += [line for note in load_notes(s) for line in wrap(note, indent="  ")]
        lines += [line for note in simulation_notes(s) for line in wrap(note, indent="  ")]
    else:
        lines.append("No combination meets the load.")
    if s.unmet:
        lines += ["", "cannot meet it:"]
        for c in s.unmet:
            lines += wrap(f"  {unmet_line(c)}", indent="    ")
    warned = sorted({w for c in s.met[:1] for w in (c.plan.warnings if c.plan else ())})
    if warned:
        lines += ["", "warnings (the pick):"] + [line for w in warned for line in wrap(f"  {w}", indent="    ")]
    lines += ["", "Recommendation", *wrap(s.recommendation)]
    return "\n".join(lines)
