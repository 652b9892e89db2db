"""Reading a request before it is admitted: its gateway key (``--keys``), its body within ``--max-body``, as a
JSON object. Each failure is the gateway's own answer in OpenAI's error shape (a 401, 413 or 400), never a
traceback."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from kvbudget.gateway.keys import Keys, Unauthorized
from kvbudget.gateway.metrics import Metrics
from kvbudget.gateway.replies import error


class TooLarge(Exception):
    pass


async def body(request: Request, max_body: int) -> bytes:
    """The request's body; TooLarge past ``max_body`` bytes, declared or read (it stops reading there)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_body:
        raise TooLarge
    chunks, size = [], 0
    async for chunk in request.stream():
        chunks.append(chunk)
        size += len(chunk)
        if size > max_body:
            raise TooLarge
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)  # copied once at most


def too_large(max_body: int) -> Response:
    return error(413, f"request body larger than {max_body} bytes (--max-body)")


async def json_body(request: Request, max_body: int) -> tuple[dict[str, Any], bytes] | Response:
    """The body as a JSON object with its bytes, or the 413 / 400 that answers it."""
    try:
        raw = await body(request, max_body)
    except TooLarge:
        return too_large(max_body)
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
        return error(400, "request body is not valid JSON")
    if not isinstance(doc, dict):
        return error(400, "request body must be a JSON object")
    return doc, raw


def namespace(keys: Keys | None, request: Request) -> str:
    """``name/`` of the request's gateway key ("" without --keys); Unauthorized without a known key."""
    return "" if keys is None else keys.identify(request.headers) + "/"


def unauthorized(metrics: Metrics, exc: Unauthorized) -> Response:
    metrics.refused.labels("unauthorized").inc()
    return error(401, str(exc), code="invalid_api_key", headers={"www-authenticate": "Bearer"})
