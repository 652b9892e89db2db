"""``kvbudget gateway`` in front of a real llama-server (no mock): a tiny GGUF with Llama-3.1-8B's KV geometry.

The server runs ``-c 1024 -np 4``: four slots of 256 cells. Its vocabulary is bytes and, without a chat template
in the GGUF, llama-server renders chats with ChatML, so a one-user-message chat of n ASCII bytes is 51 + n tokens
(BOS, the ChatML markers, the generation prompt). Every test sends a few tiny requests.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kvbudget.cli.main import main
from kvbudget.workload.traces import kvbudget_jsonl
from tests.live.gateway import Gateway, events, gateway
from tests.live.server import Server, binary, llama_server
from tests.live.tiny_gguf import write_llama

SLOTS = 4
CHAT_OVERHEAD = 51  # tokens of a one-user-message ChatML chat around its content (measured: "abc" is 54)


def chat(content: str, max_tokens: int | None = 4, **extra: Any) -> dict[str, Any]:
    # ignore_eos (llama-server): the random model may sample EOS early; lengths are asserted
    body: dict[str, Any] = {"messages": [{"role": "user", "content": content}], "ignore_eos": True, **extra}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    binary()  # skip (or fail under KVBUDGET_REQUIRE_LIVE) before writing anything
    return write_llama(tmp_path_factory.mktemp("gateway-model") / "llama-3.1-8b-tiny.gguf")


@pytest.fixture(scope="module")
def server(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("gateway-live") / "server.log"
    with llama_server(model, log, "-c", str(SLOTS * 256), "-np", str(SLOTS)) as running:
        yield running


def processing(server: Server) -> int:
    slots = server.get_json("/slots")
    assert isinstance(slots, list)
    return sum(1 for slot in slots if slot.get("is_processing"))


def wait_idle(server: Server, timeout_s: float) -> float:
    """Seconds until no slot of the server is processing; fails past ``timeout_s``."""
    start = time.monotonic()
    while processing(server):
        assert time.monotonic() - start < timeout_s, "the server kept generating"
        time.sleep(0.02)
    return time.monotonic() - start


def stream(gw: Gateway, body: dict[str, Any], session: str, headers: dict[str, str] | None = None) -> Any:
    conn = gw.connection()
    conn.request("POST", "/v1/chat/completions", json.dumps({**body, "stream": True}),
                 {"content-type": "application/json", "x-session-id": session, **(headers or {})})  # fmt: skip
    return conn, conn.getresponse()


# -- the cap ---------------------------------------------------------------------------------------------------


def test_the_cap_counts_as_the_engine_does_and_refuses_in_openais_shape(server: Server) -> None:
    with gateway(server.url, "--cap", "128", "--sessions", "2") as gw:
        status, headers, body = gw.call(chat("a" * 20), "s1")
        assert status == 200
        assert headers["x-session-id"] == "s1"
        assert int(headers["x-kvbudget-prompt-tokens"]) == body["usage"]["prompt_tokens"] == CHAT_OVERHEAD + 20

        status, headers, body = gw.call(chat("a" * 80), "s1")  # 131 + 4 > 128
        assert status == 400 and headers["x-kvbudget-cap"] == "refused"
        error = body["error"]
        assert (error["code"], error["type"], error["param"]) == (
            "context_length_exceeded",
            "invalid_request_error",
            "messages",
        )
        assert (error["cap"], error["prompt_tokens"], error["max_tokens"]) == (128, CHAT_OVERHEAD + 80, 4)
        assert "maximum context length is 128 tokens" in error["message"]

        status, _, body = gw.call(chat("a" * 20, max_tokens=60), "s1")  # the generation budget counts: 71 + 60
        assert status == 400 and body["error"]["max_tokens"] == 60

        # no max_tokens: the gateway gives the room left under the cap (128 - 121 = 7)
        status, _, body = gw.call(chat("a" * 70, max_tokens=None), "s1")
        assert status == 200 and body["usage"]["completion_tokens"] <= 7
        assert gw.metric("kvbudget_gateway_cap_events_total") == 2


def test_truncate_drops_the_oldest_whole_turns_and_the_server_accepts_it(server: Server) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    messages = [
        {"role": "system", "content": "s" * 10},
        {"role": "user", "content": "a" * 40},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "o" * 30},
        {"role": "user", "content": "b" * 30},
        {"role": "assistant", "content": "c" * 20},
        {"role": "user", "content": "d" * 10},
    ]
    with gateway(server.url, "--cap", "160", "--sessions", "1", "--on-cap", "truncate") as gw:
        status, headers, body = gw.call({"messages": messages, "max_tokens": 4}, "t")
        assert status == 200, body
        assert headers["x-kvbudget-cap"].startswith("truncated dropped_turns=")
        assert body["usage"]["prompt_tokens"] == int(headers["x-kvbudget-prompt-tokens"])
        assert body["usage"]["prompt_tokens"] + 4 <= 160
        # the last turn alone does not fit: refused, not cut mid-turn
        status, _, body = gw.call({"messages": [*messages[:1], {"role": "user", "content": "x" * 200}]}, "t")
        assert status == 400 and body["error"]["code"] == "context_length_exceeded"


# -- streaming -------------------------------------------------------------------------------------------------


def test_streams_pass_through_as_generated_and_usage_only_when_asked(server: Server) -> None:
    with gateway(server.url, "--cap", "200", "--sessions", "1") as gw:
        conn, reply = stream(gw, chat("abc", max_tokens=48), "st")
        assert reply.status == 200 and reply.getheader("content-type", "").startswith("text/event-stream")
        got = list(events(reply))
        conn.close()
        assert got[-1][1] == "[DONE]"
        chunks = [json.loads(data) for _, data in got[:-1]]
        assert not any("usage" in chunk for chunk in chunks)  # the gateway asked for it; the client did not
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"
        # relayed as generated, not at the end: 47 decode steps apart (4 ms a step at the fastest seen here, 17 ms
        # under load; 12 steps once came to 0.047 s on an idle CPU), and most chunks in reads of their own
        assert got[-2][0] - got[0][0] > 0.05
        gaps = [later[0] - earlier[0] for earlier, later in itertools.pairwise(got[:-1])]
        assert sum(gap > 0.001 for gap in gaps) > len(gaps) // 2

        conn, reply = stream(gw, chat("abc", max_tokens=5, stream_options={"include_usage": True}), "st")
        chunks = [json.loads(data) for _, data in events(reply) if data != "[DONE]"]
        conn.close()
        assert chunks[-1]["usage"]["completion_tokens"] == 5


def test_client_disconnect_stops_the_engine_and_frees_the_slot(server: Server) -> None:
    with gateway(server.url, "--cap", "256", "--sessions", "1", "--queue-timeout", "2") as gw:
        predicted = server_counter(server, "llamacpp:tokens_predicted_total")
        conn, reply = stream(gw, chat("abc", max_tokens=200), "gone", {"x-session-end": "1"})
        first = reply.readline()
        assert first.startswith(b"data:")
        assert processing(server) == 1
        conn.close()  # 200 tokens take >= 3.4 s here (longer under load); the engine must stop before them
        wait_idle(server, 60)  # a count, not a time: an answer run to its end counts its 200 tokens there
        assert server_counter(server, "llamacpp:tokens_predicted_total") - predicted < 200
        wait_for(lambda: gw.metric("kvbudget_gateway_sessions_resident") == 0, 30)
        status, _, _ = gw.call(chat("abc"), "next")  # the slot is free: admitted at once
        assert status == 200


def test_upstream_killed_mid_stream_ends_cleanly_and_frees_the_slot(model: Path, tmp_path: Path) -> None:
    with (
        llama_server(model, tmp_path / "doomed.log", "-c", "512", "-np", "2") as doomed,
        gateway(doomed.url, "--cap", "256", "--sessions", "1") as gw,
    ):
        conn, reply = stream(gw, chat("abc", max_tokens=200), "k", {"x-session-end": "1"})
        assert reply.readline().startswith(b"data:")
        os.kill(doomed.process.pid, signal.SIGKILL)
        rest = [data for _, data in events(reply)]
        conn.close()
        assert json.loads(rest[-1])["error"]["code"] == "upstream_failed"
        wait_for(lambda: gw.metric("kvbudget_gateway_sessions_resident") == 0, 30)  # freed after the last byte
        status, _, body = gw.call(chat("abc"), "after")
        assert status == 502 and body["error"]["code"] == "upstream_failed"
        assert gw.metric("kvbudget_gateway_upstream_errors_total") >= 2


# -- admission -------------------------------------------------------------------------------------------------


def test_twice_the_planned_sessions_wait_and_the_server_never_holds_more(server: Server) -> None:
    planned, steps = 2, 2
    seen = {"server": 0, "resident": 0.0, "queued": 0.0}
    statuses: list[int] = []
    stop = threading.Event()

    with gateway(server.url, "--cap", "256", "--sessions", str(planned), "--queue-timeout", "60") as gw:

        def watch() -> None:
            while not stop.is_set():
                seen["server"] = max(seen["server"], processing(server))
                seen["resident"] = max(seen["resident"], gw.metric("kvbudget_gateway_sessions_resident"))
                seen["queued"] = max(seen["queued"], gw.metric("kvbudget_gateway_sessions_queued"))
                time.sleep(0.01)

        def agent(name: str) -> None:
            for step in range(steps):
                end = {"x-session-end": "1"} if step == steps - 1 else {}
                conn, reply = stream(gw, chat("x" * (10 + 10 * step), max_tokens=6), name, end)
                list(events(reply))
                conn.close()
                statuses.append(reply.status)
                time.sleep(0.1)  # a tool pause: the session keeps its slot

        watcher = threading.Thread(target=watch)
        watcher.start()
        agents = [threading.Thread(target=agent, args=(f"agent-{i}",)) for i in range(2 * planned)]
        for thread in agents:
            thread.start()
        for thread in agents:
            thread.join(120)
        stop.set()
        watcher.join()
    assert statuses == [200] * (2 * planned * steps)
    assert seen["server"] <= planned and seen["resident"] <= planned
    assert seen["queued"] >= 1  # the excess waited


def test_a_new_session_past_the_queue_gets_429_with_retry_after(server: Server) -> None:
    args = ("--cap", "128", "--sessions", "1", "--queue-timeout", "0.5", "--max-queue", "1", "--idle-timeout", "30")
    with gateway(server.url, *args) as gw:
        assert gw.call(chat("abc"), "a")[0] == 200
        answers: dict[str, tuple[int, dict[str, str], Any]] = {}
        waiting = threading.Thread(target=lambda: answers.setdefault("b", gw.call(chat("abc"), "b")))
        waiting.start()
        time.sleep(0.2)
        answers["c"] = gw.call(chat("abc"), "c")  # the queue holds b: c is refused at once
        waiting.join()
        assert gw.call(chat("abc"), "a")[0] == 200  # an admitted session is never queued
        for name, reason in (("b", "queue-timeout"), ("c", "queue-full")):
            status, headers, body = answers[name]
            assert status == 429 and headers["x-kvbudget-refused"] == reason, (name, headers)
            assert 1 <= int(headers["retry-after"]) <= 30 and body["error"]["code"] == "session_limit"
        assert gw.call(None, path="/v1/sessions/a", method="DELETE")[0] == 204
        assert gw.call(None, path="/v1/sessions/a", method="DELETE")[0] == 404
        assert gw.call(chat("abc"), "b")[0] == 200
        assert gw.metric("kvbudget_gateway_admissions_refused_total") == 2


def test_a_client_gone_while_queued_frees_its_place(server: Server) -> None:
    with gateway(server.url, "--cap", "128", "--sessions", "1", "--queue-timeout", "30") as gw:
        assert gw.call(chat("abc"), "a")[0] == 200
        conn = gw.connection()
        conn.request("POST", "/v1/chat/completions", json.dumps(chat("abc")), {"x-session-id": "b"})
        deadline = time.monotonic() + 5
        while gw.metric("kvbudget_gateway_sessions_queued") < 1:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        conn.close()
        while gw.metric("kvbudget_gateway_sessions_queued") > 0:
            assert time.monotonic() < deadline, "the queue kept a client that left"
            time.sleep(0.02)
        assert gw.metric("kvbudget_gateway_admissions_refused_total") == 1  # reason client-gone


# -- records ---------------------------------------------------------------------------------------------------


def test_the_record_read_back_by_trace_stats_is_what_was_sent(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = tmp_path / "steps.jsonl"
    sent: dict[str, list[tuple[int, int]]] = {"alpha": [], "beta": []}
    with gateway(server.url, "--cap", "256", "--sessions", "2", "--record", str(record)) as gw:
        for name, steps in (("alpha", 3), ("beta", 2)):
            messages: list[dict[str, Any]] = []  # ChatML markers are bytes here: 33 tokens a 5-byte turn
            for step in range(steps):
                messages.append({"role": "user", "content": f"sec{name[0]}{step}"})
                status, _, body = gw.call({"messages": messages, "max_tokens": 3, "ignore_eos": True}, name)
                assert status == 200, body
                sent[name].append((body["usage"]["prompt_tokens"], body["usage"]["completion_tokens"]))
                messages.append({"role": "assistant", "content": "ok"})  # the bytes model's text is noise
        assert gw.call(None, path="/v1/sessions/alpha", method="DELETE")[0] == 204
    text = record.read_text(encoding="utf-8")
    assert "sec" not in text and "alpha" not in text
    bad: list[object] = []
    rows = list(kvbudget_jsonl.read(record, bad.append))
    assert not bad
    by_session: dict[str, list[tuple[int, int]]] = {}
    for row in rows:
        by_session.setdefault(row.session, []).append((row.prompt_tokens, row.output_tokens))
    assert sorted(by_session.values()) == sorted(sent.values())
    assert all(row.pause_s is not None for row in rows if row.step < len(by_session[row.session]) - 1)

    assert main(["trace", "stats", str(record), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["bad_rows"], stats["steps"], stats["sessions"]) == (0, 5, 2)
    assert stats["sources"] == [f"kvbudget:{record.name}"]


# -- hostile input ---------------------------------------------------------------------------------------------


def test_hostile_input_is_a_clean_4xx_and_a_flood_stays_bounded(server: Server) -> None:
    args = ("--cap", "128", "--sessions", "1", "--max-body", "2KiB", "--max-queue", "4", "--queue-timeout", "0.3")
    with gateway(server.url, *args) as gw:
        status, _, body = gw.call(chat("a" * 4000), "h")
        assert status == 413 and body["error"]["type"] == "invalid_request_error"
        for raw in (b"{not json", b"[1, 2]", b"\xff\xfe"):
            status, _, body = gw.call(None, "h", raw=raw)
            assert status == 400 and "error" in body
        for bad in ("a b", "x" * 300):
            status, _, body = gw.call(chat("abc"), bad)
            assert status == 400 and body["error"]["param"] == "session"
        # header injection through the body's session link (headers cannot carry CR LF; the body can): refused,
        # never echoed into the answer's headers
        status, headers, body = gw.call({**chat("abc"), "user": "a\r\nset-cookie: x=1"})
        assert status == 400 and body["error"]["param"] == "session" and "set-cookie" not in headers
        assert gw.call(chat("abc"), "holder")[0] == 200

        answers: list[tuple[int, str]] = []
        peak = {"queued": 0.0}

        def newcomer(i: int) -> None:
            status, headers, _ = gw.call(chat("abc"), f"flood-{i}")
            answers.append((status, headers.get("x-kvbudget-refused", "")))

        flood = [threading.Thread(target=newcomer, args=(i,)) for i in range(40)]
        for thread in flood:
            thread.start()
        for _ in range(5):
            peak["queued"] = max(peak["queued"], gw.metric("kvbudget_gateway_sessions_queued"))
            time.sleep(0.03)
        for thread in flood:
            thread.join(30)
        assert len(answers) == 40 and {status for status, _ in answers} == {429}
        assert {reason for _, reason in answers} <= {"queue-full", "queue-timeout"}
        assert peak["queued"] <= 4
        assert gw.metric("kvbudget_gateway_sessions_queued") == 0
        assert gw.metric("kvbudget_gateway_sessions_resident") == 1


# -- shared state: two gateway replicas on one real Redis ------------------------------------------------------


def test_two_replicas_on_redis_admit_the_last_slot_once_and_a_restart_keeps_the_session(
    server: Server, tmp_path: Path
) -> None:
    from tests.gateway.redis_server import redis_server

    with redis_server(tmp_path) as redis:
        args = ("--cap", "128", "--sessions", "1", "--queue-timeout", "0.5", "--state", redis.url)
        with gateway(server.url, *args) as one, gateway(server.url, *args) as two:
            answers: dict[str, int] = {}
            racers = [threading.Thread(target=lambda g=g, n=n: answers.setdefault(n, g.call(chat("abc"), n)[0]))
                      for g, n in ((one, "a"), (two, "b"))]  # fmt: skip
            for thread in racers:
                thread.start()
            for thread in racers:
                thread.join(30)
            assert sorted(answers.values()) == [200, 429]  # the last slot went to exactly one of them
            winner = next(name for name, status in answers.items() if status == 200)
            assert one.metric("kvbudget_gateway_sessions_resident") == two.metric("kvbudget_gateway_sessions_resident")
            assert two.metric("kvbudget_gateway_sessions_resident") == 1
            assert two.call(chat("abc"), winner)[0] == 200  # its session goes through either replica
        with gateway(server.url, *args) as restarted:
            assert restarted.metric("kvbudget_gateway_sessions_resident") == 1
            assert restarted.call(chat("abc"), winner)[0] == 200  # still resident: straight in
            status, headers, _ = restarted.call(chat("abc"), "newcomer")
            assert status == 429 and headers["x-kvbudget-refused"] == "queue-timeout"
            assert restarted.call(None, path=f"/v1/sessions/{winner}", method="DELETE")[0] == 204
            assert restarted.call(chat("abc"), "newcomer")[0] == 200


# -- several upstreams: two real llama-servers -----------------------------------------------------------------


def prompt_tokens(server: Server) -> float:
    """llama-server's own count of prompt tokens processed (its /metrics, --metrics)."""
    return server_counter(server, "llamacpp:prompt_tokens_total")


