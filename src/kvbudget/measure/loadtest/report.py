"""The text report of a load test: what was measured, level by level, and what it means, in words."""

from __future__ import annotations

from kvbudget.measure.loadtest.result import Outcome, to_json
from kvbudget.render.text import fit, table

STOPS = {
    "criterion": "the criterion: a level failed",
    "max-sessions": "--max-sessions: every level passed",
    "hold": "the end of the held level",
    "duration": "--duration",
    "max-requests": "--max-requests",
    "ceiling": "the hard ceiling (give --duration or --max-requests)",
    "interrupted": "Ctrl-C (partial results)",
    "error": "an error",
}


def _s(value: object, digits: int = 3) -> str:
    return "-" if value is None else f"{float(str(value)):.{digits}f}"


def _pct(value: object) -> str:
    return "-" if value is None else f"{float(str(value)):.0%}"


def render(o: Outcome) -> str:
    d = to_json(o)
    server = d["server"]
    assert isinstance(server, dict)
    settings = o.settings
    version = f" {server['version']}" if server.get("version") else ""
    lines = [f"kvbudget loadtest: {o.url} ({server.get('engine') or 'not identified'}{version})"]
    if server.get("model"):
        lines.append(f"  model {server['model']}")
    if server.get("total_slots"):
        lines.append(f"  {server['total_slots']} slots x {server['slot_n_ctx']:,} cells")
    cap = settings.get("context")
    cap_text = f"{int(str(cap)):,}-token cap" if cap is not None else "cap unknown"
    lines.append(
        f"Sessions from {settings['source']}; {cap_text}; {settings['api']} API; pauses x{settings['time_scale']:g}; "
        f"seed {settings['seed']}"
    )
    rows = []
    levels = d["levels"]
    assert isinstance(levels, list)
    for lv in levels:
        verdict = "passed" if lv["passed"] else ("not judged" if lv["passed"] is None else "failed")
        t = lv["ttft_s"]
        rows.append(
            [
                str(lv["sessions"]),
                f"{lv['duration_s']:.1f}",
                str(lv["requests"]),
                str(lv["refused"] + lv["errors"]),
                str(lv["deferred_peak"]),
                str(lv["preempted"]),
                f"{_s(t['p50'])} / {_s(t['p99'])}",
                _pct(lv["kv_usage_peak"]),
                verdict,
            ]
        )
    if rows:
        headers = ["sessions", "s", "requests", "failed", "deferred", "preempted", "TTFT p50/p99 s", "KV peak", ""]
        lines.append(table(headers, rows, [True, True, True, True, True, True, True, True, False]))
        for lv in levels:
            if lv["passed"] is False:
                lines.append(f"  {lv['sessions']} sessions: {'; '.join(lv['reasons'])}")
    sustained = d["sessions_sustained"]
    lines.append(
        f"Measured: {'no figure' if sustained is None else f'{sustained} concurrent sessions'} sustained "
        f"({d['sustained_basis']})."
    )
    predicted = d["predicted"]
    assert isinstance(predicted, dict)
    if predicted.get("plan_sessions") is not None:
        lines.append(f"Plan: {predicted['plan_sessions']} sessions ({predicted['plan_basis']}).")
    elif predicted.get("plan_basis"):
        lines.append(f"Plan: {predicted['plan_basis']}.")
    if predicted.get("simulated_sessions") is not None:
        lines.append(f"Simulator: {predicted['simulated_sessions']} sessions ({predicted['simulated_basis']}).")
    recon = d["reconciliation"]
    assert isinstance(recon, list)
    for row in recon:
        lines.append(f"  {row['figure']}: measured {row['measured']}, predicted {row['predicted']}: {row['note']}")
    t = d["ttft_s"]
    assert isinstance(t, dict)
    tokens = d["tokens"]
    assert isinstance(tokens, dict)
    lines.append(
        f"Totals: {d['sessions_started']} sessions started, {d['sessions_completed']} ran all their steps, "
        f"{d['sessions_capped']} ended at the cap; {d['requests']} requests, {d['errors']} errors, "
        f"{d['refused']} refused, {'-' if d['preempted'] is None else d['preempted']} preempted; "
        f"TTFT p50 {_s(t['p50'])} s, p99 {_s(t['p99'])} s"
    )
    kv_source = f" ({d['kv_usage_source']})" if d["kv_usage_source"] else ""
    lines.append(
        f"Tokens (the server's counts): {tokens['prompt']:,} prompt ({tokens['planned_prompt']:,} planned), "
        f"{tokens['output']:,} output, {tokens['cached']:,} from cache; KV usage peak {_pct(d['kv_usage_peak'])}"
        f"{kv_source}; prefix hit rate {_pct(d['prefix_hit_rate'])} ({d['prefix_hit_source']})"
    )
    lines.append(f"Stopped by {STOPS.get(o.stopped_by, o.stopped_by)} after {o.duration_s:.1f} s.")
    lines += [f"Warning: {w}" for w in o.warnings]
    return fit("\n".join(lines))
