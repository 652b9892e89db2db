"""``DELETE /v1/sessions/{id}`` racing a request of that session: the slot is freed exactly once, and never while
one of its requests is in flight, in memory and in a real Redis (two replicas).

Every interleaving here is forced by the order of the calls (each state operation is one step: one event-loop turn
in memory, one Lua script in Redis), so nothing depends on timing; ``ended`` counts the on_end calls (the metric
and the recorder's last row hang on them: more than one per session would be a double free).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kvbudget.gateway.admission import Admission, Session
from kvbudget.gateway.shared import SharedAdmission
from tests.gateway.redis_server import Redis

UP = "http://a:1"


def replica(redis: Redis, ended: list[tuple[str, str]], slots: int = 1, **options: Any) -> SharedAdmission:
    settings: dict[str, Any] = {"queue_timeout_s": 5.0, "max_queue": 16, "idle_timeout_s": 60.0, **options}
    return SharedAdmission(redis.url, slots, (UP,), on_end=lambda s, why: ended.append((s.id, why)), **settings)


def test_in_memory_an_end_during_a_request_waits_for_it_and_frees_the_slot_once() -> None:
    async def scenario() -> None:
        ended: list[tuple[str, str]] = []
        admission = Admission(1, (UP,), queue_timeout_s=5, max_queue=4, idle_timeout_s=60,
                              on_end=lambda s, why: ended.append((s.id, why)))  # fmt: skip
        first = await admission.wait("s")
        assert await admission.finish("s")  # 204: it ends when its request is done
        assert (await admission.counts()).resident == {UP: 1} and ended == []
        newcomer = asyncio.ensure_future(admission.wait("t"))
        await asyncio.sleep(0)
        assert not newcomer.done()  # the slot is not free while the request runs
        second = await admission.wait("s")  # another request of the ending session joins it
        await admission.release(first)
        assert ended == [] and not newcomer.done()
        assert await admission.finish("s")  # a second DELETE while it still runs: still one end
        await admission.release(second)
        assert ended == [("s", "ended")]
        assert (await newcomer).id == "t"  # the freed slot went to the one waiting
        assert not await admission.finish("s")  # 404 now
        assert (await admission.counts()).resident == {UP: 1} and admission.load[UP] == 1

    asyncio.run(scenario())


@pytest.mark.parametrize("order", ["delete-first", "release-first"])
def test_in_redis_an_end_racing_the_last_request_of_the_session_frees_its_slot_once(redis: Redis, order: str) -> None:
    async def scenario() -> None:
        ended: list[tuple[str, str]] = []
        a, b = replica(redis, ended), replica(redis, ended)
        session = await a.wait("s")  # in flight on replica a
        waiting = asyncio.ensure_future(b.wait("t"))
        if order == "delete-first":
            assert await b.finish("s")  # DELETE through the other replica while a relays the request
            assert (await b.counts()).resident == {UP: 1} and ended == []
            await asyncio.sleep(0.2)  # four polls of the waiter: no slot was freed
            assert not waiting.done()
            await a.release(session)
        else:
            await a.release(session)
            assert await b.finish("s")
        assert ended == [("s", "ended")]
        assert (await waiting).id == "t"
        assert not await b.finish("s") and not await a.finish("s")
        await a.release(session)  # a stray second end of the same request: nothing to free, no count below 0
        counts = await a.counts()
        assert counts.resident == {UP: 1} and counts.queued == 0
        assert ended == [("s", "ended")]
        await asyncio.gather(a.close(), b.close())

    asyncio.run(scenario())


def test_in_redis_ends_racing_each_other_and_the_request_free_the_slot_once(redis: Redis) -> None:
    async def scenario() -> None:
        ended: list[tuple[str, str]] = []
        a, b = replica(redis, ended, slots=2), replica(redis, ended, slots=2)
        for round_ in range(20):
            sid = f"s{round_}"
            session = await a.wait(sid)
            session.ending = True  # its request carries x-session-end, and two DELETEs arrive as it completes
            results = await asyncio.gather(a.release(session), a.finish(sid), b.finish(sid))
            assert ended.count((sid, "ended")) == 1, results
            assert (await b.counts()).resident == {UP: 0}
        assert await redis_keys(redis) <= {"where", "seen", "load", "ticket", "carried"}
        await asyncio.gather(a.close(), b.close())

    asyncio.run(scenario())


def test_in_redis_an_end_between_a_grant_and_its_replicas_poll_waits_for_the_granted_request(redis: Redis) -> None:
    async def scenario() -> None:
        ended: list[tuple[str, str]] = []
        a, b = replica(redis, ended), replica(redis, ended)
        holder = await a.wait("holder")
        assert (await b._call("queue", "w"))[0] == "queued"  # b's waiter, before b's poll runs
        await a.release(holder)
        assert await a.finish("holder")  # frees the slot: the queue's head "w" is granted it in the same script
        assert await a.finish("w")  # DELETE of "w" before b counted its request: it must wait for that request
        assert (await a.counts()).resident == {UP: 1} and ("w", "ended") not in ended
        assert await b._call("poll", ids=["w", "1"]) == [UP]  # b's poll finds the grant and counts its request
        granted = b._take("w", UP)
        assert (await a.counts()).resident == {UP: 1}
        await b.release(granted)
        assert ended == [("holder", "ended"), ("w", "ended")]
        assert (await a.counts()).resident == {UP: 0}
        await asyncio.gather(a.close(), b.close())

    asyncio.run(scenario())


def test_in_redis_a_request_queued_behind_the_grant_of_its_own_session_is_counted(redis: Redis) -> None:
    async def scenario() -> None:
        ended: list[tuple[str, str]] = []
        a = replica(redis, ended)
        holder = await a.wait("holder")
        first = asyncio.ensure_future(a.wait("w"))
        second = asyncio.ensure_future(a.wait("w"))  # two requests of one new session wait on one replica
        await asyncio.sleep(0.1)
        await a.release(holder)
        assert await a.finish("holder")
        got: list[Session] = [await first, await second]
        assert got[0] is got[1] and got[0].in_flight == 2
        assert await a.finish("w")  # deferred: two requests in flight
        await a.release(got[0])
        assert ("w", "ended") not in ended and (await a.counts()).resident == {UP: 1}
        await a.release(got[1])
        assert ended[-1] == ("w", "ended") and (await a.counts()).resident == {UP: 0}
        await a.close()

    asyncio.run(scenario())


async def redis_keys(redis: Redis) -> set[str]:
    """The names of the shared state's keys that exist (empty ones do not)."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis.url, decode_responses=True)
    try:
        return {str(key).rsplit(":", 1)[1] for key in await client.keys("kvbudget:gateway:*")}
    finally:
        await client.aclose()