def server_counter(server: Server, name: str) -> float:
    """A counter of llama-server's /metrics (--metrics). tokens_predicted_total grows when an answer is finished
    (tools/server/server.cpp: metrics.on_prediction after send_final_response), not for a cancelled one."""
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def wait_for(condition: Callable[[], bool], timeout_s: float) -> float:
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout_s, "not within the time"
        time.sleep(0.05)
    return time.monotonic() - start


def test_sessions_stick_to_their_upstream_and_a_stalled_one_takes_no_new_sessions(
    server: Server, model: Path, tmp_path: Path
) -> None:
    with llama_server(model, tmp_path / "second.log", "-c", "512", "-np", "2") as second:
        servers = {server.url: server, second.url: second}
        args = ("--upstream", second.url, "--cap", "128", "--sessions", "1", "--queue-timeout", "1",
                "--health-interval", "0.3")  # fmt: skip
        with gateway(server.url, *args) as gw:
            where: dict[str, str] = {}
            for name in ("a", "b"):  # least loaded: one session on each
                before = {url: prompt_tokens(s) for url, s in servers.items()}
                assert gw.call(chat(f"first {name}"), name)[0] == 200
                grew = [url for url, s in servers.items() if prompt_tokens(s) > before[url]]
                assert len(grew) == 1
                where[name] = grew[0]
            assert set(where.values()) == set(servers)
            for url in servers:
                assert gw.metric("kvbudget_gateway_sessions_resident", upstream=url) == 1
            before = {url: prompt_tokens(s) for url, s in servers.items()}
            assert gw.call(chat("second a"), "a")[0] == 200  # sticks: only its own server works
            assert [url for url, s in servers.items() if prompt_tokens(s) > before[url]] == [where["a"]]

            stalled = servers[where["b"]]
            os.kill(stalled.process.pid, signal.SIGSTOP)  # accepts connections, answers nothing
            try:
                took = wait_for(lambda: gw.metric("kvbudget_gateway_upstream_healthy", upstream=where["b"]) == 0, 5)
                assert took < 3  # two failed checks 0.3 s apart, each given 0.3 s
                for name in ("a", "b"):
                    assert gw.call(None, path=f"/v1/sessions/{name}", method="DELETE")[0] == 204
                assert gw.call(chat("c"), "c")[0] == 200  # the healthy server
                status, headers, _ = gw.call(chat("d"), "d")  # a free slot, but on the stalled server
                assert status == 429 and headers["x-kvbudget-refused"] == "queue-timeout"
            finally:
                os.kill(stalled.process.pid, signal.SIGCONT)
            wait_for(lambda: gw.metric("kvbudget_gateway_upstream_healthy", upstream=where["b"]) == 1, 5)
            before_b = prompt_tokens(stalled)
            assert gw.call(chat("d"), "d")[0] == 200  # back in health: the new session goes there
            assert prompt_tokens(stalled) > before_b
            assert gw.metric("kvbudget_gateway_upstream_health_changes_total", upstream=where["b"]) == 2


