"""Text of ``kvbudget size``: the deployments that meet the load, cheapest first, what the columns mean, the ones
that cannot with their reason, and the recommendation."""

from __future__ import annotations

from kvbudget.plan.cap_refusals import pct
from kvbudget.render.compare import money
from kvbudget.render.text import table, wrap
from kvbudget.units import format_tokens

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.plan.sizing import Candidate, Sizing


def _what(c: Candidate) -> str:
    weights = f" {c.choice.weights}" if c.choice.weights else ""
    name = c.plan.inputs.spec.name if c.plan else c.choice.model
    kv = f" kv {c.choice.kv_dtype}" if c.choice.kv_dtype != "auto" else ""
    return f"{name}{weights} {c.choice.engine}{kv}"


def _latency(c: Candidate) -> list[str]:
    if c.latency is None:
        return ["-", "-"]
    return [f"{c.latency.ttft_s:,.2f}", f"{c.latency.itl_s * 1000:,.1f}"]


def _refusal_lines(s: Sizing) -> list[str]:
    """The sessions the cap refuses (computed on the sample) and the smallest cap within the tolerance."""
    r = s.refusals
    if r is None:
        return []
    within = s.cap_within
    smallest = (
        f"; the smallest cap within it: {format_tokens(within.cap)} ({pct(within.share)})"
        if within is not None
        else "; no cap up to 1M is within it"
    )
    return wrap(
        f"refused at the cap: {pct(r.share)} of the workload's sessions (computed: {r.basis}); tolerated "
        f"{pct(s.refusal_rate)}{smallest}",
        indent="  ",
    )


def render_size(s: Sizing) -> str:
    targets = [f"TTFT <= {s.ttft_s:g} s" for _ in [0] if s.ttft_s is not None] + [
        f"inter-token <= {s.itl_s * 1000:g} ms" for _ in [0] if s.itl_s is not None
    ]
    load = f"{s.sessions:,} concurrent sessions at peak" if s.sessions else f"{s.rate_per_s:g} new sessions/s"
    lines = [
        *wrap(
            f"Sizing for {load} (whole deployment), cap {format_tokens(s.context)}"
            + (f", {', '.join(targets)}" if targets else ", no latency targets"),
            indent="  ",
        ),
        *wrap(f"request shape: {s.shape.basis}", indent="  "),
        *_refusal_lines(s),
        "",
    ]
    head = ["deployment", "GPUs", "mem/lat", "repl.", "binds", "spare", "refused", "TTFT s", "ITL ms", "$/h"]
    head.append("$/sess-h")
    body = []
    for c in s.met:
        body.append(
            [
                _what(c),
                f"{c.choice.gpu} x {c.gpus}" + (f" tp{c.choice.tp}" if c.choice.tp > 1 else ""),
                f"{c.memory_sessions:,}/{c.latency_sessions:,}",
                f"{c.replicas:,}",
                c.binding,
                f"+{c.headroom:,}",
                "-" if c.refusals is None else pct(c.refusals.share),
                *_latency(c),
                money(c.cost_per_hour),
                money(c.cost_per_session_hour),
            ]
        )
    if body:
        lines.append(table(head, body, [False, False, True, True, False, True, True, True, True, True, True]))
        lines += [
            "",
            "mem/lat: sessions one replica holds in memory at the cap (plan, worst case reserved) / runs within",
            "  the latency targets (speed's roofline, computed, or a load test's speeds, measured: see speeds;",
            "  every session generating at once); repl.:",
            "  replicas (GPUs / tp); binds: what set the replicas (memory; prefill: TTFT; decode: inter-token",
            "  latency); spare: sessions held beyond the peak; refused: the workload's sessions that outgrow",
            "  the cap (counted on the sessions simulate draws); TTFT, ITL: at the load each replica runs",
            "  (computed or measured, as the speeds); $/sess-h: $/h over the peak sessions",
        ]
        if s.speed_from:
            measured = [c for c in s.met if c.speeds and c.speeds[0] == "measured"]
            rows = ", ".join(dict.fromkeys(_what(c) for c in measured)) or "none of the rows that meet the load"
            lines += wrap(
                f"speeds: measured by {s.speed_origin} {s.speed_from} for {rows} (TTFT, ITL and the latency limit "
                f"from the {s.speed_origin}'s prefill and decode speeds); the other rows: computed (roofline)",
                indent="  ",
            )
            lines += [line for c in measured[:1] if c.speeds for line in wrap(f"  {c.speeds[1]}", indent="    ")]
        rate_bases = {c.load.basis for c in s.met if c.load is not None and c.load.rate_per_s is not None}
        for basis in sorted(rate_bases)[:3]:
            lines += wrap(f"load: {basis}", indent="  ")
    else:
        lines.append("No combination meets the load.")
    if s.unmet:
        lines += ["", "cannot meet it:"]
        for c in s.unmet:
            lines += wrap(f"  {_what(c)} on {c.choice.gpu}, tp {c.choice.tp}: {c.unmet}", indent="    ")
    warned = sorted({w for c in s.met[:1] for w in (c.plan.warnings if c.plan else ())})
    if warned:
        lines += ["", "warnings (the pick):"] + [line for w in warned for line in wrap(f"  {w}", indent="    ")]
    lines += ["", "Recommendation", *wrap(s.recommendation)]
    return "\n".join(lines)
