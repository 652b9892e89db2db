"""The `kvbudget simulate` command (parse, call, render): a serving instance under agent traffic."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from kvbudget.cli.options import request_from
from kvbudget.errors import InputError
from kvbudget.requests.simulate import DEFAULT_SESSIONS
from kvbudget.simulate.deployment import MAX_CALLS, MAX_REPLICAS

if TYPE_CHECKING:
    from kvbudget.simulate.runner import Progress


class ProgressBar:
    """A one-line progress bar on stderr, shown only on a terminal and only after ~2 s."""

    def __init__(
        self, total: int | None, duration: float | None, stream: Any = None, probe_total: int | None = None
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.total, self.duration, self.probe_total = total, duration, probe_total
        self.start = time.monotonic()
        self.shown = False

    def hook(self, label: str) -> Progress | None:
        if not self.enabled:
            return None

        probe = label.startswith("search")
        total = self.probe_total if probe else self.total
        duration = None if probe else self.duration

        def update(arrived: int, now: float) -> None:
            elapsed = time.monotonic() - self.start
            if elapsed < 2.0:
                return
            share = None
            if total:
                share = min(1.0, arrived / total)
            elif duration:
                share = min(1.0, now / duration)
            bar = "" if share is None else "[" + "#" * int(24 * share) + "." * (24 - int(24 * share)) + "] "
            self.stream.write(f"\rsimulate {label}: {bar}{arrived:,} sessions, t={now:,.0f} s, {elapsed:.0f} s ")
            self.stream.flush()
            self.shown = True

        return update

    def close(self) -> None:
        if self.shown:
            self.stream.write("\r" + " " * 79 + "\r")
            self.stream.flush()


def cmd_simulate(args: argparse.Namespace) -> str:
    from kvbudget.requests.simulate import SimulateRequest
    from kvbudget.simulate.deployment import check_traffic, simulate_deployment

    model = args.model_option or args.model
    if not model or (args.model_option and args.model):
        raise InputError("--model: give the model once: --model NAME (or as the first argument)")
    request = request_from(SimulateRequest, args, model=model)
    check_traffic(request)
    if args.plot:
        from kvbudget.render.simulate import require_matplotlib
        from kvbudget.safeio import AtomicWriter

        if Path(args.plot).suffix.lower() not in (".png", ".svg", ".pdf"):
            raise InputError(f"--plot {args.plot}: the file must end in .png, .svg or .pdf")
        AtomicWriter(args.plot, "--plot", [*(request.trace or []), *([request.workload] if request.workload else [])])
        require_matplotlib()
    bar = ProgressBar(request.sessions, request.duration, probe_total=request.search_sessions)
    try:
        study = simulate_deployment(request, bar.hook)
    finally:
        bar.close()
    if args.plot:
        from kvbudget.render.simulate import plot_study

        plot_study(study, args.plot)
    if args.json:
        from kvbudget.simulate.study import study_json

        return json.dumps(study_json(study, time_series=args.time_series), indent=2)
    from kvbudget.render.simulate import render_study

    return render_study(study, cast(Any, args.units))


def register(sub: argparse._SubParsersAction[Any]) -> dict[str, Callable[[argparse.Namespace], str]]:
    from kvbudget.cli.plan import add_plan_options

    p = sub.add_parser(
        "simulate",
        help="event-driven simulation of a serving instance under agent traffic (paging, preemption, prefix cache)",
        conflict_handler="resolve",
    )
    add_plan_options(p)
    for action in p._actions:
        if action.dest == "model" and not action.option_strings:
            action.nargs, action.default = "?", None  # --model NAME is the documented spelling
    p.add_argument(
        "--model",
        dest="model_option",
        metavar="MODEL",
        help="catalog name, config.json, dir, .gguf or Hub id",
    )
    g = p.add_argument_group("traffic")
    g.add_argument("--workload", help="workload file (TOML or YAML; docs/workload.md)")
    g.add_argument("--trace", nargs="+", help="trace file(s) to replay (docs/traces.md)")
    g.add_argument("--format", help="trace format (default: detected)")
    g.add_argument("--strict", action="store_true", help="fail at the first bad trace row instead of skipping it")
    g.add_argument(
        "--sessions-span-files",
        action="store_true",
        help="the files are parts of one trace: a session id continues across them (default: per file)",
    )
    g.add_argument("--seed", help="seed of the generated sessions (default 0)")
    g.add_argument("--sessions", help=f"sessions to simulate (default {DEFAULT_SESSIONS} generated)")
    g.add_argument("--duration", help="simulated time instead of --sessions: 600, 10m, 2h")
    g.add_argument(
        "--rate", help="sessions arriving per second, all replicas: 0.5, 30/min (default: the workload's [arrival])"
    )
    g = p.add_argument_group("serving policy")
    g.add_argument(
        "--policy",
        choices=["reserve", "paged", "watermark"],
        help="memory policy (default: the engine's: reserve for llamacpp/ollama slots, paged otherwise)",
    )
    g.add_argument("--preempt", choices=["recompute", "swap"], help="paged preemption mode (default recompute)")
    g.add_argument(
        "--pause",
        choices=["hold", "evictable"],
        help="blocks during a tool pause (default: the engine's: evictable for vllm, sglang and trtllm, whose "
        "prefix cache keeps a finished step's blocks until evicted; hold otherwise)",
    )
    g.add_argument("--admission", choices=["queue", "refuse"], help="when no room: wait (queue, the default) or refuse")
    g.add_argument("--watermark", help="watermark policy: pool share kept free at admission (default 0.05)")
    g.add_argument("--replicas", help="replicas behind the router (default: the plan's)")
    g.add_argument("--router", choices=["least-loaded", "round-robin"], help="default least-loaded")
    g = p.add_argument_group("speed")
    g.add_argument("--prefill-rate", help="prefill tokens/s per replica (default: the speed model's roofline)")
    g.add_argument("--decode-rate", help="fixed decode tokens/s per session instead of the roofline")
    g.add_argument("--bandwidth", help="HBM bytes/s per GPU (default: the --gpu catalog entry)")
    g.add_argument(
        "--speed-from",
        metavar="RESULT.json|LOG",
        help="a kvbudget loadtest --json result or the engine's log: its measured prefill and decode speeds replace "
        "the roofline",
    )
    g = p.add_argument_group("target and output")
    g.add_argument("--target-p99-delay", help="target: p99 queue delay bound in s (allows preemption)")
    g.add_argument(
        "--target-preemption-rate", help="target: preemptions tolerated per step, 0.1%% or 0.001 (default 0.1%%)"
    )
    g.add_argument(
        "--target-refusal-rate",
        help="target: sessions refused per arrived, at the cap included, 0.1%% or 0.001 (default 0.1%%)",
    )
    g.add_argument(
        "--ttft",
        help="target: p99 time to first token at most (2s, 500ms); reports what memory allows and which binds",
    )
    g.add_argument("--itl", help="target: p99 inter-token latency at most (50ms)")
    g.add_argument("--search-sessions", help="sessions per search probe (default 2000; 0: no search)")
    g.add_argument("--search-probes", help="runs in the sustained-sessions search (default 8)")
    g.add_argument("--plot", help="write a time-series plot (PNG/SVG/PDF; extra: plot)")
    g.add_argument("--check", action="store_true", help="assert the pool invariants at every allocation")
    g.add_argument("--jobs", help="processes for the search's probes (default: every core; 1: serial)")
    g.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run the search's probes as tasks on this Ray cluster (HOST:PORT, ray://HOST:PORT, auto; extra: ray)",
    )
    g.add_argument(
        "--time-series", action="store_true", help="--json: include the sampled time series (the plot's data)"
    )
    g.add_argument(
        "--allow-long",
        action="store_true",
        help=f"run past the ceilings ({MAX_CALLS:,} model calls, {MAX_REPLICAS:,} replicas) instead of refusing",
    )
    return {"simulate": cmd_simulate}
