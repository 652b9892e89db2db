"""The gateway's parts that need no server: session naming, turns for truncation, FIFO admission on a fake clock,
the plan's numbers, and the command's one-line errors (the live behaviour: tests/live/test_gateway_live.py)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvbudget.errors import InputError
from kvbudget.gateway import cap, sessions
from kvbudget.gateway.admission import Admission, Refused
from kvbudget.gateway.settings import resolve
from kvbudget.requests.gateway import GatewayRequest
from tests.helpers import run_cli

# -- sessions ------------------------------------------------------------------------------------------------


def test_the_first_present_link_of_the_chain_names_the_session() -> None:
    body: dict[str, Any] = {"prompt_cache_key": "k", "user": "u", "messages": [{"role": "user", "content": "hi"}]}
    assert sessions.resolve({"x-session-id": "h", "x-conversation-id": "c"}, body) == sessions.Identity(
        "h", "header x-session-id"
    )
    assert sessions.resolve({"x-conversation-id": "c"}, body).session == "c"
    assert sessions.resolve({}, body) == sessions.Identity("k", "body prompt_cache_key")
    assert sessions.resolve({}, {"user": "u"}).session == "u"
    assert sessions.resolve({}, {"conversation": {"id": "conv_1"}}).session == "conv_1"
    assert sessions.resolve({}, {"previous_response_id": "resp_1"}).session == "resp_1"


def test_a_conversation_keeps_its_fingerprint_as_it_grows() -> None:
    first = [{"role": "system", "content": "s"}, {"role": "user", "content": "q1"}]
    grown = [*first, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"}]
    other = [{"role": "system", "content": "s"}, {"role": "user", "content": "q9"}]
    one = sessions.resolve({}, {"messages": first})
    assert one.source == "fingerprint" and one == sessions.resolve({}, {"messages": grown})
    assert one != sessions.resolve({}, {"messages": other})


@pytest.mark.parametrize("bad", ["a b", "x" * 201, "caf\u00e9", "a\r\nset-cookie: x"])
def test_an_id_that_cannot_be_echoed_is_refused(bad: str) -> None:
    with pytest.raises(sessions.BadSession, match="printable ASCII"):
        sessions.resolve({"x-session-id": bad}, {})


# -- truncation keeps whole turns ------------------------------------------------------------------------------

ROLES = st.sampled_from(["user", "assistant", "tool"])


@given(st.lists(ROLES, max_size=12), st.integers(0, 2))
def test_turns_split_at_user_messages_and_keep_the_system_prompt(roles: list[str], systems: int) -> None:
    messages = [{"role": "system", "content": str(i)} for i in range(systems)]
    messages += [{"role": role, "content": str(i)} for i, role in enumerate(roles)]
    head, groups = cap.turns(messages)
    assert head == messages[:systems]
    assert [m for g in groups for m in g] == messages[systems:]
    for group in groups[1:]:
        assert group[0]["role"] == "user"
        assert all(m["role"] != "user" for m in group[1:])  # a tool result stays with its call's turn


def test_truncate_finds_the_fewest_turns_to_drop() -> None:
    messages = [{"role": "system", "content": "s"}] + [
        {"role": role, "content": "x" * 10} for _ in range(5) for role in ("user", "assistant")
    ]

    class Bytes(cap.Counter):  # counts message bytes: a stand-in tokenizer, not a server
        async def count(self, path: str, body: dict[str, Any]) -> cap.Count:
            return cap.Count(sum(len(m["content"]) for m in body["messages"]), "engine")

    counter = Bytes("other", post=None)  # type: ignore[arg-type]
    cut = asyncio.run(cap.truncate(counter, "/v1/chat/completions", {"messages": messages}, lambda n: n <= 61))
    assert cut is not None and (cut.dropped_turns, cut.dropped_messages, cut.count.prompt_tokens) == (2, 4, 61)
    assert cut.body["messages"][0] == {"role": "system", "content": "s"}
    never = asyncio.run(cap.truncate(counter, "/v1/chat/completions", {"messages": messages}, lambda n: n < 21))
    assert never is None


def test_the_refusal_is_openais_context_length_error() -> None:
    error = cap.refusal(32768, 32000, 1000)["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "context_length_exceeded",
        "messages",
    )
    assert "maximum context length is 32768 tokens" in error["message"] and "33000 tokens" in error["message"]


# -- admission -------------------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_new_sessions_wait_in_order_and_resident_ones_never_wait() -> None:
    async def scenario() -> list[str]:
        clock = Clock()
        admission = Admission(2, queue_timeout_s=5, max_queue=8, idle_timeout_s=10, clock=clock)
        order: list[str] = []
        a, b = await admission.enter("a"), await admission.enter("b")

        async def newcomer(name: str) -> None:
            await admission.enter(name)
            order.append(name)

        waiting = [asyncio.create_task(newcomer(n)) for n in ("c", "d")]
        await asyncio.sleep(0)
        assert list(admission.queue) == ["c", "d"]
        again = await admission.enter("a")  # resident: straight in, ahead of the queue
        assert again is a and a.in_flight == 2
        admission.leave(a)
        admission.leave(a)
        admission.leave(b)
        clock.now = 10.0
        assert admission.expire() == 2  # a and b idle past the timeout: c then d take their slots
        await asyncio.gather(*waiting)
        assert set(admission.resident) == {"c", "d"} and not admission.queue
        return order

    assert asyncio.run(scenario()) == ["c", "d"]


def test_a_full_queue_and_a_long_wait_are_refused_with_a_retry_after() -> None:
    async def scenario() -> None:
        clock = Clock()
        admission = Admission(1, queue_timeout_s=0.05, max_queue=1, idle_timeout_s=30, clock=clock)
        holder = await admission.enter("a")
        admission.leave(holder)
        clock.now = 12.0
        waiting = asyncio.create_task(admission.enter("b"))
        await asyncio.sleep(0)
        with pytest.raises(Refused) as full:
            await admission.enter("c")
        assert (full.value.reason, full.value.retry_after_s) == ("queue-full", 18)  # a idles out at 30 s
        with pytest.raises(Refused) as late:
            await waiting
        assert late.value.reason == "queue-timeout" and not admission.queue

    asyncio.run(scenario())


def test_an_ended_session_leaves_when_its_last_request_is_done() -> None:
    async def scenario() -> None:
        ended: list[tuple[str, str]] = []
        admission = Admission(1, queue_timeout_s=1, max_queue=1, idle_timeout_s=30,
                              on_end=lambda s, why: ended.append((s.id, why)))  # fmt: skip
        session = await admission.enter("a")
        assert admission.end("a") and "a" in admission.resident  # still in flight
        admission.leave(session)
        assert ended == [("a", "ended")] and not admission.resident
        assert not admission.end("a")

    asyncio.run(scenario())


def test_a_client_gone_while_queued_leaves_no_trace() -> None:
    async def scenario() -> None:
        admission = Admission(1, queue_timeout_s=5, max_queue=4, idle_timeout_s=30)
        await admission.enter("a")
        waiting = asyncio.create_task(admission.enter("b"))
        await asyncio.sleep(0)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        assert not admission.queue

    asyncio.run(scenario())


# -- settings and the command ----------------------------------------------------------------------------------


def test_a_plans_cap_sessions_and_engine_apply_unless_given(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"context": 32768, "sessions": 10, "engine": {"name": "vllm", "version": "0.11"}}))
    settings = resolve(GatewayRequest(upstream=("http://127.0.0.1:8000/v1/",), from_plan=str(plan)))
    assert (settings.cap, settings.sessions, settings.engine, settings.upstream) == (
        32768, 10, "vllm", "http://127.0.0.1:8000",
    )  # fmt: skip
    given_ = resolve(GatewayRequest(upstream=("http://h:1",), from_plan=str(plan), cap=16384, sessions=4))
    assert (given_.cap, given_.sessions) == (16384, 4)
    plan.write_text(json.dumps({"context": 32768, "sessions": 0, "engine": {"name": "vllm"}}))
    with pytest.raises(InputError, match=r"--from-plan .*'sessions'"):
        resolve(GatewayRequest(upstream=("http://h:1",), from_plan=str(plan)))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--upstream", "http://h:1", "--sessions", "2"], "Error: --cap is required"),
        (["--upstream", "http://h:1", "--cap", "32k"], "Error: --sessions is required"),
        (["--cap", "32k", "--sessions", "2"], "Error: --upstream is required"),
        (["--upstream", "h:1", "--cap", "32k", "--sessions", "2"], "Error: --upstream h:1: give the engine's base URL"),
        (["--upstream", "http://h:1", "--cap", "lots", "--sessions", "2"], "Error: --cap: "),
        (
            ["--upstream", "http://h:1", "--cap", "1k", "--sessions", "2", "--port", "70000"],
            "Error: --port: 70,000 is outside 0..65,535",
        ),
    ],
)
def test_a_bad_option_is_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    pytest.importorskip("aiohttp")
    code, out, err = run_cli(capsys, "gateway", *argv)
    assert (code, out) == (1, "") and err.startswith(message) and err.count("\n") == 1, err


def test_without_the_extra_it_names_the_extra_in_one_line() -> None:
    code = "import sys; sys.modules['aiohttp'] = None; from kvbudget.cli.main import main; sys.exit(main(['gateway']))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "Error: kvbudget gateway needs aiohttp: pip install 'kvbudget[gateway]'\n"


def test_a_real_plan_document_gives_its_cap_sessions_and_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "plan", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "32k", "--engine",
                           "llamacpp", "--json")  # fmt: skip
    assert code == 0
    plan = json.loads(out)
    (tmp_path / "plan.json").write_text(out, encoding="utf-8")
    settings = resolve(GatewayRequest(upstream=("http://127.0.0.1:8080",), from_plan=str(tmp_path / "plan.json")))
    assert (settings.cap, settings.sessions, settings.engine) == (32768, plan["sessions"], "llamacpp")
    assert plan["sessions"] >= 1


def test_an_unreachable_upstream_is_probed_again_not_taken_for_an_engine_without_a_tokenizer() -> None:
    answers: list[object] = [ConnectionError("refused"), (404, None), (200, {"count": 7}), (200, {"count": 7})]

    async def post(path: str, body: dict[str, Any]) -> tuple[int, Any]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, tuple)
        return answer

    counter = cap.Counter("auto", post)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(ConnectionError):
        asyncio.run(counter.count("/v1/chat/completions", body))
    assert counter.engine == "auto"
    # up again: not llama-server (/apply-template is a 404), vLLM's /tokenize answers
    assert asyncio.run(counter.count("/v1/chat/completions", body)) == cap.Count(7, "engine")
    assert counter.engine == "vllm"
