"""``kvbudget gateway``: a session gateway that enforces a plan (parse, start the server). docs/gateway.md.

Needs the ``gateway`` extra, imported only when the command runs. Listens on 127.0.0.1:8740 unless ``--host``
says otherwise (then one warning line); ``--port 0`` takes a free port. The URL is printed once the socket
listens, so a script can read it from the first line of stdout.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from kvbudget.requests.gateway import DEFAULT_PORT, ENGINES, ON_CAP


def register(sub: argparse._SubParsersAction[Any]) -> dict[str, Callable[[argparse.Namespace], str]]:
    p = sub.add_parser(
        "gateway", help="an OpenAI-compatible proxy that admits the planned sessions and holds the cap (extra: gateway)"
    )
    p.add_argument("--upstream", action="append", help="an engine's base URL, e.g. http://127.0.0.1:8000 (required; "
                   "repeat for several: a session sticks to one, new ones go to the least loaded)")  # fmt: skip
    p.add_argument("--from-plan", help="a `kvbudget plan --json` document: cap, sessions and engine from it")
    p.add_argument("--cap", help="tokens a request may hold, prompt + max_tokens (32768, 32k)")
    p.add_argument("--sessions", help="resident sessions admitted at most per upstream; new ones queue")
    p.add_argument("--engine", choices=ENGINES, help="how tokens are counted (default auto: probe the upstream)")
    p.add_argument("--on-cap", choices=ON_CAP, help="past the cap: refuse (OpenAI's 400, default), truncate, "
                   "or compact (summarise the dropped turns through the upstream)")  # fmt: skip
    p.add_argument("--host", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", help=f"port (default {DEFAULT_PORT}; 0 = a free one)")
    p.add_argument("--idle-timeout", help="a session idle this long leaves its slot (default 10m)")
    p.add_argument("--queue-timeout", help="a new session waits this long for a slot, then 429 (default 30s)")
    p.add_argument("--max-queue", help="new sessions waiting at once; past it 429 at once (default 1024)")
    p.add_argument("--max-body", help="largest request body (default 8MiB); past it 413")
    p.add_argument("--upstream-timeout", help="longest silence of the upstream while answering (default 10m)")
    p.add_argument("--record", help="append one kvbudget trace row per step to this JSONL file")
    p.add_argument("--health-interval", help="check each upstream's /health this often (default 5s); 2 failures "
                   "in a row stop its new sessions until it answers again")  # fmt: skip
    p.add_argument("--keys", help='API keys with session quotas, a JSON file: {"team-a": {"key": "sk-...", '
                   '"sessions": 4}}; requests then need one (401), each key its own sessions')  # fmt: skip
    p.add_argument("--upstream-key-env", help="an environment variable holding the engines' API key (their "
                   "--api-key), sent on every call to them")  # fmt: skip
    p.add_argument("--state", help="memory (default), or redis://HOST:PORT/DB: sessions shared by several replicas")
    return {"gateway": _cmd_gateway}


def _cmd_gateway(args: argparse.Namespace) -> str:
    from kvbudget.gateway import require_extra

    require_extra()
    import uvicorn

    from kvbudget.cli.serve import is_loopback, listen, url_of
    from kvbudget.gateway.app import create_app
    from kvbudget.gateway.settings import resolve
    from kvbudget.requests.gateway import GatewayRequest

    names = ("upstream", "from_plan", "cap", "sessions", "engine", "on_cap", "host", "port", "idle_timeout",
             "queue_timeout", "max_queue", "max_body", "upstream_timeout", "record", "state",
             "health_interval", "keys", "upstream_key_env")  # fmt: skip
    request = GatewayRequest.from_options({name: getattr(args, name) for name in names})
    settings = resolve(request)
    if settings.state is not None:
        from kvbudget.gateway.redis_link import check

        check(settings.state)
    if not is_loopback(request.host):
        print(
            f"Warning: --host {request.host} is not a loopback address: anyone who can reach this machine on port "
            f"{request.port} can send requests through the gateway to {', '.join(settings.upstreams)}",
            file=sys.stderr,
        )
    sock = listen(request.host, request.port)
    app = create_app(settings)
    print(
        f"kvbudget gateway: {url_of(sock)} -> {', '.join(settings.upstreams)} (cap {settings.cap} tokens, "
        f"{settings.sessions} sessions{' per upstream' if len(settings.upstreams) > 1 else ''}, on cap: "
        f"{settings.on_cap}, state: {'memory' if settings.state is None else 'redis'}; Ctrl-C stops it)",
        flush=True,
    )
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5, server_header=False)
    )
    server.run(sockets=[sock])
    return "kvbudget gateway: stopped"
