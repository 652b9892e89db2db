"""The cap: a request's tokens counted as the engine will count them, plus what it may generate.

Counting goes through the engine's own endpoints, chat template included (exact):
* llama-server: ``POST /apply-template`` renders the chat body with the model's template, then
  ``POST /tokenize`` with ``add_special`` (the BOS the completion adds; llama.cpp tools/server/server.cpp
  handle_apply_template and handle_tokenize);
* vLLM: ``POST /tokenize`` with the messages and ``add_generation_prompt`` (vllm/entrypoints/openai
  serving_tokenization.py), which answers ``count``.
A request that provably fits skips the exact count (llama-server only; gateway/bound.py: a bound on the tokens
from the rendered bytes, proven from llama.cpp's tokenizers). An engine without such an endpoint gets a
heuristic, the request's UTF-8 bytes / 4 scaled by the ratio that
the engine's reported ``usage.prompt_tokens`` showed so far (reconciled after every answer).

The generation budget is ``max_completion_tokens`` or ``max_tokens``; a request without one is given
``cap - prompt`` (vLLM fills a missing max_tokens the same way: serving_engine.py, max_model_len - prompt).
Past the cap, ``refuse`` answers OpenAI's context_length_exceeded error; ``truncate`` drops the oldest whole
turns (a turn: a user message with the assistant and tool messages after it, so a tool call keeps its result;
the leading system/developer messages are never dropped) until the request fits.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvbudget.gateway import bound as bounds
from kvbudget.gateway.bound import Get, Post

HEURISTIC_BYTES_PER_TOKEN = 4.0  # a rough English BPE figure; corrected from the engine's usage (heuristic)


@dataclass(frozen=True)
class Count:
    prompt_tokens: int
    basis: str  # "engine" (its tokenizer), "heuristic", or "bound" (an upper bound: the count was skipped)


class Counter:
    """Counts prompt tokens through the upstream; ``engine`` is auto, llamacpp, vllm or another name."""

    def __init__(self, engine: str, post: Post, get: Get | None = None) -> None:
        self.engine = engine
        self.post = post
        self.get = get
        self.ratio = 1.0  # heuristic correction: reported / estimated, from the engine's usage
        self.bounding: bool | None = None  # None: not learned yet; False: every request is counted
        self.vocab_type = 0
        self.template: bounds.Template | None = None
        self._learning = asyncio.Lock()

    async def bound(self, body: dict[str, Any], room: int) -> Count | None:
        """A proven upper bound on the prompt tokens when it is within ``room`` (the count can be skipped), else
        None (count exactly). llama-server only, once the engine is known (gateway/bound.py)."""
        if self.engine != "llamacpp" or self.bounding is False or not bounds.plain(body):
            return None
        if self.bounding is None:
            async with self._learning:  # one learning per upstream, whatever arrives meanwhile
                if self.bounding is None:
                    await self._learn()
            if not self.bounding:
                return None
        messages, prompt = body.get("messages"), body.get("prompt")
        if isinstance(messages, list):
            rendered = None if self.template is None else self.template.rendered_bytes(messages)
        else:
            rendered = len(prompt.encode()) if isinstance(prompt, str) and "messages" not in body else None
        if rendered is None:
            return None
        tokens = bounds.token_bound(self.vocab_type, rendered)
        return Count(tokens, "bound") if tokens <= room else None

    async def _learn(self) -> None:
        """The upstream's vocabulary type (``GET /v1/models``: ``meta.vocab_type``) and chat template's rendering.
        No HTTP answer (status 0) leaves it unlearned (the request is counted; tried again with the next one); an
        answer without a usable vocabulary type turns the bound off on this upstream."""
        if self.get is None:
            self.bounding = False
            return
        status, models = await self.get("/v1/models")
        if status == 0:
            return
        data = models.get("data") if isinstance(models, dict) else None
        meta = data[0].get("meta") if isinstance(data, list) and data and isinstance(data[0], dict) else None
        vocab = meta.get("vocab_type") if isinstance(meta, dict) else None
        # a bool is no vocabulary type (llama.cpp builds after b10585 may serialise the enum as true/false)
        if status != 200 or type(vocab) is not int or vocab not in bounds.PER_BYTE:
            self.bounding = False
            return
        self.vocab_type = vocab
        self.template = await bounds.learn_template(self.post)  # None: chat requests are counted, prompts bounded
        self.bounding = True

    def exceeded(self, counted: Count, reported: int) -> bool:
        """The engine reported more prompt tokens than a bound said: the template rendered past what was learned.
        The bound is off on this upstream from now on (every request counted)."""
        if counted.basis == "bound" and reported > counted.prompt_tokens:
            self.bounding = False
            return True
        return False

    async def count(self, path: str, body: dict[str, Any]) -> Count:
        if self.engine == "auto":
            self.engine = await self._probe(path, body)
        if self.engine == "llamacpp":
            got = await self._llamacpp(path, body)
        elif self.engine == "vllm":
            got = await self._vllm(body)
        else:
            got = None
        if got is not None:
            return Count(got, "engine")
        return Count(max(1, round(self._estimate(body) * self.ratio)), "heuristic")

    async def _probe(self, path: str, body: dict[str, Any]) -> str:
        """The first engine whose endpoints answer; an unreachable upstream is probed again next time."""
        for engine in ("llamacpp", "vllm"):
            self.engine = engine
            try:
                if await (self._llamacpp(path, body) if engine == "llamacpp" else self._vllm(body)) is not None:
                    return engine
            except BaseException:
                self.engine = "auto"
                raise
        return "other"

    async def _llamacpp(self, path: str, body: dict[str, Any]) -> int | None:
        if "messages" in body:
            status, answer = await self.post("/apply-template", {**body, "stream": False})
            if status != 200 or not isinstance(answer, dict) or not isinstance(answer.get("prompt"), str):
                return None
            content: object = answer["prompt"]
        elif isinstance(body.get("prompt"), str):
            content = body["prompt"]
        else:
            return None
        status, answer = await self.post("/tokenize", {"content": content, "add_special": True})
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        return len(tokens) if status == 200 and isinstance(tokens, list) else None

    async def _vllm(self, body: dict[str, Any]) -> int | None:
        query: dict[str, Any] = {"model": body.get("model")}
        if "messages" in body:
            query |= {"messages": body["messages"], "add_generation_prompt": True}
            if "tools" in body:
                query["tools"] = body["tools"]
        elif isinstance(body.get("prompt"), str):
            query["prompt"] = body["prompt"]
        else:
            return None
        status, answer = await self.post("/tokenize", query)
        count = answer.get("count") if isinstance(answer, dict) else None
        return count if status == 200 and isinstance(count, int) else None

    @staticmethod
    def _estimate(body: dict[str, Any]) -> float:
        payload = body.get("messages", body.get("prompt", ""))
        return len(json.dumps(payload, ensure_ascii=False).encode()) / HEURISTIC_BYTES_PER_TOKEN

    def reconcile(self, counted: Count, reported: int) -> int:
        """Learn from the engine's reported prompt tokens; returns reported - counted (0 when exact; 0 for a bound,
        which ``exceeded`` checks)."""
        if counted.basis == "bound":
            return 0
        if counted.basis == "heuristic" and counted.prompt_tokens > 0 and reported > 0:
            self.ratio *= 0.8 + 0.2 * reported / counted.prompt_tokens  # a slow moving average of the error
        return reported - counted.prompt_tokens


def generation_budget(body: dict[str, Any]) -> int | None:
    """What the request may generate, as it says (``max_completion_tokens`` first, as OpenAI reads it)."""
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def refusal(cap: int, prompt: int, budget: int) -> dict[str, Any]:
    """OpenAI's error for a request past the context length (agent harnesses compact on exactly this)."""
    message = (
        f"This model's maximum context length is {cap} tokens. However, you requested {prompt + budget} tokens "
        f"({prompt} in the messages, {budget} in the completion). Please reduce the length of the messages or "
        "completion."
    )
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
            "cap": cap,
            "prompt_tokens": prompt,
            "max_tokens": budget,
        }
    }


