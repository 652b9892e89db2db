"""The report as Markdown for a pull request or a ticket: the same numbers as the HTML page, as tables, and
the serve commands in code blocks. Charts become small tables (the ledger, the curve's points, the
session-length percentiles), since Markdown renderers differ in what images they allow."""

from __future__ import annotations

import re

from kvbudget.report import sections
from kvbudget.report.charts import ledger_segments
from kvbudget.report.data import Report, TraceSessions
from kvbudget.units import counted, format_bytes, format_int, format_tokens

# Everything interpolated into the document is escaped (a model's name, a file's, a basis or warning quoting a
# config), since the report did not write it: HTML is entities (no <script>, no <img onerror> in a renderer that
# passes HTML through), Markdown's own characters are backslash-escaped (no link, emphasis or code span made
# from a name), and line breaks become spaces (no heading, list or table row started from inside a value).
_MARKDOWN = re.compile(r"([\\`*_\[\]#!|~])")
_LINE_START = re.compile(r"^(\s*)([-+=]|[0-9]+(?=[.)]))")  # a list item or setext underline where a line starts
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]+")


def md(text: object, *, starts_line: bool = False) -> str:
    """``text`` as inert Markdown inline text: one line, no HTML, no Markdown syntax (``starts_line``: it begins a
    line, where ``-``, ``+`` or ``1.`` would start a list)."""
    flat = _CONTROL.sub(" ", str(text))
    html = flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    inline = _MARKDOWN.sub(r"\\\1", html)
    return _LINE_START.sub(r"\1\\\2", inline) if starts_line else inline


