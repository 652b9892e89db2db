"""The `kvbudget speed` command (parse, call, render): one request shape's throughput and latency."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from kvbudget.cli.options import request_from, spelled


def register(sub: argparse._SubParsersAction[Any]) -> dict[str, Callable[[argparse.Namespace], str]]:
    from kvbudget.cli.main import add_model_options

    p = sub.add_parser("speed", help="throughput, TTFT and inter-token latency of one request shape (roofline)")
    add_model_options(p)
    p.add_argument("--gpu", help="catalog GPU (see kvbudget gpus; needs its datasheet compute figures)")
    p.add_argument("--gpus", help="GPUs in the deployment (default tp); replicas = gpus / tp")
    p.add_argument("--weights", help="weights precision: bf16, fp8, nvfp4, awq... (default: the checkpoint's)")
    p.add_argument("--isl", help="prompt tokens per request (default 1000)")
    p.add_argument("--osl", help="output tokens per request (default 1000)")
    p.add_argument("--concurrency", help="requests in flight over the deployment, or max: as many as the KV pool holds")
    p.add_argument("--prefix", help="prompt tokens each request finds in the prefix cache (not recomputed)")
    p.add_argument(*spelled("--utilization"), help="engine memory fraction (default: the engine's)")
    p.add_argument("--overhead", help="measured runtime overhead per GPU (default: the engine's model)")
    p.add_argument("--weights-size", help="measured weight footprint (e.g. 16GB)")
    return {"speed": cmd_speed}


def cmd_speed(args: argparse.Namespace) -> str:
    from kvbudget.requests.speed import SpeedRequest
    from kvbudget.speed.answer import estimate_speed

    answer = estimate_speed(request_from(SpeedRequest, args))
    if args.json:
        return json.dumps(answer.to_dict(), indent=2)
    from kvbudget.render.speed import render_speed

    return render_speed(answer)
