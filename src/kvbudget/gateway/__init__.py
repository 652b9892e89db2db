"""``kvbudget gateway``: a session gateway in front of OpenAI-compatible serving engines (docs/gateway.md).

``settings`` resolves the request (and a plan's numbers) into what the gateway enforces; ``sessions`` names a
request's session; ``keys`` the team of its API key; ``admission`` keeps at most the planned sessions resident on
each upstream and queues new ones FIFO (``shared`` and ``atomic``: the same in Redis for several replicas);
``health`` checks the upstreams; ``cap`` counts a request's tokens as the engine will and refuses or truncates
past the cap, ``compact`` summarises instead; ``upstreams`` makes the calls to the engines; ``stream`` passes
their bytes through as they come; ``records`` writes one trace row per step; ``metrics`` is /metrics; ``app`` is
the Starlette application. Starlette, uvicorn, aiohttp, prometheus_client and redis are the ``gateway`` extra;
nothing here is imported by the other commands.
"""

from __future__ import annotations

EXTRA = "gateway"
NEEDS = ("starlette", "uvicorn", "aiohttp", "prometheus_client")


def require_extra() -> None:
    """Raise MissingExtraError (one line) when a package of the extra is not installed."""
    import importlib.util

    from kvbudget.errors import MissingExtraError

    missing = [name for name in NEEDS if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtraError(f"kvbudget gateway needs {', '.join(missing)}: pip install 'kvbudget[{EXTRA}]'")
