"""A small real HTTP upstream for the gateway tests: a threaded ``http.server`` on a free local port, started in a
thread of the test, whose answers each test module writes in a handler of its own (what no real engine does on
demand: hold an answer, leave ``usage`` out, answer garbage). The gateway talks to it over real sockets."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar


class Upstream(ThreadingHTTPServer):
    """The server; a test's subclass holds what its handler answers and records."""

    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def stopping(self) -> None:
        """Called before the server shuts down: a subclass releases any request it holds."""


class Handler(BaseHTTPRequestHandler):
    """Quiet (no access log on stderr), with one plain answer: status 200, the body and its length."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, body: bytes, kind: str = "application/json") -> None:
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


U = TypeVar("U", bound=Upstream)


@contextmanager
def serving(server: U) -> Iterator[U]:
    """The server answering in a thread of its own until the block ends, then stopped and closed."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stopping()
        server.shutdown()
        server.server_close()
        thread.join(10)
