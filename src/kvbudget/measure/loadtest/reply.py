"""What one request of a load test got back (``Reply``): its status and times, the server's own counts and
timings read from the streamed answer's events (measure/loadtest/client.py sends the request), and an HTTP error
answer named by kind, context-size refusals apart. What a server reports is checked, never trusted."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from kvbudget.measure.loadtest.flow import Stream

ERROR_TEXT = 300  # characters of an error body kept in a message
ERROR_BODY = 64 * 1024  # bytes of an error answer read for its message
MAX_STREAM = 64 << 20  # bytes of one streamed answer: 100,000 tokens of chunks are ~30 MiB


@dataclass
class Reply:
    """What one request got back. ``status`` is the HTTP status (0: no answer: connection, timeout)."""

    status: int
    sent_s: float  # monotonic time the request was sent
    ttft_s: float | None = None
    latency_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens or timings.cache_n
    prompt_ms: float | None = None  # llama.cpp timings: prompt processing time
    predicted_per_s: float | None = None  # llama.cpp timings: decode speed of this request
    prompt_per_s: float | None = None
    finish_reason: str | None = None
    text: str = ""
    error: str | None = None
    error_kind: str | None = None  # "context", "http_4xx", "http_5xx", "transport", "stream"
    gaps: list[tuple[int, int, float]] = field(default_factory=list)  # clean gaps (flow.py): decoding, held, s
    beside: int = 0  # requests decoding when it was sent (flow.py)
    waited_s: float = 0.0  # its wait for the batch running on the server when it was sent (flow.py)

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None


def classify_http(status: int, body: str) -> tuple[str, str]:
    """(kind, one-line message) of an HTTP error answer; context-size refusals are their own kind."""
    message = " ".join(body.split())
    if message.startswith("<"):
        message = "an HTML page, not an API answer"
    try:
        data = json.loads(body)
        err = data.get("error", data) if isinstance(data, dict) else data
        if isinstance(err, dict):
            message = str(err.get("message") or err.get("detail") or message)
        elif isinstance(err, str):
            message = err
    except ValueError:
        pass
    lowered = message.lower() + body.lower()
    context = any(
        word in lowered
        for word in ("context size", "context length", "exceed_context", "maximum context", "max_model_len", "too long")
    )
    kind = "context" if context else ("http_5xx" if status >= 500 else "http_4xx")
    return kind, f"HTTP {status}: {message[:ERROR_TEXT]}"


async def read_stream(
    r: aiohttp.ClientResponse, reply: Reply, sent: float, keep_text: bool, stream: Stream | None = None
) -> int:
    """Server-sent events: ``data: {...}`` lines until ``data: [DONE]`` or the end of the body, at most
    MAX_STREAM bytes; the number of counts the server reported that are no count."""
    parts: list[str] = []
    loads = json.loads
    read = unreadable = 0
    async for raw in r.content:
        read += len(raw)
        if read > MAX_STREAM:
            reply.error_kind, reply.error = "stream", f"the answer passed {MAX_STREAM >> 20} MiB without ending"
            return unreadable
        if not raw.startswith(b"data:"):
            continue
        data = raw[5:].strip()
        if data == b"[DONE]":
            break
        try:
            obj = loads(data)
        except (ValueError, RecursionError):
            reply.error_kind, reply.error = "stream", f"unreadable stream chunk: {data[:80]!r}"
            return unreadable
        if not isinstance(obj, dict):
            continue
        if "error" in obj:
            reply.error_kind, reply.error = classify_http(500, json.dumps(obj)[:ERROR_BODY])
            if reply.error_kind != "context":
                reply.error_kind = "stream"
            return unreadable
        choices = obj.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict):
                continue
            first = reply.ttft_s is None
            if first:
                reply.ttft_s = time.monotonic() - sent
            text = choice.get("text")
            delta = choice.get("delta")
            if text is None and isinstance(delta, dict):
                text = delta.get("content")
            if stream is not None and (first or (isinstance(text, str) and text)):
                stream.token()
            if isinstance(text, str) and text and keep_text:
                parts.append(text)
            if isinstance(choice.get("finish_reason"), str):
                reply.finish_reason = choice["finish_reason"]
                if stream is not None:
                    stream.end()
        usage = obj.get("usage")
        if isinstance(usage, dict) and usage:
            unreadable += _usage(reply, usage)
        timings = obj.get("timings")
        if isinstance(timings, dict) and timings:
            _timings(reply, timings)
    reply.text = "".join(parts)
    return unreadable


def _usage(reply: Reply, usage: dict[str, Any]) -> int:
    """The server's counts; returns how many it gave that are no count."""
    reply.prompt_tokens = _int(usage.get("prompt_tokens"))
    reply.completion_tokens = _int(usage.get("completion_tokens"))
    bad = sum(usage.get(k) is not None and _int(usage.get(k)) is None for k in ("prompt_tokens", "completion_tokens"))
    details = usage.get("prompt_tokens_details") or {}
    if isinstance(details, dict) and details.get("cached_tokens") is not None:
        reply.cached_tokens = _int(details.get("cached_tokens"))
    return bad


def _timings(reply: Reply, timings: dict[str, Any]) -> None:
    if timings.get("cache_n") is not None and reply.cached_tokens is None:
        reply.cached_tokens = _int(timings.get("cache_n"))
    if timings.get("prompt_ms") is not None:
        reply.prompt_ms = _real(timings["prompt_ms"])
    if timings.get("predicted_per_second"):
        reply.predicted_per_s = _real(timings["predicted_per_second"])
    if timings.get("prompt_per_second"):
        reply.prompt_per_s = _real(timings["prompt_per_second"])


# What a server reports is not trusted: a count past 2^40 tokens, a negative one, Infinity, NaN or a value of
# the wrong type is no figure (None, as if the server had not reported it), never a crash.
MAX_REPORTED = 2**40


def _int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_REPORTED:
        return None  # nan fails the range too
    return int(value)


def _real(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1e15:
        return None
    return float(value)
