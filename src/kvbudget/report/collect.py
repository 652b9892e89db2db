"""Gather one deployment's numbers for the report, each from the call behind its CLI command:

* the plan and its serve commands: ``plan_inputs`` + ``make_plan`` + ``Plan.to_dict`` (``kvbudget plan --json``);
* the levers: ``levers_of`` + ``levers_json`` (``kvbudget levers --json``);
* the per-token cost by layer group: the plan's own layout read as ``kvbudget cost --json`` reads a layout, at
  the cap, for one sequence (with pipeline parallelism, the stage that fills first);
* sessions against the cap: ``Plan.at_cap`` at caps from 1K to the advertised window (what
  ``kvbudget plan --context CAP`` gives at each);
* session lengths: ``trace stats --model ... --json`` (``report.traces``);
* simulated sessions: ``simulate_deployment`` with the report's plan options (``kvbudget simulate --json``);
* measured sessions: a ``loadtest --json`` result, an engine log read by ``calibrate`` (``report.measured``);
* latency: ``kvbudget speed --json`` at the planned sessions, and the simulation's (``report.latency``);
* with --size, the sizing answer: ``kvbudget size --json`` (``report.sizing``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from kvbudget.cost import CostReport
from kvbudget.plan.plan import Plan
from kvbudget.report.data import CapPoint, EnforcedCap, LayerGroup, Measured, Report, Simulated

if TYPE_CHECKING:
    from kvbudget.report.latency import SimulatedLatency
    from kvbudget.requests.report import ReportRequest
    from kvbudget.requests.simulate import SimulateRequest
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


def simulate_request(request: ReportRequest) -> SimulateRequest:
    """The ``kvbudget simulate --workload W`` request with the report's plan options and simulator settings: the
    simulator's own defaults for every other option."""
    from kvbudget.requests.base import narrowed
    from kvbudget.requests.simulate import SimulateRequest

    # --rate is the sizing answer's load (report --size), not the simulated workload's arrival rate
    return narrowed(SimulateRequest, request, sessions=request.simulate_sessions, trace=None, rate=None)


def _number(doc: dict[str, object], key: str) -> float:
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"simulate --json {key}: {value!r} is not a number")
    return float(value)


def simulated(request: ReportRequest) -> tuple[Simulated, SimulatedLatency]:
    from kvbudget.report.latency import simulated_latency
    from kvbudget.simulate.deployment import simulate_deployment
    from kvbudget.simulate.study import study_json

    doc = study_json(simulate_deployment(simulate_request(request)))
    target = doc["target"]
    assert isinstance(target, dict)
    found = Simulated(
        source=str(doc["source"]),
        sustained_sessions=None if doc["sustained_sessions"] is None else _number(doc, "sustained_sessions"),
        sustained_sessions_total=(
            None if doc["sustained_sessions_total"] is None else _number(doc, "sustained_sessions_total")
        ),
        sustained_basis=str(doc["sustained_basis"]),
        target=str(target["text"]),
        mean_concurrency=_number(doc, "mean_concurrency"),
        peak_concurrency=int(_number(doc, "peak_concurrency")),
        sessions_arrived=int(_number(doc, "sessions_arrived")),
        refused=int(_number(doc, "refused")),
        preemptions=int(_number(doc, "preemptions")),
        static_plan_sessions=int(_number(doc, "static_plan_sessions")),
        speeds=_speeds(doc.get("speeds"), request.speed_from),
        at_targets=_at_targets(doc.get("at_targets")),
        search_stopped=_stopped(doc.get("search"), doc.get("search_memory")),
    )
    return found, simulated_latency(doc)


def _stopped(*searches: object) -> dict[str, object] | None:
    """Why the simulation's search stopped early (``simulate --json`` search_memory's, then search's ``stopped``)."""
    for search in reversed(searches):
        if isinstance(search, dict) and isinstance(search.get("stopped"), dict):
            return dict(search["stopped"])
    return None


def _at_targets(at: object) -> str:
    """The sessions at the memory limit and at the latency targets, which binds (``simulate --json`` at_targets)."""
    return str(at["text"]) if isinstance(at, dict) and isinstance(at.get("text"), str) else ""


def _speeds(speeds: object, speed_from: str | None) -> str:
    """The simulation's speed provenance in words (``simulate --json`` speeds), naming the load test."""
    if not isinstance(speeds, dict):
        return ""
    said = f"prefill {speeds['prefill']['provenance']}, decode {speeds['decode']['provenance']}"
    if not speed_from:
        return said + " (roofline or given rates)"
    from kvbudget.simulate.measured_log import measured_by

    return said + f" ({measured_by(speed_from)})"


def collect(request: ReportRequest) -> Report:
    """Every number of the report for the deployment the request describes (``kvbudget report``)."""
    from kvbudget import hardware
    from kvbudget.model.sources import resolve
    from kvbudget.plan.build import _with_offload, levers_of, plan_inputs, with_speeds
    from kvbudget.plan.plan import make_plan
    from kvbudget.plan.report import levers_json
    from kvbudget.report.latency import planned_latency
    from kvbudget.report.measured import from_loadtest, from_log
    from kvbudget.report.sizing import sizing_of
    from kvbudget.report.traces import trace_sessions

    r = request
    inputs, bits = plan_inputs(r)
    plan = with_speeds(r, _with_offload(r, make_plan(inputs)))
    plan_doc = plan.to_dict()
    found = levers_of(r, plan, bits)
    trace = (
        trace_sessions(list(r.trace), inputs, fmt=r.trace_format, strict=r.strict, span_files=r.sessions_span_files)
        if r.trace
        else None
    )
    marks = [trace.recommended_cap] if trace is not None else []
    # each measurement must be of this deployment's model, engine and GPU (measure/belong.py)
    base = resolve(r.model) if r.loadtest else None
    gpu = hardware.gpu(r.gpu) if r.gpu else None
    engine = inputs.engine.name
    measured: list[Measured] = [from_loadtest(path, engine, base, r.model) for path in r.loadtest or ()]
    measured += [from_log(path, r.model, engine, gpu, r.startup) for path in r.log or ()]
    measured = [_at_the_cap(m, plan.inputs.context) for m in measured]
    commands = plan_doc["commands"]
    assert isinstance(commands, dict)
    units: UnitSystem = "si" if r.units == "si" else "iec"
    sizing = sizing_of(r)
    simulation = simulated(r) if r.workload else None
    latency = replace(planned_latency(r, plan), simulated=simulation[1] if simulation else None)
    return Report(
        plan=plan,
        plan_doc=plan_doc,
        levers=tuple(found),
        levers_doc=levers_json(plan, found),
        groups=layer_groups(plan),
        curve=cap_curve(plan, curve_caps(inputs.context, inputs.spec.max_position_embeddings, marks)),
        cap=enforced_cap(plan, commands),
        trace=trace,
        simulated=simulation[0] if simulation else None,
        measured=tuple(measured),
        units=units,
        latency=latency,
        sizing=sizing,
    )


def _at_the_cap(m: Measured, cap: int) -> Measured:
    """A measurement at another cap than the plan's is shown, and says so next to its figure: sessions at an 8K
    cap are not sessions at 32K (each holds a quarter of the cache), so it does not confirm or refute the plan."""
    if m.context is None or m.context == cap:
        return m
    from kvbudget.units import format_tokens

    note = (
        f"measured at the {format_tokens(m.context)} cap, not the plan's {format_tokens(cap)}: not the same question, "
        "so it neither confirms nor refutes the plan's sessions"
    )
    return replace(m, basis=f"{m.basis}; {note}")
