"""Start and stop a real redis-server for the shared-state tests (no mock stands in for it).

``redis-server`` comes from Debian's package (scripts/setup installs it). Without it the tests skip, which
fails under KVBUDGET_REQUIRE_ALL=1 (tests/conftest.py): CI never passes without having run them.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.live.server import free_port, stop


def binary() -> str:
    found = shutil.which("redis-server")
    if found is None:
        pytest.skip("no redis-server on PATH: run scripts/setup (apt-get install redis-server)")
    return found


@dataclass
class Redis:
    port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start (again, on the same port): no persistence, so a restart of Redis itself loses the state."""
        command = [binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                   "--dir", str(self.directory), "--logfile", str(self.directory / "redis.log")]  # fmt: skip
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server not ready on port {self.port}: {(self.directory / 'redis.log').read_text()}")

    def stop(self) -> None:
        """Stop it by its PID (SIGTERM, then SIGKILL after 10 s); always reaped."""
        process, self.process = self.process, None
        if process is not None:
            stop(process)

    def flush(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as conn:
            conn.sendall(b"FLUSHALL\r\n")
            assert conn.recv(16).startswith(b"+OK")


@contextmanager
def redis_server(directory: Path) -> Iterator[Redis]:
    server = Redis(free_port(), directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()
