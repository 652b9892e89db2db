"""``DELETE /v1/sessions/{id}`` while a streamed request of that session is being relayed, through the gateway's
command line: 204 at once, the slot held until the stream ends (a new session gets no slot meanwhile), then freed
exactly once; in memory, and with two replicas on a real Redis (the DELETE through the other replica).

The upstream holds its stream open until the test lets it go (a threading.Event, no timing): a raw socket that
speaks just enough HTTP, as in test_faults.py (no engine can be told to pause a stream at a chosen point).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from tests.gateway.http_upstream import raw
from tests.live.gateway import Gateway, gateway

pytest.importorskip("aiohttp")

ARGS = ("--cap", "1k", "--sessions", "1", "--engine", "other", "--health-interval", "1h", "--queue-timeout", "1")
EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"


def held_stream(go: threading.Event) -> AbstractContextManager[str]:
    """An upstream whose every answer is a stream: one event, then (once ``go`` is set) the usage and [DONE]."""

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        conn.settimeout(60)
        conn.recv(65536)
        conn.sendall(HEAD + EVENT)
        while not go.wait(0.1):
            if stop.is_set():
                return
        usage = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'
        conn.sendall(usage + b"data: [DONE]\n\n")

    return raw(answer)


def wait_for(gw: Gateway, name: str, value: float, **labels: str) -> None:
    deadline = time.monotonic() + 60  # generous: the condition is guaranteed, only its moment is not
    while gw.metric(name, **labels) != value:
        assert time.monotonic() < deadline, f"{name} stayed at {gw.metric(name, **labels)}, not {value}"
        time.sleep(0.05)


@pytest.mark.parametrize("state", ["memory", "redis"])
def test_delete_during_a_stream_holds_the_slot_until_the_stream_ends_then_frees_it_once(
    state: str, tmp_path: Path
) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}
    go = threading.Event()
    with contextlib.ExitStack() as stack:
        upstream = stack.enter_context(held_stream(go))
        shared: tuple[str, ...] = ()
        if state == "redis":
            pytest.importorskip("redis")
            from tests.gateway.redis_server import redis_server

            shared = ("--state", stack.enter_context(redis_server(tmp_path)).url)
        relaying = stack.enter_context(gateway(upstream, *ARGS, *shared))
        other = stack.enter_context(gateway(upstream, *ARGS, *shared)) if shared else relaying
        conn = relaying.connection()
        conn.request("POST", "/v1/chat/completions", json.dumps(body),
                     {"content-type": "application/json", "x-session-id": "s"})  # fmt: skip
        reply = conn.getresponse()
        assert reply.status == 200 and reply.readline().startswith(b"data:")  # in flight, held by the upstream
        status, headers, _ = other.call(None, path="/v1/sessions/s", method="DELETE")
        assert status == 204 and headers["x-session-id"] == "s"
        assert other.metric("kvbudget_gateway_sessions_resident") == 1  # still held: its request runs
        status, headers, _ = other.call({**body, "stream": False}, "t")
        assert status == 429 and headers["x-kvbudget-refused"] == "queue-timeout"  # no slot freed meanwhile
        go.set()
        rest = reply.read()
        conn.close()
        assert rest.rstrip().endswith(b"data: [DONE]")
        wait_for(other, "kvbudget_gateway_sessions_resident", 0)
        replicas = [relaying] if other is relaying else [relaying, other]
        ended = sum(gw.metric("kvbudget_gateway_sessions_ended_total", why="ended") for gw in replicas)
        assert ended == 1  # freed once, counted once (by the replica that freed it)
        assert other.call(None, path="/v1/sessions/s", method="DELETE")[0] == 404
        assert other.call({**body, "stream": False}, "t")[0] == 200  # the slot is there for the next session
        assert relaying.metric("kvbudget_gateway_sessions_resident") == 1
