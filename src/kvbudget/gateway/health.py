"""Health checks of the upstreams: a failing one receives no new sessions until it recovers.

Every ``interval_s`` each upstream is asked ``GET /health`` (llama-server answers 503 while it loads the model
and 200 when ready: tools/server/server.cpp; vLLM: vllm/entrypoints/openai/api_server.py; SGLang likewise);
an upstream without it (404: Ollama, some proxies) is asked ``GET /v1/models`` from then on, where any answer
short of a 5xx counts as alive (a 401 for want of a key, a 404 from a server without the route). Another answer
(a 503 from /health), none within the interval (at most ``TIMEOUT_S``), a refused connection or a stalled one is
a failure;
``FAILS`` failures in a row take the upstream out of ``healthy`` (one blip does not), one success brings it back.
``healthy`` is the admission's own set, so the next admission decision sees the change; with ``--state redis``
each replica checks for itself and admits by its own view.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

FAILS = 2  # failures in a row that take an upstream out (a single lost probe does not)
TIMEOUT_S = 5.0  # the longest a probe may take (less when the interval is shorter)
PATHS = ("/health", "/v1/models")

# (url) -> HTTP status, 0 when there was no answer (refused, reset, not HTTP)
Get = Callable[[str], Awaitable[int]]


class Health:
    def __init__(
        self,
        upstreams: Sequence[str],
        healthy: set[str],
        get: Get,
        *,
        interval_s: float,
        on_change: Callable[[str, bool], None] = lambda upstream, up: None,
    ) -> None:
        self.upstreams = tuple(upstreams)
        self.healthy = healthy
        self.get = get
        self.interval_s = interval_s
        self.on_change = on_change
        self.failures = dict.fromkeys(self.upstreams, 0)
        self.path = dict.fromkeys(self.upstreams, PATHS[0])

    async def run(self) -> None:
        """Check every upstream once an interval, until cancelled."""
        while True:
            await self.check_all()
            await asyncio.sleep(self.interval_s)

    async def check_all(self) -> None:
        await asyncio.gather(*(self.check(upstream) for upstream in self.upstreams))

    async def check(self, upstream: str) -> bool:
        """One probe of ``upstream``; returns whether it answered 200."""
        ok = await self._probe(upstream)
        if ok:
            self.failures[upstream] = 0
            if upstream not in self.healthy:
                self.healthy.add(upstream)
                self.on_change(upstream, True)
        else:
            self.failures[upstream] += 1
            if self.failures[upstream] >= FAILS and upstream in self.healthy:
                self.healthy.discard(upstream)
                self.on_change(upstream, False)
        return ok

    async def _probe(self, upstream: str) -> bool:
        try:
            async with asyncio.timeout(min(TIMEOUT_S, self.interval_s)):
                status = await self.get(upstream + self.path[upstream])
                if status == 404 and self.path[upstream] == PATHS[0]:
                    self.path[upstream] = PATHS[1]
                    status = await self.get(upstream + PATHS[1])
        except TimeoutError:  # stalled: connected (the kernel accepts) but no answer in time
            return False
        if self.path[upstream] == PATHS[0]:
            return status == 200  # /health: 503 while loading
        return 200 <= status < 500  # the fallback: any answer short of a server error (401 without a key) is life
