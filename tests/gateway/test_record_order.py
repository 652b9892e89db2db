"""``--record``: a session's rows are in the order its requests arrived, whatever order they finish in, so
kvbudget's trace reader (which refuses a step that goes back in time) reads every row, and ``new_tokens`` and
``pause_s`` are those of the steps as the client sent them.

The order is forced by the upstream, not by time: it holds the first request's answer until the client has the
second's, so the first-sent request finishes last on any machine, however loaded. The upstream is a small real
HTTP server written for the test (``--engine other``: no counting calls; it answers with the ``usage`` the test
sets), with the state in memory and in a real redis-server, and with two gateway replicas sharing that Redis, the
two requests sent to different replicas (their files read together by ``trace stats --sessions-span-files``). The
recorder's rule itself is checked on every interleaving hypothesis finds, in memory and across two replicas in Redis.
"""

from __future__ import annotations

import asyncio
import json
import threading
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.gateway.admission import Session
from kvbudget.gateway.records import OPEN, Place, Recorder
from kvbudget.workload.record import BadRow
from kvbudget.workload.traces import kvbudget_jsonl, read_records
from tests.gateway.http_upstream import Handler, Upstream, serving
from tests.gateway.redis_server import Redis
from tests.gateway.replicas import Replica
from tests.live.gateway import gateway

pytest.importorskip("aiohttp")

HOLD = "hold until the next request is answered"
WAIT_S = 120  # generous: a loaded machine delays these, never changes their order


class Holding(Upstream):
    """Completions whose ``usage`` is 100 prompt tokens a message and 7 output tokens; a request whose last message
    is ``HOLD`` says it has arrived (``held``), then waits for ``release`` before answering."""

    def __init__(self) -> None:
        super().__init__(HoldingHandler)
        self.held, self.release = threading.Event(), threading.Event()

    def stopping(self) -> None:
        self.release.set()


class HoldingHandler(Handler):
    server: Holding

    def do_GET(self) -> None:  # the health check
        self._send(b"{}")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if body["messages"][-1]["content"] == HOLD:
            self.server.held.set()
            assert self.server.release.wait(WAIT_S)
        usage = {"prompt_tokens": 100 * len(body["messages"]), "completion_tokens": 7, "total_tokens": 0}
        message = {"role": "assistant", "content": "ok"}
        self._send(json.dumps({"choices": [{"index": 0, "message": message}], "usage": usage}).encode())


def upstream() -> AbstractContextManager[Holding]:
    return serving(Holding())


def chat(messages: int, last: str = "go on") -> dict[str, Any]:
    turns = [{"role": "user" if n % 2 == 0 else "assistant", "content": f"turn {n}"} for n in range(messages - 1)]
    return {"messages": [*turns, {"role": "user", "content": last}], "max_tokens": 8}


