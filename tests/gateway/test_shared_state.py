"""``--state redis://...``: admission shared by several gateway replicas, against a real redis-server.

Each test builds replicas as the gateway does (one SharedAdmission each, its own connection pool) on one Redis;
the live test (tests/live/test_gateway_live.py) runs two gateway processes in front of a real llama-server.
"""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from kvbudget.gateway.admission import Refused, Session
from kvbudget.gateway.shared import SharedAdmission, StateUnavailable
from tests.gateway.redis_server import Redis, redis_server

pytest.importorskip("redis")

UP = ("http://a:1", "http://b:2")


def replica(redis: Redis, slots: int = 2, upstreams: tuple[str, ...] = UP[:1], **options: Any) -> SharedAdmission:
    settings: dict[str, Any] = {"queue_timeout_s": 5.0, "max_queue": 16, "idle_timeout_s": 60.0, **options}
    return SharedAdmission(redis.url, slots, upstreams, **settings)


async def closing(*replicas: SharedAdmission) -> None:
    await asyncio.gather(*(r.close() for r in replicas))


def test_replicas_racing_for_the_last_slots_admit_exactly_the_slots(redis: Redis) -> None:
    async def scenario() -> None:
        replicas = [replica(redis, slots=3) for _ in range(4)]
        for round_ in range(5):
            tries = [r.admit_now(f"r{round_}-{i}-{j}") for i, r in enumerate(replicas) for j in range(5)]
            admitted = [s for s in await asyncio.gather(*tries) if s is not None]
            assert len(admitted) == 3  # 20 new sessions at once through 4 replicas: exactly the 3 slots
            counts = await replicas[0].counts()
            assert counts.resident == {UP[0]: 3} and counts.queued == 0
            for session in admitted:  # each replica ends its own sessions
                owner = next(r for r in replicas if session.id in r.sessions)
                await owner.release(session)
                assert await owner.finish(session.id)
            assert (await replicas[1].counts()).resident == {UP[0]: 0}
        await closing(*replicas)

    asyncio.run(scenario())


def test_two_replicas_waiting_for_one_slot_get_it_in_turn_and_the_late_one_a_429(redis: Redis) -> None:
    async def scenario() -> None:
        a, b = replica(redis, slots=1, queue_timeout_s=0.5), replica(redis, slots=1, queue_timeout_s=0.5)
        held = await a.wait("holder")
        first = asyncio.ensure_future(b.wait("first"))
        await asyncio.sleep(0.05)
        second = asyncio.ensure_future(a.wait("second"))
        await asyncio.sleep(0.05)
        assert (await b.counts()).queued == 2
        await a.release(held)
        assert await a.finish("holder")
        got = await first  # queued first, on the other replica: it takes the slot
        assert got.id == "first" and got.upstream == UP[0]
        with pytest.raises(Refused) as late:
            await second
        assert late.value.reason == "queue-timeout" and late.value.retry_after_s >= 1
        counts = await a.counts()
        assert counts.resident == {UP[0]: 1} and counts.queued == 0  # the one that gave up left the queue
        await closing(a, b)

    asyncio.run(scenario())


def test_sessions_survive_a_gateway_restart(redis: Redis) -> None:
    async def scenario() -> None:
        before = replica(redis, slots=2, upstreams=UP)
        one, two = await before.wait("one"), await before.wait("two")
        assert {one.upstream, two.upstream} == set(UP)  # least loaded: one on each
        for session in (one, two):
            await before.release(session)
        await before.close()
        after = replica(redis, slots=2, upstreams=UP)  # the restarted gateway
        again = await after.admit_now("two")
        assert again is not None and again.upstream == two.upstream  # still resident, on the same upstream
        assert (await after.counts()).resident == dict.fromkeys(UP, 1)
        await closing(after)

    asyncio.run(scenario())


def test_idle_sessions_expire_once_and_sessions_in_flight_do_not(redis: Redis) -> None:
    async def scenario() -> None:
        ended: dict[str, list[tuple[str, str]]] = {"a": [], "b": []}

        def on_end(name: str) -> Any:
            return lambda session, why: ended[name].append((session.id, why))

        a = replica(redis, slots=2, idle_timeout_s=0.3, on_end=on_end("a"))
        b = replica(redis, slots=2, idle_timeout_s=0.3, on_end=on_end("b"))
        paused, busy = await a.wait("paused"), await a.wait("busy")
        await a.release(paused)
        for _ in range(3):  # 0.6 s: past the timeout; a keeps its request in flight seen
            await asyncio.sleep(0.2)
            await a.reap()
            await b.reap()
        assert ended["a"] + ended["b"] == [("paused", "idle")]  # ended once, by whichever replica reaped first
        assert set(a.sessions) == {"busy"} and busy.in_flight == 1
        assert (await b.counts()).resident == {UP[0]: 1}
        await closing(a, b)

    asyncio.run(scenario())


def test_a_dead_replicas_sessions_and_waiters_free_their_places(redis: Redis) -> None:
    async def scenario() -> None:
        dead = replica(redis, slots=1, idle_timeout_s=0.4, stale_s=0.3)
        await dead.wait("in-flight-forever")  # never released: its replica died mid-request
        waiter = asyncio.ensure_future(dead.wait("queued-forever"))
        await asyncio.sleep(0.1)
        waiter.cancel()  # the replica dies: nobody polls for its waiter and nobody gives it up
        poller = dead.waiting.poller
        assert poller is not None
        poller.cancel()
        await asyncio.gather(waiter, poller, return_exceptions=True)
        dead.waiting.waiters.clear()
        alive = replica(redis, slots=1, idle_timeout_s=0.4, stale_s=0.3, queue_timeout_s=3.0)
        started = time.monotonic()
        reaping = asyncio.ensure_future(alive.run())
        got = await alive.wait("newcomer")
        waited = time.monotonic() - started
        assert got.id == "newcomer" and 0.3 <= waited < 2.5  # after the dead one's idle expiry, not before
        counts = await alive.counts()
        assert counts.resident == {UP[0]: 1} and counts.queued == 0
        reaping.cancel()
        await asyncio.gather(reaping, return_exceptions=True)
        await closing(alive, dead)  # (its connections only: it ran nothing more)

    asyncio.run(scenario())


