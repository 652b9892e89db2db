"""Which session a request belongs to: the first of a resolution chain that is present wins.

1. the ``x-session-id`` header, then other headers agent harnesses and proxies send for the same thing
   (``x-conversation-id``, ``session_id``/``session-id``, ``x-claude-code-session-id``);
2. the body's ``prompt_cache_key`` (OpenAI's key for routing a conversation to its cache), then ``user``;
3. the body's ``conversation`` (Responses API: an id, or an object with ``id``), then ``previous_response_id``;
4. else a fingerprint of the conversation's first messages (the system prompt and first user turn stay the
   same as a conversation grows, so every call of one conversation gets the same id).

An id is 1..200 printable ASCII characters (it is echoed in a header); another value is a 400, not a guess.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

SESSION_HEADER = "x-session-id"
HEADERS = (SESSION_HEADER, "x-conversation-id", "session_id", "session-id", "x-claude-code-session-id")
END_HEADER = "x-session-end"  # "1"/"true": the session ends when this request completes
MAX_ID = 200
FINGERPRINT_MESSAGES = 2  # the system prompt and the first user turn


class BadSession(ValueError):
    """The request names its session in a way the gateway will not echo (the message says which field)."""


@dataclass(frozen=True)
class Identity:
    session: str
    source: str  # header name, body field, or "fingerprint"


def _valid(value: str, source: str) -> str:
    if not 1 <= len(value) <= MAX_ID or not all(33 <= ord(c) <= 126 for c in value):
        raise BadSession(f"session id from {source}: give 1..{MAX_ID} printable ASCII characters without spaces")
    return value


def fingerprint(messages: object) -> str:
    """A stable id from the first messages (roles and contents as sent, canonical JSON)."""
    first = messages[:FINGERPRINT_MESSAGES] if isinstance(messages, list) else messages
    text = json.dumps(first, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "fp-" + hashlib.sha256(text.encode()).hexdigest()[:24]


def resolve(headers: Mapping[str, str], body: Mapping[str, object]) -> Identity:
    """The request's session; BadSession when a named id cannot be echoed."""
    for name in HEADERS:
        value = headers.get(name)
        if value is not None and value.strip():
            return Identity(_valid(value.strip(), f"header {name}"), f"header {name}")
    for name in ("prompt_cache_key", "user"):
        field = body.get(name)
        if isinstance(field, str) and field:
            return Identity(_valid(field, f"body {name}"), f"body {name}")
    conversation = body.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    if isinstance(conversation, str) and conversation:
        return Identity(_valid(conversation, "body conversation"), "body conversation")
    previous = body.get("previous_response_id")
    if isinstance(previous, str) and previous:
        return Identity(_valid(previous, "body previous_response_id"), "body previous_response_id")
    messages = body.get("messages", body.get("input", body.get("prompt")))
    return Identity(fingerprint(messages), "fingerprint")


def ends(headers: Mapping[str, str]) -> bool:
    return headers.get(END_HEADER, "").strip().lower() in ("1", "true", "yes")
