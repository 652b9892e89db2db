"""The comparison question: ``kvbudget compare``, deployments side by side over lists of models, GPUs, engines,
caps, cache dtypes, weights precisions and tensor-parallel sizes, with prices, a rate and simulation."""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.requests.base import option, required
from kvbudget.requests.cost import EngineSettings
from kvbudget.requests.plan import DeploymentSettings

SORTS = ("sessions", "cost", "gpus")
MAX_ROWS = 500  # every row is a full plan; more is a sweep for a script
MAX_SIMULATED_ROWS = 24  # each simulated row is a search of several simulator runs (about a second each)
# the model calls of a whole --simulate sweep: about 4.5 minutes of one core at the simulator's measured 150,000
# calls/s (simulate/deployment.py); 24 rows each under the per-run ceiling used to run about 48 minutes
MAX_SWEEP_CALLS = 40_000_000


@dataclass(frozen=True, kw_only=True)
class CompareRequest(EngineSettings, DeploymentSettings):
    """Every combination of the lists planned as ``plan`` plans it, best first by ``sort``.

    Each list takes a list or a comma-separated text. ``weights``: serving precisions (``"checkpoint"`` for the
    checkpoint's own); ``price``: ``GPU=PRICE`` per GPU-hour (``h100-sxm=2.49/h``); ``prices``: a TOML or JSON file
    of them; ``rate``: new sessions per unit time (``50/h``) with ``workload`` for Little's law; ``sessions``: also
    each row's largest cap for that many sessions; ``simulate``: each served row through the simulator too, held
    to ``ttft`` / ``itl`` (p99 latency targets) when given, with the sessions memory alone allows and which binds;
    ``speed_from``: a ``kvbudget loadtest --json`` result whose measured
    speeds the simulations of its model and engine use (``simulate`` only).
    """

    command = "compare"
    model: tuple[str, ...] = required("model", many=True, name="model")
    gpu: tuple[str, ...] = required("gpu", many=True)
    engine: tuple[str, ...] = option(("ideal",), "engine", many=True)
    context: tuple[int, ...] = required("tokens", many=True)
    kv_dtype: tuple[str, ...] = option(("auto",), "kv_dtype", many=True)
    weights: tuple[str, ...] = option(("checkpoint",), "weights", many=True)
    tp: tuple[int, ...] = option((1,), "gpus", many=True)
    sessions: int | None = option(None, "sessions")
    price: tuple[str, ...] | None = option(None, "text", many=True)
    prices: str | None = option(None, "text")
    rate: float | None = option(None, "per_second")
    workload: str | None = option(None, "text")
    decode_rate: float | None = option(None, "positive")
    prefill_rate: float | None = option(None, "positive")
    sort: str = option("sessions", "text", choices=SORTS)
    simulate: bool = option(False, "switch")
    speed_from: str | None = option(None, "text")
    search_sessions: int = option(1000, "count")
    search_probes: int = option(6, "count")
    jobs: int | None = option(None, "jobs")  # processes for the simulated rows (None: every core)
    ray: str | None = option(None, "address")  # a Ray cluster the simulated rows run on instead, as tasks
    ttft: float | None = option(None, "seconds")  # --simulate: latency targets, as simulate --ttft / --itl
    itl: float | None = option(None, "seconds")
