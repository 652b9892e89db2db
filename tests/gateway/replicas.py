"""Gateway replicas' shared state and recorders wired as gateway/app.py wires them (``--state redis`` with
``--record``), driven step by step as gateway/proxy.py drives them, for the tests against a real redis-server."""

from __future__ import annotations

from pathlib import Path

from kvbudget.gateway.admission import Session
from kvbudget.gateway.records import Place, Recorder
from kvbudget.gateway.shared import SharedAdmission
from tests.gateway.redis_server import Redis

UP = "http://a:1"


class Replica:
    """One gateway replica's state and recorder, wired as gateway/app.py wires them."""

    def __init__(self, redis: Redis, record: Path) -> None:
        self.recorder = Recorder(record)
        self.recorder.shared = True
        self.state = SharedAdmission(redis.url, 2, (UP,), queue_timeout_s=5, max_queue=4, idle_timeout_s=60,
                                     on_end=lambda session, why: self.recorder.end(session),
                                     on_rows=self.recorder.write)  # fmt: skip

    async def open(self) -> Replica:
        self.recorder.salt = await self.state.salt() or self.recorder.salt
        return self

    async def begin(self, sid: str, start_s: float) -> tuple[Session, Place]:
        """A request admitted (as proxy.py: its place taken in the admission's script)."""
        place = Place(start_s)
        session = await self.state.wait(sid, place)
        self.recorder.enter(session, place)
        return session, place

    async def end(self, session: Session, place: Place, end_s: float | None, prompt: int, output: int) -> None:
        """Its request answered at ``end_s`` (None: failed, no row), and released."""
        if end_s is not None:
            self.recorder.finish(session, place, end_s=end_s, prompt_tokens=prompt, output_tokens=output,
                                 cached_tokens=prompt - 10)  # fmt: skip
        self.recorder.drop(session, place)
        await self.state.release(session, place)

    async def step(self, sid: str, start_s: float, prompt: int, output: int, *, ending: bool = False) -> None:
        session, place = await self.begin(sid, start_s)
        session.ending = ending
        await self.end(session, place, start_s + 1, prompt, output)

    async def close(self) -> None:
        for session in self.state.local():
            self.recorder.end(session)
        self.recorder.close()
        await self.state.close()
