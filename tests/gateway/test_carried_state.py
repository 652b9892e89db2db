"""``--state redis://``: what a session carries between steps (its compaction summary, its place in the record, kept
in Redis by the admission script: ledger.py) survives a gateway restart and is shared by replicas, against a real
redis-server; a session carried by the previous version (its record in the carried JSON) continues."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.gateway import carried, compact
from kvbudget.workload.traces import kvbudget_jsonl
from tests.gateway.redis_server import Redis
from tests.gateway.replicas import Replica


def test_a_summary_kept_by_one_replica_is_recalled_by_another_and_after_a_restart(redis: Redis, tmp_path: Path) -> None:
    async def scenario() -> None:
        one, two = await Replica(redis, tmp_path / "1.jsonl").open(), await Replica(redis, tmp_path / "2.jsonl").open()
        session = await one.state.wait("s")
        memory = compact.Memory(4, "d" * 64, "The user wants a haiku about ¼ of a cake.")
        session.state[compact.KEY] = memory
        await one.state.release(session)
        elsewhere = await two.state.wait("s")
        assert elsewhere.state[compact.KEY] == memory  # the other replica reuses it: no second summarising call
        await two.state.release(elsewhere)
        await asyncio.gather(one.close(), two.close())
        restarted = await Replica(redis, tmp_path / "3.jsonl").open()
        again = await restarted.state.wait("s")
        assert again.state[compact.KEY] == memory
        await restarted.state.release(again)
        assert await restarted.state.finish("s")
        back = await restarted.state.wait("s")  # a session that ended starts afresh: nothing carried
        assert back.state == {}
        await restarted.state.release(back)
        await restarted.close()

    asyncio.run(scenario())


def test_a_session_recorded_through_two_replicas_and_a_restart_is_one_session_step_by_step(
    redis: Redis, tmp_path: Path
) -> None:
    async def scenario() -> list[Path]:
        files = [tmp_path / f"{n}.jsonl" for n in range(3)]
        one, two = await Replica(redis, files[0]).open(), await Replica(redis, files[1]).open()
        await one.step("s", 100.0, 50, 5)  # step 0 on replica one
        await two.step("s", 103.0, 70, 6)  # step 1 on replica two: writes step 0's row
        await asyncio.gather(one.close(), two.close())  # both stop: step 1's row stays in Redis, not written twice
        restarted = await Replica(redis, files[2]).open()
        # step 2 after the restart writes step 1's row; its request carries x-session-end: the last row is written
        await restarted.step("s", 110.0, 90, 7, ending=True)
        await restarted.close()
        return files

    files = asyncio.run(scenario())
    rows = [json.loads(line) for path in files for line in path.read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1, 2]  # each step once, in order, across the three files
    assert len({row["session"] for row in rows}) == 1  # one salt in Redis: one hashed id everywhere
    assert [row["new_tokens"] for row in rows] == [50, 70 - 55, 90 - 76]
    assert [row.get("pause_s") for row in rows] == [2.0, 6.0, None]  # next start minus this step's end
    joined = tmp_path / "all.jsonl"  # the replicas' files together: kvbudget's trace reader takes them unchanged
    joined.write_text("".join(path.read_text() for path in files))
    bad: list[object] = []
    read = list(kvbudget_jsonl.read(joined, bad.append))
    assert not bad and [(r.step, r.prompt_tokens, r.output_tokens) for r in read] == [
        (0, 50, 5),
        (1, 70, 6),
        (2, 90, 7),
    ]


@settings(deadline=None)  # no time limit: on a loaded machine one example may take over 200 ms
@given(covered=st.integers(0, 10**6), summary=st.text())
def test_what_a_session_carries_reads_back_the_same(covered: int, summary: str) -> None:
    state: dict[str, object] = {compact.KEY: compact.Memory(covered, "0" * 64, summary)}
    assert carried.decode(carried.encode(state)) == state
    assert carried.decode("") == {} and carried.decode("not json") == {} and carried.decode("[1]") == {}
    assert carried.old_pending("") is None and carried.old_pending("[1]") is None


def test_a_session_carried_by_the_previous_version_continues_its_steps(redis: Redis, tmp_path: Path) -> None:
    """The previous version kept the record in the carried JSON: the first request after the upgrade takes it over
    (its step number and context continue, the row it kept waiting is written with its pause), once."""
    import redis as client

    async def scenario() -> None:
        one, two = await Replica(redis, tmp_path / "1.jsonl").open(), await Replica(redis, tmp_path / "2.jsonl").open()
        await one.state.release(await one.state.wait("s"))  # resident, nothing recorded yet
        old_row = {"session": one.recorder.hashed("s"), "step": 4, "start_s": 1733000000.123456, "prompt_tokens": 80,
                   "output_tokens": 4, "new_tokens": 20}  # fmt: skip
        doc = {"record": {"step": 5, "context": 84, "pending": [old_row, 1733000001.5], "start_s": 1733000000.123456}}
        with client.Redis.from_url(redis.url) as direct:
            direct.hset("kvbudget:gateway:{sessions}:carried", "s", json.dumps(doc))
        first, place = await one.begin("s", 1733000003.0)
        await two.step("s", 1733000004.0, 120, 5)  # the other replica, while the first is in flight
        await one.end(first, place, 1733000005.0, 100, 6)
        assert await two.state.finish("s")
        await asyncio.gather(one.close(), two.close())

    asyncio.run(scenario())
    rows = [json.loads(line) for n in (1, 2) for line in (tmp_path / f"{n}.jsonl").read_text().splitlines()]
    rows.sort(key=lambda row: row["step"])
    assert [(r["step"], r["prompt_tokens"], r["new_tokens"], r.get("pause_s")) for r in rows] == [
        (4, 80, 20, 1.5), (5, 100, 100 - 84, 0), (6, 120, 120 - 106, None)]  # fmt: skip
    assert rows[0]["start_s"] == 1733000000.123456 and rows[1]["start_s"] == 1733000003.0
