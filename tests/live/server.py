"""Start and stop a real llama-server for the live tests (no mock stands in for it).

The binary comes from ``scripts/build-llama-server`` (cached by version outside the clone):
``$KVBUDGET_LLAMA_SERVER`` names it, else the script's default cache path is looked up. Without a
binary the live tests are skipped, unless ``$KVBUDGET_REQUIRE_LIVE`` is set (``scripts/check``
sets it), in which case they fail: CI never passes without having run them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

VERSION = "11434.0.0"  # scripts/build-llama-server VERSION


def binary() -> Path:
    """The llama-server binary, or skip (fail under $KVBUDGET_REQUIRE_LIVE) when none is built."""
    named = os.environ.get("KVBUDGET_LLAMA_SERVER")
    if named:
        path = Path(named)
    else:
        cache = os.environ.get("KVBUDGET_CACHE") or str(
            Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kvbudget"
        )
        path = Path(cache) / "llama-server" / VERSION / "llama-server"
    if path.is_file() and os.access(path, os.X_OK):
        return path
    message = f"no llama-server at {path}: run scripts/build-llama-server"
    if os.environ.get("KVBUDGET_REQUIRE_LIVE"):
        pytest.fail(message)
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Server:
    """A running llama-server: its base URL, log file and process."""

    url: str
    log: Path
    process: subprocess.Popen[bytes]

    def get_json(self, path: str) -> object:
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            return json.loads(response.read())

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def _wait_ready(server: Server, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"llama-server exited with {server.process.returncode}:\n{server.log_text()[-3000:]}")
        try:
            with urllib.request.urlopen(server.url + "/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"llama-server not ready after {timeout_s} s:\n{server.log_text()[-3000:]}")


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop the server by its PID: SIGTERM, then SIGKILL after 10 s; always reaped."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


@contextmanager
def llama_server(model: Path, log: Path, *args: str, ready_timeout_s: float = 60.0) -> Iterator[Server]:
    """Run ``llama-server -m model --host 127.0.0.1 --port P -lv 4 --metrics *args`` until the block ends.

    ``args`` must include ``-c`` (without it llama-server sizes the context to free RAM).
    """
    assert "-c" in args, "always pass -c to llama-server"
    port = free_port()
    command = [str(binary()), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
    command += ["-lv", "4", "--metrics", "-t", "1", "-tb", "1", "--no-warmup", *args]
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = Server(f"http://127.0.0.1:{port}", log, process)
    try:
        _wait_ready(server, ready_timeout_s)
        yield server
    finally:
        stop(process)
