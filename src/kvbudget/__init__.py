"""kvbudget: exact KV-cache memory of LLMs per serving engine, with the arithmetic shown.

The Python API (kvbudget.api, docs/api.md): typed requests (``kvbudget.PlanRequest(...)``) and the functions that
answer them (``kvbudget.plan_deployment(request)``), imported on first use so that ``import kvbudget`` (and the
command line's start-up) stays light.
"""

from __future__ import annotations

__version__ = "0.1.0"

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from typing import Any

    from kvbudget.api import (
        CalibrateRequest,
        Calibrations,
        CatalogCosts,
        CompareRequest,
        Comparison,
        CostReport,
        CostRequest,
        CostTable,
        LeverRanking,
        LeversRequest,
        Memory,
        ModelsRequest,
        Plan,
        PlanRequest,
        SimulateRequest,
        SizeRequest,
        Sizing,
        Speed,
        SpeedRequest,
        Study,
        TableRequest,
        Tokens,
        TraceReport,
        TraceStatsRequest,
        calibrate_logs,
        catalog_costs,
        compare_deployments,
        cost_table,
        estimate_speed,
        kv_cost,
        plan_deployment,
        rank_levers,
        simulate_deployment,
        size_deployments,
        trace_report,
    )

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
    "__version__",
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


def __getattr__(name: str) -> Any:
    if name in __all__ and name != "__version__":
        from kvbudget import api

        return getattr(api, name)
    raise AttributeError(f"module 'kvbudget' has no attribute {name!r}")
