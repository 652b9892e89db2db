"""``--on-cap``: what a request past the cap becomes. ``compact`` summarises the oldest turns through the same
upstream (gateway/compact.py; falling back to ``truncate`` when that fails or no summary fits), ``truncate`` drops
the oldest whole turns (gateway/cap.py), ``refuse`` (or nothing left that fits) answers OpenAI's 400
``context_length_exceeded`` with the numbers. The answer's headers say what was done: ``x-kvbudget-cap``,
``x-kvbudget-summary``, ``x-kvbudget-compact-failed``."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import aiohttp
from starlette.responses import Response

from kvbudget.gateway import cap as caps
from kvbudget.gateway import compact
from kvbudget.gateway.admission import Session
from kvbudget.gateway.metrics import Metrics
from kvbudget.gateway.settings import Settings


@dataclass(frozen=True)
class Cut:
    """The request made to fit: its new body and count, the event (``truncated``/``compacted``), tokens dropped."""

    body: dict[str, Any]
    count: caps.Count
    event: str
    dropped: int


async def hold(
    settings: Settings, metrics: Metrics, path: str, session: Session, counter: caps.Counter,
    original: dict[str, Any], body: dict[str, Any], memory: compact.Memory | None, count: caps.Count,
    budget: int | None, ours: dict[str, str],
) -> Cut | Response:  # fmt: skip
    """A request past the cap: compacted, truncated, or refused (the 400 is returned; the caller records it)."""
    cap = settings.cap
    room = cap - (budget or 1)
    if settings.on_cap == "compact":
        try:
            done = await compact.compact(counter, path, original, body, memory, room, compact.summary_tokens(cap))
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            done = f"the upstream failed: {type(exc).__name__}"
        if isinstance(done, compact.Compaction):
            session.state[compact.KEY] = done.memory
            ours["x-kvbudget-summary"] = f"covers_messages={done.memory.covered}"
            return _cut(metrics, ours, "compacted", count, done)
        ours["x-kvbudget-compact-failed"] = done
    if settings.on_cap != "refuse":
        cut = await caps.truncate(counter, path, body, lambda tokens: tokens <= room)
        if cut is not None:
            return _cut(metrics, ours, "truncated", count, cut)
    metrics.cap_events.labels("refused").inc()
    refusal = caps.refusal(cap, count.prompt_tokens, budget or 0)
    return Response(json.dumps(refusal), 400, {**ours, "x-kvbudget-cap": "refused"}, "application/json")


def _cut(metrics: Metrics, ours: dict[str, str], event: str, before: caps.Count, fitted: caps.Fitted) -> Cut:
    metrics.cap_events.labels(event).inc()
    dropped = before.prompt_tokens - fitted.count.prompt_tokens
    ours["x-kvbudget-cap"] = f"{event} dropped_turns={fitted.dropped_turns} dropped_tokens={dropped}"
    ours["x-kvbudget-prompt-tokens"] = str(fitted.count.prompt_tokens)
    return Cut(fitted.body, fitted.count, event, dropped)
