"""A proven upper bound on a request's prompt tokens, so that a request far below the cap skips the exact count.

Counting through llama-server costs two round trips a request (``/apply-template`` then ``/tokenize``). A request
whose *upper bound* plus its generation budget is within the cap provably fits, and is forwarded without them;
every other request (near the cap, or not covered below) is counted exactly as before, so the cap decision near
the cap stays exact. The trace keeps exact figures either way: it takes the prompt tokens from the engine's
``usage``.

**Tokens from bytes** (llama.cpp src/llama-vocab.cpp, read at ggml-org/llama.cpp 00ad355, the tokenizer of the
pinned llama-server build; ``vocab_type`` as ``GET /v1/models`` reports it in ``meta``, tools/server):

* SPM (``vocab_type`` 1): the text is split into UTF-8 characters and merged; a final symbol that is no token is
  emitted as one byte token per byte (``llm_tokenizer_spm_session::resegment``), so a byte yields at most one
  token, *after* ``llama_escape_whitespace`` turns each space into U+2581 (3 bytes: a vocabulary without a
  ``▁`` token, as the live tests' byte vocabulary, gives 3 tokens for one space). With ``add_space_prefix``, a
  ``▁`` is also put before the text and after every special token parsed from it (``is_prev_special``), and a
  special token is one token whatever its length. So: a space at most 3 tokens, another byte at most 1, a special
  token of L >= 1 bytes at most 1 + 3; with BOS and EOS and the leading prefix, **tokens <= 4 B + 5**.
* BPE (``vocab_type`` 2): each initial symbol is one byte (GPT-2 byte encoding: one byte maps to one character of
  1-2 UTF-8 bytes) or one UTF-8 character (the SPM-style BPE of Gemma 4, which escapes spaces to ``▁`` too); a
  final symbol that is no token falls back to one token per UTF-8 byte of its text
  (``llm_tokenizer_bpe_session::tokenize``); specials are one token each, no prefix. So at most 3 tokens a byte
  (an escaped space), with BOS and EOS: **tokens <= 3 B + 2**.
* WPM, UGM (its normaliser can expand a character to many), RWKV, PLaMo-2, or a type not reported: no bound,
  every request is counted.

In practice a byte-level vocabulary gives about a quarter of a token a byte, so the bound is loose by design:
it proves the fit only for requests far below the cap (about B < cap / 4 to cap / 16), which is where most
requests of most sessions are.

**Bytes from the messages** (learned, guarded): the chat template's rendering is measured once per upstream
through ``/apply-template`` on known conversations: its fixed part with one user message, and the most one more
message adds around its content (a system message, or a whole assistant + user turn), counted for every message.
The learning checks that the template copies a message's content once and verbatim (content longer by N bytes,
including quotes, a backslash, a newline, a tab, ``é`` and ``<&>``, renders exactly N bytes longer for each
message) and that more turns add no more than measured; a template that fails either, or refuses a probe, is
"unknown" and every chat request is counted. Only plain conversations are bounded: ``system`` / ``user`` /
``assistant`` messages with string contents and no other keys, and bodies with only the fields of ``PLAIN``
(tools, images, ``chat_template_kwargs``... change the rendering: counted). The template is code the gateway
cannot prove things about, so the bound is guarded: an engine ``usage`` above a bound (which the margins above
make unlikely) stops the skipping on that upstream for good and counts ``kvbudget_gateway_bound_exceeded_total``.
With ``--engine auto`` the first request finds the engine by counting, so it is counted.

**vLLM: no bound.** Its ``/tokenize`` renders and tokenises in one call, so the bytes a template renders are not
seen apart from the tokens; it does not report its tokenizer's type; and a Hugging Face tokenizer may normalise
(NFKC turns the one character U+FDFA, 3 bytes, into 18 characters), so tokens from bytes has no bound that holds
for every model it serves. Every vLLM request is counted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

# (path, JSON body) -> (HTTP status, JSON answer or None)
Post = Callable[[str, dict[str, Any]], Awaitable[tuple[int, Any]]]
Get = Callable[[str], Awaitable[tuple[int, Any]]]

SPM, BPE = 1, 2  # llama_vocab_type (include/llama.h): LLAMA_VOCAB_TYPE_SPM, LLAMA_VOCAB_TYPE_BPE
# tokens <= per_byte x B + fixed (see the module's docstring for the derivation from llama-vocab.cpp)
PER_BYTE = {SPM: (4, 5), BPE: (3, 2)}
ROLES = frozenset(("system", "user", "assistant"))
# body fields that leave the prompt as the messages (or prompt) alone render it: sampling, streaming, naming
PLAIN = frozenset(
    ("model", "messages", "prompt", "stream", "stream_options", "max_tokens", "max_completion_tokens", "temperature",
     "top_p", "top_k", "min_p", "typical_p", "seed", "stop", "n", "presence_penalty", "frequency_penalty",
     "repeat_penalty", "logit_bias", "logprobs", "top_logprobs", "user", "prompt_cache_key", "cache_prompt",
     "ignore_eos", "metadata", "store")
)  # fmt: skip
PAD = "q" * 40 + ' "\\\n\té<&>'  # content added in the linearity probe: escaping or trimming would show


def token_bound(vocab_type: int, rendered_bytes: int) -> int:
    per_byte, fixed = PER_BYTE[vocab_type]
    return per_byte * rendered_bytes + fixed


@dataclass(frozen=True)
class Template:
    """The most bytes a chat template renders: ``head`` (its fixed part and one user message around an empty
    content) plus ``per`` for every message (the first's role may cost more than a user's), plus the contents."""

    head: int
    per: int

    def rendered_bytes(self, messages: list[Any]) -> int | None:
        """The bound for a plain conversation, None for anything else (counted exactly)."""
        if not messages:
            return None
        content = 0
        for message in messages:
            if (
                not isinstance(message, dict)
                or message.get("role") not in ROLES
                or not isinstance(message.get("content"), str)
                or len(message) != 2
            ):
                return None
            content += len(message["content"].encode())
        return self.head + self.per * len(messages) + content  # head holds a user message too: room for any first


def _conversation(contents: list[str]) -> list[dict[str, str]]:
    roles = ["system", "user"] + ["assistant", "user"] * len(contents)
    return [
        {"role": role, "content": text} for role, text in zip(roles, contents, strict=False)
    ]  # roles: enough for every content


async def learn_template(post: Post) -> Template | None:
    """Measure the template through ``/apply-template``; None when it renders in a way the bound does not hold."""

    async def rendered(messages: list[dict[str, str]]) -> int | None:
        status, answer = await post("/apply-template", {"messages": messages})
        if status != 200 or not isinstance(answer, dict) or not isinstance(answer.get("prompt"), str):
            return None
        return len(answer["prompt"].encode())

    short = ["s", "a", "b", "c", "d", "e"]
    one = await rendered([{"role": "user", "content": "a"}])
    two, four, six = [await rendered(_conversation(short[:n])) for n in (2, 4, 6)]
    longer = await rendered(_conversation([text + PAD for text in short[:4]]))
    if one is None or two is None or four is None or six is None or longer is None:
        return None
    if longer - four != 4 * len(PAD.encode()):  # each content copied once, verbatim
        return None
    head = one - 1
    per = max(two - one - 1, four - two - 2)  # one more message adds at most a system message or a whole turn does
    if per < 0 or six - four - 2 > per:  # later turns add no more than measured
        return None
    return Template(head, per)


def plain(body: dict[str, Any]) -> bool:
    return all(key in PLAIN for key in body)