def test_in_redis_requests_of_a_replica_that_died_do_not_hold_an_ended_session(redis: Redis) -> None:
    async def scenario() -> None:
        ended: list[tuple[str, str]] = []
        dead = replica(redis, ended)
        await dead.wait("s")  # in flight when its replica dies: never released, never refreshed again
        await dead.close()
        live = replica(redis, ended, stale_s=0.3)
        assert await live.finish("s")  # seen just now: its request may still run somewhere, the end waits
        assert (await live.counts()).resident == {UP: 1} and ended == []
        await asyncio.sleep(0.5)  # past stale_s without a refresh (only longer under load: the outcome holds)
        assert await live.finish("s")
        assert ended == [("s", "ended")] and (await live.counts()).resident == {UP: 0}
        await live.close()

    asyncio.run(scenario())


def test_in_redis_a_slot_granted_as_its_waiter_gives_up_goes_to_the_next(redis: Redis) -> None:
    async def scenario() -> None:
        ended: list[tuple[str, str]] = []
        a, b = replica(redis, ended), replica(redis, ended)
        holder = await a.wait("holder")
        assert (await b._call("queue", "w"))[0] == "queued"  # b's waiter, before b's poll runs
        await a.release(holder)
        assert await a.finish("holder")  # "w" is granted the slot in the same script
        await b._call("give_up", "w")  # its queue time ran out before b's poll saw the grant
        assert (await a.counts()).resident == {UP: 0}  # not held until the idle timeout by nobody's request
        holder = await a.wait("holder")
        assert (await b._call("queue", "x"))[0] == "queued"
        await a.release(holder)
        assert await a.finish("holder")  # "x" is granted the slot
        assert await b._call("poll", ids=["x", "2"]) == [UP]  # two requests of "x" counted: both gave up meanwhile
        assert (await a.counts()).resident == {UP: 1}
        await b.waiting.drop("x", 2)
        assert (await a.counts()).resident == {UP: 0}
        await asyncio.gather(a.close(), b.close())

    asyncio.run(scenario())
