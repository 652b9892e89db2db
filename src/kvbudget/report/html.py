"""The report as one self-contained HTML page: inline CSS, inline SVG charts, no script to run and nothing
to fetch (no external script, stylesheet, font or image), so it opens offline and can be attached to a
ticket or mailed. The collected data rides along as an inert ``application/json`` block.

Layout: the five numbers as cards, then panels in a grid that is two columns on a laptop and one on a
phone; charts scale with their column (SVG viewBox), tables scroll sideways on a narrow screen.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from html import escape
from pathlib import Path

from kvbudget import __version__
from kvbudget.report import charts, sections
from kvbudget.report.data import Report, TraceSessions
from kvbudget.units import counted, format_bytes, format_int, format_tokens

CSS = """
:root { --ink: #1f2933; --muted: #52606d; --line: #d9dee3; --bg: #f5f7f9; --card: #ffffff; --accent: #2f6fb3; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
  color: var(--ink); background: var(--bg); }
.page { max-width: 1340px; margin: 0 auto; padding: 12px 16px 24px; }
h1 { font-size: 1.35rem; margin: 4px 0 2px; }
h2 { font-size: 1.05rem; margin: 0 0 6px; }
h3 { font-size: .95rem; margin: 10px 0 4px; }
p { margin: 4px 0; }
.sub, .note, figcaption { color: var(--muted); font-size: .88rem; }
.statement { font-weight: 600; }
.numbers { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(100%, 230px), 1fr)); gap: 10px;
  margin: 10px 0 0; padding: 0; list-style: none; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 8px 12px; min-width: 0; }
.card .what { color: var(--muted); font-size: .8rem; text-transform: uppercase; letter-spacing: .03em; }
.card .value { font-size: 1.3rem; font-weight: 650; font-variant-numeric: tabular-nums; }
.card .how { color: var(--muted); font-size: .82rem; overflow-wrap: anywhere; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(100%, 560px), 1fr)); gap: 12px;
  margin-top: 12px; }
.panel { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 12px; min-width: 0; }
.panel.wide { grid-column: 1 / -1; }
.panel p, .panel li { overflow-wrap: anywhere; }
figure { margin: 0; }
svg.chart { display: block; width: 100%; max-width: 520px; height: auto; }
.scroll { overflow-x: auto; -webkit-overflow-scrolling: touch; margin-top: 8px; }
table { border-collapse: collapse; font-size: .84rem; }
th, td { padding: 3px 8px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top;
  white-space: nowrap; }
