"""``kvbudget loadtest``: drive a running OpenAI-compatible server with agent sessions at the cap.

Closed loop: N concurrent sessions, each a multi-step loop whose prompt is the previous prompt, the
previous output and the tokens appended for the step, with tool pauses and a shared prefix. The
ramp raises N until a level refuses, defers or preempts a request, or its p99 time-to-first-token
passes the target; the server's own metrics are read throughout. docs/loadtest.md has the whole
contract.

Modules, one concept each: ``client`` (async HTTP, streaming, TTFT), ``server`` (what the server
is), ``prompts`` (text of a known token count), ``session`` (the agent loop), ``metrics``
(Prometheus and llama.cpp ``/slots``), ``record`` (what was measured), ``ramp`` (levels and the
criterion), ``predict`` (plan and simulator), ``result`` (JSON contract), ``report`` (text),
``progress`` (stderr), ``run`` (the whole run). aiohttp and prometheus_client are the
``loadtest`` extra; nothing here is imported by other commands.
"""

from __future__ import annotations

EXTRA = "loadtest"


def require_extra() -> None:
    """Raise MissingExtraError (one line) when aiohttp or prometheus_client is not installed."""
    import importlib.util

    from kvbudget.errors import MissingExtraError

    missing = [name for name in ("aiohttp", "prometheus_client") if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtraError(f"kvbudget loadtest needs {' and '.join(missing)}: pip install 'kvbudget[{EXTRA}]'")
