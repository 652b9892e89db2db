"""At most the planned sessions resident on each upstream; new sessions wait in one FIFO queue (state in memory).

A session is resident from its first admitted request until it ends: explicitly (``end``), or after
``idle_timeout_s`` with no request in flight (a tool pause keeps the slot, as the engine keeps its cache).
A request of a resident session enters at once, whatever is queued: only *new* sessions queue. A new
session waits up to ``queue_timeout_s``; past it, or with ``max_queue`` sessions already waiting (a flood
of new ids cannot grow memory past that), it is refused with a reason and a Retry-After. Memory holds the
resident sessions and the waiting ones, never more than ``slots x upstreams + max_queue``.

With several upstreams a session sticks to the one it was admitted to (its prefix cache lives there); a new
session goes to the least-loaded upstream in ``healthy`` with a free slot (ties: the order given). ``State`` is
the interface the application uses; ``shared.SharedAdmission`` implements it in Redis for several replicas.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kvbudget.gateway.records import Place


class Refused(Exception):
    """A new session not admitted: ``reason`` ("queue-timeout", "queue-full", "key-quota"), ``retry_after_s``
    (whole >= 1)."""

    def __init__(self, reason: str, retry_after_s: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s


@dataclass(eq=False, slots=True)
class Session:
    id: str
    upstream: str
    admitted_s: float  # monotonic
    last_seen_s: float  # monotonic: the end of its last request, or the start of one in flight
    in_flight: int = 0
    ending: bool = False
    state: dict[str, object] = field(default_factory=dict)  # what records keep between a session's steps


@dataclass(frozen=True)
class Counts:
    """Resident sessions per upstream, and new sessions waiting (for /metrics)."""

    resident: dict[str, int]
    queued: int


class State(Protocol):
    """Admission as the application uses it: in memory (``Admission``) or shared in Redis (``SharedAdmission``)."""

    upstreams: tuple[str, ...]
    healthy: set[str]

    # ``place``: the request's place in the record (records.Place), taken by the shared state at admission
    async def admit_now(self, session_id: str, place: Place | None = None) -> Session | None: ...
    async def wait(self, session_id: str, place: Place | None = None) -> Session: ...
    async def release(self, session: Session, place: Place | None = None) -> None: ...
    async def rehome(self, session: Session) -> str | None: ...
    async def finish(self, session_id: str) -> bool: ...
    async def counts(self) -> Counts: ...
    async def run(self) -> None: ...
    def local(self) -> Iterable[Session]: ...
    async def salt(self) -> str | None: ...
    async def close(self) -> None: ...


def pick(load: dict[str, int], healthy: Iterable[str], slots: int, order: Sequence[str]) -> str | None:
    """The least-loaded healthy upstream with a free slot (ties: the first in ``order``), or None."""
    free = [u for u in order if u in healthy and load.get(u, 0) < slots]
    return min(free, key=lambda u: load.get(u, 0)) if free else None


@dataclass(eq=False)
class Waiter:
    future: asyncio.Future[Session]
    requests: int = 0
    counted: int = 0  # shared state: of its requests, those the granting poll counted in flight


class Admission:
    """The resident sessions of the upstreams and the FIFO queue of new ones (one event loop, no locks needed)."""

    def __init__(
        self,
        slots: int,
        upstreams: Sequence[str] = ("upstream",),
        *,
        queue_timeout_s: float,
        max_queue: int,
        idle_timeout_s: float,
        on_end: Callable[[Session, str], None] = lambda session, why: None,
        clock: Callable[[], float] = time.monotonic,
        quotas: dict[str, int] | None = None,
    ) -> None:
        self.slots = slots  # per upstream
        self.quotas = quotas  # key name -> sessions (resident or waiting) at most; session ids are "name/id"
        self.held: dict[str, int] = {}  # key name -> its sessions resident or waiting
        self.upstreams = tuple(upstreams)
        self.healthy = set(self.upstreams)
        self.load = dict.fromkeys(self.upstreams, 0)
        self.queue_timeout_s = queue_timeout_s
        self.max_queue = max_queue
        self.idle_timeout_s = idle_timeout_s
        self.on_end = on_end
        self.clock = clock
        self.resident: dict[str, Session] = {}
        self.queue: OrderedDict[str, Waiter] = OrderedDict()

    # -- entering and leaving ---------------------------------------------------------------------------------

    async def enter(self, session_id: str) -> Session:
        """The resident session for one request (its in-flight count taken); waits when it is new and no slot is
        free; raises Refused past the queue's time or size."""
        session = self.enter_now(session_id)
        if session is not None:
            return session
        waiter = self.queue.get(session_id)
        if waiter is None:
            if len(self.queue) >= self.max_queue:
                raise Refused("queue-full", self.retry_after_s())
            self._check_quota(session_id)
            waiter = Waiter(asyncio.get_running_loop().create_future())
            self.queue[session_id] = waiter
            self._hold(session_id, 1)
        waiter.requests += 1
        try:
            session = await asyncio.wait_for(asyncio.shield(waiter.future), self.queue_timeout_s)
        except asyncio.TimeoutError:
            self._give_up(session_id, waiter)
            raise Refused("queue-timeout", self.retry_after_s()) from None
        except asyncio.CancelledError:  # the client went away while waiting
            if waiter.future.done() and not waiter.future.cancelled():
                self.leave(waiter.future.result())  # admitted meanwhile: its in-flight count was taken for us
            else:
                self._give_up(session_id, waiter)
            raise
        return session

    def enter_now(self, session_id: str) -> Session | None:
        """The session when it can enter without waiting (resident, or new with a slot free and nobody queued)."""
        session = self.resident.get(session_id)
        if session is not None:
            return self._take(session)
        if not self.queue:
            upstream = self._pick()
            if upstream is not None:
                self._check_quota(session_id)
                self._hold(session_id, 1)
                return self._take(self._admit(session_id, upstream))
        return None

    def _check_quota(self, session_id: str) -> None:
        if self.quotas is not None:
            name = session_id.split("/", 1)[0]
            if self.held.get(name, 0) >= self.quotas.get(name, 0):
                raise Refused("key-quota", self.retry_after_s())

    def _hold(self, session_id: str, change: int) -> None:
        if self.quotas is not None:
            name = session_id.split("/", 1)[0]
            self.held[name] = self.held.get(name, 0) + change

    def _pick(self) -> str | None:
        return pick(self.load, self.healthy, self.slots, self.upstreams)

    def _give_up(self, session_id: str, waiter: Waiter) -> None:
        waiter.requests -= 1
        if waiter.requests == 0 and self.queue.get(session_id) is waiter and not waiter.future.done():
            del self.queue[session_id]
            waiter.future.cancel()
            self._hold(session_id, -1)

    def _take(self, session: Session) -> Session:
        session.in_flight += 1
        session.last_seen_s = self.clock()
        return session

    def _admit(self, session_id: str, upstream: str) -> Session:
        now = self.clock()
        session = Session(session_id, upstream, now, now)
        self.resident[session_id] = session
        self.load[upstream] += 1
        return session

    def leave(self, session: Session) -> None:
        """One request of ``session`` is done (answered, failed or abandoned)."""
        session.in_flight -= 1
        session.last_seen_s = self.clock()
        if session.ending and session.in_flight == 0:
            self._remove(session, "ended")

    def end(self, session_id: str) -> bool:
        """End a session now, or when its requests in flight are done; False when it is not resident."""
        session = self.resident.get(session_id)
        if session is None:
            return False
        session.ending = True
        if session.in_flight == 0:
            self._remove(session, "ended")
        return True

    def _remove(self, session: Session, why: str) -> None:
        if self.resident.get(session.id) is session:
            del self.resident[session.id]
            self.load[session.upstream] -= 1
            self._hold(session.id, -1)
            self.on_end(session, why)
        self._grant()

    def _grant(self) -> None:
        while self.queue:
            upstream = self._pick()
            if upstream is None:
                return
            session_id, waiter = self.queue.popitem(last=False)
            if waiter.future.done():
                self._hold(session_id, -1)
                continue
            session = self._admit(session_id, upstream)
            session.in_flight = waiter.requests
            waiter.future.set_result(session)

    # -- idle sessions ------------------------------------------------------------------------------------------

    def expire(self) -> int:
        """End the sessions idle past the timeout (none in flight); returns how many."""
        now = self.clock()
        idle = [s for s in self.resident.values() if s.in_flight == 0 and now - s.last_seen_s >= self.idle_timeout_s]
        for session in idle:
            self._remove(session, "idle")
        return len(idle)

    def retry_after_s(self) -> int:
        """Seconds until a slot may free: the soonest idle expiry of a session with nothing in flight."""
        now = self.clock()
        waits = [s.last_seen_s + self.idle_timeout_s - now for s in self.resident.values() if s.in_flight == 0]
        soonest = min(waits) if waits else self.idle_timeout_s
        return max(1, math.ceil(soonest))

    async def reap(self) -> None:
        """Expire idle sessions until cancelled (checks four times per idle timeout, at least once a second)."""
        period = min(1.0, self.idle_timeout_s / 4)
        while True:
            await asyncio.sleep(period)
            self.expire()
            self._grant()  # an upstream back in health takes waiting sessions

    # -- the State interface --------------------------------------------------------------------------------------

    async def admit_now(self, session_id: str, place: Place | None = None) -> Session | None:
        return self.enter_now(session_id)  # the place is the recorder's, in memory (records.py)

    async def wait(self, session_id: str, place: Place | None = None) -> Session:
        return await self.enter(session_id)

    async def release(self, session: Session, place: Place | None = None) -> None:
        self.leave(session)

    async def rehome(self, session: Session) -> str | None:
        """Move a session off an upstream out of health to a healthy one with a free slot (its cache there is
        lost anyway); returns the upstream it left, or None when it stays."""
        old, new = session.upstream, self._pick()
        if old in self.healthy or new is None or self.resident.get(session.id) is not session:
            return None
        self.load[old] -= 1
        self.load[new] += 1
        session.upstream = new
        return old

    async def finish(self, session_id: str) -> bool:
        return self.end(session_id)

    async def counts(self) -> Counts:
        return Counts(dict(self.load), len(self.queue))

    async def run(self) -> None:
        await self.reap()

    def local(self) -> Iterable[Session]:
        return list(self.resident.values())

    async def salt(self) -> str | None:
        """None: the recorder makes a salt of its own (shared.SharedAdmission keeps one in Redis)."""
        return None

    async def close(self) -> None:
        return None
