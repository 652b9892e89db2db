"""Gather one deployment's numbers for the report, each from the call behind its CLI command:

* the plan and its serve commands: ``plan_inputs`` + ``make_plan`` + ``plan_json`` (``kvbudget plan --json``);
* the levers: ``plan_levers`` + ``levers_json`` (``kvbudget levers --json``);
* the per-token cost by layer group: the plan's own layout read as ``kvbudget cost --json`` reads a layout, at
  the cap, for one sequence (with pipeline parallelism, the stage that fills first);
* sessions against the cap: ``Plan.at_cap`` at caps from 1K to the advertised window (what
  ``kvbudget plan --context CAP`` gives at each);
* session lengths: ``trace stats --model ... --json`` (``report.traces``);
* simulated sessions: ``simulate_study`` with the report's plan options (``kvbudget simulate --json``);
* measured sessions: a ``loadtest --json`` result, an engine log read by ``calibrate`` (``report.measured``).
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvbudget.cost import CostReport
from kvbudget.plan.plan import Plan
from kvbudget.report.data import CapPoint, EnforcedCap, LayerGroup, Measured, Report, Simulated
from kvbudget.units import parse_count

if TYPE_CHECKING:
    from kvbudget.units import UnitSystem

FIRST_CAP = 1024
# the serve-command settings that carry the per-session cap, per engine
_CAP_FLAGS = ("--max-model-len", "--context-length", "--max_seq_len", "--ctx-size")
_CAP_ENV = "OLLAMA_CONTEXT_LENGTH="


def layer_groups(plan: Plan) -> tuple[LayerGroup, ...]:
    """The plan's layout per group at the cap, for one sequence, on the GPU that fills first."""
    i = plan.inputs
    stage = max(plan.layout.stages, key=lambda layout: layout.sequence_bytes(i.context))
    cost = CostReport(i.spec, i.engine, stage, i.context, 1)
    return tuple(
        LayerGroup(
            kind=g.kind,
            label=g.label,
            layers=g.layers,
            allocated_layers=g.allocated_layers,
            slot_bytes=g.slot_bytes,
            per_token_bytes=g.per_token_bytes,
            token_slots=g.slots_at_tokens,
            bytes_at_cap=g.bytes_at_tokens,
            state_bytes=g.state_bytes,
        )
        for g in cost.groups()
    )


def curve_caps(context: int, window: int | None, marks: Sequence[int] = ()) -> list[int]:
    """Caps for the sessions-against-cap curve: 1K x 2^k and 1.5K x 2^k up to the advertised window (twice the
    cap when the model states none), with the cap itself, the window and ``marks`` (a recommended cap)."""
    top = max(window or 2 * context, context, *marks)
    caps = {context, top, *marks, *([window] if window else [])}  # the window stays a point past it too
    step = FIRST_CAP
    while step <= top:
        caps.add(step)
        if step * 3 // 2 <= top:
            caps.add(step * 3 // 2)
        step *= 2
    return sorted(c for c in caps if c >= 1)


def cap_curve(plan: Plan, caps: Sequence[int]) -> tuple[CapPoint, ...]:
    points = []
    for cap in caps:
        at = plan.at_cap(cap)
        points.append(CapPoint(cap, at.sessions, at.total_sessions, at.per_session_bytes))
    return tuple(points)


def cap_setting(argv: Sequence[str], cap: int) -> str | None:
    """The argument of a serve command that enforces ``cap`` tokens per session."""
    value = str(cap)
    for flag, arg in itertools.pairwise(argv):
        if flag in _CAP_FLAGS and arg == value:
            return f"{flag} {arg}"
    for arg in argv:
        if arg == _CAP_ENV + value:
            return arg
    if "-c" in argv and "-np" in argv:  # llama.cpp: the context is shared by -np slots
        total, slots = argv[argv.index("-c") + 1], argv[argv.index("-np") + 1]
        if total.isdigit() and slots.isdigit() and int(total) == cap * int(slots):
            return f"-c {total} -np {slots} ({int(total):,} / {slots} = {cap:,} tokens per slot)"
    return None


def enforced_cap(plan: Plan, commands: dict[str, dict[str, object]]) -> EnforcedCap:
    i = plan.inputs
    own = commands.get(i.engine.name, {})
    argv = own.get("argv")
    setting = cap_setting([str(a) for a in argv], i.context) if isinstance(argv, list) else None
    return EnforcedCap(i.context, i.spec.max_position_embeddings, i.engine.name, setting)


def _plan_dests() -> set[str]:
    from kvbudget.cli.plan import add_plan_options

    scratch = argparse.ArgumentParser(add_help=False)
    add_plan_options(scratch)
    return {a.dest for a in scratch._actions}


def simulate_args(args: argparse.Namespace) -> argparse.Namespace:
    """The namespace ``kvbudget simulate --workload W`` parses, with the report's plan options and simulator
    settings: the simulator's own defaults for every other option."""
    from kvbudget.cli.simulate import register

    parser = argparse.ArgumentParser(add_help=False)
    register(parser.add_subparsers(dest="command"))
    ns = parser.parse_args(["simulate", "--model", "m", "--context", "1", "--workload", args.workload])
    for dest in _plan_dests():
        setattr(ns, dest, getattr(args, dest))
    ns.model_option, ns.json, ns.plot = None, False, None
    ns.sessions = args.simulate_sessions
    ns.seed, ns.search_sessions = args.seed, args.search_sessions
    ns.bandwidth, ns.decode_rate, ns.prefill_rate = args.bandwidth, args.decode_rate, args.prefill_rate
    return ns


def _number(doc: dict[str, object], key: str) -> float:
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"simulate --json {key}: {value!r} is not a number")
    return float(value)


