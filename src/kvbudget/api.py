"""The Python API: the typed requests and the functions that answer them, nothing else.

    import kvbudget
    report = kvbudget.kv_cost(kvbudget.CostRequest(model="llama-3.1-70b", tokens="32k"))           # CostReport
    plan = kvbudget.plan_deployment(
        kvbudget.PlanRequest(model="qwen3-32b", gpu="h100-sxm", engine="vllm", context="32k")      # Plan
    )
    rows = kvbudget.compare_deployments(
        kvbudget.CompareRequest(model=["llama-3.1-8b"], gpu=["h100-sxm", "h200"], context=["32k"])  # Comparison
    ).rows

Each request is a frozen dataclass whose fields are named as the command's options (``kv_dtype`` is
``--kv-dtype``) with the same defaults; a field takes the typed value (``context=32768``, ``gpu_memory=80 * 10**9``,
``kvbudget.Tokens("32k")``, ``kvbudget.Memory("80GB")``) or the text the command line takes (``"32k"``, ``"80GB"``).
A value the command line refuses is refused here, at construction, with the same one-line InputError. Each answer
is a record whose ``to_dict()`` is the command's ``--json`` document. The functions keep no state between calls and
may be called from many threads at once. Documented with examples in docs/api.md (run as tests).
"""

from __future__ import annotations

from functools import wraps

from kvbudget.cost import CostReport, kv_cost
from kvbudget.measure.calibrations import Calibrations, calibrate_logs
from kvbudget.plan.build import plan_deployment, rank_levers
from kvbudget.plan.comparison import Comparison, compare_deployments
from kvbudget.plan.levers import LeverRanking
from kvbudget.plan.plan import Plan
from kvbudget.plan.sizing import Sizing, size_deployments
from kvbudget.plan.trace_report import TraceReport, trace_report
from kvbudget.requests.calibrate import CalibrateRequest
from kvbudget.requests.compare import CompareRequest
from kvbudget.requests.cost import CostRequest, ModelsRequest, TableRequest
from kvbudget.requests.plan import LeversRequest, PlanRequest
from kvbudget.requests.simulate import SimulateRequest
from kvbudget.requests.size import SizeRequest
from kvbudget.requests.speed import SpeedRequest
from kvbudget.requests.trace import TraceStatsRequest
from kvbudget.requests.values import Memory, Tokens
from kvbudget.simulate.deployment import simulate_deployment
from kvbudget.simulate.study import Study
from kvbudget.speed.answer import Speed, estimate_speed
from kvbudget.tables import CatalogCosts, CostTable, catalog_costs, cost_table

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    from kvbudget.requests.base import Request

    F = TypeVar("F", bound=Callable[..., object])


def _naming(answer: F) -> F:
    """``answer`` with an error met while reading a file or model an option names starting with that option
    (errors.name_option): ``--workload: nope.toml: no such file``, as the command line and the web API say it."""
    from kvbudget.errors import KvBudgetError, name_option
    from kvbudget.requests.base import named_options

    @wraps(answer)
    def named(request: Request, *args: object, **kwargs: object) -> object:
        try:
            return answer(request, *args, **kwargs)
        except KvBudgetError as exc:
            name_option(exc, named_options(type(request), request.options()))
            raise

    return named  # type: ignore[return-value]


kv_cost = _naming(kv_cost)
cost_table = _naming(cost_table)
catalog_costs = _naming(catalog_costs)
plan_deployment = _naming(plan_deployment)
rank_levers = _naming(rank_levers)
compare_deployments = _naming(compare_deployments)
size_deployments = _naming(size_deployments)
simulate_deployment = _naming(simulate_deployment)
calibrate_logs = _naming(calibrate_logs)
trace_report = _naming(trace_report)
estimate_speed = _naming(estimate_speed)

__all__ = [
    "CalibrateRequest",
    "Calibrations",
    "CatalogCosts",
    "CompareRequest",
    "Comparison",
    "CostReport",
    "CostRequest",
    "CostTable",
    "LeverRanking",
    "LeversRequest",
    "Memory",
    "ModelsRequest",
    "Plan",
    "PlanRequest",
    "SimulateRequest",
    "SizeRequest",
    "Sizing",
    "Speed",
    "SpeedRequest",
    "Study",
    "TableRequest",
    "Tokens",
    "TraceReport",
    "TraceStatsRequest",
    "calibrate_logs",
    "catalog_costs",
    "compare_deployments",
    "cost_table",
    "estimate_speed",
    "kv_cost",
    "plan_deployment",
    "rank_levers",
    "simulate_deployment",
    "size_deployments",
    "trace_report",
]
