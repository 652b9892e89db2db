"""The count the gateway skipped (gateway/bound.py), made good afterwards; its guard; hostile counting answers
(and a client body nested past the JSON parser's depth).

No real engine omits ``usage``, so the upstream here is a small real HTTP server written for the test (not a
stand-in for llama-server's behaviour, which tests/live/test_gateway_bound_live.py checks): llama-server's
counting endpoints with a known tokenizer (ChatML rendering, one token a UTF-8 byte plus BOS) and completions
without ``usage``, or with a ``usage`` it sets, or counting answers that are garbage. The gateway runs as its
command line does. Every assertion is on counts and headers, none on time.
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from kvbudget.gateway import bound
from kvbudget.workload.traces import kvbudget_jsonl
from tests.gateway.http_upstream import Handler, Upstream, serving
from tests.live.gateway import Gateway, gateway

pytest.importorskip("aiohttp")

CAP = 4096
ARGS = ("--cap", str(CAP), "--sessions", "4", "--engine", "llamacpp", "--health-interval", "1h")


def chatml(messages: list[dict[str, str]]) -> str:
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + "<|im_start|>assistant\n"


def exact(messages: list[dict[str, str]]) -> int:
    """The known tokenizer's count of a chat: BOS and one token a byte of the rendered prompt."""
    return 1 + len(chatml(messages).encode())


class Counting(Upstream):
    """Answers as configured: ``models`` and ``probe`` (bytes of ``GET /v1/models`` and of ``/apply-template`` for
    the bound's learning probes, None: the proper answer), ``usage`` (the completion's, None: left out)."""

    def __init__(self, models: bytes | None = None, probe: bytes | None = None, usage: dict[str, int] | None = None):
        super().__init__(CountingHandler)
        self.models, self.probe, self.usage = models, probe, usage
        self.first_count_s = 0.0
        self.calls: dict[str, int] = {}
        self.lock = threading.Lock()


class CountingHandler(Handler):
    server: Counting

    def _count(self) -> None:
        with self.server.lock:
            self.server.calls[self.path] = self.server.calls.get(self.path, 0) + 1

    def _send(self, body: bytes, kind: str = "application/json") -> None:
        if body.startswith(b"RAW"):  # bytes that are not an HTTP answer
            self.wfile.write(body[len(b"RAW") :])
            self.close_connection = True
            return
        if not body.startswith((b"UNDECLARED", b"HUGE")):
            super()._send(body, kind)
            return
        self.send_response(200)
        self.send_header("content-type", kind)
        if body.startswith(b"UNDECLARED"):  # no length: read until the connection closes (HTTP/1.0)
            self.end_headers()
            self.wfile.write(body[len(b"UNDECLARED") :])
            return
        self.send_header("content-length", str(10**12))  # declared far past any limit; a few bytes, then closed
        self.end_headers()
        self.wfile.write(b'{"prompt": "')

    def do_GET(self) -> None:
        self._count()
        models = json.dumps({"object": "list", "data": [{"id": "m", "meta": {"vocab_type": bound.SPM}}]}).encode()
        self._send(models if self.server.models is None else self.server.models)

    def do_POST(self) -> None:
        self._count()
        self._send(*self._answer(json.loads(self.rfile.read(int(self.headers["content-length"])))))

    def _answer(self, body: dict[str, Any]) -> tuple[bytes, str]:
        if self.path == "/apply-template":
            probe = "stream" not in body  # the bound's probes send the messages alone; the count, the request
            if probe and self.server.probe is not None:
                return self.server.probe, "application/json"
            return json.dumps({"prompt": chatml(body["messages"])}).encode(), "application/json"
        if self.path == "/tokenize":
            if self.server.calls["/tokenize"] == 1:
                time.sleep(self.server.first_count_s)  # a slow count: the next step must not be recorded first
            return json.dumps({"tokens": list(range(1 + len(body["content"].encode())))}).encode(), "application/json"
        message = {"role": "assistant", "content": "ok"}
        usage = {} if self.server.usage is None else {"usage": self.server.usage}
        if body.get("stream") is not True:
            return json.dumps({"choices": [{"index": 0, "message": message}], **usage}).encode(), "application/json"
        events = [{"choices": [{"index": 0, "delta": message}]}] + ([{"choices": [], **usage}] if usage else [])
        stream = b"".join(b"data: " + json.dumps(event).encode() + b"\n\n" for event in events) + b"data: [DONE]\n\n"
        return stream, "text/event-stream"


def upstream(**answers: Any) -> AbstractContextManager[Counting]:
    return serving(Counting(**answers))


def conversation(turns: int) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": "Be brief. é <&>"}]
    for turn in range(turns):
        messages += [{"role": "user", "content": f'question {turn} \n\t"quoted"'}]
        if turn < turns - 1:
            messages += [{"role": "assistant", "content": f"answer {turn}"}]
    return messages


def ask(gw: Gateway, messages: list[dict[str, str]], session: str, stream: bool) -> dict[str, str]:
    status, headers, answer = gw.call({"messages": messages, "max_tokens": 4, "stream": stream}, session)
    assert status == 200, answer
    if stream:
        assert "data: [DONE]" in answer and '"usage"' not in answer  # the client did not ask for usage
    return headers


