"""Plain-text rendering of workload checks and fits. Formats only; the numbers come computed."""

from __future__ import annotations

from collections.abc import Sequence

from kvbudget.render.text import fit, line_width, table
from kvbudget.workload.check import WorkloadCheck
from kvbudget.workload.distributions import fmt_number
from kvbudget.workload.model import DISTRIBUTIONS, Workload


def _cap_text(workload: Workload) -> str:
    c = workload.cap
    where = f"{c.tokens:,} tokens" if c.tokens is not None else "the serving cap (--context)"
    if c.action == "refuse":
        return f"refuse the step that would pass {where}; the session ends there"
    target = f"{c.target_tokens:,} tokens" if c.target_tokens is not None else f"{c.target_fraction:g} of the cap"
    if c.action == "compact":
        return f"compact to {target} at {where} (no generation; the kept context is prefilled again)"
    return (
        f"summarize at {where}: generate {c.summary_tokens:,} output tokens, then continue from {target} "
        "(prefilled again)"
    )


def render_workload_summary(workload: Workload) -> list[str]:
    w = workload
    lines = [(f"Workload {w.name}" if w.name else "Workload") + (f"  ({w.source})" if w.source else "")]
    if w.description:
        lines.append(f"  {w.description}")
    if w.arrival.rate_per_s is not None:
        rate = w.arrival.rate_per_s
        lines.append(f"  arrivals: Poisson, {rate:g} sessions/s ({rate * 3600:,.4g} per hour)")
    else:
        fmt = f" ({w.arrival.format})" if w.arrival.format else ""
        lines.append(f"  arrivals: replayed from the session starts of {w.arrival.replay}{fmt}")
    p = w.prefix
    lines.append(
        f"  shared prefix: {p.tokens:,} tokens ({p.system_prompt_tokens:,} system prompt + "
        f"{p.tool_catalog_tokens:,} tool catalogue)"
    )
    lines.append(f"  at the cap: {_cap_text(w)}")
    rows = [
        [name, dist.describe(), fmt_number(dist.mean()), DISTRIBUTIONS[name]]
        for name, dist in w.distributions().items()
    ]
    lines += ["", table(["quantity", "distribution", "mean", "what"], rows, [False, False, True, False])]
    return lines


def render_check(check: WorkloadCheck) -> str:
    r = check.rates
    lines = render_workload_summary(check.workload)
    lines += [
        "",
        f"Mean context at session end (before any cap event): {check.final_context_line}",
        "",
        f"Session time, unloaded (per sequence: prefill {r.prefill_tokens_per_s:,.0f} tok/s, decode "
        f"{r.decode_tokens_per_s:,.0f} tok/s; set --prefill-rate / --decode-rate):",
        *(f"  {line}" for line in check.session.lines),
        "",
        f"Little's law (arrival rate: {check.arrival_basis}):",
        *(f"  {line}" for line in check.little.lines),
        "  sessions hold their cache through tool pauses, so this is the number of caches to budget for "
        "(mean, not peak; the simulator adds queueing and the spread)",
    ]
    if check.retry is not None:
        lines += ["", "Client retries after a timeout ([retries]; the timeout share is assumed, --timeout-share):"]
        lines += [f"  {line}" for line in check.retry.lines]
    else:
        lines += ["", "No [retries] section: clients never retry."]
    return fit("\n".join(lines))


def render_fit(workload: Workload, *, records: int, bad_rows: Sequence[str], out: str | None, toml_text: str) -> str:
    lines = render_workload_summary(workload)
    lines.insert(1, f"  from {records:,} step records" + (f"; {len(bad_rows)} bad rows skipped" if bad_rows else ""))
    lines += [f"bad row: {row}" for row in bad_rows[:20]]
    if len(bad_rows) > 20:
        lines.append(f"... and {len(bad_rows) - 20} more bad rows")
    if out is not None:
        lines += ["", f"Wrote {out}; check it with: kvbudget workload check {out}"]
        return fit("\n".join(lines))
    # Without --out the output is itself a workload file: the summary as comments, then the TOML.
    commented = [f"# {line}".rstrip() for line in fit("\n".join(lines), line_width() - 2).splitlines()]
    return "\n".join([*commented, "#", toml_text.rstrip("\n")])
