"""The gateway's calls to its upstreams: one HTTP client, the headers forwarded, the engines' own key.

Request headers forwarded are the client's, less the hop-by-hop ones (RFC 9110 7.6.1) and those the HTTP
client sets again, and, with ``--keys``, less the client's credentials (they are the gateway's). With
``--upstream-key-env``, every call (completions, the counting calls, the health checks) carries the engines'
own key as ``Authorization: Bearer``. Bodies are never decompressed (``accept-encoding: identity`` upstream).

The JSON answers the gateway reads itself (the counting calls, the summaries, what the bound learns) are read
bounded: an answer longer than its limit, not UTF-8, not JSON or nested past the parser's depth is no answer
(``None``), which the callers treat as an engine that cannot count or tell (they count exactly, or fall back).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from typing import Any

import aiohttp

from kvbudget.gateway.bound import Get, Post

NOT_FORWARDED = frozenset(
    ("host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
     "proxy-authorization", "proxy-connection", "accept-encoding")
)  # fmt: skip
CREDENTIALS = frozenset(("authorization", "x-api-key"))  # with --keys: the gateway's own, never the engine's
# bytes of a JSON answer the gateway reads itself: a POST's (a /tokenize of a request up to --max-body, whose token
# list is several times the text) and a GET's (/v1/models: a few hundred bytes from llama-server)
MAX_POSTED = 64 * 2**20
MAX_GOT = 2**20


async def read_json(reply: aiohttp.ClientResponse, limit: int) -> Any:
    """The answer's JSON document, or None when it is longer than ``limit`` bytes (read no further), not UTF-8, not
    JSON, or nested too deep to parse (RecursionError)."""
    declared = reply.content_length
    if declared is not None and declared > limit:
        return None
    body = bytearray()
    async for chunk in reply.content.iter_any():
        body += chunk
        if len(body) > limit:
            return None
    try:
        return json.loads(body.decode("utf-8")) if body.strip() else None
    except (ValueError, RecursionError):
        return None


class Upstreams:
    def __init__(self, *, timeout_s: float, key: str | None, keyed: bool) -> None:
        self.timeout_s = timeout_s
        self.auth = {} if key is None else {"authorization": f"Bearer {key}"}
        self.dropped = NOT_FORWARDED | CREDENTIALS if keyed else NOT_FORWARDED
        self._dropped_raw = frozenset(name.encode("latin-1") for name in self.dropped)
        self._client: aiohttp.ClientSession | None = None

    @property
    def client(self) -> aiohttp.ClientSession:
        assert self._client is not None, "open() first (the application's lifespan does)"
        return self._client

    def open(self) -> None:
        """The HTTP client (in the running event loop); ``timeout_s`` bounds each silence of an upstream."""
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=self.timeout_s)
        self._client = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=timeout, auto_decompress=False
        )

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

    def forwarded(self, raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
        """The headers sent upstream, from the request's own (the ASGI scope's: lower-case names, latin-1), less those
        not forwarded; read from the scope, not through a Headers object, once a request."""
        dropped = self._dropped_raw
        sent = {name.decode("latin-1"): value.decode("latin-1") for name, value in raw if name not in dropped}
        sent["accept-encoding"] = "identity"
        sent.update(self.auth)
        return sent

    async def status(self, url: str) -> int:
        """GET ``url``'s status, 0 when there was no answer (for the health checks)."""
        try:
            async with self.client.get(url, headers={"accept-encoding": "identity", **self.auth}) as reply:
                await reply.read()
                return reply.status
        except aiohttp.ClientError:
            return 0

    def poster(self, upstream: str) -> Post:
        """POST a JSON body to ``upstream`` (the counting and summarising calls): the status and JSON answer."""

        async def post(path: str, body: dict[str, Any]) -> tuple[int, Any]:
            async with self.client.post(upstream + path, json=body, headers=self.auth) as reply:
                return reply.status, await read_json(reply, MAX_POSTED)

        return post

    def getter(self, upstream: str) -> Get:
        """GET a JSON answer from ``upstream`` (what the count's bound learns: llama-server's ``/v1/models``); no
        answer at all is status 0, never an error: the request that asked is counted exactly."""

        async def get(path: str) -> tuple[int, Any]:  # status 0: no HTTP answer (refused, not HTTP, cut, silent)
            try:
                async with self.client.get(upstream + path, headers={"accept-encoding": "identity", **self.auth}) as r:
                    return r.status, await read_json(r, MAX_GOT)
            except (aiohttp.ClientError, asyncio.TimeoutError):
                return 0, None

        return get
