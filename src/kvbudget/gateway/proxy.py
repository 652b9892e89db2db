"""The completion route (``/v1/chat/completions``, ``/v1/completions``): a request is read (gateway/intake.py),
named to its session (gateway/sessions.py; in its key's namespace with ``--keys``), admitted (gateway/admitting.py),
given its place in the session's record (gateway/records.py), held to the cap (counted exactly, or bounded where
that proves the fit: gateway/cap.py, bound.py; past it, gateway/on_cap.py), forwarded and relayed
(gateway/stream.py). The session's slot is released once, when the answer ends or the request fails, whatever way.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

import aiohttp
from starlette.requests import Request
from starlette.responses import Response

from kvbudget.gateway import cap as caps
from kvbudget.gateway import compact, intake, on_cap, sessions
from kvbudget.gateway.admission import Session
from kvbudget.gateway.admitting import REFUSALS, admit, refusal, rehome
from kvbudget.gateway.keys import Unauthorized
from kvbudget.gateway.records import Place
from kvbudget.gateway.replies import error, upstream_error
from kvbudget.gateway.stream import Outcome, Relay

if TYPE_CHECKING:
    from kvbudget.gateway.app import Gateway

JSON_SPACE = frozenset(b" \t\r\n")  # RFC 8259's whitespace, as byte values


async def completion(gw: Gateway, request: Request) -> Response | Relay:
    arrived = time.time()
    try:
        namespace = intake.namespace(gw.keys, request)
    except Unauthorized as exc:
        return intake.unauthorized(gw.metrics, exc)
    read = await intake.json_body(request, gw.settings.max_body)
    if isinstance(read, Response):
        return read
    body, raw = read
    try:
        identity = sessions.resolve(request.headers, body)
    except sessions.BadSession as exc:
        return error(400, str(exc), param="session")
    ours = {"x-session-id": identity.session, "x-kvbudget-session-source": identity.source}
    place = None if gw.recorder is None else Place(arrived)  # its row, in arrival order
    try:
        session = await admit(gw.admission, request, namespace + identity.session, place)
    except REFUSALS as exc:
        return refusal(gw.settings, gw.metrics, gw.keys, namespace, ours, exc)
    if sessions.ends(request.headers):
        session.ending = True
    if gw.recorder is not None and place is not None:
        gw.recorder.enter(session, place)  # in memory; with --state redis it was placed in the admission's script
    handed_over = False
    try:
        if session.upstream not in gw.admission.healthy:
            await rehome(gw.admission, gw.metrics, session)
        if session.upstream not in gw.counters:  # resident (in Redis) on an upstream this gateway lacks
            return error(503, "the session is on an upstream this gateway does not have, and no upstream of "
                         "its own has a slot free to take it", type_="service_unavailable",
                         code="upstream_unknown", headers={**ours, "retry-after": "1"})  # fmt: skip
        reply = await _forward(gw, request, body, raw, session, place, ours)
        handed_over = isinstance(reply, Relay)
        return reply
    finally:
        if not handed_over:
            if gw.recorder is not None and place is not None:
                gw.recorder.drop(session, place)  # no-op when the request was recorded (a refusal at the cap)
            await gw.admission.release(session, place)


async def _forward(
    gw: Gateway, request: Request, body: dict[str, Any], raw: bytes, session: Session, place: Place | None,
    ours: dict[str, str],
) -> Response | Relay:  # fmt: skip
    path, cap = request.scope["path"], gw.settings.cap  # the URL object need not be built
    counter = gw.counters[session.upstream]
    original, memory = body, None
    if gw.settings.on_cap == "compact":
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
        gw.metrics.upstream_errors.labels(session.upstream, "count").inc()
        return upstream_error(exc, "while counting tokens", ours)
    if count.basis == "bound":
        gw.metrics.count_skipped.inc()
        ours["x-kvbudget-prompt-bound"] = str(count.prompt_tokens)
    else:
        ours["x-kvbudget-prompt-tokens"] = str(count.prompt_tokens)
    cap_event, dropped = None, 0
    if count.prompt_tokens + (budget or 0) > cap or (budget is None and count.prompt_tokens >= cap):
        held = await on_cap.hold(gw.settings, gw.metrics, path, session, counter, original, body, memory, count,
                                 budget, ours)  # fmt: skip
        if isinstance(held, Response):  # refused: the step is recorded, with no output (demand the cap turned away)
            _record(gw, session, place, count.prompt_tokens, 0, None, "refused", 0)
            return held
        body, count, cap_event, dropped = held.body, held.count, held.event, held.dropped
    unchanged, added = body is original, dict[str, Any]()
    if budget is None:
        added["max_tokens"] = cap - count.prompt_tokens
    hide_usage = False
    if body.get("stream") is True:
        options = body.get("stream_options")
        asked = isinstance(options, dict) and options.get("include_usage") is True
        hide_usage = not asked
        if not asked:
            added["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
    if added:
        body = {**body, **added}
    started = time.monotonic()
    try:
        upstream = await gw.upstreams.client.post(
            session.upstream + path,
            data=_encoded(raw, original, body, added) if unchanged else json.dumps(body).encode(),
            headers=gw.upstreams.forwarded(request.scope["headers"]),
        )
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        gw.metrics.upstream_errors.labels(session.upstream, "connect").inc()
        return upstream_error(exc, "before its answer", ours)
    gw.metrics.upstream_latency.labels(session.upstream).observe(time.monotonic() - started)
    counted_after: list[int] = []

    async def before_end(outcome: Outcome) -> None:
        # an answer without usage to a request whose count was skipped: counted before the client has the end of
        # the answer, so the row has the exact count when the session's next request (sent after it) arrives
        prompt = (outcome.usage or {}).get("prompt_tokens")
        if upstream.status == 200 and not isinstance(prompt, int) and count.basis == "bound":
            counted_after.append(await _exact(counter, path, body, count))

    async def done(outcome: Outcome) -> None:
        try:
            if outcome.upstream_error is not None:
                gw.metrics.upstream_errors.labels(session.upstream, "stream").inc()
            if outcome.disconnected:
                gw.metrics.upstream_errors.labels(session.upstream, "client-disconnect").inc()
            if upstream.status == 200:
                usage = outcome.usage or {}
                prompt = usage.get("prompt_tokens")
                if isinstance(prompt, int):
                    if counter.exceeded(count, prompt):
                        gw.metrics.bound_exceeded.labels(session.upstream).inc()
                    gw.metrics.count_error.inc(abs(counter.reconcile(count, prompt)))
                else:  # counted before the end reached the client, or now (the client went away first)
                    prompt = counted_after[0] if counted_after else await _exact(counter, path, body, count)
                output = usage.get("completion_tokens")
                details = usage.get("prompt_tokens_details")
                cached = details.get("cached_tokens") if isinstance(details, dict) else None
                output = output if isinstance(output, int) else 0
                gw.metrics.session_tokens.observe(prompt + output)
                _record(gw, session, place, prompt, output, cached if isinstance(cached, int) else None, cap_event,
                        dropped)  # fmt: skip
        finally:
            if gw.recorder is not None and place is not None:
                gw.recorder.drop(session, place)  # an answer that was not a 200: no row (no-op when recorded)
            await gw.admission.release(session, place)

    return Relay(upstream, ours, done, hide_usage=hide_usage, before_end=before_end)


def _encoded(raw: bytes, parsed: dict[str, Any], body: dict[str, Any], added: dict[str, Any]) -> bytes:
    """The body to forward: the client's own bytes when only keys it did not send were added (spliced in before its
    closing brace), so a long conversation is not serialised again (json.dumps of a 100 KB body costs more CPU
    than the rest of the request path; bench/gateway.py --body-kib); else ``body`` serialised. Spliced only into
    UTF-8 text of one object (a UTF-16 or UTF-32 body, which json.loads also reads, ends in a NUL byte)."""
    if added.keys() & parsed.keys():
        return json.dumps(body).encode()
    first, last = 0, len(raw) - 1  # the object's braces, past JSON's whitespace (looked at in place: no copy)
    while first < last and raw[first] in JSON_SPACE:
        first += 1
    while last > first and raw[last] in JSON_SPACE:
        last -= 1
    if not (raw[first : first + 1] == b"{" and raw[last : last + 1] == b"}"):
        return json.dumps(body).encode()
    if not added:
        return raw
    extra = json.dumps(added).encode()[1:-1]  # '"max_tokens": 900, ...' without the braces
    return b"".join((memoryview(raw)[:last], b"," if parsed else b"", extra, b"}"))  # the body copied once


async def _exact(counter: caps.Counter, path: str, body: dict[str, Any], count: caps.Count) -> int:
    """The prompt tokens of an answer without ``usage``: as counted, or counted now when the count was skipped
    (the record stays exact; the bound where the upstream cannot count)."""
    if count.basis != "bound":
        return count.prompt_tokens
    try:
        return (await counter.count(path, body)).prompt_tokens
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return count.prompt_tokens


def _record(gw: Gateway, session: Session, place: Place | None, prompt: int, output: int, cached: int | None,
            cap: str | None, dropped: int) -> None:  # fmt: skip
    if gw.recorder is not None and place is not None:
        gw.recorder.finish(session, place, end_s=time.time(), prompt_tokens=prompt, output_tokens=output,
                           cached_tokens=cached, cap=cap, dropped_tokens=dropped)  # fmt: skip
