"""``kvbudget serve``: the local web calculator (parse, start the server). docs/serve.md has the API.

Needs the ``web`` extra (starlette, uvicorn), imported only when the command runs (as are socket and ipaddress:
registering the command costs ``kvbudget cost`` nothing). Listens on 127.0.0.1 unless
``--host`` says otherwise (then one warning line); ``--port 0`` takes a free port. The URL is printed once the
socket listens, so a script can read it from the first line of stdout.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kvbudget.errors import InputError

if TYPE_CHECKING:
    import socket

from kvbudget.requests.serve import DEFAULT_PORT


def register(sub: argparse._SubParsersAction[Any]) -> dict[str, Callable[[argparse.Namespace], str]]:
    p = sub.add_parser("serve", help="a local web calculator and JSON API over these commands (extra: web)")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", help=f"port (default {DEFAULT_PORT}; 0 = a free one)")
    p.add_argument(
        "--request-seconds", help="a heavy answer is stopped past this, with a 503 (default 2m; e.g. 30s, 5m)"
    )
    p.add_argument(
        "--request-memory",
        help="memory one answer may add, past it a 503 (default 1GiB; enforced on Linux, where each answer "
        "runs in a process of its own)",
    )
    return {"serve": _cmd_serve}


def is_loopback(host: str) -> bool:
    from kvbudget.web.hosts import is_loopback as loopback

    return loopback(host)


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port``; a busy port or an unknown host is one InputError line."""
    import socket

    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise InputError(f"--host {host}: cannot resolve it ({exc.strerror})") from None
    sock = socket.socket(info[0], socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # accepted connections inherit it (Linux): without it, uvicorn serving a socket made here answers a
    # keep-alive request 40 ms late (Nagle's algorithm against the client's delayed ACK; measured: 44 ms vs 0.5 ms)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind(info[4])
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise InputError(
            f"--port {port}: cannot listen on {host}:{port} ({exc.strerror or exc}); pick another port, or --port 0"
        ) from None
    return sock


def url_of(sock: socket.socket) -> str:
    address, port = sock.getsockname()[:2]
    shown = f"[{address}]" if ":" in address else address
    return f"http://{shown}:{port}/"


def _cmd_serve(args: argparse.Namespace) -> str:
    from kvbudget.web import require_extra

    require_extra()
    import uvicorn

    from kvbudget.requests.serve import ServeRequest
    from kvbudget.web.app import create_app

    names = ("host", "port", "request_seconds", "request_memory")
    request = ServeRequest.from_options({name: getattr(args, name) for name in names})
    port = request.port
    loopback = is_loopback(request.host)
    if not loopback:
        print(
            f"Warning: --host {request.host} is not a loopback address: anyone who can reach this machine on port "
            f"{port} can use the calculator and upload files to it",
            file=sys.stderr,
        )
    sock = listen(request.host, port)
    app = create_app(request.host, seconds=request.request_seconds, memory_bytes=request.request_memory)
    print(f"kvbudget serve: {url_of(sock)} (Ctrl-C stops it)", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    # uvicorn stops gracefully on SIGTERM, then raises it again: with this handler the process then exits as
    # Python does (exit handlers run: multiprocessing removes its fork server's folder), instead of being killed
    import signal

    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    server.run(sockets=[sock])
    return "kvbudget serve: stopped"


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
