"""An upstream that answers garbage: a clean 502 in OpenAI's shape, the request's slot accounting intact, no
traceback. The upstream here is a raw socket that writes the bytes under test (no engine sends garbage on
purpose, so none can stand in for it); the gateway runs as its command line does. The stalled upstream is a real
llama-server stopped with SIGSTOP: tests/live/test_gateway_live.py."""

from __future__ import annotations

import json
import socket
import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from tests.gateway.http_upstream import raw
from tests.live.gateway import gateway

pytest.importorskip("aiohttp")

ANSWERS = {
    "not-http": b"this is not HTTP at all\r\n\r\n",
    "cut-body": b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{"choices": [',
    "bad-length": b"HTTP/1.1 200 OK\r\ncontent-length: lots\r\n\r\n{}",
}


ARGS = ("--cap", "1k", "--sessions", "1", "--engine", "other", "--health-interval", "1h", "--queue-timeout", "1")


def garbage(answer: bytes, *later: bytes) -> AbstractContextManager[str]:
    """A TCP server answering every connection with ``answer`` (after reading the request), then each of ``later``
    0.2 s apart, then closing it."""

    def send(conn: socket.socket, stop: threading.Event) -> None:
        conn.settimeout(2)
        conn.recv(65536)
        conn.sendall(answer)
        for piece in later:
            stop.wait(0.2)
            conn.sendall(piece)

    return raw(send)


@pytest.mark.parametrize("kind", sorted(ANSWERS))
def test_garbage_from_the_upstream_is_a_clean_502_and_the_slot_is_freed(kind: str) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    with garbage(ANSWERS[kind]) as upstream, gateway(upstream, *ARGS) as gw:
        for stream in (False, True):
            status, headers, answer = gw.call({**body, "stream": stream}, "s", headers={"x-session-end": "1"})
            assert status == 502, (kind, stream, answer)
            assert answer["error"]["type"] == "upstream_error" and answer["error"]["code"] == "upstream_failed"
            assert headers["x-session-id"] == "s"
            deadline = time.monotonic() + 30  # freed once the answer is sent: a moment later on a loaded machine
            while gw.metric("kvbudget_gateway_sessions_resident") != 0:  # ended with its request: the slot frees
                assert time.monotonic() < deadline, "the slot was not freed"
                time.sleep(0.05)
        assert gw.metric("kvbudget_gateway_upstream_errors_total") >= 2


def test_an_answer_that_arrives_in_pieces_is_relayed_whole() -> None:
    content = json.dumps({"choices": [{"message": {"content": "x" * 3000}}], "usage": {"prompt_tokens": 3}})
    first = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(content)}\r\n\r\n"
    pieces = [content[i : i + 1000].encode() for i in range(0, len(content), 1000)]
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    with garbage(first.encode() + pieces[0], *pieces[1:]) as upstream, gateway(upstream, *ARGS) as gw:
        status, _, answer = gw.call(body, "s")
        assert status == 200 and answer == json.loads(content)  # (it was cut at the first piece before)


def test_sessions_left_in_redis_on_an_upstream_no_longer_configured_move_or_get_a_clean_503(tmp_path: Path) -> None:
    from tests.gateway.redis_server import redis_server

    pytest.importorskip("redis")
    content = json.dumps({"choices": [{"message": {"content": "ok"}}], "usage": {"prompt_tokens": 3}})
    answer = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(content)}\r\n\r\n{content}"
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    with redis_server(tmp_path) as redis, garbage(answer.encode()) as upstream:
        state = ("--state", redis.url)
        with gateway("http://127.0.0.1:9", *ARGS, *state, "--sessions", "2") as before:  # nothing on port 9
            for name in ("a", "b"):
                assert before.call(body, name)[0] == 502  # admitted (resident), then the upstream failed
        with gateway(upstream, *ARGS, *state) as after:  # the next deploy: another upstream, one slot
            assert after.call(body, "a")[0] == 200  # moved to the new upstream's free slot
            status, headers, answer_ = after.call(body, "b")
            assert status == 503 and answer_["error"]["code"] == "upstream_unknown" and headers["retry-after"] == "1"