# -- gateway API keys ------------------------------------------------------------------------------------------


def test_keys_hold_each_team_to_its_quota_and_the_engine_gets_only_its_own_key(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"team-a": {"key": "sk-team-a-0001", "sessions": 1},
                                "team-b": {"key": "sk-team-b-0001", "sessions": 2}}))  # fmt: skip
    monkeypatch.setenv("KVBUDGET_LIVE_UPSTREAM_KEY", "upstream-secret")
    team_a, team_b = {"authorization": "Bearer sk-team-a-0001"}, {"x-api-key": "sk-team-b-0001"}
    args = ("--cap", "128", "--sessions", "2", "--keys", str(keys), "--upstream-key-env", "KVBUDGET_LIVE_UPSTREAM_KEY")
    with (  # llama-server answers 401 to a call without its --api-key (its /health excepted)
        llama_server(
            model, tmp_path / "guarded.log", "-c", "512", "-np", "2", "--api-key", "upstream-secret"
        ) as guarded,
        gateway(guarded.url, *args) as gw,
    ):
        for headers in ({}, {"authorization": "Bearer upstream-secret"}):  # the engine's key is not a gateway key
            status, got, body = gw.call(chat("abc"), "s", headers=headers)
            assert status == 401 and got["www-authenticate"] == "Bearer"
            assert (body["error"]["type"], body["error"]["code"]) == ("invalid_request_error", "invalid_api_key")
        status, got, body = gw.call(chat("abc"), "s", headers=team_a)
        assert status == 200, body  # the gateway sent the engine its own key: counting and completion went through
        assert int(got["x-kvbudget-prompt-tokens"]) == body["usage"]["prompt_tokens"] == CHAT_OVERHEAD + 3
        status, got, body = gw.call(chat("abc"), "s2", headers=team_a)
        assert status == 429 and got["x-kvbudget-refused"] == "key-quota" and body["error"]["code"] == "session_quota"
        assert gw.call(chat("abc"), "s", headers=team_b)[0] == 200  # the same id under team-b: team-b's own session
        assert gw.metric("kvbudget_gateway_sessions_resident") == 2
        assert gw.call(None, path="/v1/sessions/s", method="DELETE")[0] == 401
        assert gw.call(None, path="/v1/sessions/s", method="DELETE", headers=team_b)[0] == 204
        assert gw.call(chat("abc"), "s2", headers=team_a)[0] == 429  # team-b ended its own s, not team-a's
        assert gw.metric("kvbudget_gateway_sessions_resident") == 1
        assert gw.metric("kvbudget_gateway_admissions_refused_total", reason="unauthorized") == 3


