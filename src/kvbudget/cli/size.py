"""The `kvbudget size` command (parse, call, render): how many of which GPU a load needs."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from kvbudget.cli.options import request_from, spelled


def cmd_size(args: argparse.Namespace) -> str:
    from kvbudget.plan.sizing import size_deployments
    from kvbudget.render.size import render_size
    from kvbudget.requests.size import SizeRequest

    sizing = size_deployments(request_from(SizeRequest, args))
    if args.json:
        return json.dumps(sizing.to_dict(), indent=2)
    return render_size(sizing)


def register(sub: argparse._SubParsersAction[Any]) -> dict[str, Callable[[argparse.Namespace], str]]:
    from kvbudget.cli.main import add_model_options

    p = sub.add_parser(
        "size", help="how many of which GPU a peak load needs: memory and latency targets, cheapest first"
    )
    add_model_options(p)
    for action in p._actions:
        if action.dest == "model" and not action.option_strings:
            action.help = "candidate model(s), comma-separated: catalog names, config.json, dirs, .gguf"
        if action.dest == "engine":
            action.help = "engines, comma-separated: vllm, sglang, trtllm, llamacpp, ollama... (default vllm)"
        if action.dest in ("kv_dtype", "tp"):
            action.help = f"{action.help or ''} (comma-separated list)".strip()
    g = p.add_argument_group("candidates")
    g.add_argument("--gpu", help="catalog GPUs, comma-separated (kvbudget gpus)")
    g.add_argument("--weights", help="weights precisions, comma-separated (checkpoint: the checkpoint's own)")
    g.add_argument("--price", help="GPU=PRICE per GPU-hour, comma-separated: h100-sxm=2.49/h,h200=3.59/h")
    g.add_argument("--prices", help='a TOML or JSON file: GPU name = price ("2.49/h")')
    g.add_argument(*spelled("--utilization"), help="engine memory fraction (default: each engine's)")
    g.add_argument("--overhead", help="measured runtime overhead per GPU (default: each engine's model)")
    g.add_argument("--group-size", help="int4/AWQ/GPTQ group size (default 128)")
    g = p.add_argument_group("load and targets")
    g.add_argument(*spelled("--context"), help="context cap per session (64k); required")
    g.add_argument("--sessions", help="peak concurrent sessions over the whole deployment")
    g.add_argument(
        "--rate",
        help="new sessions per unit time instead (50/h, 0.2/s): the --workload's sessions, "
        "else one --isl/--osl request each",
    )
    g.add_argument("--workload", help="workload file: the request shape and, with --rate, the session time")
    g.add_argument("--ttft", help="time to first token at most (2s, 500ms)")
    g.add_argument("--itl", help="inter-token latency at most (50ms)")
    g.add_argument("--isl", help="prompt tokens per request without --workload (default 1000)")
    g.add_argument("--osl", help="output tokens per request without --workload (default 1000)")
    g.add_argument(
        "--speed-from",
        metavar="RESULT.json|LOG",
        help="a kvbudget loadtest --json result, or the engine's log: its measured speeds replace the roofline for "
        "its model and engine",
    )
    g.add_argument(
        "--target-refusal-rate",
        help="with --workload: sessions the cap may refuse, 0.1%% or 0.001 (default 0.1%%, as simulate's target)",
    )
    g = p.add_argument_group("check by simulation")
    g.add_argument(
        "--no-simulate",
        action="store_true",
        help="keep speed's latency-bound counts (every session generating at once: an upper bound) instead of "
        "checking them with simulate when the workload's sessions pause (tens of seconds)",
    )
    g.add_argument("--jobs", help="processes for the simulation checks (default: every core)")
    return {"size": cmd_size}
