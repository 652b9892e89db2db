"""The `kvbudget trace` commands (parse, call, render): ``trace stats`` and ``trace convert``.

``trace stats FILE... [--format F] [--strict] [--json]`` reads real traces into per-step records
and prints session statistics; with ``--model M`` and ``--gpu G`` (or ``--gpu-memory``, and any other
plan option) it adds what a cap does. ``trace convert FILE... --out FILE.jsonl`` writes kvbudget's
own per-step JSONL (docs/traces.md). Readers and statistics are imported only when a command runs.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from kvbudget.errors import InputError, TraceError
from kvbudget.units import counted, parse_tokens
from kvbudget.workload.traces import FORMATS

if TYPE_CHECKING:
    from kvbudget.plan.caps import CapAnalysis
    from kvbudget.units import UnitSystem
    from kvbudget.workload.record import BadRow
    from kvbudget.workload.stats import TraceStats

# options that only make sense with --model (a plan); their presence without it is a mistake
_PLAN_ONLY = ("gpu", "gpu_memory", "context", "weights", "weights_size", "overhead", "utilization", "sessions")


def register(sub: argparse._SubParsersAction[Any]) -> dict[str, Callable[[argparse.Namespace], str]]:
    from kvbudget.cli.plan import add_optional_plan_options

    p = sub.add_parser("trace", help="real traces: session statistics, what a cap does, conversion")
    commands = p.add_subparsers(dest="trace_command", metavar="{stats,convert}", required=True, parser_class=type(p))
    s = commands.add_parser(
        "stats",
        help="sessions, context per step and at session end, growth, pauses, prefix reuse; "
        "with --model and --gpu: the recommended cap and sessions at it",
    )
    s.add_argument("files", nargs="+", metavar="FILE", help="trace files (formats detected unless --format)")
    s.add_argument("--format", choices=FORMATS, default=None, help="read every file as this format")
    s.add_argument("--strict", action="store_true", help="stop at the first bad row instead of skipping it")
    s.add_argument(
        "--sessions-span-files",
        action="store_true",
        help="the files are parts of one trace: a session id continues across them (default: per file)",
    )
    add_optional_plan_options(s)
    c = commands.add_parser("convert", help="write traces as kvbudget per-step JSONL (docs/traces.md)")
    c.add_argument("files", nargs="+", metavar="FILE", help="trace files (formats detected unless --format)")
    c.add_argument("--out", required=True, metavar="FILE.jsonl", help="the JSONL file to write")
    c.add_argument("--format", choices=FORMATS, default=None, help="read every file as this format")
    c.add_argument("--strict", action="store_true", help="stop at the first bad row instead of skipping it")
    c.add_argument(
        "--sessions-span-files",
        action="store_true",
        help="the files are parts of one trace: a session id continues across them (default: per file)",
    )
    return {"trace": _cmd_trace}


def _cmd_trace(args: argparse.Namespace) -> str:
    if args.trace_command == "convert":
        return _convert(args)
    return _stats(args)


def _stats(args: argparse.Namespace) -> str:
    from dataclasses import replace

    from kvbudget.workload.stats import trace_stats
    from kvbudget.workload.traces import read_records

    if args.model is None:
        given = [f"--{name.replace('_', '-')}" for name in _PLAN_ONLY if getattr(args, name) is not None]
        if given:
            raise InputError(f"{', '.join(given)} describe a deployment for the cap analysis; add --model M")
    bad: list[BadRow] = []
    records = read_records(
        args.files, fmt=args.format, strict=args.strict, bad_rows=bad, span_files=args.sessions_span_files
    )
    stats = trace_stats(records, 0)
    stats = replace(stats, bad_rows=len(bad))  # the bad rows are known once the records are consumed
    cap = _cap(args, stats) if args.model is not None else None
    if args.json:
        data = stats.to_json()
        data["bad_row_examples"] = [str(row) for row in bad[:20]]
        if cap is not None:
            data["cap"] = cap.to_json()
        return json.dumps(data, indent=2)
    from kvbudget.render.traces import render_cap, render_trace_stats

    text = render_trace_stats(stats, bad, len(args.files))
    if cap is not None:
        text += "\n\n" + render_cap(cap, cast("UnitSystem", args.units))
    return text


def _cap(args: argparse.Namespace, stats: TraceStats) -> CapAnalysis:
    from kvbudget.cli.plan import plan_inputs
    from kvbudget.plan.caps import cap_analysis

    peak = stats.session_peak_tokens.p99
    if stats.steps == 0 or peak is None:
        raise TraceError("the traces have no usable steps; there is no session length to read a cap from")
    current = parse_tokens(args.context, what="--context") if args.context else None
    # plan_inputs needs some cap; cap_analysis replaces it with each cap it plans
    inputs, _ = plan_inputs(argparse.Namespace(**{**vars(args), "context": args.context or "1"}))
    return cap_analysis(int(peak), inputs, current, stats.session_peak_tokens.count)


def _convert(args: argparse.Namespace) -> str:
    from kvbudget.safeio import AtomicWriter
    from kvbudget.workload.traces import read_records

    writer = AtomicWriter(args.out, "--out", args.files)
    bad: list[BadRow] = []
    records = read_records(
        args.files, fmt=args.format, strict=args.strict, bad_rows=bad, span_files=args.sessions_span_files
    )
    steps, sessions = 0, set()
    with writer.stream() as f:
        for record in records:
            f.write(json.dumps(record.to_json(), separators=(",", ":")) + "\n")
            steps += 1
            sessions.add(record.session)
    lines = [
        f"wrote {steps:,} steps of {counted(len(sessions), 'session')} to {args.out} (kvbudget JSONL, docs/traces.md)"
    ]
    if bad:
        lines.append(f"{counted(len(bad), 'bad row')} skipped (use --strict to stop at the first):")
        lines += [f"  {row}" for row in bad[:10]]
        if len(bad) > 10:
            lines.append(f"  ... and {len(bad) - 10:,} more")
    return "\n".join(lines)
