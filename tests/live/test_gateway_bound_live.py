"""The count's bound (gateway/bound.py) against a real llama-server: its tokenizer never gives more tokens than the
bound, its chat template is learned as it renders, and a gateway skips the count only where the bound fits, with
the record still exact, step for step.

Each test runs against two tiny GGUFs (tests/live/tiny_gguf.py), one per bounded vocabulary type; llama-server
renders their chats with ChatML. ``spm``: SentencePiece with only byte tokens (no ``▁``), the worst case for its
bound: every space is 3 tokens, every other byte 1. ``bpe``: GPT-2-style byte-level BPE (256 byte symbols, a few
merges, ChatML's control tokens), where every byte without a merge is one token and the control tokens' texts
are one token each.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbudget.gateway import bound
from kvbudget.workload.traces import kvbudget_jsonl
from tests.live.gateway import gateway
from tests.live.server import Server, binary, llama_server
from tests.live.tiny_gguf import LLAMA_32_1B, write_llama

CONTEXT = 2048  # one slot of 2048 cells: the gateway's cap below


VOCAB_TYPES = {"spm": bound.SPM, "bpe": bound.BPE}


@pytest.fixture(scope="module", params=sorted(VOCAB_TYPES))
def vocab(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def server(vocab: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    binary()  # skip (or fail under KVBUDGET_REQUIRE_LIVE) before writing anything
    where = tmp_path_factory.mktemp(f"bound-live-{vocab}")
    # Llama-3.2-1B's geometry: the bound does not depend on it, and its prefill is about 4 times cheaper than the
    # 8B's, so the long prompt below is answered in time on a loaded machine
    model = write_llama(where / f"llama-3.2-1b-tiny-{vocab}.gguf", LLAMA_32_1B, vocab=vocab)
    with llama_server(model, where / "server.log", "-c", str(CONTEXT), "-np", "1") as running:
        yield running


def post(server: Server, path: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(server.url + path, json.dumps(body).encode(), {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read())


def tokens(server: Server, text: str) -> int:
    return len(post(server, "/tokenize", {"content": text, "add_special": True})["tokens"])  # as the gateway counts


def learned(server: Server) -> bound.Template:
    async def ask(path: str, body: dict[str, Any]) -> tuple[int, Any]:
        return 200, post(server, path, body)

    template = asyncio.run(bound.learn_template(ask))
    assert template is not None
    return template


# text as clients send it: any printable character (multi-byte ones too), spaces, newlines, tabs, and the
# special tokens' own texts
PIECE = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=8) | st.sampled_from(
    [" ", "\n", "\t", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "1234567890", "😀", "  the"]
)
TEXT = st.lists(PIECE, max_size=12).map("".join)
LIVE = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def test_the_server_reports_the_vocabulary_type(server: Server, vocab: str) -> None:
    meta = server.get_json("/v1/models")["data"][0]["meta"]  # type: ignore[index]
    assert meta["vocab_type"] == VOCAB_TYPES[vocab]


ADVERSARIAL = ["", " ", " " * 50, "<s>" * 20, "</s> <s> ", "é中😀 \n\t" * 7, "a b c", "<|im_start|>" * 20,
               "<|endoftext|> <|im_end|>", "😀" * 30, "0123456789" * 10, " 1 2 3 4 5", "\t \n " * 20]  # fmt: skip


@pytest.mark.parametrize("text", ADVERSARIAL)
def test_the_tokenizer_stays_within_the_bound_where_it_is_tightest(server: Server, vocab: str, text: str) -> None:
    got = tokens(server, text)
    assert got <= bound.token_bound(VOCAB_TYPES[vocab], len(text.encode()))
    if text == " " * 50 and vocab == "spm":
        assert got == 1 + 3 * 50  # BOS and 3 byte tokens a space: why the SPM bound is not one token a byte
    if text == "😀" * 30 and vocab == "bpe":
        assert got == 1 + 4 * 30  # BOS and one token a byte of an unmerged character: BPE's worst actual case


@LIVE
@given(text=TEXT)
def test_the_tokenizer_never_passes_the_bound(server: Server, vocab: str, text: str) -> None:
    assert tokens(server, text) <= bound.token_bound(VOCAB_TYPES[vocab], len(text.encode()))


@LIVE
@given(contents=st.lists(TEXT, min_size=1, max_size=6), system=st.booleans())
def test_a_learned_template_bounds_the_exact_count(
    server: Server, vocab: str, contents: list[str], system: bool
) -> None:
    template = learned(server)
    roles = (["system"] if system else []) + ["user", "assistant"] * len(contents)
    messages = [{"role": role, "content": text} for role, text in zip(roles, contents, strict=False)]
    rendered = post(server, "/apply-template", {"messages": messages})["prompt"]
    limit = template.rendered_bytes(messages)
    assert limit is not None and len(rendered.encode()) <= limit
    assert tokens(server, rendered) <= bound.token_bound(VOCAB_TYPES[vocab], limit)


def test_only_requests_far_below_the_cap_skip_the_count_and_the_record_stays_exact(
    server: Server, vocab: str, tmp_path: Path
) -> None:
    record = tmp_path / "steps.jsonl"
    sent: list[tuple[int, int]] = []
    skipped = 0
    with gateway(server.url, "--cap", str(CONTEXT), "--sessions", "1", "--record", str(record)) as gw:
        messages: list[dict[str, Any]] = []
        # short turns are bounded below the cap (SPM: 4 x (50 + 61 x n + content) + 5, BPE: 3 x (...) + 2); the long
        # one is not (about 2,600 both; with few tokens, so a loaded machine prefills it in time: SPM's byte tokens,
        # BPE's runs of four spaces), so it is counted. Adversarial text (multi-byte, emoji, digits, spaces, a
        # control token's text) is bounded as any other
        long = "x" * 350 if vocab == "spm" else " " * 600
        for step, content in enumerate(["hello 😀 é中 12345  \t", "and then? <|im_end|>", long, "ok"]):
            messages.append({"role": "user", "content": content})
            status, headers, body = gw.call({"messages": messages, "max_tokens": 3, "ignore_eos": True}, "s")
            assert status == 200, body
            prompt = body["usage"]["prompt_tokens"]
            sent.append((prompt, body["usage"]["completion_tokens"]))
            if step in (0, 2):  # the first request finds the engine (--engine auto) by counting; the third is long
                assert int(headers["x-kvbudget-prompt-tokens"]) == prompt  # counted exactly
                assert "x-kvbudget-prompt-bound" not in headers
            else:
                assert "x-kvbudget-prompt-tokens" not in headers  # far below the cap: not counted
                assert prompt <= int(headers["x-kvbudget-prompt-bound"]) <= CONTEXT - 3
                skipped += 1
            messages.append({"role": "assistant", "content": "ok"})
            if step == 2:
                messages = messages[:1]  # start again short (the history is the client's)
        assert gw.metric("kvbudget_gateway_count_skipped_total") == skipped == 2
        assert gw.metric("kvbudget_gateway_bound_exceeded_total") == 0
        assert gw.metric("kvbudget_gateway_count_error_tokens_total") == 0
        assert gw.call(None, path="/v1/sessions/s", method="DELETE")[0] == 204
    bad: list[object] = []
    rows = list(kvbudget_jsonl.read(record, bad.append))
    assert not bad and [(row.prompt_tokens, row.output_tokens) for row in rows] == sent  # the engine's usage
