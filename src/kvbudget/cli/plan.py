"""The capacity commands: ``kvbudget plan`` and ``kvbudget levers`` (parse, call, render)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from kvbudget.units import counted, parse_count, parse_memory, parse_tokens

if TYPE_CHECKING:
    from kvbudget.engines import EngineRef
    from kvbudget.plan.from_log import LogInputs
    from kvbudget.plan.ledger import LineProvenance
    from kvbudget.plan.levers import Lever
    from kvbudget.plan.plan import Plan, PlanInputs
    from kvbudget.units import UnitSystem
    from kvbudget.weights.sources import WeightSize


def add_plan_options(p: argparse.ArgumentParser) -> None:
    from kvbudget.cli.main import add_model_options

    add_model_options(p)
    g = p.add_argument_group("deployment")
    g.add_argument("--gpu", default=None, help="GPU catalog name (kvbudget gpus), e.g. h100-80gb")
    g.add_argument("--gpu-memory", default=None, help="memory per GPU instead of --gpu, e.g. 24GiB or 80GB")
    g.add_argument("--gpus", default=None, help="GPUs in the deployment (default tp x pp)")
    g.add_argument("--pp", default="1", help="pipeline-parallel size (default 1)")
    g.add_argument(
        "--weights",
        default=None,
        help="serving precision of the weights: bf16, fp8, int8, int4, awq, "
        "gptq, nvfp4, mxfp4, q4_k, 2bit ... (default: the checkpoint's own, or the model dtype)",
    )
    g.add_argument("--weights-size", default=None, help="measured weight footprint of the whole model (overrides)")
    g.add_argument("--weight-bits", default=None, help="bits of a measured --weights-size (enables the weights lever)")
    g.add_argument("--group-size", default="128", help="int4/AWQ/GPTQ group size (default 128)")
    g.add_argument(
        "--overhead",
        default=None,
        help="measured runtime overhead per GPU (activations, non-torch, CUDA graphs); default: a labelled heuristic",
    )
    g.add_argument("--utilization", default=None, help="vLLM gpu_memory_utilization / SGLang mem_fraction_static")
    g.add_argument("--context", required=True, help="context cap per session (32k, 128K, 32768)")
    g.add_argument("--sessions", default=None, help="sessions wanted: also report the largest cap that serves them")
    g.add_argument("--prefix", default=None, help="tokens of a byte-stable prefix every session shares")
    g.add_argument(
        "--from-log",
        default=None,
        metavar="LOG",
        help="an engine start-up log: its measured GPU total, weights and overhead become the ledger (calibrate)",
    )
    g.add_argument("--offload-memory", default=None, help="CPU memory or disk for offloaded caches, e.g. 512GB")
    g.add_argument("--link", default="pcie-gen5-x16", help="link for the offload tier (default pcie-gen5-x16)")


def plan_inputs(args: argparse.Namespace) -> tuple[PlanInputs, int | None]:
    """PlanInputs from the options, and the current weight bits when known (for the weights lever)."""
    from kvbudget.cli.main import engine_options
    from kvbudget.cost import resolve_dtypes
    from kvbudget.engines import parse_engine, served_spec
    from kvbudget.engines.capability import compute_capability
    from kvbudget.errors import InputError
    from kvbudget.model.sources import resolve
    from kvbudget.plan.inputs import gpu_memory, weights_figure
    from kvbudget.plan.plan import PlanInputs
    from kvbudget.weights.precision import weight_precision
    from kvbudget.weights.sources import WeightSize

    engine = parse_engine(args.engine)
    logged = _from_log(args)
    if logged is not None:
        engine = _log_engine(args.engine, engine, logged.engine)
    label_for_capability = hardware_name(args.gpu) if args.gpu else ""
    # the dtype the engine runs the checkpoint in (weights, and the cache with --kv-dtype auto)
    spec = served_spec(resolve(args.model), engine, compute_capability(label_for_capability))
    k, v = resolve_dtypes(spec, args.kv_dtype, args.k_dtype, args.v_dtype)
    tp = parse_count(args.tp, what="--tp")
    pp = parse_count(args.pp, what="--pp")
    group = parse_count(args.group_size, what="--group-size")
    overhead_basis = None
    if logged is not None and logged.gpu_memory is not None and args.gpu_memory is None:
        memory, provenance = logged.gpu_memory.bytes, "measured"
        memory_basis: str | None = logged.gpu_memory.basis
        label = f"{hardware_name(args.gpu)} as the engine saw it" if args.gpu else "the logged GPU"
    else:
        memory, label, prov, memory_basis = gpu_memory(args.gpu, args.gpu_memory)
        provenance = prov or ("given" if label == "given" else "exact")
    if logged is not None and logged.weights_per_gpu is not None and not (args.weights or args.weights_size):
        w = logged.weights_per_gpu
        weights = WeightSize(
            w.bytes * logged.parallel, "measured", f"{w.basis} x {counted(logged.parallel, 'GPU')} of the log"
        )
    else:
        weights = weights_figure(spec, args.model, args.weights, args.weights_size, group)
    overhead = parse_memory(args.overhead, what="--overhead") if args.overhead else None
    if overhead is None and logged is not None and logged.overhead is not None:
        overhead, overhead_basis = logged.overhead.bytes, f"measured: {logged.overhead.basis}"
    utilization = logged.utilization if logged is not None and args.utilization is None else None
    if args.utilization is not None:
        try:
            utilization = float(args.utilization)
        except ValueError:
            raise InputError(f"--utilization: cannot read {args.utilization!r} as a fraction like 0.9") from None
        if not 0 < utilization <= 1:
            raise InputError(f"--utilization: {args.utilization} must be above 0 and at most 1")
    inputs = PlanInputs(
        spec=spec,
        engine=engine,
        k=k,
        v=v,
        gpu_memory_bytes=memory,
        gpu_label=label,
        weights=weights,
        context=parse_tokens(args.context, what="--context"),
        gpus=parse_count(args.gpus, what="--gpus") if args.gpus else tp * pp,
        tp=tp,
        pp=pp,
        overhead=overhead,
        utilization=utilization,
        sessions=parse_count(args.sessions, what="--sessions") if args.sessions else None,
        prefix=parse_tokens(args.prefix, what="--prefix") if args.prefix else 0,
        options=engine_options(args),
        gpu_memory_basis=memory_basis,
        gpu_memory_provenance=cast("LineProvenance | None", provenance),
        overhead_basis=overhead_basis,
        gpu_id=gpu_id(args.gpu) if args.gpu else None,
        weights_precision=_requantized(spec, args.weights, group),
    )
    if logged is not None:  # the log's own KV pool: the overhead is what it leaves (plan/reproduce.py)
        from kvbudget.plan.reproduce import reproduce

        inputs = reproduce(inputs, logged)
    bits: int | None = None
    if args.weight_bits:
        bits = parse_count(args.weight_bits, what="--weight-bits")
    elif weights.provenance == "computed":
        from kvbudget.weights.checkpoint import checkpoint_precision

        shipped = None if args.weights else checkpoint_precision(spec)
        chosen = shipped.precision if shipped else weight_precision(args.weights or spec.dtype, group_size=group)
        bits = int(chosen.bits)
    return inputs, bits


def _requantized(spec: Any, weights: str | None, group: int) -> str | None:
    """The --weights precision when it differs from the one the checkpoint ships (serve commands then quantize)."""
    if not weights:
        return None
    from kvbudget.weights.checkpoint import checkpoint_precision
    from kvbudget.weights.precision import weight_precision

    asked = weight_precision(weights, group_size=group, what="--weights")
    shipped = checkpoint_precision(spec)
    own = shipped.precision if shipped else weight_precision(spec.dtype, what="model dtype")
    return None if asked.bits == own.bits else asked.name


def gpu_id(gpu: str) -> str:
    from kvbudget import hardware

    return hardware.gpu(gpu).id


def hardware_name(gpu: str) -> str:
    from kvbudget import hardware

    return hardware.gpu(gpu).name


def _from_log(args: argparse.Namespace) -> LogInputs | None:
    if not getattr(args, "from_log", None):
        return None
    from kvbudget.measure.logs import read_log
    from kvbudget.plan.from_log import log_inputs

    return log_inputs(read_log(args.from_log))


def _log_engine(text: str, chosen: EngineRef, logged: EngineRef) -> EngineRef:
    """The log's engine, unless --engine names another one (then the log cannot stand for it)."""
    from kvbudget.errors import InputError

    if text == "ideal":
        return logged
    if chosen.name != logged.name:
        raise InputError(
            f"--from-log is a {logged.name} log but --engine is {chosen.name}: its measured figures are that "
            f"engine's; drop --engine or give a {chosen.name} log"
        )
    return chosen


