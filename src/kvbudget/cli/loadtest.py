"""The `kvbudget loadtest` command (parse, call, render): agent sessions against a live server.

Needs the ``loadtest`` extra (aiohttp, prometheus_client), imported only when the command runs.
On an error or Ctrl-C the partial results are still printed (``--json``) and written (``--out``);
then the error is one ``Error:`` line and exit code 1, or exit code 130 after Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kvbudget.errors import InputError

if TYPE_CHECKING:
    from kvbudget.measure.loadtest.server import ServerInfo
    from kvbudget.measure.loadtest.session import Source
    from kvbudget.plan.plan import PlanInputs

PLANNED_ENGINES = ("vllm", "sglang")


def _count(text: str | None, what: str, default: int | None = None) -> int | None:
    from kvbudget.units import parse_count

    return default if text is None else parse_count(text, what=what)


def _seconds(text: str | None, what: str) -> float | None:
    from kvbudget.requests.values import read_seconds

    return None if text is None else read_seconds(text, what)


def _scale(text: str) -> float:
    from kvbudget.units import parse_real

    return parse_real(text, what="--time-scale", low=0, high=10**6, noun="(0 = no pauses)", example="1 or 0.5")


def _source(args: argparse.Namespace) -> Source:
    from kvbudget.measure.loadtest.session import from_trace, from_workload
    from kvbudget.units import parse_tokens

    if bool(args.workload) == bool(args.trace):
        field = "--trace" if args.workload else "--workload"  # the one missing, or the second given
        raise InputError(f"{field}: give exactly one of --workload FILE or --trace FILE...")
    prefix = parse_tokens(args.prefix, what="--prefix") if args.prefix else None
    if args.workload:
        return from_workload(args.workload, args.seed, prefix)
    return from_trace(args.trace, args.format, args.strict, prefix)


def _plans(args: argparse.Namespace) -> Callable[[ServerInfo, int], PlanInputs | None]:
    """The plan inputs for a server that is not llama.cpp, when a deployment (GPU memory) is given."""
    memo: dict[tuple[str, int], PlanInputs | None] = {}

    def plans(info: ServerInfo, cap: int) -> PlanInputs | None:
        if info.engine == "llamacpp" or not (args.gpu or args.gpu_memory):
            return None
        key = (info.engine, cap)
        if key not in memo:
            from kvbudget.cli.options import request_from
            from kvbudget.plan.build import plan_inputs
            from kvbudget.plan.plan import make_plan
            from kvbudget.requests.plan import PlanRequest

            engine = args.engine or (info.engine if info.engine in PLANNED_ENGINES else None)
            if engine is None:
                raise InputError(
                    f"--engine: the server is {info.engine}; name the engine to plan for (vllm, sglang, llamacpp)"
                )
            model = args.model or info.model
            if not model:
                raise InputError("--model: the server names no model; give --model for the prediction")
            request = request_from(PlanRequest, args, model=model, engine=engine, sessions=None, context=cap)
            inputs, _ = plan_inputs(request)
            make_plan(inputs)  # a plan that cannot be made fails now, before any load
            memo[key] = inputs
        return memo[key]

    return plans


def cmd_loadtest(args: argparse.Namespace) -> str:
    from kvbudget.measure.loadtest import require_extra

    require_extra()
    from kvbudget.measure.loadtest.client import ServerError
    from kvbudget.measure.loadtest.progress import Progress
    from kvbudget.measure.loadtest.report import render
    from kvbudget.measure.loadtest.result import to_json
    from kvbudget.measure.loadtest.run import Settings, run_loadtest
    from kvbudget.units import parse_tokens

    if not args.url.startswith(("http://", "https://")):
        raise InputError(f"URL: {args.url!r} must start with http:// or https://, e.g. http://127.0.0.1:8080")
    from kvbudget.safeio import AtomicWriter

    writer = (
        AtomicWriter(args.out, "--out", [*(args.trace or []), *([args.workload] if args.workload else [])])
        if args.out
        else None
    )
    hold = _count(args.sessions, "--sessions")
    if hold is not None and any(v is not None for v in (args.start, args.step, args.max_sessions)):
        raise InputError(
            "--sessions: give --sessions N (hold one level) or a ramp (--start, --step, --max-sessions), not both"
        )
    start = _count(args.start, "--start", 1) or 1
    max_sessions = _count(args.max_sessions, "--max-sessions", 64) or 64
    if start > max_sessions:
        raise InputError(f"--start {start} is above --max-sessions {max_sessions}")
    target = _seconds(args.target_ttft, "--target-ttft")
    settings = Settings(
        url=args.url,
        api=args.api,
        history=args.history,
        context=parse_tokens(args.context, what="--context") if args.context else None,
        hold=hold,
        start=start,
        step=_count(args.step, "--step", 1) or 1,
        max_sessions=max_sessions,
        level_time_s=_seconds(args.level_time, "--level-time") or 30.0,
        target_ttft_s=target if target is not None else 2.0,
        max_requests=_count(args.max_requests, "--max-requests"),
        duration_s=_seconds(args.duration, "--duration"),
        time_scale=_scale(args.time_scale),
        seed=args.seed,
        scrape_interval_s=_seconds(args.scrape_interval, "--scrape-interval") or 0.25,
        request_timeout_s=_seconds(args.request_timeout, "--request-timeout") or 300.0,
        kv_unified=args.kv_unified,
        served_model=args.served_model,
    )
    outcome = run_loadtest(settings, _source(args), _plans(args), Progress(True if args.progress else None))
    document = to_json(outcome)
    if writer is not None:
        writer.write(json.dumps(document, indent=2) + "\n")
    text = json.dumps(document, indent=2) if args.json else render(outcome)
    if outcome.error is not None:
        if args.json or (outcome.recorder is not None and outcome.recorder.requests):
            print(text, flush=True)
        error = ServerError(outcome.error)
        error.reported = bool(args.json)
        raise error
    if outcome.stopped_by == "interrupted":
        print(text, flush=True)
        raise KeyboardInterrupt
    return text


def register(sub: argparse._SubParsersAction[Any]) -> dict[str, Callable[[argparse.Namespace], str]]:
    from kvbudget.cli.plan import add_optional_plan_options

    p = sub.add_parser(
        "loadtest",
        help="drive a live OpenAI-compatible server with agent sessions: sessions it sustains at the cap",
        conflict_handler="resolve",
    )
    p.add_argument("url", help="the server's base URL, e.g. http://127.0.0.1:8080")
    add_optional_plan_options(p)
    p.set_defaults(engine=None)
    g = p.add_argument_group("sessions")
    g.add_argument("--workload", default=None, help="workload file (TOML or YAML; docs/workload.md)")
    g.add_argument("--trace", nargs="+", default=None, help="trace file(s) whose sessions are replayed")
    g.add_argument("--format", default=None, help="trace format (default: detected)")
    g.add_argument("--strict", action="store_true", help="fail at the first bad trace row")
    g.add_argument("--seed", type=int, default=0, help="seed of the sessions and their text (default 0)")
    g.add_argument("--time-scale", default="1", help="multiply tool pauses and think times (0: none; default 1)")
    g.add_argument("--api", choices=["completions", "chat"], default="completions", help="default completions")
    g.add_argument(
        "--history",
        choices=["output", "filler"],
        default="output",
        help="each step resends the previous output as returned (default), or new text of its token count",
    )
    g.add_argument("--served-model", default=None, help="the model name sent in requests (default: /v1/models)")
    g = p.add_argument_group("load")
    g.add_argument("--sessions", default=None, help="hold N concurrent sessions instead of ramping")
    g.add_argument("--start", default=None, help="ramp: first level (default 1)")
    g.add_argument("--step", default=None, help="ramp: sessions added per level (default 1)")
    g.add_argument("--max-sessions", default=None, help="ramp: last level (default 64)")
    g.add_argument("--level-time", default="30", help="seconds each level is held (default 30)")
    g.add_argument("--target-ttft", default="2", help="p99 time to first token a level must stay under (default 2 s)")
    g.add_argument("--max-requests", default=None, help="stop after this many requests")
    g.add_argument("--duration", default=None, help="stop after this long: 600, 90s, 10m (hold: the level's time)")
    g.add_argument("--scrape-interval", default="0.25", help="seconds between metric scrapes (default 0.25)")
    g.add_argument("--request-timeout", default="300", help="seconds a request may stay silent (default 300)")
    g = p.add_argument_group("output")
    g.add_argument("--out", default=None, help="also write the JSON document here (kept on errors and Ctrl-C)")
    g.add_argument("--progress", action="store_true", help="progress on stderr even when it is not a terminal")
    return {"loadtest": cmd_loadtest}
