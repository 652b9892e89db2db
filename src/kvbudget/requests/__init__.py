"""The typed questions kvbudget answers, one frozen request per command, read and checked once (requests/base.py),
with the defaults every face shares. ``by_command()`` maps each command to its request."""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.requests.base import Request


def by_command() -> dict[str, type[Request]]:
    """Each command's request (imported here, not at start-up: a one-answer command loads only its own)."""
    from kvbudget.requests.calibrate import CalibrateRequest
    from kvbudget.requests.compare import CompareRequest
    from kvbudget.requests.cost import CostRequest, GpusRequest, ModelsRequest, TableRequest
    from kvbudget.requests.gateway import GatewayRequest
    from kvbudget.requests.plan import LeversRequest, PlanRequest
    from kvbudget.requests.report import ReportRequest
    from kvbudget.requests.serve import ServeRequest
    from kvbudget.requests.simulate import SimulateRequest
    from kvbudget.requests.size import SizeRequest
    from kvbudget.requests.speed import SpeedRequest
    from kvbudget.requests.trace import TraceStatsRequest

    classes: list[type[Request]] = [
        CostRequest,
        TableRequest,
        ModelsRequest,
        GpusRequest,
        PlanRequest,
        LeversRequest,
        CompareRequest,
        SimulateRequest,
        TraceStatsRequest,
        CalibrateRequest,
        ReportRequest,
        SpeedRequest,
        SizeRequest,
        GatewayRequest,
        ServeRequest,
    ]
    return {cls.command: cls for cls in classes}
