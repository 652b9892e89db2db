"""``--on-cap compact``: past the cap, the oldest whole turns are summarised through the same upstream, and the
summary is kept for the session.

A compacted request is the leading system messages with the summary appended to the last of them (so no chat
template meets a second system message or two user messages in a row), then the turns that fit. The summary
replaces the fewest oldest turns that make room for the request, its generation budget and the summary itself
(at most ``summary_tokens``, the summarising call's ``max_tokens``). The session keeps the summary with a digest
of the messages it replaces: the client keeps sending its whole history, and while that history begins with
the same messages, they are replaced by the kept summary without another call (so the prefix stays the same
from one request to the next and the engine's prefix cache hits again after the one miss the rewrite costs).
When the history outgrows the cap again, the kept summary and the next turns are summarised together.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from kvbudget.gateway import cap as caps

KEY = "compact"  # in Session.state
MARK = "\n\n[Summary of the earlier conversation, written by the gateway]\n"
INSTRUCTION = (
    "Summarise the conversation below for the assistant that continues it: the user's goals, decisions, facts, "
    "names, numbers, file paths and open tasks. Plain text, at most {tokens} tokens."
)


@dataclass(frozen=True)
class Memory:
    """What a session keeps: the summary of its first ``covered`` messages after the system prompt."""

    covered: int
    digest: str
    summary: str


def _digest(messages: list[Any]) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def with_summary(head: list[Any], summary: str) -> list[Any]:
    """The system messages with ``summary`` appended to the last (or a new system message when none is text)."""
    if head and isinstance(head[-1], dict) and isinstance(head[-1].get("content"), str):
        return [*head[:-1], {**head[-1], "content": head[-1]["content"] + MARK + summary}]
    return [{"role": "system", "content": MARK.lstrip() + summary}, *head]


def split(messages: list[Any]) -> tuple[list[Any], list[Any]]:
    head, groups = caps.turns(messages)
    return head, [m for group in groups for m in group]


def recall(body: dict[str, Any], memory: Memory | None) -> tuple[dict[str, Any], int]:
    """The body with the kept summary in place of the messages it covers (when the history still begins with
    them), and how many messages it replaced (0: the body as sent)."""
    messages = body.get("messages")
    if memory is None or not isinstance(messages, list):
        return body, 0
    head, rest = split(messages)
    if len(rest) <= memory.covered or _digest(head + rest[: memory.covered]) != memory.digest:
        return body, 0
    return {**body, "messages": with_summary(head, memory.summary) + rest[memory.covered :]}, memory.covered


def transcript(previous: str | None, messages: list[Any]) -> str:
    """The text to summarise: the summary so far, then each message as ``role: content`` (tool calls as JSON)."""
    lines = [f"(summary of what came before) {previous}"] if previous else []
    for message in messages:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        text = (
            "" if content is None else content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        )
        if message.get("tool_calls"):
            text = f"{text or ''} [tool calls: {json.dumps(message['tool_calls'], ensure_ascii=False)}]".strip()
        lines.append(f"{message.get('role', '?')}: {text}")
    return "\n".join(lines)


def summary_request(body: dict[str, Any], text: str, tokens: int) -> dict[str, Any]:
    request: dict[str, Any] = {
        "messages": [
            {"role": "system", "content": INSTRUCTION.format(tokens=tokens)},
            {"role": "user", "content": text},
        ],
        "max_tokens": tokens,
        "temperature": 0,
        "stream": False,
    }
    if "model" in body:
        request["model"] = body["model"]
    return request


def summary_of(answer: Any) -> str | None:
    """The summary text of a chat completion answer, or None when it has none."""
    try:
        content = answer["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    return content.strip() if isinstance(content, str) else None


def remember(original: dict[str, Any], memory: Memory | None, dropped: int, summary: str) -> Memory:
    """The session's new memory: the summary now covers the old messages and ``dropped`` more."""
    head, rest = split(original["messages"])
    covered = (memory.covered if memory is not None else 0) + dropped
    return Memory(covered, _digest(head + rest[:covered]), summary)


def rewritten(original: dict[str, Any], memory: Memory) -> dict[str, Any]:
    """The original body with ``memory``'s summary in place of the messages it covers."""
    head, rest = split(original["messages"])
    return {**original, "messages": with_summary(head, memory.summary) + rest[memory.covered :]}


def summary_tokens(cap: int) -> int:
    """The summary's budget: an eighth of the cap, 16 to 1024 tokens (room for goals, facts and open tasks
    without taking much of what the compaction frees)."""
    return max(16, min(1024, cap // 8))


@dataclass(frozen=True)
class Compaction(caps.Fitted):
    """The turns summarised, and the session's memory of the summary."""

    memory: Memory


async def compact(
    counter: caps.Counter, path: str, original: dict[str, Any], body: dict[str, Any], memory: Memory | None,
    room: int, tokens: int,
) -> Compaction | str:  # fmt: skip
    """Summarise the fewest oldest turns of ``body`` (the original, or with ``memory`` recalled) that make room for
    the rest, the summary's marker and ``tokens`` of summary within ``room``; the compaction, or why there is none
    (the caller then truncates)."""
    if memory is None:  # count the summary's marker too: the room is for the request as it will be sent
        head, rest = split(body["messages"])
        body = {**body, "messages": with_summary(head, "") + rest}
    cut = await caps.truncate(counter, path, body, lambda prompt: prompt + tokens <= room)
    if cut is None:
        return "the system prompt, a summary and the last turn do not fit"
    _, rest = split(body["messages"])
    text = transcript(memory.summary if memory is not None else None, rest[: cut.dropped_messages])
    status, answer = await counter.post("/v1/chat/completions", summary_request(original, text, tokens))
    summary = summary_of(answer) if status == 200 else None
    if summary is None:
        return f"the upstream gave no summary (HTTP {status})"
    return await _fitted(counter, path, original, memory, cut.dropped_messages, summary, room, cut.dropped_turns)


async def _fitted(
    counter: caps.Counter, path: str, original: dict[str, Any], memory: Memory | None, dropped: int, summary: str,
    room: int, turns: int,
) -> Compaction | str:  # fmt: skip
    """The compaction with the summary cut to fit when, tokenised again, it came out longer than it was generated
    (text that is not valid UTF-8 comes back as U+FFFD, three bytes a byte; a tokenizer may also merge tokens
    differently): the longest head of the summary that fits (binary search, a few counts)."""
    kept = remember(original, memory, dropped, summary)
    compacted = rewritten(original, kept)
    count = await counter.count(path, compacted)
    if count.prompt_tokens <= room:
        return Compaction(compacted, count, turns, memory=kept)
    low, high, best = 0, len(summary) - 1, None
    while low <= high:
        middle = (low + high) // 2
        trial = remember(original, memory, dropped, summary[:middle])
        trial_count = await counter.count(path, rewritten(original, trial))
        if trial_count.prompt_tokens <= room:
            best, low = (trial, trial_count), middle + 1
        else:
            high = middle - 1
    if best is None:
        return "the system prompt and the last turn leave no room for a summary"
    return Compaction(rewritten(original, best[0]), best[1], turns, memory=best[0])
