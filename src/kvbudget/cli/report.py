"""The `kvbudget report` command (parse, call, render): one page for one deployment.

``kvbudget report MODEL [plan options] [--trace FILE...] [--workload FILE] [--loadtest RESULT.json]
[--log ENGINE.log] [--isl N --osl N] [--size --sessions N|--rate R [--ttft S --itl S --price G=P]]
[--format html|md|json] [--out FILE]``: a self-contained HTML page (default), Markdown
or the collected JSON, to ``--out`` or to stdout.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from kvbudget.cli.options import request_from
from kvbudget.units import counted

FORMATS = ("html", "md", "json")


def register(sub: argparse._SubParsersAction[Any]) -> dict[str, Callable[[argparse.Namespace], str]]:
    from kvbudget.cli.plan import add_plan_options

    p = sub.add_parser(
        "report",
        help="one self-contained HTML page (or Markdown) for a deployment: cost, ledger, sessions, levers, commands",
    )
    add_plan_options(p)
    p.set_defaults(units=None)  # the report's units are its request's (default iec)
    g = p.add_argument_group("report")
    g.add_argument("--format", choices=FORMATS, default="html", help="html (default), md (Markdown) or json")
    g.add_argument("--out", metavar="FILE", help="write the report here (default: stdout)")
    g = p.add_argument_group("traces (session lengths; kvbudget trace stats)")
    g.add_argument("--trace", nargs="+", metavar="FILE", help="trace file(s) (docs/traces.md)")
    g.add_argument("--trace-format", help="read every trace file as this format (default: detected)")
    g.add_argument("--strict", action="store_true", help="stop at the first bad trace row instead of skipping it")
    g.add_argument(
        "--sessions-span-files",
        action="store_true",
        help="the trace files are parts of one trace: a session id continues across them",
    )
    g = p.add_argument_group("simulation (kvbudget simulate; its defaults otherwise)")
    g.add_argument("--workload", help="workload file (TOML or YAML): run the simulator on it")
    g.add_argument("--seed", help="seed of the generated sessions (default 0)")
    g.add_argument("--simulate-sessions", help="sessions to simulate (default: simulate's 2000)")
    g.add_argument("--search-sessions", help="sessions per search probe (default 2000; 0: no search)")
    g.add_argument("--bandwidth", help="HBM bytes/s per GPU (default: the --gpu catalog entry)")
    g.add_argument("--decode-rate", help="fixed decode tokens/s per session instead of the roofline")
    g.add_argument("--prefill-rate", help="prefill tokens/s per replica (default: the speed model's roofline)")
    g.add_argument(
        "--speed-from",
        metavar="RESULT.json|LOG",
        help="a kvbudget loadtest --json result or the engine's log, of this model and engine: its measured speeds "
        "for the simulation and the plan's latency",
    )
    g = p.add_argument_group("latency at the planned sessions (kvbudget speed)")
    g.add_argument("--isl", help="prompt tokens per request (default: speed's 1000, or the --workload's mean step)")
    g.add_argument("--osl", help="output tokens per request (default: speed's 1000, or the --workload's mean step)")
    g = p.add_argument_group("sizing (kvbudget size; the load is --sessions N, whole deployment, or --rate)")
    g.add_argument("--size", action="store_true", help="also size the load: replicas, cost, the recommendation")
    g.add_argument("--size-gpu", help="catalog GPUs to size on, comma-separated (default: --gpu)")
    g.add_argument("--size-engine", help="engines to size with, comma-separated (default: --engine)")
    g.add_argument(
        "--rate",
        help="new sessions per unit time instead of --sessions (50/h): the --workload's sessions, "
        "else one request each",
    )
    g.add_argument("--ttft", help="time to first token at most (2s, 500ms): of --size, and of the simulation")
    g.add_argument("--itl", help="inter-token latency at most (50ms): of --size, and of the simulation")
    g.add_argument("--price", help="GPU=PRICE per GPU-hour, comma-separated: h100-sxm=2.49/h,h200=3.59/h")
    g.add_argument("--prices", help='a TOML or JSON file: GPU name = price ("2.49/h")')
    g = p.add_argument_group("measured (kvbudget loadtest, kvbudget calibrate)")
    g.add_argument("--loadtest", action="append", metavar="RESULT.json", help="a kvbudget loadtest --json result")
    g.add_argument("--log", action="append", metavar="LOG", help="an engine start-up log (calibrate)")
    return {"report": cmd_report}


def cmd_report(args: argparse.Namespace) -> str:
    from kvbudget.report.collect import collect
    from kvbudget.requests.report import ReportRequest

    fmt = "json" if args.json else args.format
    request = request_from(ReportRequest, args)
    writer = None
    if args.out:
        from kvbudget.safeio import AtomicWriter

        inputs = [*(request.trace or ()), *([request.workload] if request.workload else []), *(request.loadtest or ())]
        inputs += [request.speed_from] if request.speed_from else []
        inputs += [request.prices] if request.prices else []
        writer = AtomicWriter(args.out, "--out", [*inputs, *(request.log or ())])
    report = collect(request)
    if fmt == "json":
        text = json.dumps(report.to_dict(), indent=2)
    elif fmt == "md":
        from kvbudget.report.markdown import render_markdown

        text = render_markdown(report)
    else:
        from kvbudget.report.html import render_html

        text = render_html(report)
    if writer is None:
        return text.rstrip("\n")
    text = text if text.endswith("\n") else text + "\n"
    writer.write(text)
    plan = report.plan
    return (
        f"wrote {args.out} ({fmt}, {len(text.encode()):,} bytes): {plan.inputs.spec.name} on "
        f"{plan.inputs.engine.label}, {counted(plan.total_sessions, 'session')} at {plan.inputs.context:,} tokens"
    )
