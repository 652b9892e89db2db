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

from kvbudget.cli.options import request_from
from kvbudget.units import counted
from kvbudget.workload.traces import FORMATS

if TYPE_CHECKING:
    from kvbudget.units import UnitSystem
    from kvbudget.workload.record import BadRow


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
    from kvbudget.plan.trace_report import trace_report
    from kvbudget.requests.trace import TraceStatsRequest

    report = trace_report(request_from(TraceStatsRequest, args))
    if args.json:
        return json.dumps(report.to_dict(), indent=2)
    from kvbudget.render.traces import render_cap, render_trace_stats

    text = render_trace_stats(report.stats, list(report.bad_rows), report.files)
    if report.cap is not None:
        text += "\n\n" + render_cap(report.cap, cast("UnitSystem", args.units))
    return text


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
    from kvbudget.render.text import fit

    return fit("\n".join(lines))
