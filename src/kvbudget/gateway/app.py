"""The gateway application: its parts (admission state, upstreams, counters, health checks, metrics, recorder), its
life, and its routes. Each completion request is named to its session (in its key's namespace with ``--keys``),
admitted to an upstream, held to the cap, and relayed (gateway/proxy.py, with intake.py, admitting.py, on_cap.py);
``/metrics`` and ``DELETE /v1/sessions/{id}`` are the gateway's own; any other path is relayed as is to the first
healthy upstream.

Response headers the gateway adds: ``x-session-id`` (the resolved session), ``x-kvbudget-session-source`` (which
link of the chain named it), ``x-kvbudget-prompt-tokens`` (as counted before forwarding) or, where the count was
skipped, ``x-kvbudget-prompt-bound`` (the proven upper bound that fit, gateway/bound.py) and, where the cap
acted, ``x-kvbudget-cap`` (``truncated|compacted dropped_turns=N dropped_tokens=M``), ``x-kvbudget-summary``
(``covers_messages=K``: a kept summary replaced them) and ``x-kvbudget-compact-failed`` (why compact fell back to
truncate). A refused new session gets 429 with ``Retry-After`` and ``x-kvbudget-refused`` (``queue-timeout``,
``queue-full``, ``key-quota``), or 503 (``no-healthy-upstream``, or Redis unavailable); a request without a
known key, 401.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from kvbudget.gateway import cap as caps
from kvbudget.gateway import intake, proxy
from kvbudget.gateway.admission import Admission, Session, State
from kvbudget.gateway.health import Health
from kvbudget.gateway.keys import Keys, Unauthorized
from kvbudget.gateway.metrics import Metrics
from kvbudget.gateway.records import Recorder
from kvbudget.gateway.replies import error, upstream_error
from kvbudget.gateway.settings import Settings
from kvbudget.gateway.shared import FORGOTTEN, StateUnavailable
from kvbudget.gateway.stream import Outcome, Relay
from kvbudget.gateway.upstreams import Upstreams

COMPLETIONS = ("/v1/chat/completions", "/v1/completions")


class Gateway:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.recorder = None if settings.record is None else Recorder(settings.record)
        self.keys: Keys | None = settings.keys
        self.upstreams = Upstreams(
            timeout_s=settings.upstream_timeout_s, key=settings.upstream_key, keyed=settings.keys is not None
        )
        self.admission = state(settings, self._ended, self._rows)
        if self.recorder is not None and settings.state is not None:
            self.recorder.shared = True  # the sessions' steps are ordered in Redis, for every replica (ledger.py)
        self.metrics = Metrics(settings.upstreams, settings.sessions, settings.cap)
        self.counters = {
            upstream: caps.Counter(settings.engine, self.upstreams.poster(upstream), self.upstreams.getter(upstream))
            for upstream in settings.upstreams
        }
        self.health = Health(settings.upstreams, self.admission.healthy, self.upstreams.status,
                             interval_s=settings.health_interval_s, on_change=self.metrics.set_healthy)  # fmt: skip

    # -- life ---------------------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.upstreams.open()
        if self.recorder is not None:  # with Redis, one salt for every replica (a session hashes the same anywhere)
            with contextlib.suppress(StateUnavailable):  # else this process's own: rows of one session then differ
                self.recorder.salt = await self.admission.salt() or self.recorder.salt
        background = [asyncio.create_task(self.admission.run()), asyncio.create_task(self.health.run())]
        try:
            yield
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await self.upstreams.close()
            if self.recorder is not None:
                for session in self.admission.local():
                    self.recorder.end(session)
                self.recorder.close()
            await self.admission.close()

    def _rows(self, items: list[dict[str, Any]]) -> None:
        if self.recorder is not None:
            self.recorder.write(items)

    def _ended(self, session: Session, why: str) -> None:
        if why == FORGOTTEN:  # a session another replica ended: that replica counts it and writes its last row
            return
        self.metrics.ended.labels(why).inc()
        if self.recorder is not None:
            self.recorder.end(session)

    # -- requests (the completion route: gateway/proxy.py) -----------------------------------------------------

    async def completion(self, request: Request) -> Response | Relay:
        return await proxy.completion(self, request)

    async def end_session(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        try:
            namespace = intake.namespace(self.keys, request)
        except Unauthorized as exc:
            return intake.unauthorized(self.metrics, exc)
        try:
            ended = await self.admission.finish(namespace + session_id)
        except StateUnavailable as exc:
            return error(503, str(exc), type_="service_unavailable", code="state_unavailable")
        if not ended:
            return error(404, f"session {session_id} is not resident", code="session_not_found")
        return Response(status_code=204, headers={"x-session-id": session_id})

    async def metrics_page(self, request: Request) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        try:
            self.metrics.update(await self.admission.counts())
        except StateUnavailable:
            self.metrics.state_errors.inc()  # the gauges keep their last values; this counter says they are stale
        return Response(self.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    async def other(self, request: Request) -> Response | Relay:
        """Any other path (models, health, embeddings...): relayed without session accounting."""
        try:
            intake.namespace(self.keys, request)
        except Unauthorized as exc:
            return intake.unauthorized(self.metrics, exc)
        try:
            raw = await intake.body(request, self.settings.max_body)
        except intake.TooLarge:
            return intake.too_large(self.settings.max_body)
        target = next((u for u in self.settings.upstreams if u in self.admission.healthy), self.settings.upstream)
        try:
            upstream = await self.upstreams.client.request(
                request.method, target + request.url.path, params=request.query_params,
                data=raw or None, headers=self.upstreams.forwarded(request.scope["headers"]),
            )  # fmt: skip
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            return upstream_error(exc, "before its answer")

        async def nothing(outcome: Outcome) -> None:
            return None

        return Relay(upstream, {}, nothing, hide_usage=False)


class _Endpoint:
    """A Starlette endpoint whose handler may answer with a Relay (an ASGI response of its own)."""

    def __init__(self, handler: Any) -> None:
        self.handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self.handler(Request(scope, receive))
        await response(scope, receive, send)


def state(settings: Settings, on_end: Any, on_rows: Any) -> State:
    """Admission in memory, or shared in Redis with ``--state redis://...``."""
    common = {"queue_timeout_s": settings.queue_timeout_s, "max_queue": settings.max_queue,
              "idle_timeout_s": settings.idle_timeout_s, "on_end": on_end,
              "quotas": None if settings.keys is None else settings.keys.quota}  # fmt: skip
    if settings.state is None:
        return Admission(settings.sessions, settings.upstreams, **common)
    from kvbudget.gateway.shared import SharedAdmission

    return SharedAdmission(settings.state, settings.sessions, settings.upstreams, on_rows=on_rows, **common)


def create_app(settings: Settings) -> Starlette:
    gateway = Gateway(settings)
    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    routes = [Route(path, _Endpoint(gateway.completion), methods=["POST"]) for path in COMPLETIONS] + [
        Route("/v1/sessions/{session_id}", gateway.end_session, methods=["DELETE"]),
        Route("/metrics", gateway.metrics_page, methods=["GET"]),
        Route("/{path:path}", _Endpoint(gateway.other), methods=methods),
    ]
    app = Starlette(routes=routes, lifespan=gateway.lifespan)
    app.state.gateway = gateway
    return app
