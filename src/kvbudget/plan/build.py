"""From a plan request to the plan: which model as the engine serves it, which GPU memory, which weights, which
measured figures of a log, and the engine settings; then the plan, its offload tier and its levers.

Weights, most exact first: a measured size (``weights_size``), the checkpoint's own tensor headers for a local
directory or GGUF file, else computed from the architecture at the asked, shipped or served precision
(plan/inputs.py). A start-up log (``from_log``) gives the GPU total, the weights and the runtime overhead the
engine measured, unless the request gives them (plan/from_log.py).
"""

from __future__ import annotations

from dataclasses import replace

from kvbudget.cost import engine_options
from kvbudget.errors import InputError
from kvbudget.units import counted

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from collections.abc import Callable

    from kvbudget.engines import EngineRef
    from kvbudget.hardware import Gpu
    from kvbudget.model.spec import ModelSpec
    from kvbudget.plan.from_log import LogInputs
    from kvbudget.plan.levers import Lever, LeverRanking
    from kvbudget.plan.plan import Plan, PlanInputs
    from kvbudget.provenance import Label
    from kvbudget.requests.plan import LeversRequest, PlanRequest
    from kvbudget.weights.sources import WeightSize


def plan_inputs(request: PlanRequest) -> tuple[PlanInputs, int | None]:
    """PlanInputs from the request, and the current weight bits when known (for the weights lever)."""
    from kvbudget import hardware
    from kvbudget.cost import resolve_dtypes
    from kvbudget.engines import parse_engine, served_spec
    from kvbudget.engines.capability import compute_capability
    from kvbudget.model.sources import resolve
    from kvbudget.plan.inputs import gpu_memory, weights_figure
    from kvbudget.plan.plan import PlanInputs
    from kvbudget.weights.precision import weight_precision
    from kvbudget.weights.sources import WeightSize

    r = request
    engine = parse_engine(r.engine)
    logged = _from_log(r.from_log, r.startup)
    if logged is not None:
        engine = _log_engine(r.engine, engine, logged.engine)
    gpu_entry = hardware.gpu(r.gpu) if r.gpu else None
    # the dtype the engine runs the checkpoint in (weights, and the cache with --kv-dtype auto)
    base = resolve(r.model)
    if logged is not None:
        _belongs(r, logged, base, gpu_entry)
    spec = served_spec(base, engine, compute_capability(gpu_entry.name if gpu_entry else ""))
    k, v = resolve_dtypes(spec, r.kv_dtype, r.k_dtype, r.v_dtype)
    overhead_basis = None
    if logged is not None and logged.gpu_memory is not None and r.gpu_memory is None:
        provenance: Label = "measured"
        memory = logged.gpu_memory.bytes
        memory_basis: str | None = logged.gpu_memory.basis
        label = f"{gpu_entry.name} as the engine saw it" if gpu_entry else "the logged GPU"
    else:
        memory, label, prov, memory_basis = gpu_memory(r.gpu, r.gpu_memory)
        provenance = prov or "given"
    if logged is not None and logged.weights_per_gpu is not None and not (r.weights or r.weights_size):
        w = logged.weights_per_gpu
        weights = WeightSize(
            w.bytes * logged.parallel, "measured", f"{w.basis} x {counted(logged.parallel, 'GPU')} of the log"
        )
    else:
        weights = weights_figure(spec, r.model, r.weights, r.weights_size, r.group_size)
        if weights.provenance != "measured" and not r.weights:  # the checkpoint's bytes -> as the engine loads them
            from kvbudget.weights.loaded import as_loaded

            capability = compute_capability(gpu_entry.name if gpu_entry else "")
            weights, _ = as_loaded(
                spec, weights, engine=engine.name, version=engine.version, capability=capability, tp=r.tp
            )
        weights = engine.rules.loaded_weights(spec, weights, r.model, r.weights)
    overhead = r.overhead
    if overhead is None and logged is not None and logged.overhead is not None:
        overhead, overhead_basis = logged.overhead.bytes, f"measured: {logged.overhead.basis}"
    utilization = r.utilization
    if utilization is None and logged is not None:
        utilization = logged.utilization
    options = engine_options(r)
    if logged is not None:  # the switches the engine ran with, as its log shows them, unless the request sets them
        options = replace(
            options,
            enforce_eager=options.enforce_eager or logged.enforce_eager,
            flashinfer_sampler=(
                options.flashinfer_sampler if r.flashinfer_sampler is not None else logged.flashinfer_sampler
            ),
        )
    engine.rules.check_options(options)
    inputs = PlanInputs(
        spec=spec,
        engine=engine,
        k=k,
        v=v,
        gpu_memory_bytes=memory,
        gpu_label=label,
        weights=weights,
        context=r.context,
        gpus=r.gpus if r.gpus is not None else r.tp * r.pp,
        tp=r.tp,
        pp=r.pp,
        overhead=overhead,
        utilization=utilization,
        sessions=r.sessions,
        prefix=r.prefix or 0,
        options=options,
        gpu_memory_basis=memory_basis,
        gpu_memory_provenance=provenance,
        overhead_basis=overhead_basis,
        gpu_id=gpu_entry.id if gpu_entry else None,
        weights_precision=requantized(spec, r.weights, r.group_size),
    )
    if logged is not None:  # the log's own KV pool: the overhead is what it leaves (plan/reproduce.py)
        from kvbudget.plan.reproduce import reproduce

        inputs = reproduce(inputs, logged)
    bits: int | None = None
    if r.weight_bits:
        bits = r.weight_bits
    elif weights.provenance == "computed":
        from kvbudget.weights.checkpoint import checkpoint_precision

        shipped = None if r.weights else checkpoint_precision(spec)
        chosen = shipped.precision if shipped else weight_precision(r.weights or spec.dtype, group_size=r.group_size)
        bits = int(chosen.bits)
    return inputs, bits


