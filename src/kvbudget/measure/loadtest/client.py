"""An async OpenAI-compatible client: one streamed request per agent step, with its time to first token.

Every request streams (``stream: true``, ``stream_options.include_usage``) so the first chunk that
carries a choice gives the time to first token; the server's own counts come from the final
chunk's ``usage`` (``prompt_tokens``, ``completion_tokens``, ``prompt_tokens_details.
cached_tokens``) and llama.cpp's ``timings`` (``cache_n``, ``prompt_ms``). One aiohttp session
with an unbounded connection pool serves every session (one keep-alive connection each).

A request never raises for what the server answers: HTTP errors, context-size refusals and broken
streams come back as a ``Reply`` (measure/loadtest/reply.py, which reads the answer) with ``status`` and
``error`` set. ``ServerError`` is raised only where a run cannot go on (the server cannot be reached at all, or
it does not speak the API).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong

from kvbudget.errors import KvBudgetError
from kvbudget.measure.loadtest.flow import Flow, Stream
from kvbudget.measure.loadtest.reply import ERROR_BODY, ERROR_TEXT, Reply, classify_http, read_stream

__all__ = ["TRANSPORT", "Api", "Client", "Reply", "ServerError", "classify_http", "describe", "redirect", "stale"]

Api = Literal["completions", "chat"]
TRANSPORT = 0  # Reply.status when no HTTP answer came back
STALE_S = 1.0  # a failure to write a request this soon after sending it: a stale kept-alive connection
MAX_RETRIES = 3  # a request that never reached the server is sent again at most this often (counted, reported)
RETRY_PAUSE_S = 0.2  # before a retry after a refused connection, doubled each time
MAX_PAGE = 8 << 20  # bytes of a GET answer (/v1/models, /metrics, /slots, /props): vLLM's /metrics is ~100 KiB


class ServerError(KvBudgetError):
    """The server cannot be used for a load test (unreachable, not OpenAI-compatible, failing)."""


class Client:
    """Requests to one server. Use as ``async with Client(url) as client``."""

    def __init__(self, url: str, *, api: Api = "completions", model: str | None = None, timeout_s: float = 300.0):
        self.url = url.rstrip("/")
        self.api = api
        self.model = model
        self.timeout_s = timeout_s
        self.extras = True  # send ignore_eos / min_tokens (switched off when the server rejects them)
        self.gateway = False  # a kvbudget gateway answered (it echoes the session): end sessions there
        self.retries = 0  # requests sent again because they never reached the server
        self.unreadable = 0  # counts the server reported that are no count (negative, past 2^40, NaN, a string)
        self.flow = Flow()  # requests prefilling and decoding across the run's sessions (flow.py)
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Client:
        connector = aiohttp.TCPConnector(limit=0, enable_cleanup_closed=False)
        self._http = aiohttp.ClientSession(connector=connector, trust_env=False)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    @property
    def http(self) -> aiohttp.ClientSession:
        assert self._http is not None, "use Client inside 'async with'"
        return self._http

    async def get(self, path: str, timeout_s: float = 10.0) -> tuple[int, str]:
        """(status, body) of a GET; ServerError when nothing answers."""
        return await self._plain("GET", path, None, timeout_s)

    async def post_json(self, path: str, body: dict[str, Any], timeout_s: float = 30.0) -> tuple[int, str]:
        return await self._plain("POST", path, body, timeout_s)

    async def _plain(self, method: str, path: str, body: dict[str, Any] | None, timeout_s: float) -> tuple[int, str]:
        for attempt in range(MAX_RETRIES + 1):
            sent = time.monotonic()
            try:
                async with self.http.request(
                    method,
                    self.url + path,
                    json=body,
                    timeout=aiohttp.ClientTimeout(total=timeout_s),
                    allow_redirects=False,
                ) as resp:
                    redirect(resp, self.url + path)
                    data = await resp.content.read(MAX_PAGE + 1)
                    if len(data) > MAX_PAGE:
                        raise ServerError(
                            f"{method} {path} answered more than {MAX_PAGE >> 20} MiB: no server page is this large"
                        )
                    return resp.status, data.decode("utf-8", "replace")
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError, HttpProcessingError) as exc:
                if attempt < MAX_RETRIES and await self.retry(exc, Reply(TRANSPORT, sent), sent, attempt):
                    continue
                raise ServerError(f"cannot reach {self.url}: {describe(exc)}") from None
        raise AssertionError("unreachable")

    async def retry(self, exc: BaseException, reply: Reply, sent: float, attempt: int) -> bool:
        """Whether to send again a request that never reached the server (a stale kept-alive connection at once;
        a refused connection after a pause), counting it."""
        if stale(exc, reply, sent):
            self.retries += 1
            return True
        if isinstance(exc, aiohttp.ClientConnectorError) and reply.status == TRANSPORT:
            self.retries += 1
            await asyncio.sleep(RETRY_PAUSE_S * 2**attempt)
            return True
        return False

    def body(self, prompt: str | list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
        out: dict[str, Any] = {
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.model is not None:
            out["model"] = self.model
        if self.api == "chat":
            out["messages"] = prompt
        else:
            out["prompt"] = prompt
        if self.extras:
            out["ignore_eos"] = True  # vLLM, SGLang, llama.cpp: outputs have the planned length
            out["min_tokens"] = max_tokens
        return out

    async def end_session(self, session: str) -> None:
        """End ``session`` at a kvbudget gateway (``DELETE /v1/sessions/{id}``) so its slot is free for the next
        one rather than held until its idle timeout; nothing when no gateway answered. Never raises."""
        if not self.gateway:
            return
        try:
            async with self.http.delete(
                f"{self.url}/v1/sessions/{session}", timeout=aiohttp.ClientTimeout(total=10.0), allow_redirects=False
            ) as r:
                await r.read()
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            pass  # the gateway frees it at its idle timeout

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.api == "chat" else "/v1/completions"

    async def complete(
        self,
        prompt: str | list[dict[str, str]],
        max_tokens: int,
        *,
        keep_text: bool = True,
        session: str | None = None,
        prompt_tokens: int = 0,
    ) -> Reply:
        """One streamed request (``session``: sent as ``x-session-id``, which a session gateway admits by and an
        engine ignores; ``prompt_tokens``: its planned size, for the flow). Never raises for the server's answers
        (see Reply)."""
        sent = time.monotonic()
        reply = Reply(status=TRANSPORT, sent_s=sent)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30.0, sock_read=self.timeout_s)
        body = self.body(prompt, max_tokens)
        stream = self.flow.send(prompt_tokens)
        try:
            answered = await self._attempts(reply, stream, body, timeout, keep_text, session)
        finally:
            stream.end()
        reply.gaps, reply.beside, reply.waited_s = stream.gaps, stream.beside, stream.waited_s
        if answered:
            reply.latency_s = time.monotonic() - sent
        return reply

    async def _attempts(
        self,
        reply: Reply,
        stream: Stream,
        body: dict[str, Any],
        timeout: aiohttp.ClientTimeout,
        keep_text: bool,
        session: str | None,
    ) -> bool:
        """Send (again while it never reached the server); False for an HTTP error answer (no latency)."""
        sent = reply.sent_s
        for attempt in range(MAX_RETRIES + 1):
            try:
                headers = {"x-session-id": session} if session is not None else None
                async with self.http.post(
                    self.url + self.path, json=body, timeout=timeout, headers=headers, allow_redirects=False
                ) as r:
                    reply.status = r.status
                    redirect(r, self.url + self.path)
                    self.gateway = self.gateway or "x-kvbudget-session-source" in r.headers
                    if r.status != 200:
                        text = (await r.read())[:ERROR_BODY].decode("utf-8", "replace")
                        reply.error_kind, reply.error = classify_http(r.status, text)
                        return False
                    self.unreadable += await read_stream(r, reply, sent, keep_text, stream)
            except ServerError as exc:  # a redirect: no answer of this server
                reply.error_kind, reply.error = "http_4xx", str(exc)
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError, HttpProcessingError) as exc:
                # LineTooLong (an HttpProcessingError): an event-stream line past aiohttp's 512 KiB
                if attempt < MAX_RETRIES and await self.retry(exc, reply, sent, attempt):
                    continue  # the request never reached the server: not a failed request
                reply.error_kind = "transport" if reply.status == TRANSPORT else "stream"
                reply.error = describe(exc)
            break
        return True


def redirect(resp: aiohttp.ClientResponse, url: str) -> None:
    """ServerError for a redirect: kvbudget follows none (a load test measures the server it was given)."""
    if 300 <= resp.status < 400:
        where = resp.headers.get("Location", "")[:200]
        raise ServerError(
            f"{url} answered HTTP {resp.status}, a redirect to {where!r}: kvbudget follows no redirect; give the "
            "server's own URL"
        )


def stale(exc: BaseException, reply: Reply, sent: float) -> bool:
    """A pooled keep-alive connection the server closed: the write fails at once, before any answer.

    llama-server closes the connection after a streamed answer while still saying keep-alive; a
    request sent on it in that instant fails to be written. One immediate retry, on a new
    connection, is what HTTP clients do for an idle connection the peer closed (RFC 9112 9.3.1)."""
    quick = time.monotonic() - sent < STALE_S
    kinds = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)
    return (
        reply.status == TRANSPORT
        and quick
        and isinstance(exc, kinds)
        and not isinstance(exc, aiohttp.ClientConnectorError)
    )


def describe(exc: BaseException) -> str:
    """One line for a transport error: what happened, without the traceback."""
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    if isinstance(exc, aiohttp.ClientConnectorError):
        reason = exc.os_error.strerror or str(exc.os_error) if exc.os_error else str(exc)
        return f"connection failed ({reason})"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection"
    if isinstance(exc, LineTooLong):
        return "an answer line longer than 512 KiB (aiohttp's limit): no event-stream chunk is this long"
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:ERROR_TEXT]
