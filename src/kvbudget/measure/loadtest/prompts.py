"""Prompt text of a known token count on the server's own tokenizer, and the growing conversation.

Text is drawn (seeded) from an *alphabet* of units that each tokenize to exactly one token and do
not merge with their neighbours: space-led letters (`` a b c``: one token each on BPE and
SentencePiece vocabularies) or bare letters (byte vocabularies, where a space costs several
tokens). ``calibrate`` measures each alphabet on the server — llama.cpp or vLLM ``/tokenize`` when
the completions API is used, else ``usage.prompt_tokens`` of a one-token request — at two lengths,
and keeps the first one whose count grows by exactly one token per unit; ``base_tokens`` is what
the server adds to every prompt (BOS, the chat template). Without an exact alphabet the closest is
kept and marked approximate. Real counts always come from the server's ``usage`` anyway.

Random letters make every session's text its own from its first private token, so no two
sessions share cache beyond the shared prefix (vLLM hashes whole blocks; one differing token is
enough).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace
from string import ascii_lowercase

from kvbudget.measure.loadtest.client import Client, ServerError

ALPHABETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("space-led letters", tuple(" " + c for c in ascii_lowercase)),
    ("letters", tuple(ascii_lowercase)),
)
PROBE_UNITS = (16, 80)
TOKENIZE = ("llamacpp", "vllm")  # engines whose /tokenize counts a completions prompt as usage does


@dataclass(frozen=True)
class TextUnits:
    """How to write text of N tokens on this server."""

    name: str
    units: tuple[str, ...]
    tokens_per_unit: float
    base_tokens: int  # tokens the server adds to every prompt (BOS, chat template)
    exact: bool
    method: str  # how it was measured
    turn_tokens: int = 0  # chat API: template tokens of each further assistant + user turn

    def text(self, rng: random.Random, tokens: int) -> str:
        n = tokens if self.exact else round(tokens / self.tokens_per_unit)
        return "".join(rng.choices(self.units, k=max(0, n)))

    def to_json(self) -> dict[str, object]:
        return {
            "alphabet": self.name,
            "tokens_per_unit": self.tokens_per_unit,
            "base_tokens": self.base_tokens,
            "exact": self.exact,
            "turn_tokens": self.turn_tokens,
            "measured_with": self.method,
        }


class Conversation:
    """One session's prompt: a growing string (completions API) or message list (chat API)."""

    __slots__ = ("api", "messages", "parts")

    def __init__(self, api: str, prefix: str) -> None:
        self.api = api
        self.parts: list[str] = [prefix] if prefix else []
        self.messages: list[dict[str, str]] = [{"role": "system", "content": prefix}] if prefix else []

    def add_user(self, text: str) -> None:
        if self.api == "chat":
            if self.messages and self.messages[-1]["role"] == "user":  # after a compaction: one user turn
                self.messages[-1] = {"role": "user", "content": self.messages[-1]["content"] + text}
            else:
                self.messages.append({"role": "user", "content": text})
        else:
            self.parts.append(text)

    def add_output(self, text: str) -> None:
        if self.api == "chat":
            self.messages.append({"role": "assistant", "content": text})
        else:
            self.parts.append(text)

    def reset(self, prefix: str, text: str) -> None:
        """Compaction: the prefix is kept, the history becomes ``text`` (new text: prefilled again)."""
        self.parts = [p for p in (prefix, text) if p]
        self.messages = [{"role": "system", "content": prefix}] if prefix else []
        if text:
            self.messages.append({"role": "user", "content": text})

    def prompt(self) -> str | list[dict[str, str]]:
        if self.api == "chat":
            return list(self.messages)
        return "".join(self.parts)


async def count_tokens(client: Client, prompt: str | list[dict[str, str]], engine: str) -> tuple[int, str]:
    """(tokens of ``prompt`` as the server counts it, how it was counted)."""
    if isinstance(prompt, str) and engine in TOKENIZE:
        body: dict[str, object] = {"content": prompt, "add_special": True}
        if engine == "vllm":
            body = {"prompt": prompt, "model": client.model} if client.model else {"prompt": prompt}
        status, answer = await client.post_json("/tokenize", body)
        if status == 200:
            try:
                data = json.loads(answer)
            except ValueError:
                data = None
            if isinstance(data, dict):
                if isinstance(data.get("count"), int):
                    return data["count"], "/tokenize"
                if isinstance(data.get("tokens"), list):
                    return len(data["tokens"]), "/tokenize"
    reply = await client.complete(prompt, 1, keep_text=False)
    if not reply.ok:
        raise ServerError(f"{client.url}{client.path}: {reply.error}")
    if reply.prompt_tokens is None:
        raise ServerError(f"{client.url}{client.path} reports no usage.prompt_tokens; token counts cannot be known")
    return reply.prompt_tokens, "usage.prompt_tokens"