def requantized(spec: ModelSpec, weights: str | None, group: int) -> str | None:
    """The asked weights precision when it differs from the one the checkpoint ships (serve commands then quantize)."""
    if not weights:
        return None
    from kvbudget.weights.checkpoint import checkpoint_precision
    from kvbudget.weights.precision import weight_precision

    asked = weight_precision(weights, group_size=group, what="--weights")
    shipped = checkpoint_precision(spec)
    own = shipped.precision if shipped else weight_precision(spec.dtype, what="model dtype")
    return None if asked.bits == own.bits else asked.name


def _from_log(path: str | None, startup: int | str | None = None) -> LogInputs | None:
    if not path:
        return None
    from kvbudget.measure.logs import read_log
    from kvbudget.plan.from_log import log_inputs

    return log_inputs(read_log(path, startup=startup))


def _belongs(r: PlanRequest, logged: LogInputs, spec: ModelSpec, gpu: Gpu | None) -> None:
    """The log is of the planned model and GPU, or InputError (measure/belong.py)."""
    from kvbudget.measure import belong

    log = logged.log
    if log is None:
        return
    belong.check_model(log, spec, r.model, "--from-log")
    weights = log.figure("weights_bytes")
    if weights is not None:
        parallel = logged.parallel if logged.tp is not None else r.tp * r.pp  # the plan takes the plan's own
        belong.check_weights(log, weights, parallel, spec, r.model, "--from-log")
    # CUDA's device total, where the engine's log prints it (vLLM's and TensorRT-LLM's readers)
    belong.check_gpu(log.figure("total_gpu_memory_bytes"), gpu, log.path, "--from-log")


def _log_engine(text: str, chosen: EngineRef, logged: EngineRef) -> EngineRef:
    """The log's engine, unless the request names another one (then the log cannot stand for it)."""
    if text == _default_engine():
        return logged
    if chosen.name != logged.name:
        raise InputError(
            f"--from-log is a {logged.name} log but --engine is {chosen.name}: its measured figures are that "
            f"engine's; drop --engine or give a {chosen.name} log"
        )
    return chosen


def _default_engine() -> str:
    """The engine a request names when none was given (the request's default)."""
    from dataclasses import fields

    from kvbudget.requests.plan import PlanRequest

    return str(next(f.default for f in fields(PlanRequest) if f.name == "engine"))


def plan_deployment(request: PlanRequest) -> Plan:
    """The capacity plan of one deployment (``kvbudget plan``), with its offload tier when ``offload_memory``
    is given; ``.to_dict()`` is the ``plan --json`` document."""
    from kvbudget.plan.plan import make_plan

    plan = with_speeds(request, _with_offload(request, make_plan(plan_inputs(request)[0])))
    if request.alerts:
        from kvbudget.plan.alerts import alert_rules

        plan = replace(plan, alerts=alert_rules(plan))
    return plan


def with_speeds(request: PlanRequest, plan: Plan) -> Plan:
    """``plan`` with the ``--speed-from`` load test's speeds at its planned concurrency (plan/speeds.py); the load
    test must be of the plan's engine and model (simulate/measured.py)."""
    if not request.speed_from:
        return plan
    from kvbudget.model.sources import resolve
    from kvbudget.plan.speeds import plan_speeds
    from kvbudget.simulate.measured import measured_speeds

    measured = measured_speeds(request.speed_from)
    measured.check(plan.inputs.engine.name, resolve(request.model), request.model)
    return replace(plan, speeds=plan_speeds(measured, plan))


def _with_offload(request: PlanRequest, plan: Plan) -> Plan:
    if request.offload_memory is None:
        return plan
    from kvbudget import hardware
    from kvbudget.plan.offload import offload_tier

    link = hardware.link(request.link)
    return replace(plan, offload=offload_tier(plan, request.offload_memory, link.id, link.bytes_per_s))


def levers_of(request: PlanRequest, plan: Plan, bits: int | None) -> list[Lever]:
    """The levers ranked for ``plan`` (made from ``request``), best first."""
    from kvbudget.plan.levers import levers, scaled_weights

    reweigh = None
    if bits is not None:
        if plan.inputs.weights.provenance == "computed":
            reweigh = _recompute(request.group_size, plan.inputs)
        else:
            reweigh = scaled_weights(plan.inputs.weights, bits)
    return levers(plan, bits, reweigh)


def rank_levers(request: LeversRequest) -> LeverRanking:
    """What each lever buys on the deployment (``kvbudget levers``); ``.to_dict()`` is ``levers --json``."""
    from kvbudget.plan.levers import LeverRanking
    from kvbudget.plan.plan import make_plan

    if request.speed_from:
        raise InputError(
            "--speed-from: levers rank capacity, not speed; give the load test to plan, simulate, compare "
            "--simulate, size or report"
        )
    inputs, bits = plan_inputs(request)
    plan = make_plan(inputs)
    return LeverRanking(plan, tuple(levers_of(request, plan, bits)))


def _recompute(group: int, inputs: PlanInputs) -> Callable[[int], WeightSize]:
    from kvbudget.weights import sources
    from kvbudget.weights.params import count_params
    from kvbudget.weights.precision import estimate_weights, weight_precision

    names = {8: "fp8", 4: "int4", 2: "2bit"}
    count = count_params(inputs.spec)

    def reweigh(bits: int) -> WeightSize:
        return sources.computed(estimate_weights(count, weight_precision(names[bits], group_size=group)))

    return reweigh
