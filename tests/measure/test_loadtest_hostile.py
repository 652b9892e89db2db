"""The load tester against a hostile peer (issue 22): a real local HTTP server started in the test that stalls,
trickles, redirects to another host, answers garbage or an endless body. No engine is imitated: each handler
misbehaves the way no real engine would, so no real server could play it.

Each run must end within its --duration (plus the stated grace) in one error line, never a traceback or a hang."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")

from kvbudget.cli.main import main
from kvbudget.measure.loadtest.record import Level, Recorder
from kvbudget.measure.loadtest.result import Outcome
from kvbudget.measure.loadtest.run import DEADLINE_GRACE_S
from kvbudget.measure.loadtest.verdict import judge

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "coding-agent.toml")


class Hostile(BaseHTTPRequestHandler):
    mode = "stall"
    stop = threading.Event()

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        mode = type(self).mode
        if mode == "stall":
            type(self).stop.wait(60)
            return
        if mode == "redirect":
            self.send_response(302)
            self.send_header("Location", "http://another-host.invalid/v1/models")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        if mode == "garbage":
            self.wfile.write(b"\x00\xff{{{ not json \x9c" * 100)
            return
        chunk = b"x" * 65536 if mode == "endless" else b"["
        try:
            while not type(self).stop.is_set():
                self.wfile.write(chunk)
                if mode == "trickle":
                    time.sleep(0.5)
        except OSError:
            pass

    do_POST = do_GET


@pytest.fixture
def hostile() -> Iterator[tuple[str, type[Hostile]]]:
    class handler(Hostile):  # its own stop event and mode, per test
        stop = threading.Event()

    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        handler.stop.set()
        server.shutdown()
        server.server_close()


def run(capsys: pytest.CaptureFixture[str], url: str, *extra: str) -> tuple[float, str]:
    began = time.monotonic()
    code = main(["loadtest", url, "--workload", EXAMPLE, "--context", "4096", "--max-sessions", "2", *extra])
    took = time.monotonic() - began
    captured = capsys.readouterr()
    assert code == 1, captured.out
    err = captured.err.strip().splitlines()[-1]
    assert err.startswith("Error: ") and "Traceback" not in captured.err, captured.err
    return took, err


@pytest.mark.parametrize("mode", ["stall", "trickle"])
def test_duration_bounds_a_server_that_never_answers(
    hostile: tuple[str, type[Hostile]], capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    url, handler = hostile
    handler.mode = mode
    took, err = run(capsys, url, "--duration", "2")
    assert took < 2 + DEADLINE_GRACE_S + 3  # the probe's own 10 s timeout would be longer
    assert "--duration 2 s passed before the server gave a level to measure" in err


def test_a_redirect_to_another_host_is_not_followed(
    hostile: tuple[str, type[Hostile]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, handler = hostile
    handler.mode = "redirect"
    _, err = run(capsys, url, "--duration", "20")
    assert "answered HTTP 302, a redirect to 'http://another-host.invalid/v1/models'" in err
    assert "follows no redirect" in err


def test_an_endless_page_is_cut_at_its_limit(
    hostile: tuple[str, type[Hostile]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, handler = hostile
    handler.mode = "endless"
    took, err = run(capsys, url, "--duration", "60")
    # the probe's page stops at 8 MiB; an event-stream line at aiohttp's 512 KiB
    assert "answered more than 8 MiB" in err or "an answer line longer than 512 KiB" in err
    assert took < 30


def test_garbage_is_one_error_line(hostile: tuple[str, type[Hostile]], capsys: pytest.CaptureFixture[str]) -> None:
    url, handler = hostile
    handler.mode = "garbage"
    run(capsys, url, "--duration", "20")


def _outcome(output: int, duration_s: float) -> Outcome:
    rec = Recorder("vllm", None)
    level = Level(sessions=3, started_s=0.0, ended_s=30.0)
    level.passed = True
    rec.levels.append(level)
    rec.requests = 40
    rec.tokens["output"] = output
    o = Outcome(url="http://127.0.0.1:8000", settings={}, recorder=rec, duration_s=duration_s)
    o.sustained, o.sustained_basis = 3, "levels up to 3 passed"
    return o


@pytest.mark.parametrize(
    ("output", "unreadable", "said"),
    [
        (10**20, 0, "past any GPU"),
        (0, 0, "40 requests produced no output token"),
        (12_000, 7, "7 token counts that are no count"),
    ],
)
def test_an_implausible_run_gets_no_verdict(output: int, unreadable: int, said: str) -> None:
    o = _outcome(output, 31.0)
    judge(o, unreadable)
    assert o.sustained is None
    assert said in o.sustained_basis and any(said in w for w in o.warnings)


def test_a_plausible_run_keeps_its_verdict() -> None:
    o = _outcome(12_000, 31.0)  # 387 tokens/s
    judge(o, 0)
    assert o.sustained == 3 and not o.warnings
