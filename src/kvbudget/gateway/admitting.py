"""A request's admission as the route sees it: its session let in at once, or waiting in the FIFO queue while the
client stays connected (its queue place freed when it goes away), moved off an upstream out of health; and every
way it can be refused, as the answer the client gets (429 with ``Retry-After`` and ``x-kvbudget-refused``, 503,
499). The counting of slots itself is admission.py's (memory) or shared.py's (Redis)."""

from __future__ import annotations

import asyncio
import contextlib

from starlette.requests import Request
from starlette.responses import Response

from kvbudget.gateway.admission import Refused, Session, State
from kvbudget.gateway.keys import Keys
from kvbudget.gateway.metrics import Metrics
from kvbudget.gateway.records import Place
from kvbudget.gateway.redis_link import StateUnavailable
from kvbudget.gateway.replies import error
from kvbudget.gateway.settings import Settings


class ClientGone(Exception):
    """The client disconnected before its request was admitted."""


class NoUpstream(Exception):
    """A new session while no upstream passes its health check."""


async def _client_gone(request: Request) -> None:
    """Return when the client disconnects (the body has been read: the next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def admit(admission: State, request: Request, session_id: str, place: Place | None = None) -> Session:
    """Admission, given up (the queue place freed) when the client goes away while it waits; ``place`` (with
    ``--record``) takes its place in the session's record in Redis in the same step (shared.py)."""
    now = await admission.admit_now(session_id, place)
    if now is not None:
        return now
    if not admission.healthy:
        raise NoUpstream
    entering = asyncio.ensure_future(admission.wait(session_id, place))
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


def refusal(settings: Settings, metrics: Metrics, keys: Keys | None, namespace: str, ours: dict[str, str],
            exc: Exception) -> Response:  # fmt: skip
    """The answer to a request ``admit`` refused (``exc`` one of the exceptions it raises)."""
    if isinstance(exc, Refused):
        metrics.refused.labels(exc.reason).inc()
        headers = {**ours, "retry-after": str(exc.retry_after_s), "x-kvbudget-refused": exc.reason}
        if exc.reason == "key-quota":
            assert keys is not None
            quota = keys.quota[namespace[:-1]]
            message = f"this API key holds its quota of {quota} sessions: end one (DELETE /v1/sessions/ID) first"
            return error(429, message, type_="rate_limit_error", code="session_quota", headers=headers)
        per = f"{settings.sessions} sessions are resident" + (
            f" on each of {len(settings.upstreams)} upstreams" if len(settings.upstreams) > 1 else ""
        )
        message = f"no session slot free ({exc.reason}): {per}"
        return error(429, message, type_="rate_limit_error", code="session_limit", headers=headers)
    if isinstance(exc, StateUnavailable):
        metrics.refused.labels("state-unavailable").inc()
        return error(503, str(exc), type_="service_unavailable", code="state_unavailable", headers=ours)
    if isinstance(exc, NoUpstream):
        metrics.refused.labels("no-healthy-upstream").inc()
        retry = max(1, round(settings.health_interval_s))
        headers = {**ours, "retry-after": str(retry), "x-kvbudget-refused": "no-healthy-upstream"}
        return error(503, "no upstream passes its health check: new sessions wait for one to recover",
                     type_="service_unavailable", code="no_healthy_upstream", headers=headers)  # fmt: skip
    assert isinstance(exc, ClientGone)
    metrics.refused.labels("client-gone").inc()
    return error(499, "client disconnected while queued", code="client_gone")


REFUSALS = (Refused, StateUnavailable, NoUpstream, ClientGone)


async def rehome(admission: State, metrics: Metrics, session: Session) -> None:
    """A session whose upstream is out of health moves to a healthy one with a free slot, if any."""
    with contextlib.suppress(StateUnavailable):
        left = await admission.rehome(session)
        if left is not None:
            metrics.moved.labels(left).inc()
