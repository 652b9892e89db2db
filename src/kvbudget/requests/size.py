"""The sizing question: ``kvbudget size``, how many of which GPU a load needs, over lists of models, GPUs,
engines, cache dtypes, weights precisions and tensor-parallel sizes, at one cap and latency targets."""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.requests.base import option, required
from kvbudget.requests.cost import EngineSettings


@dataclass(frozen=True, kw_only=True)
class SizeRequest(EngineSettings):
    """The replicas every combination needs to hold ``sessions`` concurrent sessions over the whole deployment
    (or the concurrency an arrival ``rate`` gives by Little's law with ``workload``'s session time) at the
    ``context`` cap, with time to first token at most ``ttft`` and inter-token latency at most ``itl``.

    ``price``: ``GPU=PRICE`` per GPU-hour (``h100-sxm=2.49/h``); ``prices``: a TOML or JSON file of them;
    ``workload``: the request shape (tokens appended and generated per step, the shared prefix) for the latency;
    without one every request is ``isl`` prompt and ``osl`` output tokens; with one, a combination whose cap
    refuses more than ``target_refusal_rate`` of the workload's sessions (default 0.1%, simulate's) is unmet;
    ``speed_from``: a ``kvbudget loadtest --json`` result whose measured
    speeds replace the roofline for the rows of its model and engine; ``no_simulate``: the latency-bound counts
    as speed's arithmetic gives them (every session generating at once, an upper bound), without the check by
    simulation (plan/sizing_check.py) that refines them when the workload's sessions pause; ``jobs``: processes
    for those checks (None: every core).
    """

    command = "size"
    model: tuple[str, ...] = required("model", many=True, name="model")
    gpu: tuple[str, ...] = required("gpu", many=True)
    engine: tuple[str, ...] = option(("vllm",), "engine", many=True)
    context: int = required("tokens")
    kv_dtype: tuple[str, ...] = option(("auto",), "kv_dtype", many=True)
    weights: tuple[str, ...] = option(("checkpoint",), "weights", many=True)
    tp: tuple[int, ...] = option((1,), "gpus", many=True)
    sessions: int | None = option(None, "sessions")
    rate: float | None = option(None, "per_second")
    workload: str | None = option(None, "text")
    ttft: float | None = option(None, "seconds")
    itl: float | None = option(None, "seconds")
    isl: int = option(1000, "tokens")
    osl: int = option(1000, "tokens")
    price: tuple[str, ...] | None = option(None, "text", many=True)
    prices: str | None = option(None, "text")
    utilization: float | None = option(None, "fraction")
    overhead: int | None = option(None, "memory")
    group_size: int = option(128, "count")
    speed_from: str | None = option(None, "text")
    target_refusal_rate: float | None = option(None, "tolerance")
    no_simulate: bool = option(False, "switch")
    jobs: int | None = option(None, "jobs")
