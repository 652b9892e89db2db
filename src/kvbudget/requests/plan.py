"""The capacity questions: ``kvbudget plan`` (one deployment at a cap) and ``levers`` (what each lever buys)."""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.requests.base import Request, option, required
from kvbudget.requests.cost import EngineChoice


@dataclass(frozen=True, kw_only=True)
class DeploymentSettings(Request):
    """How a deployment is laid out and what it measured: ``gpus`` defaults to tp x pp; ``weights_size`` a measured
    weight footprint (``weight_bits`` its bits); ``overhead`` a measured runtime overhead per GPU (default: the
    engine's model of it, labelled); ``utilization`` vLLM's gpu_memory_utilization / SGLang's mem_fraction_static
    (default: the engine's); ``prefix`` tokens every session shares; ``offload_memory`` a CPU or disk tier."""

    gpus: int | None = option(None, "gpus")
    pp: int = option(1, "gpus")
    weights_size: int | None = option(None, "memory")
    weight_bits: int | None = option(None, "count")
    group_size: int = option(128, "count")
    overhead: int | None = option(None, "memory")
    utilization: float | None = option(None, "fraction")
    prefix: int | None = option(None, "prefix")
    offload_memory: int | None = option(None, "memory")
    link: str = option("pcie-gen5-x16", "link")


@dataclass(frozen=True, kw_only=True)
class Deployment(EngineChoice, DeploymentSettings):
    """One deployment: give ``gpu`` (a catalog name) or ``gpu_memory`` (bytes or ``"80GB"``); ``weights`` is a
    serving precision (default: the checkpoint's own)."""

    gpu: str | None = option(None, "gpu")
    gpu_memory: int | None = option(None, "memory")
    weights: str | None = option(None, "serving_weights")


@dataclass(frozen=True, kw_only=True)
class PlanRequest(Deployment):
    """Sessions one deployment serves at the ``context`` cap, with its memory ledger; ``sessions``: also the
    largest cap that serves that many; ``from_log``: an engine start-up log whose measured figures replace the
    modelled ones (``startup``: which start-up, 1-based or "last", of a log holding several); ``alerts``: with
    the Prometheus alerting rules tied to the plan's numbers; ``speed_from``: a ``kvbudget loadtest --json`` result
    of this model and engine, whose measured speeds give the latency at the planned sessions (plan/speeds.py)."""

    command = "plan"
    model: str = required("model", name="model")
    context: int = required("tokens")
    sessions: int | None = option(None, "sessions")
    from_log: str | None = option(None, "text")
    startup: int | str | None = option(None, "startup")  # the start-up taken of a log holding several
    alerts: bool = option(False, "switch")  # also the Prometheus alerting rules tied to the plan (plan/alerts.py)
    speed_from: str | None = option(None, "text")  # a load test's measured speeds (plan/speeds.py)


@dataclass(frozen=True, kw_only=True)
class LeversRequest(PlanRequest):
    """What each lever (cap, KV dtype, weights, TP, prefix, engine) buys on the deployment ``plan`` would make."""

    command = "levers"