def test_an_upstream_that_stalls_is_a_clean_504_and_the_slot_is_freed(model: Path, tmp_path: Path) -> None:
    # --upstream-timeout 5, not 1: on a loaded 2-core machine the server's first token alone took over 1 s (the
    # stream then began with the timeout error, before any SIGSTOP); the bounds below are the timeout's, with room
    args = ("--cap", "256", "--sessions", "1", "--upstream-timeout", "5", "--health-interval", "1h")
    with (
        llama_server(model, tmp_path / "stalls.log", "-c", "512", "-np", "2") as stalling,
        gateway(stalling.url, *args) as gw,
    ):
        conn, reply = stream(gw, chat("abc", max_tokens=200), "mid", {"x-session-end": "1"})
        first = reply.readline()
        assert first.startswith(b"data:") and b'"error"' not in first  # a token: the server was answering
        os.kill(stalling.process.pid, signal.SIGSTOP)  # alive, connected, silent
        try:
            started = time.monotonic()
            rest = [data for _, data in events(reply)]
            silent = time.monotonic() - started
            conn.close()
            assert json.loads(rest[-1])["error"]["code"] == "upstream_timeout"
            assert 4.9 < silent < 60  # --upstream-timeout 5 (a stopped server would never end the stream)
            wait_for(lambda: gw.metric("kvbudget_gateway_sessions_resident") == 0, 30)
            started = time.monotonic()  # a request whose very first call (the token count) meets the silence
            status, _, body = gw.call(chat("abc"), "before", headers={"x-session-end": "1"})
            assert status == 504 and body["error"]["code"] == "upstream_timeout"
            assert 4.9 < time.monotonic() - started < 60
            assert gw.metric("kvbudget_gateway_sessions_resident") == 0
        finally:
            os.kill(stalling.process.pid, signal.SIGCONT)
        assert gw.call(chat("abc"), "after")[0] == 200  # back: nothing was left behind


