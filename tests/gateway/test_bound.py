"""The bound that lets a request far below the cap skip the exact count: what it covers, and how a chat template is
learned, against stand-in renderers (Python functions rendering as the templates named do, not servers). The bound
against llama-server's own tokenizer and templates: tests/live/test_gateway_bound_live.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvbudget.gateway import bound, cap

Render = Callable[[list[dict[str, str]]], str]


def chatml(messages: list[dict[str, str]]) -> str:  # the live tests' template (tests/live/tiny_gguf.py)
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + "<|im_start|>assistant\n"


def llama3(messages: list[dict[str, str]]) -> str:  # Llama 3's header per message, BOS once
    parts = [f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{m['content'].strip()}<|eot_id|>" for m in messages]
    return "<|begin_of_text|>" + "".join(parts) + "<|start_header_id|>assistant<|end_header_id|>\n\n"


def escaping(messages: list[dict[str, str]]) -> str:  # content through tojson: a newline renders as two bytes
    import json

    return "".join(f"[{m['role']}]{json.dumps(m['content'])}" for m in messages)


def twice(messages: list[dict[str, str]]) -> str:  # repeats the last message (content not copied once)
    return chatml(messages) + messages[-1]["content"]


def numbered(messages: list[dict[str, str]]) -> str:  # a turn header that grows with the turn's number
    return "".join(f"Turn {'#' * i}: {m['content']}\n" for i, m in enumerate(messages))


def poster(render: Render) -> bound.Post:
    async def post(path: str, body: dict[str, Any]) -> tuple[int, Any]:
        assert path == "/apply-template"
        return 200, {"prompt": render(body["messages"])}

    return post


def learned(render: Render) -> bound.Template | None:
    return asyncio.run(bound.learn_template(poster(render)))


MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]), "content": st.text()})


@pytest.mark.parametrize("render", [chatml, llama3])
@given(messages=st.lists(MESSAGE, min_size=1, max_size=12))
def test_a_learned_template_bounds_the_bytes_it_renders(render: Render, messages: list[dict[str, str]]) -> None:
    template = learned(render)
    assert template is not None
    limit = template.rendered_bytes(messages)
    assert limit is not None and len(render(messages).encode()) <= limit


def test_chatml_is_learned_exactly() -> None:
    # per: one more message adds at most a whole turn, "<|im_start|>assistant\n<|im_end|>\n" (33 bytes) and
    # "<|im_start|>user\n<|im_end|>\n" (28)
    assert learned(chatml) == bound.Template(head=len(chatml([{"role": "user", "content": ""}])), per=61)


@pytest.mark.parametrize("render", [escaping, twice, numbered])
def test_a_template_that_escapes_repeats_or_grows_per_turn_is_unknown(render: Render) -> None:
    assert learned(render) is None


def test_a_template_that_refuses_a_probe_is_unknown() -> None:
    async def post(path: str, body: dict[str, Any]) -> tuple[int, Any]:
        roles = [m["role"] for m in body["messages"]]
        if "system" in roles:  # "System role not supported" (older Gemma templates raise it)
            return 500, {"error": {"message": "System role not supported"}}
        return 200, {"prompt": chatml(body["messages"])}

    assert asyncio.run(bound.learn_template(post)) is None


@pytest.mark.parametrize(
    "message",
    [
        {"role": "tool", "content": "x"},
        {"role": "user", "content": [{"type": "text", "text": "x"}]},
        {"role": "user", "content": "x", "name": "n"},
        {"role": "assistant", "content": None, "tool_calls": []},
    ],
)
def test_only_plain_messages_are_bounded(message: dict[str, Any]) -> None:
    assert bound.Template(10, 10).rendered_bytes([message]) is None
    assert bound.Template(10, 10).rendered_bytes([]) is None


def test_a_body_that_changes_the_rendering_is_not_plain() -> None:
    messages = [{"role": "user", "content": "x"}]
    assert bound.plain({"model": "m", "messages": messages, "max_tokens": 4, "stream": True, "temperature": 0})
    for extra in ("tools", "chat_template_kwargs", "response_format", "continue_final_message", "reasoning_format"):
        assert not bound.plain({"messages": messages, "max_tokens": 4, extra: 1})


def test_the_token_bound_per_vocabulary_type() -> None:
    # SPM: a space is 3 byte tokens (U+2581 escaped, no such token), a 1-byte special 1 + a 3-byte prefix
    assert bound.token_bound(bound.SPM, 10) == 45
    assert bound.token_bound(bound.BPE, 10) == 32
    with pytest.raises(KeyError):
        bound.token_bound(3, 10)  # WPM: no bound


class Upstream:
    """What the counter asks llama-server, answered from a stand-in template and tokenizer (bytes + 1 tokens)."""

    def __init__(self, vocab_type: object, render: Render = chatml) -> None:
        self.vocab_type, self.render = vocab_type, render
        self.calls: list[str] = []

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        self.calls.append(path)
        if path == "/apply-template":
            return 200, {"prompt": self.render(body["messages"])}
        return 200, {"tokens": [0] * (1 + len(body["content"].encode()))}

    async def get(self, path: str) -> tuple[int, Any]:
        self.calls.append(path)
        return 200, {"data": [{"id": "m", "meta": {"vocab_type": self.vocab_type, "n_vocab": 259}}]}


def chat(content: str, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 4, **extra}


def test_the_counter_skips_only_when_the_bound_fits_and_learns_once() -> None:
    upstream = Upstream(bound.SPM)
    counter = cap.Counter("llamacpp", upstream.post, upstream.get)

    async def go() -> None:
        room = 1000
        got = await counter.bound(chat("hello"), room)
        head = len(chatml([{"role": "user", "content": ""}]).encode())
        assert got == cap.Count(4 * (head + 61 + len("hello")) + 5, "bound") and got.prompt_tokens <= room
        learning = list(upstream.calls)
        assert learning[0] == "/v1/models" and set(learning[1:]) == {"/apply-template"}
        assert await counter.bound(chat("x" * 300), room) is None  # 4 x (50 + 61 + 300) + 5 > 1000: counted
        assert await counter.bound(chat("hello", tools=[]), room) is None
        assert await counter.bound({"prompt": "abc", "max_tokens": 4}, room) == cap.Count(17, "bound")
        assert upstream.calls == learning  # learned once, nothing asked per request
        # an engine usage above a bound turns the bound off on this upstream
        assert counter.exceeded(cap.Count(17, "bound"), 18) and await counter.bound(chat("hello"), room) is None

    asyncio.run(go())


@pytest.mark.parametrize("vocab_type", [3, 4, True, None, "1"])
def test_a_vocabulary_without_a_bound_counts_every_request(vocab_type: object) -> None:
    upstream = Upstream(vocab_type)
    counter = cap.Counter("llamacpp", upstream.post, upstream.get)
    assert asyncio.run(counter.bound(chat("hello"), 10**6)) is None
    assert counter.bounding is False and upstream.calls == ["/v1/models"]


def test_other_engines_are_never_bounded() -> None:
    upstream = Upstream(bound.SPM)
    for engine in ("vllm", "other", "auto"):
        assert asyncio.run(cap.Counter(engine, upstream.post, upstream.get).bound(chat("hi"), 10**6)) is None
    assert upstream.calls == []
