"""The capacity commands: ``kvbudget plan`` and ``kvbudget levers`` (parse, call, render)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from kvbudget.cli.options import request_from, spelled

if TYPE_CHECKING:
    from kvbudget.units import UnitSystem


def add_plan_options(p: argparse.ArgumentParser, *, skip: tuple[str, ...] = ()) -> None:
    """The model, engine and deployment options of a plan; ``skip``: options the command does not take."""
    from kvbudget.cli.main import add_model_options

    add_model_options(p)
    g = _Skipping(p.add_argument_group("deployment"), skip)
    g.add_argument("--gpu", help="GPU catalog name (kvbudget gpus), e.g. h100-80gb")
    g.add_argument("--gpu-memory", help="memory per GPU instead of --gpu, e.g. 24GiB or 80GB")
    g.add_argument("--gpus", help="GPUs in the deployment (default tp x pp)")
    g.add_argument(*spelled("--pp"), help="pipeline-parallel size (default 1)")
    g.add_argument(
        "--weights",
        help="serving precision of the weights: bf16, fp8, int8, int4, awq, "
        "gptq, nvfp4, mxfp4, q4_k, 2bit ... (default: the checkpoint's own, or the model dtype)",
    )
    g.add_argument("--weights-size", help="measured weight footprint of the whole model (overrides)")
    g.add_argument("--weight-bits", help="bits of a measured --weights-size (enables the weights lever)")
    g.add_argument("--group-size", help="int4/AWQ/GPTQ group size (default 128)")
    g.add_argument(
        "--overhead",
        help="measured runtime overhead per GPU (activations, non-torch, CUDA graphs); default: a labelled heuristic",
    )
    g.add_argument(*spelled("--utilization"), help="vLLM gpu_memory_utilization / SGLang mem_fraction_static")
    g.add_argument(*spelled("--context"), help="context cap per session (32k, 128K, 32768); required")
    g.add_argument("--sessions", help="sessions wanted: also report the largest cap that serves them")
    g.add_argument("--prefix", help="tokens of a byte-stable prefix every session shares")
    g.add_argument(
        "--from-log",
        metavar="LOG",
        help="an engine start-up log: its measured GPU total, weights and overhead become the ledger (calibrate)",
    )
    g.add_argument("--startup", help="which start-up of a --from-log/--log file holding several: 1, 2, ... or last")
    g.add_argument("--offload-memory", help="CPU memory or disk for offloaded caches, e.g. 512GB")
    g.add_argument("--link", help="link for the offload tier (default pcie-gen5-x16)")


def cmd_plan(args: argparse.Namespace) -> str:
    from kvbudget.plan.build import plan_deployment
    from kvbudget.render.plan import render_plan
    from kvbudget.requests.plan import PlanRequest

    alerts_to: str | None = args.alerts_to
    writer = None
    if alerts_to not in (None, "-"):
        from kvbudget.safeio import AtomicWriter

        writer = AtomicWriter(alerts_to, "--alerts", [args.from_log] if args.from_log else [])
    plan = plan_deployment(request_from(PlanRequest, args, alerts=alerts_to is not None))
    if writer is not None and plan.alerts is not None:
        writer.write(plan.alerts.yaml())
    if args.json:
        return json.dumps(plan.to_dict(), indent=2)
    if alerts_to == "-" and plan.alerts is not None:
        return plan.alerts.yaml().rstrip("\n")  # the rules file on standard output: kvbudget plan ... --alerts > f
    return render_plan(plan, cast("UnitSystem", args.units))


def cmd_levers(args: argparse.Namespace) -> str:
    from kvbudget.plan.build import rank_levers
    from kvbudget.render.plan import render_levers
    from kvbudget.requests.plan import LeversRequest

    ranking = rank_levers(request_from(LeversRequest, args))
    if args.json:
        return json.dumps(ranking.to_dict(), indent=2)
    return render_levers(ranking.plan, list(ranking.levers))


def register(sub: argparse._SubParsersAction[Any]) -> dict[str, Callable[[argparse.Namespace], str]]:
    p = sub.add_parser("plan", help="sessions a GPU deployment serves at a context cap, with the memory ledger")
    add_plan_options(p)
    p.add_argument(
        "--alerts",
        nargs="?",
        const="-",
        default=None,
        dest="alerts_to",
        metavar="FILE",
        help="Prometheus alerting rules tied to the plan (gateway and engine metrics): alone, print them (YAML) "
        "instead of the plan; with FILE, write them there; with --json, the plan's 'alerts' object",
    )
    p.add_argument(
        "--speed-from",
        metavar="RESULT.json|LOG",
        help="a kvbudget loadtest --json result or the engine's log, of this model and engine: the latency at the "
        "planned sessions from its measured speeds",
    )
    p = sub.add_parser("levers", help="what each lever (cap, KV dtype, weights, TP, prefix, engine) buys")
    add_plan_options(p)
    return {"plan": cmd_plan, "levers": cmd_levers}


class _Skipping:
    """An argument group that leaves out the options named in ``skip``."""

    def __init__(self, group: argparse._ArgumentGroup, skip: tuple[str, ...]) -> None:
        self._group, self._skip = group, skip

    def add_argument(self, *names: str, **kwargs: Any) -> argparse.Action | None:
        if set(names) & set(self._skip):
            return None
        return self._group.add_argument(*names, **kwargs)


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