def test_redis_down_is_a_clean_error_and_the_counts_are_right_once_it_is_back(tmp_path: Path) -> None:
    with redis_server(tmp_path) as own:

        async def scenario() -> None:
            gateway = replica(own, slots=1)
            session = await gateway.wait("s")
            own.stop()
            with pytest.raises(StateUnavailable, match="Redis unavailable: ConnectionError"):
                await gateway.admit_now("t")
            await gateway.release(session)  # a lost write is not an error: the slot idles out in Redis
            own.start()  # no persistence: Redis comes back empty
            again = await gateway.admit_now("t")
            assert again is not None and (await gateway.counts()).resident == {UP[0]: 1}
            await gateway.reap()
            assert set(gateway.sessions) == {"t"}  # "s" is forgotten: Redis no longer holds it
            await closing(gateway)

        asyncio.run(scenario())


def test_an_explicit_end_waits_for_the_requests_in_flight(redis: Redis) -> None:
    async def scenario() -> None:
        ended: list[tuple[str, str]] = []
        gateway = replica(redis, slots=1, on_end=lambda s, why: ended.append((s.id, why)))
        session: Session = await gateway.wait("s")
        assert await gateway.finish("s") and (await gateway.counts()).resident == {UP[0]: 1}
        await gateway.release(session)
        assert ended == [("s", "ended")] and (await gateway.counts()).resident == {UP[0]: 0}
        assert not await gateway.finish("s")
        await closing(gateway)

    asyncio.run(scenario())


def test_upstreams_out_of_health_take_no_new_sessions_and_theirs_move_when_a_slot_is_free(redis: Redis) -> None:
    async def scenario() -> None:
        gateway = replica(redis, slots=1, upstreams=UP, queue_timeout_s=0.2)
        a, b = await gateway.wait("a"), await gateway.wait("b")
        assert (a.upstream, b.upstream) == UP
        gateway.healthy.discard(UP[1])
        assert await gateway.rehome(b) is None  # no free healthy slot: b stays where it is
        await gateway.release(a)
        assert await gateway.finish("a")
        assert await gateway.rehome(b) == UP[1] and b.upstream == UP[0]
        assert (await gateway.counts()).resident == {UP[0]: 1, UP[1]: 0}
        with pytest.raises(Refused, match="queue-timeout"):  # UP[1] is free but out of health
            await gateway.wait("c")
        gateway.healthy.add(UP[1])
        assert (await gateway.wait("c")).upstream == UP[1]
        await closing(gateway)

    asyncio.run(scenario())


def test_replicas_racing_hold_each_key_to_its_quota(redis: Redis) -> None:
    async def scenario() -> None:
        quotas = {"team-a": 2, "team-b": 1}
        replicas = [replica(redis, slots=10, quotas=quotas, queue_timeout_s=0.2) for _ in range(3)]
        tries = [r.wait(f"{team}/s{i}-{j}") for i, r in enumerate(replicas) for j in range(4) for team in quotas]
        answers = await asyncio.gather(*tries, return_exceptions=True)
        admitted = sorted(a.id.split("/")[0] for a in answers if isinstance(a, Session))
        assert admitted == ["team-a", "team-a", "team-b"]
        assert {a.reason for a in answers if isinstance(a, Refused)} == {"key-quota"}
        owner = next(r for r in replicas if any(s.startswith("team-b/") for s in r.sessions))
        session = next(s for s in owner.sessions.values() if s.id.startswith("team-b/"))
        await owner.release(session)
        assert await owner.finish(session.id)
        assert (await replicas[0].wait("team-b/again")).id == "team-b/again"  # its quota place came back
        await closing(*replicas)

    asyncio.run(scenario())


def test_an_unreachable_redis_at_start_is_one_line_without_the_password(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.helpers import run_cli

    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    url = f"redis://:hunter2@127.0.0.1:{port}/0"
    code, out, err = run_cli(capsys, "gateway", "--upstream", "http://h:1", "--cap", "1k", "--sessions", "1",
                             "--state", url)  # fmt: skip
    assert (code, out) == (1, "") and err.count("\n") == 1
    assert err.startswith(f"Error: --state redis://:***@127.0.0.1:{port}/0: cannot reach Redis (ConnectionError")
    assert "hunter2" not in err
    code, _, err = run_cli(capsys, "gateway", "--upstream", "http://h:1", "--cap", "1k", "--sessions", "1",
                           "--state", "redis://127.0.0.1:6379/zero")  # fmt: skip
    assert code == 1 and "the path is the database number" in err


def test_a_session_on_an_upstream_this_replica_lacks_moves_to_one_of_its_own(redis: Redis) -> None:
    async def scenario() -> None:  # the upstream list changed between deploys: the old sessions are still in Redis
        old = replica(redis, slots=1, upstreams=UP[:1])
        stale = await old.wait("stale")
        await old.release(stale)
        await old.close()
        new = replica(redis, slots=1, upstreams=UP[1:])
        again = await new.admit_now("stale")
        assert again is not None and again.upstream == UP[0] and UP[0] not in new.healthy
        assert await new.rehome(again) == UP[0] and again.upstream == UP[1]
        assert (await new.counts()).resident == {UP[0]: 0, UP[1]: 1}
        await closing(new)

    asyncio.run(scenario())
