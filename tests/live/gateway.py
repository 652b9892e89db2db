"""Run ``kvbudget gateway`` as its command line does (a subprocess on a free port) in front of a live server, and
talk to it with the standard library's HTTP client (streams read event by event, connections closed at will)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Gateway:
    url: str
    process: subprocess.Popen[str]

    @property
    def port(self) -> int:
        port = urlsplit(self.url).port
        assert port is not None
        return port

    def connection(self, timeout: float = 60) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def call(
        self, body: Any, session: str | None = None, *, path: str = "/v1/chat/completions", method: str = "POST",
        headers: dict[str, str] | None = None, raw: bytes | None = None,
    ) -> tuple[int, dict[str, str], Any]:  # fmt: skip
        """One request; the answer's status, headers (lower-case names) and JSON body (or text)."""
        sent = dict(headers or {})
        if session is not None:
            sent["x-session-id"] = session
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        if data is not None:
            sent.setdefault("content-type", "application/json")
        conn = self.connection()
        try:
            conn.request(method, path, body=data, headers=sent)
            reply = conn.getresponse()
            text = reply.read().decode("utf-8", "replace")
            got = {k.lower(): v for k, v in reply.getheaders()}
        finally:
            conn.close()
        try:
            return reply.status, got, json.loads(text)
        except ValueError:
            return reply.status, got, text

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a /metrics sample's values over its labels, or those with ``labels`` (0 when absent)."""
        status, _, text = self.call(None, path="/metrics", method="GET")
        assert status == 200
        total = 0.0
        wanted = [f'{key}="{value}"' for key, value in labels.items()]
        for line in str(text).splitlines():
            named = line.startswith(name + "{") or line.startswith(name + " ")
            if named and all(label in line.split("}", 1)[0] for label in wanted):
                total += float(line.rsplit(" ", 1)[1])
        return total


def events(reply: http.client.HTTPResponse) -> Iterator[tuple[float, str]]:
    """The SSE data lines of a streamed answer as they arrive, with the time each arrived."""
    while True:
        line = reply.readline()
        if not line:
            return
        text = line.decode("utf-8", "replace").strip()
        if text.startswith("data:"):
            yield time.monotonic(), text[5:].strip()


def start(upstream: str, *args: str) -> Gateway:
    path = [str(ROOT / "src")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}  # this tree first, then what the caller adds
    command = [sys.executable, "-m", "kvbudget", "gateway", "--upstream", upstream, "--port", "0", *args]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None
    first = process.stdout.readline()
    if not first.startswith("kvbudget gateway: "):
        process.kill()
        raise RuntimeError(f"gateway did not start: {first}{process.communicate()[1]}")
    return Gateway(first.split()[2], process)


def stop(gateway: Gateway) -> str:
    """Stop as Ctrl-C does (the recorder flushes); returns stderr."""
    if gateway.process.poll() is None:
        os.kill(gateway.process.pid, signal.SIGINT)
    try:
        _, err = gateway.process.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        os.kill(gateway.process.pid, signal.SIGKILL)
        _, err = gateway.process.communicate(timeout=10)
    return err


@contextmanager
def gateway(upstream: str, *args: str) -> Iterator[Gateway]:
    running = start(upstream, *args)
    try:
        yield running
    finally:
        err = stop(running)
        assert "Traceback" not in err, err
