"""Several upstreams: placement, stickiness, health (the parts that need no server; the live test runs two real
llama-servers: tests/live/test_gateway_live.py)."""

from __future__ import annotations

import asyncio

import pytest

from kvbudget.errors import InputError
from kvbudget.gateway import health
from kvbudget.gateway.admission import Admission, pick
from kvbudget.gateway.settings import resolve
from kvbudget.requests.gateway import GatewayRequest

A, B = "http://a:1", "http://b:2"


def test_new_sessions_go_to_the_least_loaded_healthy_upstream_and_stick() -> None:
    async def scenario() -> None:
        admission = Admission(2, (A, B), queue_timeout_s=0.2, max_queue=4, idle_timeout_s=60)
        placed = [(await admission.wait(name)).upstream for name in "abc"]
        assert placed == [A, B, A]  # ties go to the first given
        again = await admission.wait("b")
        assert again.upstream == B and admission.load == {A: 2, B: 1}  # a session sticks to its upstream
        admission.healthy.discard(B)
        with pytest.raises(Exception, match="queue-timeout"):  # B has a free slot but is out of health
            await admission.wait("d")
        admission.healthy.add(B)
        assert (await admission.wait("d")).upstream == B

    asyncio.run(scenario())


def test_a_waiting_session_is_granted_when_an_upstream_comes_back() -> None:
    async def scenario() -> None:
        admission = Admission(1, (A, B), queue_timeout_s=5, max_queue=4, idle_timeout_s=60)
        await admission.wait("a")
        admission.healthy.discard(B)
        waiting = asyncio.ensure_future(admission.wait("b"))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        admission.healthy.add(B)
        reaper = asyncio.ensure_future(admission.run())  # the reaper grants the queue after a health change
        got = await asyncio.wait_for(waiting, 2)
        reaper.cancel()
        await asyncio.gather(reaper, return_exceptions=True)
        assert got.upstream == B

    asyncio.run(scenario())


def test_a_session_on_a_failed_upstream_moves_to_a_free_healthy_slot() -> None:
    async def scenario() -> None:
        admission = Admission(1, (A, B), queue_timeout_s=0.1, max_queue=4, idle_timeout_s=60)
        a, b = await admission.wait("a"), await admission.wait("b")
        admission.healthy.discard(B)
        assert await admission.rehome(b) is None  # A has no free slot: b stays
        admission.leave(a)
        assert admission.end("a")
        assert await admission.rehome(b) == B and b.upstream == A and admission.load == {A: 1, B: 0}

    asyncio.run(scenario())


def test_pick_prefers_the_least_loaded_then_the_order_given() -> None:
    assert pick({A: 1, B: 0}, {A, B}, 2, (A, B)) == B
    assert pick({A: 1, B: 1}, {A, B}, 2, (A, B)) == A
    assert pick({A: 2, B: 1}, {A}, 2, (A, B)) is None


def test_two_failures_in_a_row_take_an_upstream_out_and_one_answer_brings_it_back() -> None:
    answers = {A: [200, 503, 200, 503, 0, 200], B: [404, 401, 503, 500]}  # B: no /health, so /v1/models
    asked: list[str] = []

    async def get(url: str) -> int:  # the statuses a real engine answers (llama-server: 503 while loading)
        asked.append(url)
        return answers[url.rsplit("/", 2)[0] if url.endswith("/v1/models") else url.rsplit("/", 1)[0]].pop(0)

    changes: list[tuple[str, bool]] = []
    healthy = {A, B}
    checker = health.Health((A, B), healthy, get, interval_s=1, on_change=lambda u, up: changes.append((u, up)))
    seen = [asyncio.run(checker.check(A)) for _ in range(6)]
    assert seen == [True, False, True, False, False, True]
    assert changes == [(A, False), (A, True)]  # one 503 between answers is a blip, two in a row are out
    assert asyncio.run(checker.check(B)) and asked[-2:] == [B + "/health", B + "/v1/models"]
    assert checker.path[B] == "/v1/models" and healthy == {A, B}
    assert [asyncio.run(checker.check(B)) for _ in range(2)] == [False, False] and healthy == {A}  # 5xx: down


def test_a_stalled_upstream_fails_its_check_within_the_interval() -> None:
    async def stalled(url: str) -> int:
        await asyncio.sleep(30)
        return 200

    healthy = {A}
    checker = health.Health((A,), healthy, stalled, interval_s=0.05)

    async def twice() -> None:
        await checker.check(A)
        await checker.check(A)

    asyncio.run(asyncio.wait_for(twice(), 2))
    assert healthy == set()


def test_an_upstream_given_twice_is_one_line() -> None:
    with pytest.raises(InputError, match=r"--upstream http://a:1: given twice"):
        resolve(GatewayRequest(upstream=(A, A + "/v1"), cap=1024, sessions=1))
    settings = resolve(GatewayRequest(upstream=(A, B), cap=1024, sessions=1))
    assert settings.upstreams == (A, B)
