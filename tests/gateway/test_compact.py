"""``--on-cap compact``'s bookkeeping: which turns are summarised, where the summary goes, and how a session's
kept summary replaces the same messages at its next request (the live test summarises through a real
llama-server: tests/live/test_gateway_live.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from kvbudget.gateway import cap, compact

SYSTEM = {"role": "system", "content": "be brief"}
CALL = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
HISTORY: list[dict[str, Any]] = [
    SYSTEM,
    {"role": "user", "content": "u" * 40},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "t" * 40},
    {"role": "user", "content": "v" * 40},
    {"role": "assistant", "content": "w" * 40},
    {"role": "user", "content": "x" * 10},
]


class Bytes(cap.Counter):
    """Counts message bytes (a stand-in tokenizer) and answers a summarising call with a fixed text; the
    requests it was sent are kept."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

        async def post(path: str, body: dict[str, Any]) -> tuple[int, Any]:
            self.sent.append(body)
            return 200, {"choices": [{"message": {"role": "assistant", "content": " the summary "}}]}

        super().__init__("other", post)

    async def count(self, path: str, body: dict[str, Any]) -> cap.Count:
        return cap.Count(sum(len(str(m.get("content") or "")) for m in body["messages"]), "engine")


def test_the_oldest_turns_are_summarised_into_the_system_prompt_and_kept_for_the_session() -> None:
    counter = Bytes()
    body = {"model": "m", "messages": HISTORY, "max_tokens": 4}
    room = 8 + len(compact.MARK) + 11 + 40 + 40 + 10  # the system prompt, marker, summary, turn 2 and the last
    done = asyncio.run(compact.compact(counter, "/v1/chat/completions", body, body, None, room, 11))
    assert isinstance(done, compact.Compaction) and done.dropped_turns == 1  # a turn with its tool call and result
    assert done.memory.covered == 3 and done.memory.summary == "the summary"
    sent = done.body["messages"]
    assert sent[0] == {"role": "system", "content": "be brief" + compact.MARK + "the summary"}
    assert sent[1:] == HISTORY[4:]  # no second system message, no two user messages in a row
    asked = counter.sent[0]
    assert asked["max_tokens"] == 11 and asked["model"] == "m" and "11 tokens" in asked["messages"][0]["content"]
    assert asked["messages"][1]["content"].splitlines() == [
        "user: " + "u" * 40,
        'assistant: [tool calls: [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]]',
        "tool: " + "t" * 40,
    ]

    more = [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "y"}]
    grown: dict[str, Any] = {**body, "messages": [*HISTORY, *more]}
    recalled, covered = compact.recall(grown, done.memory)  # the client sends its whole history again
    assert covered == 3 and recalled["messages"] == [*sent, *more]
    edited = {**body, "messages": [SYSTEM, {"role": "user", "content": "changed"}, *HISTORY[2:]]}
    assert compact.recall(edited, done.memory) == (edited, 0)  # a different history: the summary does not apply


def test_a_second_compaction_summarises_the_summary_with_the_next_turns() -> None:
    counter = Bytes()
    first = compact.Memory(3, compact.remember({"messages": HISTORY}, None, 3, "old").digest, "old")
    body = {"messages": HISTORY, "max_tokens": 4}
    recalled, covered = compact.recall(body, first)
    assert covered == 3
    room = 8 + len(compact.MARK) + 3 + 10 + 10  # the old summary is counted as it stands, plus the new budget
    done = asyncio.run(compact.compact(counter, "/v1/chat/completions", body, recalled, first, room, 10))
    assert isinstance(done, compact.Compaction) and done.memory.covered == 5
    assert counter.sent[0]["messages"][1]["content"].startswith("(summary of what came before) old\nuser: vvvv")
    assert done.body["messages"] == [{"role": "system", "content": "be brief" + compact.MARK + "the summary"},
                                     HISTORY[-1]]  # fmt: skip


def test_without_room_for_a_summary_it_says_why() -> None:
    body = {"messages": HISTORY, "max_tokens": 4}
    why = asyncio.run(compact.compact(Bytes(), "/v1/chat/completions", body, body, None, 20, 10))
    assert why == "the system prompt, a summary and the last turn do not fit"


def test_the_summary_budget_is_an_eighth_of_the_cap_within_bounds() -> None:
    assert [compact.summary_tokens(c) for c in (64, 256, 32768, 131072)] == [16, 32, 1024, 1024]


def test_a_summary_longer_once_tokenised_again_is_cut_to_fit() -> None:
    body = {"messages": HISTORY, "max_tokens": 4}
    room = 8 + len(compact.MARK) + 10 + 40 + 40 + 10  # 10 tokens of summary; " the summary " comes back as 11
    done = asyncio.run(compact.compact(Bytes(), "/v1/chat/completions", body, body, None, room, 10))
    assert isinstance(done, compact.Compaction) and done.memory.summary == "the summar"
    assert done.count.prompt_tokens == room
