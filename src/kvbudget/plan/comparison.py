"""From a compare request to the comparison: every combination of its lists planned as ``plan`` plans it, priced,
with Little's law at a rate, optionally simulated, and sorted (``kvbudget compare``; plan/compare.py holds the
rows and their arithmetic)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from kvbudget.errors import InputError
from kvbudget.plan.compare import Choice, Row, compare, sort_rows

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from collections.abc import Sequence

    from kvbudget.plan.compare import Simulated
    from kvbudget.plan.plan import Plan
    from kvbudget.requests.compare import CompareRequest
    from kvbudget.simulate.deployment import Prepared
    from kvbudget.workload.little import SessionTime

SCHEMA_VERSION = 1
CHECKPOINT = "checkpoint"  # the weights precision the checkpoint ships


@dataclass(frozen=True)
class Comparison:
    """The compared deployments, best first, and what they were compared under."""

    rows: tuple[Row, ...]
    sort: str
    rate_per_s: float | None
    session: SessionTime | None
    with_workload: bool
    simulated: bool

    def to_dict(self) -> dict[str, object]:
        """The ``kvbudget compare --json`` document."""
        return {
            "schema_version": SCHEMA_VERSION,
            "sort": self.sort,
            "rate_per_s": self.rate_per_s,
            "mean_session_s": self.session.mean_s if self.session else None,
            "rows": [row.to_json() for row in self.rows],
        }


def prices_of(request: CompareRequest) -> dict[str, float]:
    """GPU id -> price per GPU-hour, from ``price`` (GPU=PRICE items) and ``prices`` (a TOML or JSON file)."""
    from kvbudget import hardware
    from kvbudget.units import parse_per_second

    pairs: list[tuple[str, str, str]] = []
    if request.prices:
        from kvbudget.safeio import loads_json, read_text

        path = Path(request.prices)
        text = read_text(path, "prices file")
        if path.suffix.lower() == ".json":
            data = loads_json(text, str(path), "prices file")
        else:
            import tomllib

            try:
                data = tomllib.loads(text)
            except tomllib.TOMLDecodeError as exc:
                raise InputError(f"{path}: not valid TOML ({exc})") from None
        if not isinstance(data, dict):
            raise InputError(f'{path}: a prices file maps GPU names to prices, e.g. h100-sxm = "2.49/h"')
        pairs += [(str(k), str(v), f"{path}: {k}") for k, v in data.items()]
    for item in request.price or ():
        gpu, sep, price = item.partition("=")
        if not sep or not gpu.strip() or not price.strip():
            raise InputError(f"--price {item!r}: write GPU=PRICE, e.g. --price h100-sxm=2.49/h")
        pairs.append((gpu.strip(), price.strip(), f"--price {item}"))
    out: dict[str, float] = {}
    given: dict[str, str] = {}
    for gpu, price, where in pairs:
        per_s = parse_per_second(price, what=where, default_unit="h")
        try:
            gpu_id = hardware.gpu(gpu).id
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None
        if gpu_id in given:  # one GPU, two prices: neither may win silently
            raise InputError(f"{where}: {gpu_id} is already priced by {given[gpu_id]}; give one price per GPU")
        given[gpu_id] = where
        out[gpu_id] = round(per_s * 3600, 9)  # the hourly price as written: 3.59/h, not 3.5900000000000003
    return out


def _session(request: CompareRequest) -> SessionTime | None:
    if not request.workload:
        if request.rate is not None:
            raise InputError(
                "--rate needs --workload FILE: Little's law needs the mean session time the workload gives"
            )
        return None
    from kvbudget.workload.little import ServiceRates, session_time
    from kvbudget.workload.loader import load_workload

    default = ServiceRates()
    rates = ServiceRates(
        prefill_tokens_per_s=request.prefill_rate or default.prefill_tokens_per_s,
        decode_tokens_per_s=request.decode_rate or default.decode_tokens_per_s,
    )
    return session_time(load_workload(request.workload), rates)


def choices_of(request: CompareRequest) -> list[Choice]:
    """Every combination of the request's lists (at most MAX_ROWS)."""
    from kvbudget import hardware
    from kvbudget.requests.compare import MAX_ROWS

    r = request
    axes = (r.model, r.gpu, r.engine, r.context, r.kv_dtype, r.weights, r.tp)
    count = 1
    for axis in axes:
        count *= len(axis)
    if count > MAX_ROWS:
        raise InputError(f"{count:,} combinations to plan; compare takes at most {MAX_ROWS}: narrow the lists")
    gpu_ids = [hardware.gpu(g).id for g in r.gpu]
    for n, gpu_id in enumerate(gpu_ids):
        if gpu_id in gpu_ids[:n]:  # an alias and its id (h100, h100-sxm): the same rows twice
            first = r.gpu[gpu_ids.index(gpu_id)]
            raise InputError(f"--gpu: {r.gpu[n]!r} and {first!r} are the same GPU ({gpu_id}); give it once")
    weights = [None if w.strip().lower() == CHECKPOINT else w for w in r.weights]
    return [Choice(*c) for c in itertools.product(r.model, gpu_ids, r.engine, r.context, r.kv_dtype, weights, r.tp)]


