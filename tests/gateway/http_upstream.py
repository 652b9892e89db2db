"""Small real upstreams for the gateway tests, on a free local port in threads of the test, answering what no real
engine does on demand (hold an answer, leave ``usage`` out, answer garbage); the gateway talks to them over real
sockets. ``Upstream``: a threaded ``http.server`` whose answers each test module writes in a handler of its own;
``raw``: a TCP listener whose connections a test answers with the bytes under test (HTTP it speaks itself)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
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


@contextmanager
def raw(answer: Callable[[socket.socket, threading.Event], None]) -> Iterator[str]:
    """A TCP server on a free port (its URL yielded) calling ``answer(connection, stop)`` for each connection, in a
    thread of its own; ``stop`` is set when the block ends. The connection is closed after, an OSError ignored."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stop = threading.Event()

    def answering(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            answer(conn, stop)

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=answering, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()
