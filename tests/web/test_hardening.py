"""The web server under a hostile client, against a real ``kvbudget serve``: every loopback spelling of the Host
header is answered and every DNS name refused (DNS rebinding), security headers on every response (403, 404, 400,
413 and 200 alike), no path of the server's machine in any message, values that read as options never reach a
parser of options, and the heavy-request gate answers 503 with its reason instead of queueing without end."""

from __future__ import annotations

import asyncio
import http.client
import json
import sys
import time
import urllib.parse

import pytest

from kvbudget.web.hosts import HostPolicy, address, is_loopback, split_host
from kvbudget.web.limits import Busy
from tests.helpers import run_cli
from tests.web.browser import Server

LOOPBACK_SPELLINGS = [
    "127.0.0.1", "127.1", "127.0.0.2", "0x7f.0.0.1", "2130706433", "0177.0.0.1", "[::1]", "[::ffff:127.0.0.1]",
    "localhost", "localhost.", "LOCALHOST", "LocalHost.",
]  # fmt: skip
REBINDING_NAMES = [
    "attacker.example", "127.0.0.1.nip.io", "localhost.attacker.example", "127.0.0.1 .x", "[::1", "1.2.3.4",
    "0x7f.0.0.1.example", "", "127.0.0.1:80:80", "[::1]x",
]  # fmt: skip
HEADERS = ("content-security-policy", "x-content-type-options", "referrer-policy", "x-frame-options")


def _raw(
    server: Server, method: str, path: str, host: str | None = None, body: bytes | None = None
) -> tuple[int, dict[str, str], bytes]:
    parsed = urllib.parse.urlparse(server.url)
    conn = http.client.HTTPConnection(parsed.hostname or "", parsed.port, timeout=60)
    try:
        conn.putrequest(method, path, skip_host=True)
        conn.putheader("Host", host if host is not None else parsed.netloc)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


@pytest.mark.parametrize("spelling", LOOPBACK_SPELLINGS)
def test_every_loopback_spelling_is_this_server(server: Server, spelling: str) -> None:
    port = urllib.parse.urlparse(server.url).port
    assert is_loopback(spelling)
    status, headers, _ = _raw(server, "GET", "/api/gpus", f"{spelling}:{port}")
    assert status == 200, spelling
    assert all(h in headers for h in HEADERS)


@pytest.mark.parametrize("name", REBINDING_NAMES)
def test_a_dns_name_is_refused_with_the_security_headers(server: Server, name: str) -> None:
    port = urllib.parse.urlparse(server.url).port
    status, headers, body = _raw(server, "GET", "/api/gpus", f"{name}:{port}" if name else "")
    assert status == 403, name
    assert all(h in headers for h in HEADERS), headers
    assert b"\n" not in body.rstrip(b"\n")


def test_a_server_bound_elsewhere_answers_addresses_and_its_own_name_only() -> None:
    lan = HostPolicy("0.0.0.0")
    assert lan.allows("192.168.1.20:8731") and lan.allows("[fe80::1]:8731") and lan.allows("localhost:8731")
    assert not lan.allows("attacker.example:8731") and not lan.allows("nip.io")
    named = HostPolicy("calculator.lan")
    assert named.allows("calculator.lan:8731") and named.allows("CALCULATOR.LAN.")
    assert not named.allows("other.lan")
    loop = HostPolicy("127.1")
    assert loop.allows("[::1]:1") and not loop.allows("10.0.0.1:1")
    assert address("127.0.0.1 trailing") is None and split_host("a b") is None


def test_every_response_carries_the_security_headers(server: Server) -> None:
    cases = [
        ("GET", "/api/gpus", None, 200),
        ("GET", "/no-such-page", None, 404),
        ("GET", "/api/nosuch", None, 400),
        ("GET", "/api/plan?model=--help&gpu=h100-sxm&context=32k", None, 400),
        ("POST", "/api/upload?size=1e9", b"{}", 400),
    ]
    for method, path, body, expected in cases:
        status, headers, _ = _raw(server, method, path, body=body)
        assert status == expected, (path, status)
        assert all(h in headers for h in HEADERS), (path, headers)


@pytest.mark.parametrize("model", ["--help", "-h", "x/..", "a--b/c", "~nouser/x", "a" * 5000, "a/" * 300])
def test_a_model_that_is_no_reference_is_one_400(server: Server, model: str) -> None:
    query = urllib.parse.urlencode({"model": model, "gpu": "h100-sxm", "context": "32k"})
    status, _, body = _raw(server, "GET", f"/api/plan?{query}")
    assert status == 400, body[:200]
    message = json.loads(body)["error"]["message"]
    assert "\n" not in message and len(message) < 400
    assert "usage:" not in message