def plan_choice(request: CompareRequest, choice: Choice) -> Plan:
    """One row's plan: the request's plan options with the row's model, GPU, engine, cap, dtype, weights and tp."""
    from kvbudget.plan.build import plan_deployment
    from kvbudget.requests.base import narrowed
    from kvbudget.requests.plan import PlanRequest

    # a row's plan is memory alone: a load test's speeds are for its simulation (_simulated)
    return plan_deployment(narrowed(PlanRequest, request, **choice.options(), speed_from=None))


def compare_deployments(request: CompareRequest) -> Comparison:
    """Every combination planned and sorted (``kvbudget compare``); a refused deployment is a row with its reason."""
    if request.speed_from and not request.simulate:
        raise InputError(
            "--speed-from: compare uses a load test's measured speeds only in its simulations; add --simulate "
            "(with --workload FILE), or drop --speed-from"
        )
    session = _session(request)
    rows = compare(
        choices_of(request),
        lambda choice: plan_choice(request, choice),
        prices=prices_of(request),
        session=session,
        rate_per_s=request.rate,
    )
    if request.simulate:
        rows = _simulated(request, rows)
    return Comparison(
        tuple(sort_rows(rows, request.sort)),
        request.sort,
        request.rate,
        session,
        bool(request.workload),
        request.simulate,
    )


def _simulated(request: CompareRequest, rows: list[Row]) -> list[Row]:
    """Each served row with the simulator's sustained sessions, run as `kvbudget simulate` runs it (the same plan
    options, the engine's own memory policy, the workload), with a shorter search."""
    from kvbudget.requests.base import narrowed
    from kvbudget.requests.compare import MAX_SIMULATED_ROWS
    from kvbudget.requests.simulate import SimulateRequest
    from kvbudget.simulate.deployment import prepare_deployment
    from kvbudget.simulate.measured_log import measured_by
    from kvbudget.simulate.parallel import run_all

    if not request.workload:
        raise InputError("--simulate needs --workload FILE: the simulator runs the workload's sessions")
    served = sum(row.plan is not None and row.plan.sessions >= 1 for row in rows)
    if served > MAX_SIMULATED_ROWS:
        raise InputError(
            f"--simulate: {served} served deployments to simulate; it takes at most {MAX_SIMULATED_ROWS} "
            "(each is a search of several simulator runs): narrow the lists"
        )
    _check_sweep(request, served)
    measured = _measured_rows(request, rows)
    asks: list[tuple[Prepared, str | None]] = []
    for row in rows:
        if row.plan is None or row.plan.sessions < 1:  # nothing served: nothing to simulate
            continue
        simulation = narrowed(
            SimulateRequest,
            request,
            **row.choice.options(),
            sessions=request.search_sessions,
            rate=None,  # compare's --rate is the whole deployment's; each row runs at the workload's own rate
            search_sessions=request.search_sessions,
            search_probes=request.search_probes,
            jobs=1,  # the rows are the parallel tasks
            ray=None,
            speed_from=request.speed_from if row.choice in measured else None,
        )
        source = measured_by(simulation.speed_from) if simulation.speed_from else None  # "load test X" / "log X"
        asks.append((prepare_deployment(simulation), source))  # planned, files read: a task reads none
    # One process (or Ray task) per row, a row's search serial inside it; the answer is the serial one, in row
    # order. The tasks take the rows' indices: the forked workers inherit the prepared rows, Ray carries them once.
    answers = iter(run_all(partial(_sustained, asks), range(len(asks)), request.jobs, request.ray))
    return [row if row.plan is None or row.plan.sessions < 1 else replace(row, simulated=next(answers)) for row in rows]