th { color: var(--muted); font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.basis { white-space: normal; min-width: 18em; max-width: 42em; color: var(--muted); }
details { margin-top: 6px; }
summary { cursor: pointer; color: var(--accent); font-size: .88rem; }
pre { margin: 4px 0 8px; padding: 8px 10px; background: #0f172a; color: #e2e8f0; border-radius: 6px;
  font-size: .84rem; white-space: pre-wrap; overflow-wrap: anywhere; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace; }
.commands { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(100%, 560px), 1fr)); gap: 0 16px; }
.commands > div { min-width: 0; }
.own h3::after { content: " (this plan's engine)"; color: var(--muted); font-weight: 400; }
ul.warnings { margin: 4px 0; padding-left: 18px; font-size: .88rem; }
footer { margin-top: 14px; color: var(--muted); font-size: .8rem; }
@media (max-width: 600px) {
  body { font-size: 14px; }
  .page { padding: 8px 8px 20px; }
  h1 { font-size: 1.15rem; }
  .panel { padding: 10px 8px; }
  .card .value { font-size: 1.15rem; }
}
""".strip()


def _e(text: object) -> str:
    return escape(str(text))


def _bytes(value: int, report: Report) -> str:
    return f"{format_int(value)} B ({format_bytes(value, report.units)})"


def _table(headers: list[str], rows: list[list[str]], numeric: Collection[int], basis: Collection[int] = ()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for k, cell in enumerate(row):
            cls = ' class="num"' if k in numeric else (' class="basis"' if k in basis else "")
            cells.append(f"<td{cls}>{_e(cell)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _card(name: str, what: str, value: str, how: str) -> str:
    return (
        f'<li class="card" data-number="{_e(name)}"><div class="what">{_e(what)}</div>'
        f'<div class="value">{_e(value)}</div><div class="how">{_e(how)}</div></li>'
    )


def _cards(report: Report) -> str:
    plan, i = report.plan, report.plan.inputs
    weights = next(line for line in plan.ledger if line.label == "weights")
    cap = report.cap
    window = f"; advertised window {format_tokens(cap.window)}" if cap.window else ""
    if cap.setting:
        setting = f"{cap.engine} {cap.setting}"
    elif plan.sessions == 0:
        setting = f"{cap.engine} serves no session of this length"
    else:
        setting = f"{cap.engine}: no serve command; the cap each session is planned for"
    if report.trace is not None:
        t = report.trace
        p99 = (
            f"{format_int(t.p99_tokens)} tokens",
            f"of {t.sessions:,} traced sessions; {t.over_cap:,} beyond the cap; recommended cap "
            f"{format_tokens(t.recommended_cap)}" + _past_window(t),
        )
    else:
        p99 = ("no trace", "give --trace FILE... for the session lengths")
    values, kinds = [f"{plan.sessions:,}"], ["planned"]
    if report.simulated is not None:
        values.append(report.simulated.sustained_text)
        kinds.append("simulated")
    for m in report.measured:
        if m.sessions is not None:
            values.append(f"{m.sessions:,}")
            kinds.append(f"measured ({m.source})")
    replicas = f"; {counted(plan.replicas, 'replica')}: {plan.total_sessions:,} in all" if plan.replicas > 1 else ""
    cards = [
        _card(
            "per-token",
            "KV cost per token",
            f"{format_int(plan.layout.kv_bytes_per_token)} B",
            f"{format_bytes(plan.layout.kv_bytes_per_token, report.units)} per GPU past every window, "
            f"cache {i.kv_dtype_label}",
        ),
        _card(
            "weights",
            "Weights per GPU",
            format_bytes(plan.weights_per_gpu, report.units),
            weights.basis if weights.basis.startswith(weights.provenance) else f"{weights.provenance}: {weights.basis}",
        ),
        _card("cap", "Enforced cap", f"{format_int(cap.tokens)} tokens", f"{setting}{window}"),
        _card("p99", "p99 session (traces)", p99[0], p99[1]),
        _card(
            "sessions",
            "Sessions per replica",
            " / ".join(values),
            f"{' / '.join(kinds)}, at the {format_tokens(i.context)} cap{replicas}",
        ),
        _card("latency", "Latency at the planned sessions", *sections.latency_card(report)),
    ]
    return '<ul class="numbers">' + "".join(cards) + "</ul>"


def _panel(name: str, title: str, body: str, *, wide: bool = False) -> str:
    cls = "panel wide" if wide else "panel"
    return f'<section class="{cls}" id="{_e(name)}"><h2>{_e(title)}</h2>{body}</section>'


def _per_token(report: Report) -> str:
    rows = [
        [
            g.label,
            f"{g.layers:,}" + (f" (+{g.allocated_layers - g.layers})" if g.allocated_layers != g.layers else ""),
            format_int(g.held_bytes_per_token),
            format_int(g.per_token_bytes),
            format_int(g.token_slots),
            format_int(g.allocated_layers * g.state_bytes),
            format_bytes(g.bytes_at_cap, report.units),
        ]
        for g in report.groups
    ]
    table = _table(
        ["group", "layers", "B/token held", "B/token past windows", "slots at cap", "fixed B/session", "at the cap"],
        rows,
        {1, 2, 3, 4, 5, 6},
    )
    plan = report.plan
    fixed = sum(g.allocated_layers * g.state_bytes for g in report.groups)
    note = (
        f'<p class="note">One session at the {format_tokens(plan.inputs.context)} cap holds '
        f"{_bytes(plan.per_session_bytes, report)} per GPU: each group's token slots x its bytes per token held"
        + (f", plus {_bytes(fixed, report)} of fixed state" if fixed else "")
        + f". Past every window each further token adds {format_int(plan.layout.kv_bytes_per_token)} B. "
        f"{plan.layout.first.engine} {plan.layout.first.version} layout, cache {plan.inputs.kv_dtype_label}.</p>"
    )
    return f"<figure>{charts.per_token(report)}</figure>{table}{note}"


def _ledger(report: Report) -> str:
    lines = report.plan.ledger
    rows = [[x.label, format_bytes(x.bytes, report.units), format_int(x.bytes), x.provenance] for x in lines]
    table = _table(["line", "amount", "bytes", "provenance"], rows, {1, 2})
    basis = "".join(f"<li><b>{_e(x.label)}</b>: {_e(x.basis)}</li>" for x in lines)
    return (
        f"<figure>{charts.ledger(report)}</figure>{table}"
        f'<details><summary>where each line comes from</summary><ul class="warnings">{basis}</ul></details>'
    )


def _sessions(report: Report) -> str:
    notes = [f"<li>planned: {_e(report.plan.statement)}</li>"]
    if report.simulated is not None:
        s = report.simulated
        notes.append(
            f"<li>simulated ({_e(s.source)}): {_e(s.sustained_basis)}; target {_e(s.target)}; peak concurrency "
            f"{s.peak_concurrency:,}, {s.refused:,} refused, {s.preemptions:,} preempted of {s.sessions_arrived:,}</li>"
        )
        if s.speeds:
            notes.append(f"<li>simulated speeds: {_e(s.speeds)}</li>")
        if s.at_targets:
            notes.append(f"<li>latency targets: {_e(s.at_targets)}</li>")
    else:
        notes.append("<li>simulated: give --workload FILE to run the simulator</li>")
    for m in report.measured:
        shown = "no capacity stated" if m.sessions is None else f"{m.sessions:,}"
        agree = (
            f"; kvbudget reproduces {m.agreement[0]} of {m.agreement[1]} logged figures"
            if m.agreement is not None and m.agreement[1]
            else ""
        )
        notes.append(f"<li>measured ({_e(m.source)} {_e(m.path)}): {_e(shown)}: {_e(m.basis)}{_e(agree)}</li>")
    if not report.measured:
        notes.append("<li>measured: give --loadtest RESULT.json or --log ENGINE.log</li>")
    return f'<figure>{charts.sessions(report)}</figure><ul class="warnings">{"".join(notes)}</ul>'


def _latency(report: Report) -> str:
    rows = sections.latency_rows(report)
    table = _table(sections.LATENCY_HEADERS, rows, {1, 2, 3, 4}) if rows else ""
    notes = "".join(f"<li>{_e(note)}</li>" for note in sections.latency_notes(report))
    return f'{table}<ul class="warnings">{notes}</ul>'


def _sizing(report: Report) -> str:
    s = report.sizing
    assert s is not None
    headers, rows, right = sections.sizing_table(s)
    body = [f'<p class="note">{_e(sections.sizing_heading(s))}</p>']
    if rows:
        body += [
            _table(headers, rows, right),
            *(f'<p class="note">{_e(note)}</p>' for note in sections.sizing_notes(s)),
        ]
    else:
        body.append("<p>No deployment meets the load.</p>")
    unmet = "".join(f"<li>{_e(line)}</li>" for line in sections.sizing_unmet(s))
    if unmet:
        body.append(f'<details><summary>cannot meet it</summary><ul class="warnings">{unmet}</ul></details>')
    body.append(f'<h3>Recommendation</h3><p class="recommendation">{_e(s.recommendation)}</p>')
    return "".join(body)


def _curve(report: Report) -> str:
    rows = [
        [
            format_int(p.cap),
            format_tokens(p.cap),
            format_int(p.sessions),
            format_int(p.total_sessions),
            format_bytes(p.per_session_bytes, report.units),
        ]
        for p in report.curve
    ]
    table = _table(["cap (tokens)", "cap", "per replica", "all replicas", "one session"], rows, {0, 1, 2, 3, 4})
    return f"<figure>{charts.curve(report)}</figure><details><summary>the curve's points</summary>{table}</details>"


def _cdf(report: Report) -> str:
    trace, chart = report.trace, charts.cdf(report)
    if trace is None or chart is None:
        return (
            '<p class="note">No trace given: add --trace FILE... (real sessions) to draw their lengths against '
            "the cap.</p>"
        )
    peaks = trace.peaks
    rows = [
        [name, format_int(int(value))]
        for name in ("p50", "p90", "p99", "max")
        if isinstance(value := peaks.get(name), int | float)
    ]
    names = [Path(f).name for f in trace.files]
    files = ", ".join(names[:3]) + (f" + {len(names) - 3} more" if len(names) > 3 else "")
    reading = trace.cap.get("reading", "")
    return (
        f"<figure>{chart}</figure><p>{_e(reading)}</p>"
        f'<p class="note">{trace.sessions:,} sessions (sub-agents included), {trace.steps:,} steps, '
        f"{counted(trace.bad_rows, 'bad row')} skipped; {_e(files)}</p>"
        f"{_table(['session peak', 'tokens'], rows, {1})}"
    )


def _levers(report: Report) -> str:
    rows = []
    for lv in report.levers:
        if lv.total_sessions is None:
            rows.append([lv.name, lv.change, "-", "-", "-", f"refused: {lv.refused}"])
        else:
            effect = f"not ranked: {lv.not_ranked}; {lv.memory_effect}" if lv.not_ranked else lv.memory_effect
            per_gpu = "-" if lv.per_gpu is None else f"{lv.per_gpu:,.2f}"
            rows.append([lv.name, lv.change, format_int(lv.total_sessions), f"{lv.delta:+,}", per_gpu, effect])
    table = _table(["lever", "change", "sessions", "delta", "per GPU", "memory effect"], rows, {2, 3, 4}, {5})
    return (
        f"<figure>{charts.levers(report)}</figure><details><summary>what each lever changes</summary>{table}</details>"
    )


def _commands(report: Report) -> str:
    own = report.plan.inputs.engine.name
    names = sorted(report.commands, key=lambda n: (n != own, list(report.commands).index(n)))
    blocks = []
    for name in names:
        command = report.commands[name]
        text = str(command.get("text") or "")
        cls = "own" if name == own else ""
        if command.get("argv"):
            body = f'<pre><code data-engine="{_e(name)}">{_e(text)}</code></pre>'
        else:
            body = f'<p class="note" data-engine="{_e(name)}">{_e(text or "no server command")}</p>'
        blocks.append(f'<div class="{cls}"><h3>{_e(name)}</h3>{body}</div>')
    return f'<div class="commands">{"".join(blocks)}</div>'


def _warnings(report: Report) -> str:
    if not report.plan.warnings:
        return ""
    items = "".join(f"<li>{_e(w)}</li>" for w in report.plan.warnings)
    return _panel("warnings", "Warnings", f'<ul class="warnings">{items}</ul>', wide=True)


def _data_block(report: Report) -> str:
    text = json.dumps(report.to_dict(), separators=(",", ":"))
    text = text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    return f'<script type="application/json" id="kvbudget-report">{text}</script>'


def render_html(report: Report) -> str:
    i = report.plan.inputs
    title = f"{i.spec.name} on {i.engine.label} · {i.gpu_label}"
    sub = (
        f"{counted(i.gpus, 'GPU')}, tp {i.tp}, pp {i.pp}, {counted(report.plan.replicas, 'replica')} · "
        f"cache {i.kv_dtype_label} · "
        f"cap {format_tokens(i.context)} tokens · bytes per GPU"
    )
    panels = [
        _panel("per-token-cost", "Per-token cost by layer group", _per_token(report)),
        _panel("memory-ledger", "Memory ledger per GPU", _ledger(report)),
        _panel("sessions-per-replica", "Sessions: planned, simulated, measured", _sessions(report)),
        _panel("latency", "Latency: planned and simulated", _latency(report)),
        _panel("sessions-against-cap", "Sessions against the cap", _curve(report)),
        _panel("session-lengths", "Session lengths from the traces", _cdf(report)),
        *(
            [_panel("sizing", "Sizing: the deployments that meet the load", _sizing(report), wide=True)]
            if report.sizing
            else []
        ),
        _panel("levers-ranked", "Levers, ranked", _levers(report)),
        _panel("serve-commands", "Serving commands", _commands(report), wide=True),
    ]
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>kvbudget report: {_e(title)}</title>",
            f"<style>\n{CSS}\n</style>",
            "</head>",
            "<body>",
            '<div class="page">',
            f'<header><h1>{_e(title)}</h1><p class="sub">{_e(sub)}</p>'
            f'<p class="statement">{_e(report.plan.statement)}</p></header>',
            _cards(report),
            '<main class="grid">',
            *panels,
            _warnings(report),
            "</main>",
            f"<footer>kvbudget {_e(__version__)} report · every figure is the value of kvbudget plan / levers / "
            "trace stats / simulate / calibrate / speed / size --json for the same options (embedded below as JSON) · "
            "GiB = 2^30 bytes, GB = 10^9 bytes</footer>",
            "</div>",
            _data_block(report),
            "</body>",
            "</html>",
        ]
    )


def _past_window(t: TraceSessions) -> str:
    return (
        f", past the model's trained window of {format_tokens(t.window)}"
        if t.window and t.recommended_past_window
        else ""
    )
