"""The report's sizing answer (``report --size``): ``kvbudget size`` (plan/sizing.py ``size_deployments``) for the
report's own model, cache dtype, weights and tensor parallelism at its cap, on ``--size-gpu`` (default its GPU)
and ``--size-engine`` (default its engine), for the load ``--sessions`` or ``--rate`` (with ``--workload``)
within ``--ttft``/``--itl``, priced by ``--price``/``--prices``."""

from __future__ import annotations

from kvbudget.errors import InputError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.plan.sizing import Sizing
    from kvbudget.requests.report import ReportRequest
    from kvbudget.requests.size import SizeRequest

# the options that only the sizing answer reads
SIZING_OPTIONS = ("size_gpu", "size_engine", "rate", "ttft", "itl", "price", "prices")
LATENCY = ("ttft", "itl")  # the targets: of the sizing, and of the simulation with --workload


def size_request(request: ReportRequest) -> SizeRequest:
    """The ``kvbudget size`` request the report's options make (module doc)."""
    from kvbudget.requests.base import narrowed
    from kvbudget.requests.size import SizeRequest

    gpus = request.size_gpu or ((request.gpu,) if request.gpu else None)
    if not gpus:
        raise InputError("--size: sizing prices catalog GPUs; give --gpu NAME or --size-gpu h100-sxm,h200")
    return narrowed(
        SizeRequest,
        request,
        model=(request.model,),
        gpu=gpus,
        engine=request.size_engine or (request.engine,),
        kv_dtype=(request.kv_dtype,),
        weights=(request.weights or "checkpoint",),
        tp=(request.tp,),
    )


def sizing_of(request: ReportRequest) -> Sizing | None:
    """The sizing answer with ``--size``; without it None, and a sizing option given alone is refused."""
    if not request.size:
        # --ttft / --itl also hold the report's simulation (--workload) to latency targets
        alone = SIZING_OPTIONS if request.workload is None else tuple(n for n in SIZING_OPTIONS if n not in LATENCY)
        given = [name for name in alone if getattr(request, name) is not None]
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise InputError(
                f"{flag}: a sizing option; add --size (with --sessions N or --rate R) to size the load"
                + (", or --workload W to hold the simulation to it" if flag in ("--ttft", "--itl") else "")
            )
        return None
    if request.pp != 1:
        raise InputError("--size: sizing covers tensor parallelism only; give --pp 1")
    from kvbudget.plan.sizing import size_deployments

    return size_deployments(size_request(request))
