"""Passing the upstream's answer through: an ASGI response that relays as the bytes come.

A streamed answer (``text/event-stream``) is relayed event by event (an SSE event ends at a blank line; a
partial event is held only until its end arrives), so the client sees each token as the engine sends it. The
gateway reads ``usage`` from the stream's last event (it asks the engine for it with
``stream_options.include_usage``; when the client did not ask, that event is not relayed). Any other answer is
read whole (bounded) and then sent, so an upstream that fails half-way is a clean 502 (504 when it went silent
past ``--upstream-timeout``), not a cut body.

While relaying, the client's connection is watched: when it goes away the upstream connection is closed at
once (llama-server and vLLM stop generating for a closed connection) and the outcome says so. An upstream that
fails mid-stream ends the stream with an SSE ``error`` event. ``on_done`` is called exactly once, whatever
happened, so the slot accounting survives both. ``before_end``, when given, is awaited once the whole answer is
read and before its end reaches the client (the last chunk of a stream; a whole answer's headers): what it does
is done before the client can send its next request.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from starlette.types import Message, Receive, Scope, Send

from kvbudget.gateway.replies import upstream_failure

# response headers not relayed: hop-by-hop ones (RFC 9110 7.6.1), and the length and encoding the gateway sets
DROPPED = frozenset(
    ("connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authenticate",
     "content-length", "content-encoding")
)  # fmt: skip
MAX_ANSWER = 64 * 2**20  # bytes of a non-streamed answer
MAX_EVENT = 4 * 2**20  # bytes of one SSE event held while it arrives


@dataclass
class Outcome:
    status: int
    usage: dict[str, Any] | None = None
    disconnected: bool = False  # the client went away first
    upstream_error: str | None = None


def _usage(event: bytes) -> dict[str, Any] | None:
    """The ``usage`` object of a JSON answer or of one SSE event's data, if it has one."""
    if b'"usage"' not in event:
        return None
    text = event.strip()
    if text.startswith(b"data:"):
        text = text[5:].strip()
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):  # garbage, or nested past the parser's depth: no usage
        return None
    usage = doc.get("usage") if isinstance(doc, dict) else None
    return usage if isinstance(usage, dict) else None


def error_event(message: str, code: str = "upstream_failed") -> bytes:
    body = {"error": {"message": message, "type": "upstream_error", "code": code}}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class Relay:
    """An ASGI response relaying ``upstream``; ``headers``: the gateway's own, added to the upstream's."""

    def __init__(
        self,
        upstream: aiohttp.ClientResponse,
        headers: dict[str, str],
        on_done: Callable[[Outcome], Awaitable[None]],
        *,
        hide_usage: bool,
        before_end: Callable[[Outcome], Awaitable[None]] | None = None,
    ) -> None:
        self.upstream = upstream
        self.headers = headers
        self.on_done = on_done
        self.before_end = before_end
        self.hide_usage = hide_usage
        self.outcome = Outcome(upstream.status)

    def _start(self, length: int | None) -> Message:
        pairs = [(k.lower().encode(), v.encode()) for k, v in self.upstream.headers.items() if k.lower() not in DROPPED]
        pairs += [(k.encode(), v.encode()) for k, v in self.headers.items()]
        if length is not None:
            pairs.append((b"content-length", str(length).encode()))
        return {"type": "http.response.start", "status": self.upstream.status, "headers": pairs}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sse = self.upstream.content_type == "text/event-stream"
        pump = asyncio.create_task(self._stream(send) if sse else self._whole(send))
        watch = asyncio.create_task(_disconnected(receive))
        try:
            done, _ = await asyncio.wait({pump, watch}, return_when=asyncio.FIRST_COMPLETED)
            if pump in done:
                pump.result()  # a failure to send to the client surfaces as the client having gone
            else:
                self.outcome.disconnected = True
        except OSError:
            self.outcome.disconnected = True
        finally:
            for task in (pump, watch):
                task.cancel()
            await asyncio.gather(pump, watch, return_exceptions=True)
            self.upstream.close()  # releases the connection; mid-answer it aborts it (the engine stops)
            await self.on_done(self.outcome)

    async def _whole(self, send: Send) -> None:
        try:
            whole = bytearray()  # read to the end: one read() returns as soon as the first bytes are there
            async for chunk in self.upstream.content.iter_any():
                whole += chunk
                if len(whole) > MAX_ANSWER:
                    raise aiohttp.ClientPayloadError(f"answer larger than {MAX_ANSWER} bytes")
            declared = self.upstream.content_length
            if declared is not None and len(whole) != declared:
                raise aiohttp.ClientPayloadError(f"answer cut short: {len(whole)} of {declared} bytes")
            body = bytes(whole)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            self.outcome.upstream_error = type(exc).__name__
            self.outcome.status, code = upstream_failure(exc)
            body = json.dumps({"error": {"message": f"upstream failed mid-answer: {type(exc).__name__}", "type":
                               "upstream_error", "code": code}}).encode()  # fmt: skip
            await send({"type": "http.response.start", "status": self.outcome.status,
                        "headers": [(b"content-type", b"application/json"), (b"content-length",
                                    str(len(body)).encode())] + [(k.encode(), v.encode()) for k, v in
                                                                 self.headers.items()]})  # fmt: skip
            await send({"type": "http.response.body", "body": body})
            return
        self.outcome.usage = _usage(body)
        if self.before_end is not None:
            await self.before_end(self.outcome)
        await send(self._start(len(body)))
        await send({"type": "http.response.body", "body": body})

    async def _stream(self, send: Send) -> None:
        await send(self._start(None))
        held = b""
        try:
            async for chunk in self.upstream.content.iter_any():
                held += chunk
                cut = max(held.rfind(b"\n\n"), held.rfind(b"\r\n\r\n"))
                if cut < 0:
                    if len(held) > MAX_EVENT:  # not SSE after all: relay as it comes
                        await send({"type": "http.response.body", "body": held, "more_body": True})
                        held = b""
                    continue
                end = cut + (4 if held[cut : cut + 4] == b"\r\n\r\n" else 2)
                ready, held = held[:end], held[end:]
                await send({"type": "http.response.body", "body": self._screen(ready), "more_body": True})
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            self.outcome.upstream_error = type(exc).__name__
            held += error_event(f"upstream failed mid-stream: {type(exc).__name__}", upstream_failure(exc)[1])
        if self.before_end is not None and self.outcome.upstream_error is None:
            await self.before_end(self.outcome)
        await send({"type": "http.response.body", "body": held, "more_body": False})

    def _screen(self, events: bytes) -> bytes:
        """Take the usage from the events; drop the usage-only event when the client did not ask for it."""
        if b'"usage"' not in events:
            return events
        kept = []
        for event in events.split(b"\n\n"):
            usage = _usage(event)
            if usage is not None:
                self.outcome.usage = usage
                if self.hide_usage and b'"choices":[]' in event.replace(b" ", b""):
                    continue
            kept.append(event)
        return b"\n\n".join(kept)


async def _disconnected(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