def _cell(text: object) -> str:
    return md(text)


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks in ``text`` (which then cannot close it)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _table(headers: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    out = ["| " + " | ".join(_cell(h) for h in headers) + " |"]
    out.append("|" + "|".join("---:" if k in right else "---" for k in range(len(headers))) + "|")
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return [*out, ""]


def render_markdown(report: Report) -> str:
    plan, i, units = report.plan, report.plan.inputs, report.units
    out = [
        f"## kvbudget report: {md(i.spec.name)} on {md(i.engine.label)} · {md(i.gpu_label)}",
        "",
        f"{counted(i.gpus, 'GPU')}, tp {i.tp}, pp {i.pp}, {counted(plan.replicas, 'replica')} · "
        f"cache {md(i.kv_dtype_label)} · "
        f"cap {format_tokens(i.context)} tokens · bytes per GPU",
        "",
        f"**{md(plan.statement)}**",
        "",
    ]
    weights = next(line for line in plan.ledger if line.label == "weights")
    p99 = "no trace given"
    if report.trace is not None:
        t = report.trace
        p99 = (
            f"{format_int(t.p99_tokens)} tokens over {t.sessions:,} sessions ({t.over_cap:,} beyond the cap); "
            f"recommended cap {format_tokens(t.recommended_cap)}" + _past_window(t)
        )
    sessions = [f"planned {plan.sessions:,}"]
    if report.simulated is not None:
        sessions.append(f"simulated {report.simulated.sustained_text}")
    sessions += [f"measured {m.sessions:,} ({m.source})" for m in report.measured if m.sessions is not None]
    cap = report.cap
    out += _table(
        ["figure", "value", "how"],
        [
            ["KV cost per token", f"{format_int(plan.layout.kv_bytes_per_token)} B", "per GPU, past every window"],
            [
                "weights per GPU",
                format_bytes(plan.weights_per_gpu, units),
                weights.basis
                if weights.basis.startswith(weights.provenance)
                else f"{weights.provenance}: {weights.basis}",
            ],
            ["enforced cap", f"{format_int(cap.tokens)} tokens", f"{cap.engine} {cap.setting or ''}".strip()],
            ["p99 session", p99, ", ".join(report.trace.files) if report.trace else "--trace FILE..."],
            [
                "sessions per replica",
                " · ".join(sessions),
                f"{plan.total_sessions:,} over {counted(plan.replicas, 'replica')}",
            ],
            ["latency at the planned sessions", *sections.latency_card(report)],
        ],
        set(),
    )
    out += ["### Per-token cost by layer group", ""]
    out += _table(
        ["group", "layers", "B/token held", "B/token past windows", "slots at cap", "at the cap"],
        [
            [
                g.label,
                format_int(g.layers),
                format_int(g.held_bytes_per_token),
                format_int(g.per_token_bytes),
                format_int(g.token_slots),
                format_bytes(g.bytes_at_cap, units),
            ]
            for g in report.groups
        ],
        {1, 2, 3, 4, 5},
    )
    out += ["### Memory ledger per GPU", ""]
    out += _table(
        ["line", "amount", "bytes", "provenance", "basis"],
        [[x.label, format_bytes(x.bytes, units), format_int(x.bytes), x.provenance, x.basis] for x in plan.ledger],
        {1, 2},
    )
    out += _table(
        ["split of the GPU", "amount", "bytes"],
        [[s.label, s.text, format_int(s.value)] for s in ledger_segments(report)],
        {1, 2},
    )
    out += ["### Sessions against the cap", ""]
    out += _table(
        ["cap", "tokens", "per replica", "all replicas"],
        [
            [format_tokens(p.cap), format_int(p.cap), format_int(p.sessions), format_int(p.total_sessions)]
            for p in report.curve
        ],
        {1, 2, 3},
    )
    out += _latency(report)
    if report.sizing is not None:
        out += _sizing(report)
    if report.trace is not None:
        t = report.trace
        out += ["### Session lengths from the traces", "", md(t.cap.get("reading", ""), starts_line=True), ""]
        out += _table(
            ["session peak", "tokens"],
            [
                [k, format_int(int(v))]
                for k in ("p50", "p90", "p99", "max")
                if isinstance(v := t.peaks.get(k), int | float)
            ],
            {1},
        )
    if report.simulated is not None:
        s = report.simulated
        out += [
            "### Simulated",
            "",
            f"Sessions per replica sustained: {s.sustained_text} ({md(s.source)}): {md(s.sustained_basis)}; "
            f"target {md(s.target)}.",
            "",
            *([f"Speeds: {md(s.speeds)}.", ""] if s.speeds else []),
            *([f"Latency targets: {md(s.at_targets)}.", ""] if s.at_targets else []),
        ]
    if report.measured:
        out += ["### Measured", ""]
        out += _table(
            ["source", "file", "sessions", "at", "basis"],
            [
                [
                    m.source,
                    m.path,
                    "-" if m.sessions is None else format_int(m.sessions),
                    format_tokens(m.context) if m.context else "-",
                    m.basis,
                ]
                for m in report.measured
            ],
            {2},
        )
    out += ["### Levers, ranked", ""]
    out += _table(
        ["lever", "change", "sessions", "delta", "memory effect"],
        [
            [lv.name, lv.change, format_int(lv.total_sessions), f"{lv.delta:+,}", lv.memory_effect]
            if lv.total_sessions is not None and lv.delta is not None
            else [lv.name, lv.change, "-", "-", f"refused: {lv.refused}"]
            for lv in report.levers
        ],
        {2, 3},
    )
    out += ["### Serving commands", ""]
    own = i.engine.name
    for name in sorted(report.commands, key=lambda n: (n != own, list(report.commands).index(n))):
        command = report.commands[name]
        text = str(command.get("text") or "")
        if command.get("argv"):
            fence = _fence(text)
            out += [f"{md(name)}{' (this plan)' if name == own else ''}:", "", f"{fence}sh", text, fence, ""]
        else:
            out += [f"{md(name)}: {md(text or 'no server command')}", ""]
    if plan.warnings:
        out += ["### Warnings", "", *[f"- {md(w)}" for w in plan.warnings], ""]
    return "\n".join(out).rstrip() + "\n"


def _latency(report: Report) -> list[str]:
    out = ["### Latency", ""]
    rows = sections.latency_rows(report)
    if rows:
        out += _table(sections.LATENCY_HEADERS, rows, {1, 2, 3, 4})
    return out + [f"- {md(note)}" for note in sections.latency_notes(report)] + [""]


def _sizing(report: Report) -> list[str]:
    s = report.sizing
    assert s is not None
    out = ["### Sizing", "", md(sections.sizing_heading(s), starts_line=True), ""]
    headers, rows, right = sections.sizing_table(s)
    if rows:
        out += _table(headers, rows, right)
        out += [line for note in sections.sizing_notes(s) for line in (md(note, starts_line=True), "")]
    else:
        out += ["No deployment meets the load.", ""]
    unmet = sections.sizing_unmet(s)
    if unmet:
        out += ["Cannot meet it:", "", *[f"- {md(line)}" for line in unmet], ""]
    return [*out, "**Recommendation**", "", md(s.recommendation, starts_line=True), ""]


def _past_window(t: TraceSessions) -> str:
    return (
        f", past the model's trained window of {format_tokens(t.window)}"
        if t.window and t.recommended_past_window
        else ""
    )