def rows(record: Path) -> list[Any]:
    bad: list[object] = []
    got = list(kvbudget_jsonl.read(record, bad.append))
    assert not bad
    return got


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_without_usage_is_counted_after_so_the_record_stays_exact(stream: bool, tmp_path: Path) -> None:
    record = tmp_path / "steps.jsonl"
    sent = [conversation(turns) for turns in (1, 2, 3)]
    with upstream() as server:
        server.first_count_s = 1.0
        with gateway(server.url, *ARGS, "--record", str(record)) as gw:
            for messages in sent:
                headers = ask(gw, messages, "s", stream)
                assert "x-kvbudget-prompt-tokens" not in headers  # far below the cap: not counted before forwarding
                assert exact(messages) <= int(headers["x-kvbudget-prompt-bound"]) <= CAP - 4
            assert gw.metric("kvbudget_gateway_count_skipped_total") == 3
        # counted once each, after the answer (no usage in it): the gateway stopped once its requests had ended
        assert server.calls["/tokenize"] == 3
    assert [row.prompt_tokens for row in rows(record)] == [exact(messages) for messages in sent]


@pytest.mark.parametrize("stream", [False, True])
def test_a_usage_above_the_bound_turns_the_skipping_off_on_that_upstream(stream: bool) -> None:
    with upstream(usage={"prompt_tokens": 10**6, "completion_tokens": 1}) as server, gateway(server.url, *ARGS) as gw:
        first = ask(gw, conversation(1), "s", stream)
        assert "x-kvbudget-prompt-bound" in first
        settled(gw, "kvbudget_gateway_bound_exceeded_total", 1)  # seen once the answer has ended
        second = ask(gw, conversation(1), "s", stream)  # the same request: counted now
        assert int(second["x-kvbudget-prompt-tokens"]) == exact(conversation(1))
        assert "x-kvbudget-prompt-bound" not in second
        assert gw.metric("kvbudget_gateway_count_skipped_total") == 1
        assert gw.metric("kvbudget_gateway_bound_exceeded_total") == 1


def settled(gw: Gateway, metric: str, value: float) -> None:
    """Wait for a metric the gateway sets after the answer has gone out (generously: a loaded machine)."""
    deadline = time.monotonic() + 60
    while gw.metric(metric) != value:
        assert time.monotonic() < deadline, f"{metric} never reached {value}"
        time.sleep(0.05)


def models_with(vocab: str) -> bytes:
    return b'{"data": [{"id": "m", "meta": {"vocab_type": ' + vocab.encode() + b"}}]}"


GARBAGE_MODELS = {
    "huge-int": models_with("1" * 5000),  # past Python's digit limit for int(): a ValueError
    "big-int": models_with(str(10**40)),
    "float": models_with("1.0"),
    "nested": b"[" * 200_000 + b"]" * 200_000,  # past the parser's depth: a RecursionError
    "not-json": b"\xff\xfe<html>",
    "long": b'UNDECLARED{"data": [{"id": "m", "meta": {"vocab_type": 1}}], "pad": "' + b"x" * (2 * 2**20) + b'"}',
    "declared-huge": b"HUGE",
    "not-http": b"RAWthis is not HTTP at all\r\n\r\n",
}
GARBAGE_PROBES = {
    "nested": b'{"prompt": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
    "not-a-string": b'{"prompt": 12}',
    "not-json": b"<<garbage>>",
    "declared-huge": b"HUGE",
}


@pytest.mark.parametrize("kind", sorted(GARBAGE_MODELS))
def test_a_garbage_vocabulary_answer_turns_the_bound_off_and_every_request_is_counted(kind: str) -> None:
    with upstream(models=GARBAGE_MODELS[kind]) as server, gateway(server.url, *ARGS) as gw:
        for stream in (False, True):
            headers = ask(gw, conversation(2), "s", stream)
            assert int(headers["x-kvbudget-prompt-tokens"]) == exact(conversation(2))
            assert "x-kvbudget-prompt-bound" not in headers
        assert gw.metric("kvbudget_gateway_count_skipped_total") == 0
        # an answer learned once ("no bound" is kept); no HTTP answer at all is asked again with the next request
        assert server.calls["/v1/models"] == (2 if kind == "not-http" else 1)


@pytest.mark.parametrize("kind", sorted(GARBAGE_PROBES))
def test_a_garbage_template_probe_leaves_chats_counted_and_prompts_bounded(kind: str) -> None:
    with upstream(probe=GARBAGE_PROBES[kind]) as server, gateway(server.url, *ARGS) as gw:
        headers = ask(gw, conversation(2), "s", False)
        assert int(headers["x-kvbudget-prompt-tokens"]) == exact(conversation(2))
        status, headers, _ = gw.call({"prompt": "hello", "max_tokens": 4}, "s", path="/v1/completions")
        assert status == 200 and int(headers["x-kvbudget-prompt-bound"]) == bound.token_bound(bound.SPM, 5)
        assert gw.metric("kvbudget_gateway_count_skipped_total") == 1


def test_a_body_nested_past_the_parsers_depth_is_a_clean_400() -> None:
    with upstream() as server, gateway(server.url, *ARGS) as gw:  # stopping it checks: no traceback
        status, _, answer = gw.call(None, "s", raw=b"[" * 200_000 + b"]" * 200_000)
        assert status == 400 and answer["error"]["message"] == "request body is not valid JSON"
        assert set(server.calls) <= {"/health"}  # nothing forwarded, nothing counted (only the health check)