def simulated(args: argparse.Namespace) -> Simulated:
    from kvbudget.cli.simulate import simulate_study
    from kvbudget.simulate.study import study_json

    doc = study_json(simulate_study(simulate_args(args)))
    target = doc["target"]
    assert isinstance(target, dict)
    return Simulated(
        source=str(doc["source"]),
        sustained_sessions=_number(doc, "sustained_sessions"),
        sustained_sessions_total=_number(doc, "sustained_sessions_total"),
        sustained_basis=str(doc["sustained_basis"]),
        target=str(target["text"]),
        mean_concurrency=_number(doc, "mean_concurrency"),
        peak_concurrency=int(_number(doc, "peak_concurrency")),
        sessions_arrived=int(_number(doc, "sessions_arrived")),
        refused=int(_number(doc, "refused")),
        preemptions=int(_number(doc, "preemptions")),
        static_plan_sessions=int(_number(doc, "static_plan_sessions")),
    )


def collect(args: argparse.Namespace) -> Report:
    """Every number of the report for the deployment the plan options describe."""
    from kvbudget.cli.plan import _offload, plan_inputs, plan_levers
    from kvbudget.plan.offload import Offload
    from kvbudget.plan.plan import make_plan
    from kvbudget.plan.report import levers_json, plan_json
    from kvbudget.report.measured import from_loadtest, from_log
    from kvbudget.report.traces import trace_sessions

    if args.simulate_sessions:
        args.simulate_sessions = str(parse_count(args.simulate_sessions, what="--simulate-sessions"))
    inputs, bits = plan_inputs(args)
    plan = make_plan(inputs)
    offload = _offload(args, plan)
    assert offload is None or isinstance(offload, Offload)
    plan_doc = plan_json(plan, offload)
    found = plan_levers(args, plan, bits)
    trace = (
        trace_sessions(
            args.trace, inputs, fmt=args.trace_format, strict=args.strict, span_files=args.sessions_span_files
        )
        if args.trace
        else None
    )
    marks = [trace.recommended_cap] if trace is not None else []
    measured: list[Measured] = [from_loadtest(path) for path in args.loadtest or []]
    measured += [from_log(path, args.model) for path in args.log or []]
    commands = plan_doc["commands"]
    assert isinstance(commands, dict)
    units: UnitSystem = "si" if args.units == "si" else "iec"
    return Report(
        plan=plan,
        plan_doc=plan_doc,
        levers=tuple(found),
        levers_doc=levers_json(plan, found),
        groups=layer_groups(plan),
        curve=cap_curve(plan, curve_caps(inputs.context, inputs.spec.max_position_embeddings, marks)),
        cap=enforced_cap(plan, commands),
        trace=trace,
        simulated=simulated(args) if args.workload else None,
        measured=tuple(measured),
        units=units,
    )
