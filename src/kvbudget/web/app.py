"""The Starlette application of ``kvbudget serve``: the JSON API (``web.api``), uploads, and the page (``static/``).

Every response carries a Content-Security-Policy that lets the page load only from this server (no CDN, no
inline script). A request whose Host header is not the server's own name is refused, so a web page elsewhere
cannot reach a loopback server through a DNS name pointed at 127.0.0.1 (DNS rebinding), and a POST from another
origin is refused.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kvbudget.errors import InputError
from kvbudget.units import parse_count
from kvbudget.web import api
from kvbudget.web.uploads import MAX_GGUF_BYTES, MAX_UPLOAD_BYTES, Uploads

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
JSON = "application/json; charset=utf-8"


def host_name(header: str) -> str:
    """``[::1]:8731`` -> ``::1``, ``localhost:8731`` -> ``localhost``."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class Guard:
    """ASGI middleware: the Host check, the same-origin POST check, and the security headers."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str] | None) -> None:
        self.app = app
        self.allowed = None if allowed_hosts is None else {h.lower() for h in allowed_hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        refusal = None
        if self.allowed is not None and host_name(host).lower() not in self.allowed:
            refusal = f"Host {host!r} is not this server's name; open it as http://127.0.0.1:PORT/"
        origin = headers.get("origin")
        if scope["method"] not in ("GET", "HEAD") and origin is not None and origin != f"http://{host}":
            refusal = f"a request from {origin} is not from this page"
        if refusal is not None:
            await PlainTextResponse(refusal, status_code=403)(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                raw = list(message.get("headers", []))
                raw += [
                    (b"content-security-policy", CSP.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"),
                    (b"cache-control", b"no-store"),
                ]
                message = {**message, "headers": raw}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _json(reply: api.Reply) -> Response:
    return Response(reply.body, status_code=reply.status, media_type=JSON)


def create_app(allowed_hosts: Iterable[str] | None = LOOPBACK_NAMES) -> ASGIApp:
    """The application; ``allowed_hosts`` None accepts any Host header (``--host`` other than loopback)."""
    uploads = Uploads()

    async def command(request: Request) -> Response:
        name = request.path_params["command"]
        return _json(await run_in_threadpool(api.run, name, request.query_params.multi_items(), uploads))

    async def upload(request: Request) -> Response:
        name = request.query_params.get("name", "config.json")
        size_text = request.query_params.get("size")
        try:
            size = None if size_text is None else parse_count(size_text, what="upload: size", high=MAX_GGUF_BYTES)
        except InputError as exc:
            return _json(api.Reply(400, api.error_document(exc) + "\n"))
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_UPLOAD_BYTES:
                too_big = InputError(
                    f"upload: over the {MAX_UPLOAD_BYTES:,}-byte cap; send a config.json or the GGUF's header "
                    "(its first bytes) with size= the whole file's bytes"
                )
                return Response(api.error_document(too_big) + "\n", status_code=413, media_type=JSON)
        return _json(await run_in_threadpool(api.upload, uploads, bytes(body), name=name, size=size))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            uploads.close()

    routes = [
        Route("/api/upload", upload, methods=["POST"]),
        Route("/api/{command}", command, methods=["GET"]),
        Mount("/", StaticFiles(packages=[("kvbudget.web", "static")], html=True)),
    ]
    return Guard(Starlette(routes=routes, lifespan=lifespan), allowed_hosts)
