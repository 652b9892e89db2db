"""The speed question: ``kvbudget speed`` (one request shape on one deployment, as a benchmark run of it)."""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.requests.base import option, required
from kvbudget.requests.plan import Deployment


@dataclass(frozen=True, kw_only=True)
class SpeedRequest(Deployment):
    """Throughput and latency of ``model`` serving requests of ``isl`` prompt and ``osl`` output tokens with
    ``concurrency`` in flight over the whole deployment (``"max"``: as many as the KV pool holds, an offline run);
    ``prefix``: prompt tokens each request finds in the prefix cache (not recomputed)."""

    command = "speed"
    model: str = required("text", name="model")
    isl: int = option(1000, "tokens")
    osl: int = option(1000, "tokens")
    concurrency: str = option("max", "text")