def _offload(args: argparse.Namespace, plan: Plan) -> object:
    if not args.offload_memory:
        return None
    from kvbudget import hardware
    from kvbudget.plan.offload import offload_tier

    link = hardware.link(args.link)
    return offload_tier(plan, parse_memory(args.offload_memory, what="--offload-memory"), link.id, link.bytes_per_s)


def cmd_plan(args: argparse.Namespace) -> str:
    from kvbudget.plan.offload import Offload
    from kvbudget.plan.plan import make_plan
    from kvbudget.plan.report import plan_json
    from kvbudget.render.plan import render_plan

    inputs, _ = plan_inputs(args)
    plan = make_plan(inputs)
    offload = cast(Offload | None, _offload(args, plan))
    if args.json:
        return json.dumps(plan_json(plan, offload), indent=2)
    return render_plan(plan, cast("UnitSystem", args.units), offload)


def plan_levers(args: argparse.Namespace, plan: Plan, bits: int | None) -> list[Lever]:
    """The levers `kvbudget levers` ranks for ``plan`` (made from ``plan_inputs(args)``), best first."""
    from kvbudget.plan.levers import levers, scaled_weights

    reweigh = None
    if bits is not None:
        if plan.inputs.weights.provenance == "computed":
            reweigh = _recompute(args, plan.inputs)
        else:
            reweigh = scaled_weights(plan.inputs.weights, bits)
    return levers(plan, bits, reweigh)