def _measured_rows(request: CompareRequest, rows: list[Row]) -> set[Choice]:
    """The served rows of the model and engine the ``--speed-from`` load test measured (simulate/measured.py): they
    simulate on its speeds, the others on the roofline; refused when the sweep lists several GPUs, tp sizes, weights
    or cache dtypes (the result records none), or when no row is of its model and engine."""
    if not request.speed_from:
        return set()
    from kvbudget.errors import KvBudgetError
    from kvbudget.model.sources import resolve
    from kvbudget.simulate.measured import measured_speeds, one_deployment

    measured = measured_speeds(request.speed_from)
    lists = {"GPU": request.gpu, "tp": request.tp, "weights": request.weights, "KV dtype": request.kv_dtype}
    one_deployment(measured, lists, len(set(request.engine)), len(set(request.model)))
    fitting: set[Choice] = set()
    for row in rows:
        if row.plan is None or row.plan.sessions < 1:
            continue
        try:
            spec = resolve(row.choice.model)
        except KvBudgetError:
            continue
        if measured.fits(row.plan.inputs.engine.name, spec, row.choice.model):
            fitting.add(row.choice)
    if not fitting:
        raise InputError(
            f"--speed-from {measured.source}: the load test measured {measured.served or 'a model'} on "
            f"{measured.engine or 'an unnamed engine'}, none of the served rows' models on their engines; give the "
            "load test's --engine and model, or a load test of one of them"
        )
    return fitting


def _check_sweep(request: CompareRequest, served: int) -> None:
    """Refuse a sweep whose rows together cost more model calls than MAX_SWEEP_CALLS, naming what narrows it.

    Each row runs ``search_sessions`` sessions and a search of ``search_probes`` runs of as many, every session
    costing about the workload's mean steps in model calls (simulate/deployment.py counts a run so)."""
    from kvbudget.requests.compare import MAX_SWEEP_CALLS
    from kvbudget.simulate.deployment import CALLS_PER_S
    from kvbudget.workload.loader import load_workload

    assert request.workload is not None
    steps = load_workload(request.workload).steps.mean()
    searches = 2 if request.ttft is not None or request.itl is not None else 1  # memory alone, then latency
    per_row = request.search_sessions * (1 + searches * request.search_probes) * steps
    total = served * per_row
    if total > MAX_SWEEP_CALLS:
        minutes = total / CALLS_PER_S / 60
        raise InputError(
            f"--simulate: about {total:,.0f} model calls for {served} deployments ({per_row:,.0f} each), about "
            f"{minutes:,.0f} minutes of one core at the measured {CALLS_PER_S:,} calls/s, past the "
            f"{MAX_SWEEP_CALLS:,} a comparison runs; lower --search-sessions or --search-probes, or narrow the lists"
        )


def _sustained(asks: Sequence[tuple[Prepared, str | None]], index: int) -> Simulated:
    """Row ``index``'s simulator answer (a plain record: it crosses the process boundary); each ask is the
    prepared simulation and, in words, the load test or log its speeds came from, if any."""
    from kvbudget.plan.compare import Simulated
    from kvbudget.simulate.study import sustained_basis

    prepared, speed_from = asks[index]
    study = prepared.run()
    speeds = study.about.get("speeds")
    said = (
        f"prefill {speeds['prefill']['provenance']}, decode {speeds['decode']['provenance']}"
        if isinstance(speeds, dict)
        else ""
    )
    if speed_from:
        said += f" ({speed_from})"
    r = study.result
    at = study.at_targets
    return Simulated(
        study.sustained_sessions,
        sustained_basis(study),
        study.target.describe(),
        r.ttft_s,
        r.itl_s,
        said,
        None if at is None else at.memory.sessions,
        None if at is None else at.binds,
        "" if at is None else at.text,
        None if study.stopped is None else study.stopped.to_json(),
    )