def turns(messages: list[Any]) -> tuple[list[Any], list[list[Any]]]:
    """The leading system/developer messages, and the rest in whole turns (each starts at a user message)."""
    head = 0
    while (
        head < len(messages)
        and isinstance(messages[head], dict)
        and messages[head].get("role")
        in (
            "system",
            "developer",
        )
    ):
        head += 1
    groups: list[list[Any]] = []
    for message in messages[head:]:
        if not groups or (isinstance(message, dict) and message.get("role") == "user"):
            groups.append([message])
        else:
            groups[-1].append(message)
    return messages[:head], groups


@dataclass(frozen=True)
class Fitted:
    """A request made to fit under the cap (truncated here, compacted in gateway/compact.py): its new body, that
    body's count, and the oldest whole turns it no longer carries."""

    body: dict[str, Any]
    count: Count
    dropped_turns: int


@dataclass(frozen=True)
class Truncation(Fitted):
    """The turns dropped, and the messages they held."""

    dropped_messages: int


async def truncate(counter: Counter, path: str, body: dict[str, Any], fits: Callable[[int], bool]) -> Truncation | None:
    """The body with the fewest oldest turns dropped that ``fits`` (the prompt count), or None when even the
    system prompt and the last turn alone do not fit. Binary search: fits is monotonic in the turns dropped."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    system, groups = turns(messages)

    def candidate(drop: int) -> dict[str, Any]:
        return {**body, "messages": system + [m for group in groups[drop:] for m in group]}

    low, high = 1, len(groups) - 1  # dropping `high` turns keeps the last one
    best: tuple[int, Count] | None = None
    while low <= high:
        middle = (low + high) // 2
        count = await counter.count(path, candidate(middle))
        if fits(count.prompt_tokens):
            best, high = (middle, count), middle - 1
        else:
            low = middle + 1
    if best is None:
        return None
    drop, count = best
    return Truncation(candidate(drop), count, drop, dropped_messages=sum(len(g) for g in groups[:drop]))