def cmd_levers(args: argparse.Namespace) -> str:
    from kvbudget.plan.plan import make_plan
    from kvbudget.plan.report import levers_json
    from kvbudget.render.plan import render_levers

    inputs, bits = plan_inputs(args)
    plan = make_plan(inputs)
    found = plan_levers(args, plan, bits)
    if args.json:
        return json.dumps(levers_json(plan, found), indent=2)
    return render_levers(plan, found)


def _recompute(args: argparse.Namespace, inputs: PlanInputs) -> Callable[[int], WeightSize]:
    from kvbudget.weights import sources
    from kvbudget.weights.params import count_params
    from kvbudget.weights.precision import estimate_weights, weight_precision

    names = {8: "fp8", 4: "int4", 2: "2bit"}
    count = count_params(inputs.spec)
    group = parse_count(args.group_size, what="--group-size")

    def reweigh(bits: int) -> WeightSize:
        return sources.computed(estimate_weights(count, weight_precision(names[bits], group_size=group)))

    return reweigh


def register(sub: argparse._SubParsersAction[Any]) -> dict[str, Callable[[argparse.Namespace], str]]:
    p = sub.add_parser("plan", help="sessions a GPU deployment serves at a context cap, with the memory ledger")
    add_plan_options(p)
    p = sub.add_parser("levers", help="what each lever (cap, KV dtype, weights, TP, prefix, engine) buys")
    add_plan_options(p)
    return {"plan": cmd_plan, "levers": cmd_levers}


class _OptionalPlanOptions:
    """Forwards ``add_plan_options`` to a parser with the model as ``--model`` (optional) and ``--context``
    optional, for commands whose positional arguments are something else (``trace stats FILE...``)."""

    def __init__(self, target: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
        self._target = target

    def add_argument(self, *names: str, **kwargs: Any) -> argparse.Action:
        if names == ("model",):
            names, kwargs = ("--model",), {**kwargs, "default": None}
        elif "--context" in names:
            kwargs = {**kwargs, "required": False, "default": None}
        return self._target.add_argument(*names, **kwargs)

    def add_argument_group(self, *args: Any, **kwargs: Any) -> _OptionalPlanOptions:
        assert isinstance(self._target, argparse.ArgumentParser)
        return _OptionalPlanOptions(self._target.add_argument_group(*args, **kwargs))


def add_optional_plan_options(p: argparse.ArgumentParser) -> None:
    """The plan's options (model, engine, deployment; see add_plan_options) with ``--model M`` and
    ``--context`` optional: the same options, defaults and help, without copying them."""
    add_plan_options(cast(argparse.ArgumentParser, _OptionalPlanOptions(p)))
