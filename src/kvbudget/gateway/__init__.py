"""``kvbudget gateway``: a session gateway in front of an OpenAI-compatible serving engine (docs/gateway.md).

``settings`` resolves the request (and a plan's numbers) into what the gateway enforces; ``sessions`` names a
request's session; ``admission`` keeps at most the planned sessions resident and queues new ones FIFO; ``cap``
counts a request's tokens as the engine will and refuses or truncates past the cap; ``stream`` passes the
upstream's bytes through as they come; ``records`` writes one trace row per step; ``metrics`` is /metrics;
``app`` is the Starlette application. Starlette, uvicorn, aiohttp and prometheus_client are the ``gateway``
extra; nothing here is imported by the other commands.
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
