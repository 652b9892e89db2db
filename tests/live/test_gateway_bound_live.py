"""The count's bound (gateway/bound.py) against a real llama-server: its tokenizer never gives more tokens than the
bound, its chat template is learned as it renders, and a gateway skips the count only where the bound fits, with
the record still exact, step for step.

The tiny GGUF's vocabulary is SentencePiece with only byte tokens (no ``▁``), the worst case for the bound: every
space is 3 tokens, every other byte 1 (tests/live/tiny_gguf.py); llama-server renders its chats with ChatML.
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
from tests.live.tiny_gguf import write_llama

CONTEXT = 2048  # one slot of 2048 cells: the gateway's cap below


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    binary()  # skip (or fail under KVBUDGET_REQUIRE_LIVE) before writing anything
    where = tmp_path_factory.mktemp("bound-live")
    model = write_llama(where / "llama-3.1-8b-tiny.gguf")
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
    [" ", "\n", "\t", "<s>", "</s>"]
)
TEXT = st.lists(PIECE, max_size=12).map("".join)
LIVE = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def test_the_server_reports_an_spm_vocabulary(server: Server) -> None:
    meta = server.get_json("/v1/models")["data"][0]["meta"]  # type: ignore[index]
    assert meta["vocab_type"] == bound.SPM


@pytest.mark.parametrize("text", ["", " ", " " * 50, "<s>" * 20, "</s> <s> ", "é中😀 \n\t" * 7, "a b c"])
def test_the_tokenizer_stays_within_the_bound_where_it_is_tightest(server: Server, text: str) -> None:
    got = tokens(server, text)
    assert got <= bound.token_bound(bound.SPM, len(text.encode()))
    if text == " " * 50:
        assert got == 1 + 3 * 50  # BOS and 3 byte tokens a space: why the bound is not one token a byte


@LIVE
@given(text=TEXT)
def test_the_tokenizer_never_passes_the_bound(server: Server, text: str) -> None:
    assert tokens(server, text) <= bound.token_bound(bound.SPM, len(text.encode()))


@LIVE
@given(contents=st.lists(TEXT, min_size=1, max_size=6), system=st.booleans())
def test_a_learned_template_bounds_the_exact_count(server: Server, contents: list[str], system: bool) -> None:
    template = learned(server)
    roles = (["system"] if system else []) + ["user", "assistant"] * len(contents)
    messages = [{"role": role, "content": text} for role, text in zip(roles, contents, strict=False)]
    rendered = post(server, "/apply-template", {"messages": messages})["prompt"]
    limit = template.rendered_bytes(messages)
    assert limit is not None and len(rendered.encode()) <= limit
    assert tokens(server, rendered) <= bound.token_bound(bound.SPM, limit)


def test_only_requests_far_below_the_cap_skip_the_count_and_the_record_stays_exact(
    server: Server, tmp_path: Path
) -> None:
    record = tmp_path / "steps.jsonl"
    sent: list[tuple[int, int]] = []
    skipped = 0
    with gateway(server.url, "--cap", str(CONTEXT), "--sessions", "1", "--record", str(record)) as gw:
        messages: list[dict[str, Any]] = []
        # short turns are bounded below the cap (4 x (50 + 61 x n + content) + 5); the long one is not: counted
        for step, content in enumerate(["hello", "and then?", "x" * 600, "ok"]):
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