def test_no_upload_error_shows_a_path_of_the_server(server: Server) -> None:
    for data in [b'{"model_type": "llama"}', b"GGUF\x03\x00\x00\x00" + b"\xff" * 40, b"\xff\xfe not utf-8"]:
        status, _, body = _raw(server, "POST", "/api/upload?name=x.gguf&size=100", body=data)
        assert status == 400
        message = json.loads(body)["error"]["message"]
        assert "/tmp" not in message and "kvbudget-serve-" not in message, message


def test_numbers_past_their_range_are_one_400(server: Server) -> None:
    for tokens in ["9" * 40, "9" * 400, "Infinity", "nan", "1e400", "-0", "1_000", "٣٢", " "]:
        status, _, body = _raw(
            server, "GET", "/api/cost?" + urllib.parse.urlencode({"model": "llama-3.1-8b", "tokens": tokens})
        )
        assert status == 400, (tokens, body[:200])
        assert json.loads(body)["error"]["message"].startswith("--tokens: ")


def test_a_busy_gate_answers_with_its_reason() -> None:
    from kvbudget.web.limits import Gate

    async def scenario() -> list[str]:
        gate = Gate(slots=1, queue_s=0.2, answer_s=0.5)
        slow = asyncio.ensure_future(gate.run(lambda: time.sleep(1.0)))
        await asyncio.sleep(0.05)
        outcomes = []
        try:
            await gate.run(lambda: None)
        except Busy as exc:
            outcomes.append(str(exc))
        try:
            await slow
        except Busy as exc:
            outcomes.append(str(exc))
        await asyncio.sleep(0.8)  # the slow work ends and frees its place
        outcomes.append(repr(await gate.run(lambda: 42)))
        return outcomes

    queued, timed_out, later = asyncio.run(scenario())
    assert "answering 1 large requests already" in queued
    assert "longer than 0.5 s" in timed_out
    assert later == "42"


# -- each answer in a process of its own (web/isolate.py): its time and memory budgets are enforced ---------------

COMPARE = [("model", "llama-3.1-8b,qwen3-32b"), ("gpu", "h100-sxm,h200,l40s"), ("engine", "vllm,sglang"),
           ("context", "32k")]  # fmt: skip


def test_an_answer_in_its_own_process_is_the_same_document() -> None:
    from kvbudget.web import api, isolate
    from kvbudget.web.uploads import UploadView

    view = UploadView(None, {})
    reply = isolate.answer("compare", COMPARE, view, seconds=120, memory_bytes=2**31)
    assert reply == api.run("compare", COMPARE, view)
    assert reply.status == 200


def test_an_answer_past_its_time_is_stopped_not_left_running() -> None:
    import multiprocessing

    from kvbudget.web import isolate
    from kvbudget.web.uploads import UploadView

    with pytest.raises(Busy, match=r"the answer took longer than 0\.01 s, this server's budget per request"):
        isolate.answer("compare", COMPARE, UploadView(None, {}), seconds=0.01, memory_bytes=2**31)
    assert multiprocessing.active_children() == []  # the child was killed and reaped, its work stopped


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the memory budget is enforced on Linux only")
def test_an_answer_past_its_memory_is_a_503_with_the_reason() -> None:
    from kvbudget.web import api, isolate
    from kvbudget.web.uploads import UploadView

    tokens = ",".join(str(1024 * (i + 1)) for i in range(64))
    table = [("model", "llama-3.1-8b"), ("tokens", tokens), ("sequences", ",".join(str(i + 1) for i in range(64)))]
    view = UploadView(None, {})
    assert isolate.answer("table", table, view, seconds=120, memory_bytes=2**27) == api.run("table", table, view)
    # one byte more than the process has: the 64 x 64 table's allocations fail, and the client is told why
    reply = isolate.answer("table", table, view, seconds=120, memory_bytes=1)
    assert reply.status == 503
    assert json.loads(reply.body)["error"]["message"] == (
        "the answer needs more memory or depth than this server gives one request; ask less"
    )


def test_serve_takes_its_budgets_as_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(capsys, "serve", "--request-memory", "lots") == (
        1, "", "Error: --request-memory: cannot read 'lots' as a memory size; write e.g. 80GB, 80GiB or 512MiB\n"
    )  # fmt: skip
    code, _, err = run_cli(capsys, "serve", "--request-seconds", "0")
    assert code == 1 and err.startswith("Error: --request-seconds: '0' must be above 0")


def test_the_fork_server_warms_every_served_command() -> None:
    """web/warm.py answers one question of each command the API serves (gpus is answered in the server itself), so a
    new command is warmed too, and each question is one the library answers, not a refusal."""
    from kvbudget.web import api
    from kvbudget.web.uploads import UploadView
    from kvbudget.web.warm import QUESTIONS

    assert set(QUESTIONS) == set(api.served()) - {"gpus"}
    for command, query in QUESTIONS.items():
        assert api.run(command, query, UploadView(None, {})).status == 200, command
