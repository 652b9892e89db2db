"""The `kvbudget simulate` command (parse, call, render): a serving instance under agent traffic."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from kvbudget.errors import InputError
from kvbudget.units import counted

if TYPE_CHECKING:
    from kvbudget.engines.contract import EngineRules
    from kvbudget.simulate.runner import Progress
    from kvbudget.simulate.study import Study
    from kvbudget.workload.record import BadRow, SessionPlan

DEFAULT_SESSIONS = 2000
# Ceilings past which a run is refused unless --allow-long: bench/simulate.py measures about 150,000 model
# calls a second (5.0M in 33 s), so 20M calls is over two minutes; each replica keeps its own pool state.
MAX_CALLS = 20_000_000
MAX_REPLICAS = 10_000
CALLS_PER_S = 150_000
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([kMGT]?)B?(?:/s)?\s*$")
_RATE_MULT = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_TIME_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h)?\s*$")
_TIME_MULT = {None: 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def _positive(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{what}: cannot read {text!r} as a number") from None
    if not value > 0 or value == float("inf"):
        raise InputError(f"{what}: {text!r} must be a positive number")
    return value


def parse_bandwidth(text: str) -> float:
    """Bytes per second from ``3.35TB/s``, ``3350GB/s`` or a plain number (decimal units, as published)."""
    match = _RATE_RE.match(text)
    if match is None:
        raise InputError(f"--bandwidth: cannot read {text!r}; write e.g. 3.35TB/s, 3350GB/s or 3.35e12")
    value = float(match.group(1)) * _RATE_MULT[match.group(2)]
    if value <= 0:
        raise InputError(f"--bandwidth: {text!r} must be positive")
    return value


def parse_seconds(text: str, what: str) -> float:
    """Seconds from ``600``, ``90s``, ``10m`` or ``2h``."""
    match = _TIME_RE.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise InputError(f"{what}: cannot read {text!r} as a positive time; write e.g. 600, 90s, 10m or 2h")
    return float(match.group(1)) * _TIME_MULT[match.group(2)]


def parse_share(text: str, what: str) -> float:
    """A share of the pool: ``0.05`` or ``5%``."""
    value = _positive(text[:-1], what) / 100 if text.strip().endswith("%") else float(_positive(text, what))
    if value >= 1:
        raise InputError(f"{what}: {text!r} must be below 1 (100%)")
    return value


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


def _sources(
    args: argparse.Namespace, context: int
) -> tuple[Callable[[], Iterable[SessionPlan]], Any, str, int, tuple[float, float]]:
    """(the session source, the cap policy, a description, the shared prefix, (expected sessions of one run, model
    calls per session)) from --workload or --trace."""
    from kvbudget.simulate.build import cap_from_workload
    from kvbudget.simulate.policies import CapPolicy

    count = int(args.sessions) if args.sessions else None
    duration = parse_seconds(args.duration, "--duration") if args.duration else None
    if args.workload:
        from kvbudget.workload.generate import generate_sessions
        from kvbudget.workload.loader import load_workload

        workload = load_workload(args.workload)
        if count is None and duration is None:
            count = DEFAULT_SESSIONS

        def generated() -> Iterable[SessionPlan]:
            return generate_sessions(workload, seed=args.seed, count=count, duration_s=duration)

        cap = cap_from_workload(workload.cap, context)
        rate = workload.arrival.rate_per_s
        sessions = count if count is not None else (rate or 0.0) * (duration or 0.0)
        return generated, cap, f"workload {args.workload}", workload.prefix_tokens, (sessions, workload.steps.mean())
    from kvbudget.workload.generate import replay_sessions

    try:
        from kvbudget.workload.traces import read_records
    except ImportError:  # pragma: no cover - the trace readers ship with the package
        raise InputError("--trace: this installation has no trace readers (kvbudget.workload.traces)") from None
    bad: list[BadRow] = []
    records = list(
        read_records(args.trace, fmt=args.format, strict=args.strict, bad_rows=bad, span_files=args.sessions_span_files)
    )
    if not records:
        raise InputError(f"--trace: no usable step records in {', '.join(args.trace)}")

    def replayed() -> Iterable[SessionPlan]:
        return replay_sessions(records)

    more = f" + {counted(len(args.trace) - 1, 'more file')}" if len(args.trace) > 1 else ""
    skipped = f", {counted(len(bad), 'bad row')} skipped" if bad else ""
    ids = {r.session for r in records}
    work = (float(len(ids)), len(records) / max(len(ids), 1))
    return replayed, CapPolicy("refuse"), f"trace {args.trace[0]}{more}{skipped}", 0, work


def _check_bounds(args: argparse.Namespace, work: tuple[float, float], search: int, probes: int, replicas: int) -> None:
    """Refuse a run far beyond what the simulator does in a couple of minutes, saying what it would cost."""
    if args.allow_long:
        return
    sessions, per_session = work
    total = (sessions + search * probes) * per_session
    if total > MAX_CALLS:
        minutes = total / CALLS_PER_S / 60
        raise InputError(
            f"about {total:,.0f} model calls to simulate (the run and its search), about {minutes:,.0f} minutes at "
            f"the measured {CALLS_PER_S:,} calls/s; lower --sessions / --duration / --search-sessions, or pass "
            "--allow-long to run it anyway"
        )
    if replicas > MAX_REPLICAS:
        raise InputError(
            f"--replicas {replicas:,}: each replica keeps its own pool; more than {MAX_REPLICAS:,} is refused "
            "unless --allow-long"
        )


def cmd_simulate(args: argparse.Namespace) -> str:
    study = simulate_study(args)
    if args.plot:
        from kvbudget.render.simulate import plot_study

        plot_study(study, args.plot)
    if args.json:
        from kvbudget.simulate.study import study_json

        return json.dumps(study_json(study, time_series=args.time_series), indent=2)
    from kvbudget.render.simulate import render_study

    return render_study(study, cast(Any, args.units))


def simulate_study(args: argparse.Namespace) -> Study:
    """The study `kvbudget simulate` renders (the Python API's kvbudget.simulate returns it)."""
    from kvbudget import hardware
    from kvbudget.cli.plan import plan_inputs
    from kvbudget.plan.plan import make_plan
    from kvbudget.simulate.build import memory_from_plan, time_from_plan
    from kvbudget.simulate.policies import DEFAULT_PREFILL_TOKENS_PER_S, MemoryPolicy, Target
    from kvbudget.simulate.runner import SimConfig
    from kvbudget.simulate.study import run_study
    from kvbudget.units import parse_count, parse_memory

    model = args.model_option or args.model
    if not model or (args.model_option and args.model):
        raise InputError("give the model once: --model NAME (or as the first argument)")
    if bool(args.workload) == bool(args.trace):
        raise InputError("give exactly one of --workload FILE or --trace FILE...")
    if args.sessions and args.duration:
        raise InputError("give --sessions N or --duration S, not both")
    if args.plot:
        from kvbudget.render.simulate import require_matplotlib
        from kvbudget.safeio import AtomicWriter

        if Path(args.plot).suffix.lower() not in (".png", ".svg", ".pdf"):
            raise InputError(f"--plot {args.plot}: the file must end in .png, .svg or .pdf")
        AtomicWriter(args.plot, "--plot", [*(args.trace or []), *([args.workload] if args.workload else [])])
        require_matplotlib()
    ns = argparse.Namespace(**vars(args))
    ns.model, ns.sessions = model, None  # --sessions here counts simulated sessions, not the plan's
    inputs, _ = plan_inputs(ns)
    plan = make_plan(inputs)
    if args.sessions:
        args.sessions = str(parse_count(args.sessions, what="--sessions"))
    source, cap, described, prefix, work = _sources(args, inputs.context)
    if prefix >= inputs.context:
        raise InputError(
            f"the workload's shared prefix ({prefix:,} tokens) does not fit under the {inputs.context:,}-token cap: "
            "every session would be refused; raise --context or shorten [prefix]"
        )
    sharing = plan.prefix
    if sharing is None and prefix:
        from kvbudget.plan.sharing import prefix_sharing

        sharing = prefix_sharing(plan.layout, inputs.engine, plan.kv_pool_bytes, inputs.context, prefix)
    bandwidth = parse_bandwidth(args.bandwidth) if args.bandwidth else None
    if bandwidth is None and args.gpu:
        bandwidth = hardware.gpu(args.gpu).bandwidth_bytes_per_s
    decode = _positive(args.decode_rate, "--decode-rate") if args.decode_rate else None
    if bandwidth is None and decode is None:
        raise InputError("the decode roofline needs the GPU's bandwidth: add --bandwidth 3.35TB/s or --decode-rate 50")
    time_model = time_from_plan(
        plan,
        bandwidth,
        prefill_tokens_per_s=_positive(args.prefill_rate, "--prefill-rate")
        if args.prefill_rate
        else DEFAULT_PREFILL_TOKENS_PER_S,
        decode_tokens_per_s=decode,
        swap_bytes_per_s=float(hardware.link(args.link).bytes_per_s),
    )
    rules = inputs.engine.rules
    policy = MemoryPolicy(
        policy=args.policy or rules.sim_policy,
        preempt=args.preempt,
        pause=args.pause or rules.sim_pause,
        admission=args.admission,
        watermark=parse_share(args.watermark, "--watermark"),
        cap=cap,
    )
    replicas = parse_count(args.replicas, what="--replicas") if args.replicas else plan.replicas
    config = SimConfig(
        memory=memory_from_plan(plan),
        policy=policy,
        time=time_model,
        replicas=replicas,
        router=args.router,
        host_bytes=parse_memory(args.offload_memory, what="--offload-memory") if args.offload_memory else None,
        duration_s=parse_seconds(args.duration, "--duration") if args.duration else None,
        max_sessions=int(args.sessions) if args.sessions else None,
        check=args.check,
    )
    target = (
        Target(_positive(args.target_p99_delay, "--target-p99-delay"), allow_preemption=True)
        if args.target_p99_delay
        else Target()
    )
    search = (
        0 if str(args.search_sessions).strip() == "0" else parse_count(args.search_sessions, what="--search-sessions")
    )
    probes = parse_count(args.search_probes, what="--search-probes")
    _check_bounds(args, work, search, probes, replicas)
    bar = ProgressBar(config.max_sessions, config.duration_s, probe_total=search)
    about: dict[str, object] = {
        "model": inputs.spec.name,
        "engine": inputs.engine.to_json(),
        "policy_basis": _policy_basis(args, rules),
        "gpu": inputs.gpu_label,
        "kv_dtype": inputs.kv_dtype_label,
        "context": inputs.context,
        "block_size": plan.layout.first.block_size,
        "source": described,
        "seed": args.seed,
        "prefill_tokens_per_s": time_model.prefill_tokens_per_s,
        "decode_tokens_per_s": time_model.decode_tokens_per_s,
        "bandwidth_bytes_per_s": bandwidth,
        "weights_bytes_per_gpu": plan.weights_per_gpu,
    }
    try:
        return run_study(
            source,
            config,
            target,
            static_plan_sessions=plan.sessions,
            static_prefix_sessions=sharing.sessions if sharing else None,
            search_sessions=search,
            search_probes=probes,
            progress=bar.hook,
            about=about,
        )
    finally:
        bar.close()


def _policy_basis(args: argparse.Namespace, rules: EngineRules) -> str:
    """Where the policy and pause came from, in words: the engine's behaviour, or the options given."""
    if args.policy and args.pause:
        return "set by --policy and --pause"
    given = "--policy" if args.policy else "--pause" if args.pause else None
    engine = f"{rules.title} {rules.version}".strip()
    return f"{engine}'s behaviour: {rules.sim_basis}" + (f" ({given} as given)" if given else "")


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
        default=None,
        help="catalog name, config.json, dir, .gguf or Hub id",
    )
    g = p.add_argument_group("traffic")
    g.add_argument("--workload", default=None, help="workload file (TOML or YAML; docs/workload.md)")
    g.add_argument("--trace", nargs="+", default=None, help="trace file(s) to replay (docs/traces.md)")
    g.add_argument("--format", default=None, help="trace format (default: detected)")
    g.add_argument("--strict", action="store_true", help="fail at the first bad trace row instead of skipping it")
    g.add_argument(
        "--sessions-span-files",
        action="store_true",
        help="the files are parts of one trace: a session id continues across them (default: per file)",
    )
    g.add_argument("--seed", type=int, default=0, help="seed of the generated sessions (default 0)")
    g.add_argument("--sessions", default=None, help=f"sessions to simulate (default {DEFAULT_SESSIONS} generated)")
    g.add_argument("--duration", default=None, help="simulated time instead of --sessions: 600, 10m, 2h")
    g = p.add_argument_group("serving policy")
    g.add_argument(
        "--policy",
        choices=["reserve", "paged", "watermark"],
        default=None,
        help="memory policy (default: the engine's: reserve for llamacpp/ollama slots, paged otherwise)",
    )
    g.add_argument("--preempt", choices=["recompute", "swap"], default="recompute", help="paged preemption mode")
    g.add_argument(
        "--pause",
        choices=["hold", "evictable"],
        default=None,
        help="blocks during a tool pause (default: the engine's: evictable for vllm, sglang and trtllm, whose "
        "prefix cache keeps a finished step's blocks until evicted; hold otherwise)",
    )
    g.add_argument("--admission", choices=["queue", "refuse"], default="queue", help="when no room: wait or refuse")
    g.add_argument("--watermark", default="0.05", help="watermark policy: pool share kept free at admission")
    g.add_argument("--replicas", default=None, help="replicas behind the router (default: the plan's)")
    g.add_argument("--router", choices=["least-loaded", "round-robin"], default="least-loaded")
    g = p.add_argument_group("speed")
    g.add_argument("--prefill-rate", default=None, help="prefill tokens/s per replica (default 10000)")
    g.add_argument("--decode-rate", default=None, help="fixed decode tokens/s per session instead of the roofline")
    g.add_argument("--bandwidth", default=None, help="HBM bytes/s per GPU (default: the --gpu catalog entry)")
    g = p.add_argument_group("target and output")
    g.add_argument("--target-p99-delay", default=None, help="target: p99 queue delay bound in s (allows preemption)")
    g.add_argument("--search-sessions", default="2000", help="sessions per search probe (0: no search)")
    g.add_argument("--search-probes", default="8", help="runs in the sustained-sessions search (default 8)")
    g.add_argument("--plot", default=None, help="write a time-series plot (PNG/SVG/PDF; extra: plot)")
    g.add_argument("--check", action="store_true", help="assert the pool invariants at every allocation")
    g.add_argument(
        "--time-series", action="store_true", help="--json: include the sampled time series (the plot's data)"
    )
    g.add_argument(
        "--allow-long",
        action="store_true",
        help=f"run past the ceilings ({MAX_CALLS:,} model calls, {MAX_REPLICAS:,} replicas) instead of refusing",
    )
    return {"simulate": cmd_simulate}
