"""Plain-text rendering of plans and levers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbudget.plan.flags import all_engine_commands
from kvbudget.plan.levers import Lever
from kvbudget.plan.offload import Offload
from kvbudget.plan.plan import Plan
from kvbudget.render.text import fit, table, wrap, wrap_command
from kvbudget.units import counted, format_bytes, format_int, format_tokens

if TYPE_CHECKING:
    from kvbudget.plan.reproduce import LogCheck
    from kvbudget.units import UnitSystem


def render_plan(plan: Plan, units: UnitSystem, offload: Offload | None = None) -> str:
    offload = offload or plan.offload
    i = plan.inputs
    head = (
        f"{i.spec.name} on {i.engine.label} · {counted(i.gpus, 'GPU')}, tp {i.tp}, pp {i.pp} · "
        f"cache {i.kv_dtype_label} · "
        f"cap {format_tokens(i.context)} tokens"
    )
    rows = [
        [line.label, format_bytes(line.bytes, units), format_int(line.bytes), line.provenance, line.basis]
        for line in plan.ledger
    ]
    lines = [
        head,
        "",
        "Ledger per GPU:",
        table(["line", "amount", "bytes", "provenance", "basis"], rows, [False, True, True, False, False]),
    ]
    overhead = plan.overhead
    if overhead.provenance == "heuristic":
        lines.append(
            f"  overhead range {format_bytes(overhead.low, units)} - {format_bytes(overhead.high, units)} "
            "(the plan reserves the high end)"
        )
    lines += [
        "",
        f"Sessions at {format_tokens(i.context)} (worst case reserved): {plan.sessions} per replica x "
        f"{counted(plan.replicas, 'replica')} = {plan.total_sessions}",
        f"Token budget: {format_int(plan.token_budget)} ({plan.token_budget_basis})",
    ]
    if plan.max_context_for_sessions is not None:
        share = ""
        if plan.replicas > 1 and i.sessions is not None:
            from kvbudget.plan.plan import sessions_per_replica

            share = f" over {plan.replicas} replicas ({sessions_per_replica(i.sessions, plan.replicas)} per replica)"
        lines.append(
            f"Largest cap for {i.sessions} sessions{share}: {format_int(plan.max_context_for_sessions)} tokens"
        )
    if plan.prefix is not None:
        lines.append(
            f"With a shared {format_int(plan.prefix.prefix_tokens)}-token prefix: {plan.prefix.sessions} "
            f"sessions ({plan.prefix.basis})"
        )
    if offload is not None:
        lines.append(
            f"Offload tier {format_bytes(offload.tier_bytes, units)}: holds {offload.sessions_offloaded} more "
            f"sessions' caches; restoring one takes {offload.restore_seconds:.2f} s over {offload.link}"
        )
    if i.log_check is not None:
        lines += ["", *_log_check(i.log_check)]
    if plan.speeds is not None:
        lines += ["", *(w for line in plan.speeds.lines() for w in wrap(line))]
    lines += ["", plan.statement]
    if plan.engine_lines:
        lines += ["", f"{i.engine.name} would log:"] + [f"  {line}" for line in plan.engine_lines]
    lines += ["", "Serving flags (each engine sized by its own rules):"]
    for name, command in all_engine_commands(plan).items():
        line = f"  {name}: {command['text'] or ''}"
        lines += wrap(line) if command["argv"] is None else wrap_command(line)
    flag = i.engine.rules.concurrency_flag
    if i.options.max_num_seqs is not None:
        lines.append(
            f"  (--max-num-seqs {i.options.max_num_seqs}: at most {i.options.max_num_seqs} sequences run at once per "
            "replica; more wait for a running one to finish)"
        )
    elif plan.sessions >= 1 and flag:
        lines.append(
            f"  ({plan.sessions} per replica is the worst case, every session at the cap; {i.engine.rules.title} "
            f"admits by free blocks, so shorter sessions run more and {flag} is left unset: set {flag} {plan.sessions} "
            "to rule out preemption at the worst case)"
        )
    lines += [f"warning: {w}" for w in plan.warnings]
    return fit("\n".join(lines))


def _log_check(check: LogCheck) -> list[str]:
    """plan --from-log: the log's capacity figures beside the plan's for the log's own deployment."""
    out = [f"From the log ({check.log}): " + ("reproduced" if check.reproduced else "not reproduced exactly")]
    for f in check.figures:
        mark = "exact" if f.exact else f"{f.diff_pct:+.3f}%"
        out.append(
            f"  {f.figure}: logged {f.logged.text} (line {f.logged.line}), planned {format_int(f.planned)} ({mark})"
        )
    out += [f"  not from the log: {note}" for note in check.not_from_log]
    if check.refusal:
        out.append(f"  the engine refused to start: {check.refusal}")
    return out


def render_levers(plan: Plan, levers: list[Lever]) -> str:
    gpus = plan.inputs.gpus
    head = (
        f"{plan.inputs.spec.name} on {plan.inputs.engine.label}: {plan.total_sessions} sessions at "
        f"{format_tokens(plan.inputs.context)} on {counted(gpus, 'GPU')} today "
        f"({plan.total_sessions / gpus:,.2f} per GPU). What each lever buys per GPU at the same cap (best first):"
    )
    rows: list[list[str]] = []
    aside: list[list[str]] = []
    for lv in levers:
        if lv.total_sessions is None or lv.per_gpu is None or lv.gain_per_gpu is None:
            aside.append([lv.name, lv.change, "-", "-", "-", f"not possible: {lv.refused}"])
            continue
        row = [
            lv.name,
            lv.change,
            str(lv.gpus),
            str(lv.total_sessions),
            f"{lv.per_gpu:,.2f} ({lv.gain_per_gpu:+,.2f})",
            lv.memory_effect if not lv.not_ranked else f"not ranked: {lv.not_ranked}; {lv.memory_effect}",
        ]
        (aside if lv.not_ranked else rows).append(row)
    header = ["lever", "change", "GPUs", "sessions", "per GPU (gain)", "memory effect"]
    note = (
        "per GPU: sessions over the deployment / its GPUs, at the same cap (the same GPU: per dollar ranks the "
        "same); levers that change or clamp the cap are listed after, not ranked as capacity"
    )
    lines = [*wrap(head, indent="  "), table(header, rows + aside, [False, False, True, True, True, False]), ""]
    return "\n".join([*lines, *wrap(note, indent="  ")])