async def check_api(client: Client) -> None:
    """One small request: the API answers, and takes ``ignore_eos``/``min_tokens`` (else they are dropped)."""
    prompt: str | list[dict[str, str]] = [{"role": "user", "content": "ping"}] if client.api == "chat" else "ping"
    reply = await client.complete(prompt, 1, keep_text=False)
    if not reply.ok and reply.status in (400, 422) and client.extras:
        client.extras = False
        reply = await client.complete(prompt, 1, keep_text=False)
    if reply.status == 0:
        raise ServerError(f"cannot reach {client.url}: {reply.error}")
    if reply.status in (404, 405, 501):
        raise ServerError(
            f"{client.url} does not answer the OpenAI API: POST {client.path} returned HTTP {reply.status}"
        )
    if not reply.ok:
        raise ServerError(f"{client.url}: POST {client.path} failed: {reply.error}")
    if reply.ttft_s is None:
        raise ServerError(f"{client.url}: POST {client.path} streamed no choices; it is not OpenAI-compatible")


async def calibrate(client: Client, engine: str, limit: int | None = None, system: bool = False) -> TextUnits:
    """The first alphabet with exactly one token per unit on this server (else the closest one).

    ``limit``: the most tokens one prompt may hold there; the probes stay well below it. On the
    chat API the template's tokens are measured on the run's own message structure (``system``: a
    shared prefix is sent as a system message): ``base_tokens`` for the first prompt, and
    ``turn_tokens`` for each further assistant + user turn."""
    best: TextUnits | None = None
    failed: ServerError | None = None
    high = PROBE_UNITS[1] if limit is None else max(8, min(PROBE_UNITS[1], limit // 8))
    low = min(PROBE_UNITS[0], high // 4)
    for name, units in ALPHABETS:
        rng = random.Random(f"kvbudget/loadtest/calibrate/{name}")
        short = "".join(rng.choices(units, k=low))
        long = short + "".join(rng.choices(units, k=high - low))
        try:
            n_short, method = await count_tokens(client, _wrap(client, short), engine)
            n_long, _ = await count_tokens(client, _wrap(client, long), engine)
        except ServerError as exc:  # e.g. a unit of many tokens passes a small context: try the next
            failed = exc
            continue
        slope = (n_long - n_short) / (high - low)
        base = max(0, round(n_short - slope * low))
        found = TextUnits(name, units, slope, base, slope == 1.0 and n_short - low >= 0, method)
        if found.exact:
            best = found
            break
        if slope > 0 and (best is None or abs(slope - 1) < abs(best.tokens_per_unit - 1)):
            best = found
    if best is None and failed is not None:
        raise failed
    if best is None:
        raise ServerError(f"{client.url}: prompt token counts do not grow with the prompt; cannot size prompts")
    return await _chat_template(client, engine, best, low, system) if client.api == "chat" else best


def _wrap(client: Client, text: str) -> str | list[dict[str, str]]:
    return [{"role": "user", "content": text}] if client.api == "chat" else text


async def _chat_template(client: Client, engine: str, units: TextUnits, k: int, system: bool) -> TextUnits:
    """The chat template's tokens around the first prompt and around each later turn."""
    rng = random.Random("kvbudget/loadtest/calibrate/chat")
    size = round(k * units.tokens_per_unit) if not units.exact else k
    a, b, c, s = (units.text(rng, k) for _ in range(4))
    first = ([{"role": "system", "content": s}] if system else []) + [{"role": "user", "content": a}]
    n_first, _ = await count_tokens(client, first, engine)
    later = [*first, {"role": "assistant", "content": b}, {"role": "user", "content": c}]
    n_later, _ = await count_tokens(client, later, engine)
    base = max(0, n_first - size * (2 if system else 1))
    return replace(units, base_tokens=base, turn_tokens=max(0, n_later - n_first - 2 * size))
