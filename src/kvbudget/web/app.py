"""The Starlette application of ``kvbudget serve``: the JSON API (``web.api``), uploads, and the page (``static/``).

Every response, refusals and errors included, carries a Content-Security-Policy that lets the page load only
from this server (no CDN, no inline script) and the other security headers. A request whose Host header is not
one this server answers (web/hosts.py: loopback in every spelling, its own name) is refused, so a web page
elsewhere cannot reach the server through a DNS name pointed at its address (DNS rebinding), and a POST from
another origin is refused. Heavy answers run within web/limits.py's budget (a bounded number at once, 503 with
the reason when over), each in a process of its own held to a time and a memory budget (web/isolate.py).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kvbudget.errors import InputError, KvBudgetError
from kvbudget.requests.serve import REQUEST_MEMORY, REQUEST_SECONDS
from kvbudget.units import parse_count, shown
from kvbudget.web import api, isolate
from kvbudget.web.hosts import HostPolicy
from kvbudget.web.limits import Busy, Gate
from kvbudget.web.uploads import MAX_GGUF_BYTES, MAX_UPLOAD_BYTES, Uploads

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
KILL_GRACE_S = 2.0  # the gate waits this much past an answer's budget for its process to be stopped
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
JSON = "application/json; charset=utf-8"
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]


class Guard:
    """ASGI middleware: the Host check, the same-origin POST check, the security headers on every response, and
    no traceback to a client (an unexpected failure is a 500 with the error document, its details kept out)."""

    def __init__(self, app: ASGIApp, bound: str | None) -> None:
        self.app = app
        self.hosts = HostPolicy(bound)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                names = {name for name, _ in HEADERS}
                raw = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names] + HEADERS
                message = {**message, "headers": raw}
            await send(message)

        headers = Headers(scope=scope)
        host = headers.get("host", "")
        refusal = None
        if not self.hosts.allows(host):
            refusal = f"Host {shown(host)} is not this server's name; open it as http://127.0.0.1:PORT/"
        origin = headers.get("origin")
        if scope["method"] not in ("GET", "HEAD") and origin is not None and origin != f"http://{host}":
            refusal = f"a request from {shown(origin)} is not from this page"
        if refusal is not None:
            await PlainTextResponse(refusal, status_code=403)(scope, receive, send_with_headers)
            return
        try:
            await self.app(scope, receive, send_with_headers)
        except Exception as exc:  # never a traceback to the client nor a bare 500 without headers
            if not started:
                failed = KvBudgetError(f"the server failed on this request ({type(exc).__name__}); please report it")
                body = api.error_document(failed) + "\n"
                await Response(body, status_code=500, media_type=JSON)(scope, receive, send_with_headers)


def _json(reply: api.Reply) -> Response:
    return Response(reply.body, status_code=reply.status, media_type=JSON)


def _busy(exc: Busy) -> Response:
    return Response(api.error_document(exc) + "\n", status_code=503, media_type=JSON, headers={"retry-after": "5"})


def create_app(
    bound: str | None = "127.0.0.1", *, seconds: float = REQUEST_SECONDS, memory_bytes: int = REQUEST_MEMORY
) -> ASGIApp:
    """The application of a server listening on ``bound`` (its ``--host``; None: any Host header is answered);
    each heavy answer runs in its own process, killed past ``seconds`` and held to ``memory_bytes`` more
    memory (web/isolate.py)."""
    uploads = Uploads()
    gate = Gate(answer_s=seconds + KILL_GRACE_S)  # the child is killed at ``seconds``; the gate is the backstop

    async def command(request: Request) -> Response:
        name = request.path_params["command"]
        query = request.query_params.multi_items()
        if name == "gpus":  # the catalog, read once: never behind the heavy answers
            return _json(api.run(name, query, uploads))
        view = uploads.view()
        try:
            return _json(
                await gate.run(
                    lambda: isolate.answer(name, query, view, seconds=seconds, memory_bytes=memory_bytes),
                    isolate.too_long(name, seconds),  # the child is late to start: the budget is still the server's
                )
            )
        except Busy as exc:
            return _busy(exc)

    async def upload(request: Request) -> Response:
        name = request.query_params.get("name", "config.json")
        size_text = request.query_params.get("size")
        try:
            size = None if size_text is None else parse_count(size_text, what="upload: size", high=MAX_GGUF_BYTES)
        except InputError as exc:
            return _json(api.Reply(400, api.error_document(exc) + "\n"))
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared[:20]) > MAX_UPLOAD_BYTES:
            return Response(api.error_document(_too_big()) + "\n", status_code=413, media_type=JSON)
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_UPLOAD_BYTES:
                return Response(api.error_document(_too_big()) + "\n", status_code=413, media_type=JSON)
        data = bytes(body)
        try:
            return _json(await gate.run(lambda: api.upload(uploads, data, name=name, size=size)))
        except Busy as exc:
            return _busy(exc)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        threading.Thread(target=isolate.start, name="kvbudget-forkserver", daemon=True).start()
        try:
            yield
        finally:
            uploads.close()

    routes = [
        Route("/api/upload", upload, methods=["POST"]),
        Route("/api/{command}", command, methods=["GET"]),
        Mount("/", StaticFiles(packages=[("kvbudget.web", "static")], html=True)),
    ]
    return Guard(Starlette(routes=routes, lifespan=lifespan), bound)


def _too_big() -> InputError:
    return InputError(
        f"upload: over the {MAX_UPLOAD_BYTES:,}-byte cap; send a config.json or the GGUF's header "
        "(its first bytes) with size= the whole file's bytes"
    )