@pytest.mark.parametrize("state", ["memory", "redis"])
def test_two_requests_of_a_session_finishing_out_of_order_are_recorded_in_arrival_order(
    state: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    record = tmp_path / "steps.jsonl"
    shared = () if state == "memory" else ("--state", request.getfixturevalue("redis").url)
    args = ("--cap", "4096", "--sessions", "2", "--engine", "other", "--health-interval", "1h", "--record", str(record))
    with upstream() as server, gateway(server.url, *args, *shared) as gw:
        first: list[int] = []
        sending = threading.Thread(target=lambda: first.append(gw.call(chat(3, HOLD), "s")[0]))
        sending.start()  # 3 messages: 300 prompt tokens
        assert server.held.wait(WAIT_S)  # the first request is in the upstream, so admitted and placed
        status, _, _ = gw.call(chat(5), "s")  # sent second, answered first: 500 prompt tokens
        assert status == 200
        server.release.set()
        sending.join(WAIT_S)
        assert first == [200]
        assert gw.call(chat(7), "s")[0] == 200  # a third step, after both: 700 prompt tokens
        assert gw.call(None, "s", path="/v1/sessions/s", method="DELETE")[0] == 204  # the last row is written
    bad: list[object] = []
    rows = list(kvbudget_jsonl.read(record, bad.append))
    assert not bad  # no step goes back in time: the reader takes every row
    assert [(r.step, r.prompt_tokens, r.output_tokens) for r in rows] == [(0, 300, 7), (1, 500, 7), (2, 700, 7)]
    assert [r.new_tokens for r in rows] == [300, 500 - 307, 700 - 507]
    written = [json.loads(line) for line in record.read_text().splitlines()]
    assert written[0]["pause_s"] == 0  # the second request was sent before the first was answered: no pause
    assert written[1]["pause_s"] >= 0 and "pause_s" not in written[2]
    assert written[0]["start_s"] <= written[1]["start_s"] <= written[2]["start_s"]


def test_two_requests_of_a_session_on_two_replicas_get_distinct_steps_in_arrival_order(
    tmp_path: Path, redis: Redis
) -> None:
    """No sticky load balancer: the session's first request is held on one replica while its second is answered by
    the other; each replica writes the rows its calls made writable, and the two files read together are the steps
    as they were sent."""
    files = [tmp_path / "one.jsonl", tmp_path / "two.jsonl"]
    args = ("--cap", "4096", "--sessions", "2", "--engine", "other", "--health-interval", "1h", "--state", redis.url)
    with (
        upstream() as server,
        gateway(server.url, *args, "--record", str(files[0])) as one,
        gateway(server.url, *args, "--record", str(files[1])) as two,
    ):
        first: list[int] = []
        sending = threading.Thread(target=lambda: first.append(one.call(chat(3, HOLD), "s")[0]))
        sending.start()  # 300 prompt tokens, on replica one
        assert server.held.wait(WAIT_S)  # admitted and placed in Redis
        assert two.call(chat(5), "s")[0] == 200  # sent second, answered first, on replica two: 500 tokens
        server.release.set()
        sending.join(WAIT_S)
        assert first == [200]
        assert one.call(chat(7), "s")[0] == 200  # a third step, after both: 700 prompt tokens
        # the last row: written by whichever replica ends the session (two now, or one when its request's release
        # comes after the DELETE); either file may then hold no row, and the reader skips an empty part
        assert two.call(None, "s", path="/v1/sessions/s", method="DELETE")[0] == 204
    bad: list[BadRow] = []
    rows = list(read_records(files, span_files=True, bad_rows=bad))
    assert not bad  # distinct steps that never go back in time
    assert [(r.step, r.prompt_tokens, r.output_tokens) for r in rows] == [(0, 300, 7), (1, 500, 7), (2, 700, 7)]
    assert [r.new_tokens for r in rows] == [300, 500 - 307, 700 - 507]
    assert rows[0].pause_s == 0 and rows[1].pause_s is not None and rows[1].pause_s >= 0 and rows[2].pause_s is None
    assert rows[0].start_s <= rows[1].start_s <= rows[2].start_s
    assert len({r.session for r in rows}) == 1  # one salt in Redis: one hashed id in both files


# -- the recorder's rule, on any interleaving ---------------------------------------------------------------------

# a request: its start, its duration, and whether it completes with a row (else it fails: no row)
REQUESTS = st.lists(st.tuples(st.integers(0, 50), st.integers(0, 30), st.booleans()), min_size=1, max_size=8)


def _timeline(count: int, order: Any) -> list[tuple[str, int]]:
    """Requests begin in the order they arrived (admission keeps it); each ends anywhere after its begin."""
    timeline = [("begin", n) for n in range(count)]
    for n in range(count):
        timeline.insert(order.randint(timeline.index(("begin", n)) + 1, len(timeline)), ("end", n))
    return timeline


def _check(starts: list[tuple[int, int, bool]], rows: list[dict[str, Any]]) -> None:
    """The rows are the completed requests in start order, numbered from 0, with their growth and pauses."""
    kept = [(n, start) for n, start in enumerate(starts) if start[2]]
    assert [row["step"] for row in rows] == list(range(len(kept)))
    assert [row["prompt_tokens"] for row in rows] == [100 + n for n, _ in kept]  # in start order
    assert [row["start_s"] for row in rows] == [float(start[0]) for _, start in kept]
    for (_, (start, took, _)), row, after in zip(kept, rows, rows[1:], strict=False):
        assert after["new_tokens"] == after["prompt_tokens"] - row["prompt_tokens"] - row["output_tokens"]
        # the next step begun when the row was written: the next row's, or a failed request's started before it
        assert 0 <= row["pause_s"] <= max(0, after["start_s"] - (start + took))
    if kept and kept[-1][0] == len(starts) - 1:  # the last step, no failed request after it: no pause
        assert "pause_s" not in rows[-1]


@settings(deadline=None, max_examples=200)  # no time limit: a loaded machine
@given(requests=REQUESTS, order=st.randoms(use_true_random=False))
def test_rows_are_in_start_order_with_their_pauses_on_any_interleaving(
    requests: list[tuple[int, int, bool]], order: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("order") / "steps.jsonl"
    recorder = Recorder(path, salt="s")
    session = Session("s", "http://u", 0.0, 0.0)
    try:  # closed even when hypothesis stops an example half-way (its random draws ran out)
        starts = sorted(requests)  # requests begin in the order they arrived (admission keeps it)
        places: dict[int, Place] = {}
        for kind, n in _timeline(len(starts), order):
            start, took, completes = starts[n]
            if kind == "begin":
                places[n] = recorder.begin(session, float(start))
            elif completes:
                recorder.finish(session, places[n], end_s=float(start + took), prompt_tokens=100 + n, output_tokens=n,
                                cached_tokens=None)  # fmt: skip
            else:
                recorder.drop(session, places[n])
        recorder.end(session)
    finally:
        recorder.close()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    _check(starts, rows)
    bad: list[object] = []
    assert len(list(kvbudget_jsonl.read(path, bad.append))) == len(rows) and not bad
    assert not session.state.get(OPEN)


@settings(deadline=None, max_examples=60)  # no time limit: each example talks to a real redis-server
@given(requests=REQUESTS, order=st.randoms(use_true_random=False), on=st.lists(st.integers(0, 1), min_size=8,
       max_size=8))  # fmt: skip
def test_two_replicas_sharing_redis_record_the_rule_on_any_interleaving(
    requests: list[tuple[int, int, bool]], order: Any, on: list[int], redis_process: Redis,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:  # fmt: skip
    """Each request on either replica (``on``), begun in arrival order, ended in any order: the two files read
    together hold exactly the rows one replica in memory writes (the same rule, run in Redis: ledger.py)."""
    redis_process.flush()
    directory = tmp_path_factory.mktemp("replicas")
    files = [directory / "one.jsonl", directory / "two.jsonl"]
    starts = sorted(requests)

    async def scenario() -> None:
        replicas = [await Replica(redis_process, path).open() for path in files]
        try:
            begun: dict[int, tuple[Session, Place]] = {}
            for kind, n in _timeline(len(starts), order):
                start, took, completes = starts[n]
                replica = replicas[on[n]]
                if kind == "begin":
                    begun[n] = await replica.begin("s", float(start))
                else:
                    session, place = begun[n]
                    end = float(start + took) if completes else None
                    await replica.end(session, place, end, 100 + n, n)
            assert await replicas[0].state.finish("s")  # the session ends: its last row is written
        finally:
            for replica in replicas:
                await replica.close()

    asyncio.run(scenario())
    bad: list[BadRow] = []
    written = any(path.stat().st_size for path in files)  # no row at all: every request failed
    records = list(read_records(files, span_files=True, bad_rows=bad)) if written else []
    assert not bad
    by_step = {json.loads(line)["step"]: json.loads(line) for path in files for line in path.read_text().splitlines()}
    rows = [by_step[r.step] for r in records]
    assert len(by_step) == len(records) == sum(path.read_text().count("\n") for path in files)  # each step once
    _check(starts, rows)


def test_a_pause_is_the_next_start_minus_this_end_and_zero_when_they_overlap(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "steps.jsonl", salt="s")
    session = Session("s", "http://u", 0.0, 0.0)
    one = recorder.begin(session, 10.0)
    two = recorder.begin(session, 11.0)  # sent before the first was answered
    recorder.finish(session, two, end_s=12.0, prompt_tokens=60, output_tokens=2, cached_tokens=50)
    recorder.finish(session, one, end_s=13.0, prompt_tokens=40, output_tokens=3, cached_tokens=None)
    recorder.step(session, start_s=20.0, end_s=21.0, prompt_tokens=80, output_tokens=1, cached_tokens=None)
    recorder.end(session)
    recorder.close()
    rows = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert [(r["step"], r["prompt_tokens"], r.get("pause_s")) for r in rows] == [(0, 40, 0), (1, 60, 8.0),
                                                                               (2, 80, None)]  # fmt: skip
    assert [r["new_tokens"] for r in rows] == [40, 60 - 43, 80 - 62]


def test_a_request_admitted_after_a_later_one_was_numbered_starts_no_earlier_than_it(tmp_path: Path) -> None:
    """The rare late admission: its arrival is before a row already numbered, so its start is taken as that row's
    (a session's times never go back; the reader would refuse the row)."""
    recorder = Recorder(tmp_path / "steps.jsonl", salt="s")
    session = Session("s", "http://u", 0.0, 0.0)
    recorder.step(session, start_s=10.0, end_s=11.0, prompt_tokens=40, output_tokens=3, cached_tokens=None)
    late = recorder.begin(session, 9.0)  # arrived at 9 s, admitted after the request of 10 s had finished
    recorder.finish(session, late, end_s=12.0, prompt_tokens=50, output_tokens=1, cached_tokens=None)
    recorder.end(session)
    recorder.close()
    bad: list[object] = []
    rows = list(kvbudget_jsonl.read(tmp_path / "steps.jsonl", bad.append))
    assert not bad and [(r.step, r.start_s) for r in rows] == [(0, 10.0), (1, 10.0)]