def test_compact_summarises_through_the_server_and_a_retry_reuses_the_summary(model: Path, tmp_path: Path) -> None:
    # ChatML in a bytes vocabulary: ~40 tokens a message here, 315 in all; the summarising call is ~370 tokens
    turns = [{"role": role, "content": f"{role[0]}{i} " + "z" * 8} for i in range(3) for role in ("user", "assistant")]
    messages = [{"role": "system", "content": "s" * 10}, *turns, {"role": "user", "content": "last"}]
    body = {"messages": messages, "max_tokens": 4, "ignore_eos": True}
    # one slot of 1024 cells: the summarising call (instruction + dropped turns) fits the engine, not the cap
    with (
        llama_server(model, tmp_path / "compact.log", "-c", "1024", "-np", "1") as roomy,
        gateway(roomy.url, "--cap", "256", "--sessions", "1", "--on-cap", "compact") as gw,
    ):
        status, headers, answer = gw.call(body, "long")
        assert status == 200, answer  # the server accepted the compacted conversation
        assert "x-kvbudget-compact-failed" not in headers, headers["x-kvbudget-compact-failed"]
        assert headers["x-kvbudget-cap"].startswith("compacted dropped_turns=")
        first = answer["usage"]["prompt_tokens"]
        assert first == int(headers["x-kvbudget-prompt-tokens"]) and first + 4 <= 256
        covered = headers["x-kvbudget-summary"]

        status, headers, answer = gw.call(body, "long")  # the client retries with its whole history
        assert status == 200 and "x-kvbudget-cap" not in headers and headers["x-kvbudget-summary"] == covered
        assert answer["usage"]["prompt_tokens"] == first  # the same rewritten prefix: no second summary
        assert answer["usage"]["prompt_tokens_details"]["cached_tokens"] >= first - 1  # and the cache hits it
        assert gw.metric("kvbudget_gateway_cap_events_total", behaviour="compacted") == 1


def test_redis_going_down_is_a_clean_503_and_the_gateway_carries_on_when_it_is_back(
    server: Server, tmp_path: Path
) -> None:
    from tests.gateway.redis_server import redis_server

    with (
        redis_server(tmp_path) as redis,
        gateway(server.url, "--cap", "128", "--sessions", "2", "--state", redis.url) as gw,
    ):
        assert gw.call(chat("abc"), "before")[0] == 200
        redis.stop()
        status, headers, body = gw.call(chat("abc"), "during")
        assert status == 503 and body["error"]["code"] == "state_unavailable"
        assert headers["x-session-id"] == "during"
        assert gw.call(None, path="/metrics", method="GET")[0] == 200  # stale gauges, still served
        assert gw.metric("kvbudget_gateway_state_errors_total") >= 1
        redis.start()  # empty: Redis kept no state
        assert gw.call(chat("abc"), "after")[0] == 200
        assert gw.metric("kvbudget_gateway_sessions_resident") == 1
