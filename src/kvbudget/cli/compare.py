"""The `kvbudget compare` command (parse, call, render): deployments side by side, with costs and rates."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from kvbudget.cli.options import request_from
from kvbudget.requests.compare import MAX_SIMULATED_ROWS


def cmd_compare(args: argparse.Namespace) -> str:
    from kvbudget.plan.comparison import compare_deployments
    from kvbudget.render.compare import render_comparison
    from kvbudget.requests.compare import CompareRequest

    comparison = compare_deployments(request_from(CompareRequest, args))
    if args.json:
        return json.dumps(comparison.to_dict(), indent=2)
    return render_comparison(comparison)


def register(sub: argparse._SubParsersAction[Any]) -> dict[str, Callable[[argparse.Namespace], str]]:
    from kvbudget.cli.plan import add_plan_options

    p = sub.add_parser(
        "compare",
        help="models x GPUs x engines x caps x cache dtypes x weights x tp side by side, with cost and GPUs for a rate",
    )
    # one GPU total per row comes from its catalog GPU, and a start-up log stands for one deployment only
    add_plan_options(p, skip=("--gpu-memory", "--from-log", "--startup"))
    for action in p._actions:
        if action.dest == "model" and not action.option_strings:
            action.help = "model(s), comma-separated: catalog names, config.json, dirs, .gguf"
        if action.dest in ("gpu", "engine", "context", "kv_dtype", "tp"):
            action.help = f"{action.help or ''} (comma-separated list)".strip()
        if action.dest == "weights":
            action.help = "serving precisions of the weights, comma-separated (checkpoint: the checkpoint's own)"
        if action.dest == "sessions":
            action.help = "sessions wanted: each row also gives the largest cap that serves them"
    g = p.add_argument_group("cost and rate")
    g.add_argument("--price", action="append", help="GPU=PRICE per GPU-hour, e.g. h100-sxm=2.49/h")
    g.add_argument("--prices", help='a TOML or JSON file: GPU name = price ("2.49/h", "59.76/day")')
    g.add_argument("--rate", help="new sessions per unit time: 50/h, 0.2/s, 1200/day (needs --workload)")
    g.add_argument("--workload", help="workload file: the mean session time and tokens (docs/workload.md)")
    g.add_argument("--decode-rate", help="decode tokens/s per session for the session time")
    g.add_argument("--prefill-rate", help="prefill tokens/s per session for the session time")
    g.add_argument("--sort", help="sessions (most first, the default), cost ($/session-h) or gpus (for --rate)")
    g = p.add_argument_group("simulation")
    g.add_argument(
        "--simulate",
        action="store_true",
        help="also simulate each served deployment under --workload (its sustained sessions; with --rate, the GPUs "
        f"from them); at most {MAX_SIMULATED_ROWS} deployments",
    )
    g.add_argument(
        "--speed-from",
        metavar="RESULT.json|LOG",
        help="--simulate: a kvbudget loadtest --json result or an engine log; the rows of its model and engine "
        "simulate on its speeds",
    )
    g.add_argument("--ttft", help="--simulate: target p99 time to first token (2s); says whether latency binds")
    g.add_argument("--itl", help="--simulate: target p99 inter-token latency (50ms)")
    g.add_argument("--search-sessions", help="--simulate: sessions per search probe (default 1000)")
    g.add_argument("--search-probes", help="--simulate: runs in each search (default 6)")
    g.add_argument("--jobs", help="--simulate: processes, one deployment each (default: every core; 1: serial)")
    g.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="--simulate: run the deployments as tasks on this Ray cluster (HOST:PORT, ray://HOST:PORT, auto; "
        "extra: ray)",
    )
    return {"compare": cmd_compare}
