"""The gateway application: each completion request is named to its session (in its key's namespace with
``--keys``), admitted to an upstream, held to the cap, and relayed; ``/metrics`` and ``DELETE /v1/sessions/{id}``
are the gateway's own; any other path is relayed as is to the first healthy upstream.

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
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from kvbudget.gateway import cap as caps
from kvbudget.gateway import compact, sessions
from kvbudget.gateway.admission import Admission, Refused, Session, State
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


class TooLarge(Exception):
    pass


class ClientGone(Exception):
    """The client disconnected before its request was admitted."""


class NoUpstream(Exception):
    """A new session while no upstream passes its health check."""


async def _client_gone(request: Request) -> None:
    """Return when the client disconnects (the body has been read: the next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


class Gateway:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.recorder = None if settings.record is None else Recorder(settings.record)
        self.keys: Keys | None = settings.keys
        self.upstreams = Upstreams(
            timeout_s=settings.upstream_timeout_s, key=settings.upstream_key, keyed=settings.keys is not None
        )
        self.admission = state(settings, self._ended)
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

    def _ended(self, session: Session, why: str) -> None:
        if why == FORGOTTEN:  # a session another replica ended: that replica counts it and writes its last row
            return
        self.metrics.ended.labels(why).inc()
        if self.recorder is not None:
            self.recorder.end(session)

    # -- requests -----------------------------------------------------------------------------------------------

    async def _body(self, request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.settings.max_body:
            raise TooLarge
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > self.settings.max_body:
                raise TooLarge
        return bytes(body)

    def _namespace(self, request: Request) -> str:
        """``name/`` of the request's gateway key ("" without --keys); Unauthorized without a known key."""
        return "" if self.keys is None else self.keys.identify(request.headers) + "/"

    async def completion(self, request: Request) -> Response | Relay:
        arrived = time.time()
        try:
            namespace = self._namespace(request)
        except Unauthorized as exc:
            return self._unauthorized(exc)
        try:
            raw = await self._body(request)
        except TooLarge:
            return error(413, f"request body larger than {self.settings.max_body} bytes (--max-body)")
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
            return error(400, "request body is not valid JSON")
        if not isinstance(body, dict):
            return error(400, "request body must be a JSON object")
        try:
            identity = sessions.resolve(request.headers, body)
        except sessions.BadSession as exc:
            return error(400, str(exc), param="session")
        ours = {"x-session-id": identity.session, "x-kvbudget-session-source": identity.source}
        try:
            session = await self._admit(request, namespace + identity.session)
        except Refused as exc:
            self.metrics.refused.labels(exc.reason).inc()
            headers = {**ours, "retry-after": str(exc.retry_after_s), "x-kvbudget-refused": exc.reason}
            if exc.reason == "key-quota":
                assert self.keys is not None
                quota = self.keys.quota[namespace[:-1]]
                message = f"this API key holds its quota of {quota} sessions: end one (DELETE /v1/sessions/ID) first"
                return error(429, message, type_="rate_limit_error", code="session_quota", headers=headers)
            per = f"{self.settings.sessions} sessions are resident" + (
                f" on each of {len(self.settings.upstreams)} upstreams" if len(self.settings.upstreams) > 1 else ""
            )
            message = f"no session slot free ({exc.reason}): {per}"
            return error(429, message, type_="rate_limit_error", code="session_limit", headers=headers)
        except StateUnavailable as exc:
            self.metrics.refused.labels("state-unavailable").inc()
            return error(503, str(exc), type_="service_unavailable", code="state_unavailable", headers=ours)
        except NoUpstream:
            self.metrics.refused.labels("no-healthy-upstream").inc()
            retry = max(1, round(self.settings.health_interval_s))
            headers = {**ours, "retry-after": str(retry), "x-kvbudget-refused": "no-healthy-upstream"}
            return error(503, "no upstream passes its health check: new sessions wait for one to recover",
                         type_="service_unavailable", code="no_healthy_upstream", headers=headers)  # fmt: skip
        except ClientGone:
            self.metrics.refused.labels("client-gone").inc()
            return error(499, "client disconnected while queued", code="client_gone")
        if sessions.ends(request.headers):
            session.ending = True
        handed_over = False
        try:
            if session.upstream not in self.admission.healthy:
                await self._rehome(session)
            if session.upstream not in self.counters:  # resident (in Redis) on an upstream this gateway lacks
                return error(503, "the session is on an upstream this gateway does not have, and no upstream of "
                             "its own has a slot free to take it", type_="service_unavailable",
                             code="upstream_unknown", headers={**ours, "retry-after": "1"})  # fmt: skip
            reply = await self._forward(request, body, session, identity, arrived, ours)
            handed_over = isinstance(reply, Relay)
            return reply
        finally:
            if not handed_over:
                await self.admission.release(session)

    async def _rehome(self, session: Session) -> None:
        """A session whose upstream is out of health moves to a healthy one with a free slot, if any."""
        with contextlib.suppress(StateUnavailable):
            left = await self.admission.rehome(session)
            if left is not None:
                self.metrics.moved.labels(left).inc()

    async def _admit(self, request: Request, session_id: str) -> Session:
        """Admission, given up (the queue place freed) when the client goes away while it waits."""
        now = await self.admission.admit_now(session_id)
        if now is not None:
            return now
        if not self.admission.healthy:
            raise NoUpstream
        entering = asyncio.ensure_future(self.admission.wait(session_id))
        watching = asyncio.ensure_future(_client_gone(request))
        try:
            await asyncio.wait({entering, watching}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watching.cancel()
            if not entering.done():
                entering.cancel()  # the admission's own handler frees the queue place (or the slot just granted)
            await asyncio.gather(watching, entering, return_exceptions=True)
        if entering.cancelled():
            raise ClientGone
        return entering.result()

    async def _forward(
        self, request: Request, body: dict[str, Any], session: Session, identity: sessions.Identity,
        arrived: float, ours: dict[str, str],
    ) -> Response | Relay:  # fmt: skip
        path, cap = request.scope["path"], self.settings.cap  # the URL object need not be built
        counter = self.counters[session.upstream]
        original, memory = body, None
        if self.settings.on_cap == "compact":
            kept = session.state.get(compact.KEY)
            body, covered = compact.recall(body, kept if isinstance(kept, compact.Memory) else None)
            if covered:
                memory = kept if isinstance(kept, compact.Memory) else None
                ours["x-kvbudget-summary"] = f"covers_messages={covered}"
        budget = caps.generation_budget(body)
        try:  # a request that provably fits skips the exact count (a budget is needed: it is what fits)
            count = None if budget is None else await counter.bound(body, cap - budget)
            if count is None:
                count = await counter.count(path, body)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            self.metrics.upstream_errors.labels(session.upstream, "count").inc()
            return upstream_error(exc, "while counting tokens", ours)
        if count.basis == "bound":
            self.metrics.count_skipped.inc()
            ours["x-kvbudget-prompt-bound"] = str(count.prompt_tokens)
        else:
            ours["x-kvbudget-prompt-tokens"] = str(count.prompt_tokens)
        cap_event, dropped = None, 0
        if count.prompt_tokens + (budget or 0) > cap or (budget is None and count.prompt_tokens >= cap):
            held = await self._hold_cap(path, session, counter, original, body, memory, count, budget, ours, arrived)
            if isinstance(held, Response):
                return held
            body, count, cap_event, dropped = held
        if budget is None:
            body = {**body, "max_tokens": cap - count.prompt_tokens}
        hide_usage = False
        if body.get("stream") is True:
            options = body.get("stream_options")
            asked = isinstance(options, dict) and options.get("include_usage") is True
            hide_usage = not asked
            body = {**body, "stream_options": {**(options if isinstance(options, dict) else {}), "include_usage": True}}
        started = time.monotonic()
        try:
            upstream = await self.upstreams.client.post(
                session.upstream + path,
                data=json.dumps(body).encode(),
                headers=self.upstreams.forwarded(request.headers),
            )
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            self.metrics.upstream_errors.labels(session.upstream, "connect").inc()
            return upstream_error(exc, "before its answer", ours)
        self.metrics.upstream_latency.labels(session.upstream).observe(time.monotonic() - started)
        counted_after: list[int] = []

        async def before_end(outcome: Outcome) -> None:
            # an answer without usage to a request whose count was skipped: counted before the client has the end
            # of the answer, so the session's next request (sent after it) cannot be recorded before this one
            prompt = (outcome.usage or {}).get("prompt_tokens")
            if upstream.status == 200 and not isinstance(prompt, int) and count.basis == "bound":
                counted_after.append(await self._exact(counter, path, body, count))

        async def done(outcome: Outcome) -> None:
            try:
                if outcome.upstream_error is not None:
                    self.metrics.upstream_errors.labels(session.upstream, "stream").inc()
                if outcome.disconnected:
                    self.metrics.upstream_errors.labels(session.upstream, "client-disconnect").inc()
                if upstream.status == 200:
                    usage = outcome.usage or {}
                    prompt = usage.get("prompt_tokens")
                    if isinstance(prompt, int):
                        if counter.exceeded(count, prompt):
                            self.metrics.bound_exceeded.labels(session.upstream).inc()
                        self.metrics.count_error.inc(abs(counter.reconcile(count, prompt)))
                    else:  # counted before the end reached the client, or now (the client went away first)
                        prompt = counted_after[0] if counted_after else await self._exact(counter, path, body, count)
                    output = usage.get("completion_tokens")
                    details = usage.get("prompt_tokens_details")
                    cached = details.get("cached_tokens") if isinstance(details, dict) else None
                    output = output if isinstance(output, int) else 0
                    self.metrics.session_tokens.observe(prompt + output)
                    self._record(session, arrived, prompt, output, cached if isinstance(cached, int) else None,
                                 cap_event, dropped)  # fmt: skip
            finally:
                await self.admission.release(session)

        return Relay(upstream, ours, done, hide_usage=hide_usage, before_end=before_end)

    async def _exact(self, counter: caps.Counter, path: str, body: dict[str, Any], count: caps.Count) -> int:
        """The prompt tokens of an answer without ``usage``: as counted, or counted now when the count was skipped
        (the record stays exact; the bound where the upstream cannot count)."""
        if count.basis != "bound":
            return count.prompt_tokens
        try:
            return (await counter.count(path, body)).prompt_tokens
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return count.prompt_tokens

    async def _hold_cap(
        self, path: str, session: Session, counter: caps.Counter, original: dict[str, Any], body: dict[str, Any],
        memory: compact.Memory | None, count: caps.Count, budget: int | None, ours: dict[str, str], arrived: float,
    ) -> Response | tuple[dict[str, Any], caps.Count, str, int]:  # fmt: skip
        """A request past the cap: compacted, truncated, or refused (--on-cap; compact falls back to truncate)."""
        cap = self.settings.cap
        room = cap - (budget or 1)
        if self.settings.on_cap == "compact":
            try:
                done = await compact.compact(counter, path, original, body, memory, room, compact.summary_tokens(cap))
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                done = f"the upstream failed: {type(exc).__name__}"
            if isinstance(done, compact.Compaction):
                session.state[compact.KEY] = done.memory
                ours["x-kvbudget-summary"] = f"covers_messages={done.memory.covered}"
                return self._cut(ours, "compacted", count, done.body, done.count, done.dropped_turns)
            ours["x-kvbudget-compact-failed"] = done
        if self.settings.on_cap != "refuse":
            cut = await caps.truncate(counter, path, body, lambda tokens: tokens <= room)
            if cut is not None:
                return self._cut(ours, "truncated", count, cut.body, cut.count, cut.dropped_turns)
        self.metrics.cap_events.labels("refused").inc()
        self._record(session, arrived, count.prompt_tokens, 0, None, "refused", 0)
        refusal = caps.refusal(cap, count.prompt_tokens, budget or 0)
        return Response(json.dumps(refusal), 400, {**ours, "x-kvbudget-cap": "refused"}, "application/json")

    def _cut(self, ours: dict[str, str], event: str, before: caps.Count, body: dict[str, Any], after: caps.Count,
             turns: int) -> tuple[dict[str, Any], caps.Count, str, int]:  # fmt: skip
        self.metrics.cap_events.labels(event).inc()
        dropped = before.prompt_tokens - after.prompt_tokens
        ours["x-kvbudget-cap"] = f"{event} dropped_turns={turns} dropped_tokens={dropped}"
        ours["x-kvbudget-prompt-tokens"] = str(after.prompt_tokens)
        return body, after, event, dropped

    def _record(self, session: Session, arrived: float, prompt: int, output: int, cached: int | None,
                cap: str | None, dropped: int) -> None:  # fmt: skip
        if self.recorder is not None:
            self.recorder.step(session, start_s=arrived, end_s=time.time(), prompt_tokens=prompt,
                               output_tokens=output, cached_tokens=cached, cap=cap, dropped_tokens=dropped)  # fmt: skip

    def _unauthorized(self, exc: Unauthorized) -> Response:
        self.metrics.refused.labels("unauthorized").inc()
        return error(401, str(exc), code="invalid_api_key", headers={"www-authenticate": "Bearer"})

    async def end_session(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        try:
            namespace = self._namespace(request)
        except Unauthorized as exc:
            return self._unauthorized(exc)
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
            self._namespace(request)
        except Unauthorized as exc:
            return self._unauthorized(exc)
        try:
            raw = await self._body(request)
        except TooLarge:
            return error(413, f"request body larger than {self.settings.max_body} bytes (--max-body)")
        target = next((u for u in self.settings.upstreams if u in self.admission.healthy), self.settings.upstream)
        try:
            upstream = await self.upstreams.client.request(
                request.method, target + request.url.path, params=request.query_params,
                data=raw or None, headers=self.upstreams.forwarded(request.headers),
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


def state(settings: Settings, on_end: Any) -> State:
    """Admission in memory, or shared in Redis with ``--state redis://...``."""
    common = {"queue_timeout_s": settings.queue_timeout_s, "max_queue": settings.max_queue,
              "idle_timeout_s": settings.idle_timeout_s, "on_end": on_end,
              "quotas": None if settings.keys is None else settings.keys.quota}  # fmt: skip
    if settings.state is None:
        return Admission(settings.sessions, settings.upstreams, **common)
    from kvbudget.gateway.shared import SharedAdmission

    return SharedAdmission(settings.state, settings.sessions, settings.upstreams, **common)


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
