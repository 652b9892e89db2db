"""``--state redis://HOST:PORT/DB``: sessions and admission counts shared by several gateway replicas in Redis.

Every change of the shared state is one Lua script, which Redis runs atomically: a replica reads the counts and
admits in the same step, so two replicas cannot both admit the last slot. Time is Redis's own (``TIME``), so
replicas on hosts with skewed clocks agree on idleness. The keys (one deployment per Redis database):

* ``where``: session -> its upstream (the resident sessions); ``load``: upstream -> resident sessions;
* ``seen``: session -> when it was last seen (ms). A request's end sets it, and every replica refreshes the
  sessions it has in flight once a period, so a session idle past the timeout is one not seen for that long,
  and the sessions of a replica that died leave their slots after the idle timeout, as paused ones do;
* ``queue``: new sessions waiting, in arrival order (a ticket from ``ticket``); ``beat``: each waiter's last
  heartbeat. A replica polls for its waiters (waiters.py: every ``POLL_S``, at once after a local slot frees); a
  waiter not polled for ``STALE_S`` (its replica died) leaves the queue, so it cannot block the ones behind it.

* ``flight``: session -> its requests in flight on all replicas; ``claim``: sessions granted from the queue whose
  replica has not yet counted their waiting requests; ``ending``: sessions asked to end, which leave their slot
  when nothing of theirs is in flight (an end and a request's end racing free the slot once: atomic.py);
* ``carried``: session -> what it carries between steps (its compaction summary, its place in the record:
  carried.py), written with each request's end and read with the next request's entry, on any replica;
  ``salt``: the recorder's salt, one for every replica and restart;
* ``record``: session -> its steps' order in the record (``--record``: ledger.py), changed at each request's
  admission and end; ``placed``: the places' ids. Removed with the session, as the other keys are.

Each replica keeps in memory only its own requests in flight (``local``) and the waiters it polls for. A session
stays resident across a gateway restart, with its summary and its place in the record; requests of one session
may go through any replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kvbudget.gateway import carried, ledger
from kvbudget.gateway.admission import Counts, Refused, Session, Waiter
from kvbudget.gateway.atomic import SCRIPT
from kvbudget.gateway.records import Place
from kvbudget.gateway.redis_link import StateUnavailable, check, redacted
from kvbudget.gateway.waiters import Waiters

__all__ = ["FORGOTTEN", "KEYS", "PREFIX", "STALE_S", "SharedAdmission", "StateUnavailable", "check", "redacted"]

PREFIX = "kvbudget:gateway:{sessions}:"  # the braces keep every key in one Redis Cluster hash slot
KEYS = (
    "where",
    "seen",
    "load",
    "queue",
    "beat",
    "ticket",
    "held",
    "flight",
    "claim",
    "ending",
    "carried",
    "record",
    "placed",
)
STALE_S = 5.0  # a waiter whose replica has not polled for this long has gone
FORGOTTEN = "forgotten"  # on_end's reason for a session another replica ended (no metric: that replica counts it)


class SharedAdmission:
    """The State interface (admission.State) over Redis; one instance per gateway replica."""

    def __init__(
        self,
        url: str,
        slots: int,
        upstreams: Sequence[str],
        *,
        queue_timeout_s: float,
        max_queue: int,
        idle_timeout_s: float,
        on_end: Callable[[Session, str], None] = lambda session, why: None,
        on_rows: Callable[[list[dict[str, Any]]], None] = lambda rows: None,
        prefix: str = PREFIX,
        stale_s: float = STALE_S,
        quotas: dict[str, int] | None = None,
    ) -> None:
        import redis.asyncio

        self.url = url
        self.slots = slots
        self.upstreams = tuple(upstreams)
        self.healthy = set(self.upstreams)
        self.queue_timeout_s = queue_timeout_s
        self.max_queue = max_queue
        self.idle_timeout_s = idle_timeout_s
        self.on_end = on_end
        self.on_rows = on_rows  # the record's rows a script call made writable (ledger.py): this replica writes them
        self.stale_s = stale_s
        self.quotas = quotas  # key name -> sessions at most (session ids are "name/id"); None: no keys
        self.redis = redis.asyncio.Redis.from_url(url, decode_responses=True, socket_timeout=5,
                                                  socket_connect_timeout=5)  # fmt: skip
        self.script = self.redis.register_script(SCRIPT)
        self.keys = [prefix + key for key in KEYS]
        self.salt_key = prefix + "salt"
        self.sessions: dict[str, Session] = {}  # the sessions this replica has served, still resident
        # sessions whose state this replica is writing (a release's leave not yet answered): until it is, the
        # state held here is newer than Redis's, so a request entering meanwhile takes it, not Redis's
        self.writing: dict[str, int] = {}
        self.waiting = Waiters(self._call, self._take)  # the new sessions this replica polls for (waiters.py)

    async def _call(self, op: str, session_id: str = "", ids: Iterable[str] = ()) -> Any:
        import redis.exceptions

        healthy = [u for u in self.upstreams if u in self.healthy]
        timing = [round(self.idle_timeout_s * 1000), round(self.stale_s * 1000)]
        keyed = [0, 0] if self.quotas is None else [1, self.quotas.get(session_id.split("/", 1)[0], 0)]
        args: list[str | int] = [op, self.slots, *timing, self.max_queue, session_id, *keyed, len(healthy)]
        args += [*healthy, *ids]
        try:
            return await self.script(keys=self.keys, args=args)
        except (redis.exceptions.RedisError, OSError) as exc:
            raise StateUnavailable(f"session state in Redis unavailable: {type(exc).__name__}: {exc}") from None

    def _take(self, session_id: str, upstream: str, requests: int = 1, state: str = "") -> Session:
        now = time.monotonic()
        session = self.sessions.get(session_id)
        if session is None:
            session = self.sessions[session_id] = Session(session_id, upstream, now, now)
        if session.in_flight == 0 and session_id not in self.writing:  # none here: what Redis carries is the newest
            session.state = carried.decode(state)
        session.upstream = upstream
        session.in_flight += requests
        session.last_seen_s = now
        return session

    # -- State ----------------------------------------------------------------------------------------------------

    def _placed(self, place: Place | None, reply: Sequence[Any], state: str) -> None:
        items = ledger.placed(place, reply, state)
        if items:
            self.on_rows(items)

    async def admit_now(self, session_id: str, place: Place | None = None) -> Session | None:
        reply = await self._call("enter", session_id, [] if place is None else [repr(round(place.start_s, 6))])
        if reply[0] == "quota":
            raise Refused("key-quota", await self.retry_after_s())
        if reply[0] not in ("resident", "admitted"):
            return None
        session = self._take(session_id, reply[1], state=reply[2])
        self._placed(place, reply[3:], reply[2])
        return session

    async def _place(self, session_id: str, place: Place | None) -> None:
        """A request admitted from the queue takes its place in the record (a lost place: no row, no error)."""
        if place is not None:
            with contextlib.suppress(StateUnavailable):
                reply = await self._call("place", session_id, [repr(round(place.start_s, 6))])
                self._placed(place, reply, reply[4])

    async def wait(self, session_id: str, place: Place | None = None) -> Session:
        waiter = self.waiting.waiters.get(session_id)
        if waiter is None:
            reply = await self._call("queue", session_id, [] if place is None else [repr(round(place.start_s, 6))])
            if reply[0] in ("resident", "admitted"):
                session = self._take(session_id, reply[1], state=reply[2])
                self._placed(place, reply[3:], reply[2])
                return session
            if reply[0] in ("full", "quota"):
                raise Refused("queue-full" if reply[0] == "full" else "key-quota", await self.retry_after_s())
            waiter = self.waiting.waiters.get(session_id)  # another request of the session may have queued meanwhile
            if waiter is None:
                waiter = self.waiting.waiters[session_id] = Waiter(asyncio.get_running_loop().create_future())
            self.waiting.poll_soon()
        waiter.requests += 1
        try:
            session = await asyncio.wait_for(asyncio.shield(waiter.future), self.queue_timeout_s)
        except asyncio.TimeoutError:
            self.waiting.give_up(session_id, waiter)
            raise Refused("queue-timeout", await self.retry_after_s()) from None
        except asyncio.CancelledError:  # the client went away while waiting
            if waiter.future.done() and not waiter.future.cancelled() and waiter.future.exception() is None:
                if waiter.counted > 0:  # granted meanwhile and counted in flight: its count returns
                    waiter.counted -= 1
                    self.waiting.background(self.release(waiter.future.result()))
            else:
                self.waiting.give_up(session_id, waiter)
            raise
        if waiter.counted > 0:
            waiter.counted -= 1
            placing = asyncio.ensure_future(self._place(session_id, place))
            try:
                await asyncio.shield(placing)
            except asyncio.CancelledError:  # the client went away while its place was taken: both return
                self.waiting.background(self._after(placing, session, place))
                raise
            return session
        again = await self.admit_now(session_id, place)  # joined while the poll that granted it ran: not counted yet
        return again if again is not None else await self.wait(session_id, place)

    async def _after(self, placing: asyncio.Future[None], session: Session, place: Place | None) -> None:
        """Release a request whose client left while its place was taken, once it is (then given up there)."""
        with contextlib.suppress(Exception):
            await placing
        await self.release(session, place)

    async def release(self, session: Session, place: Place | None = None) -> None:
        """One request done: its flight count returned and the session's state written, in one script; the
        session leaves its slot here when an end was asked (``x-session-end`` or DELETE) and nothing of it is in
        flight on any replica. A lost write is not an error: the session idles out in Redis."""
        session.in_flight -= 1
        session.last_seen_s = time.monotonic()
        self.writing[session.id] = self.writing.get(session.id, 0) + 1
        try:
            with contextlib.suppress(StateUnavailable):
                ids = [carried.encode(session.state), "1" if session.ending else ""]
                if place is not None and place.id is not None:  # how its request ended: its row, or none
                    ids += [str(place.id), *ledger.outcome(place)]
                ended, _, rows = await self._call("leave", session.id, ids=ids)  # this replica holds the newest state
                self._rows(rows)
                if int(ended):
                    self.on_end(session, "ended")
        finally:
            self.writing[session.id] -= 1
            if not self.writing[session.id]:
                del self.writing[session.id]
                # nothing of it here now, its state written: the next request reads its state from Redis (a request
                # that entered while it was written took the state held here, with its in-flight count)
                if session.in_flight == 0 and self.sessions.get(session.id) is session:
                    del self.sessions[session.id]
        self.waiting.poll_soon()

    async def rehome(self, session: Session) -> str | None:
        """As Admission.rehome, in one script: the move and the two counts change together."""
        old = session.upstream
        new = await self._call("move", session.id)
        if not new or new == old:
            return None
        session.upstream = new
        return old

    async def finish(self, session_id: str) -> bool:
        """End a session now, or (Redis decides, atomically) when its requests in flight on any replica are done;
        False when it is not resident."""
        code, state, rows = await self._call("end", session_id)
        self._rows(rows, state)
        if int(code) == 1:
            self.on_end(self._ghost(session_id, state), "ended")
            self.waiting.poll_soon()
        return int(code) > 0

    def _rows(self, rows: str, *ended: str) -> None:
        items = ledger.made_writable(rows, *ended)
        if items:
            self.on_rows(items)

    @staticmethod
    def _ghost(session_id: str, state: str) -> Session:
        """A session ended here with nothing of it in flight here: its id and the state Redis carried."""
        session = Session(session_id, "", 0.0, 0.0)
        session.state = carried.decode(state)
        return session

    async def counts(self) -> Counts:
        load, queued = await self._call("counts")
        resident = dict.fromkeys(self.upstreams, 0)
        resident.update({up: int(n) for up, n in zip(load[::2], load[1::2], strict=True)})
        return Counts(resident, int(queued))

    async def retry_after_s(self) -> int:
        """Seconds until a slot may free: the soonest idle expiry of a resident session (any replica's)."""
        try:
            wait_ms = float(await self._call("retry"))
        except StateUnavailable:
            wait_ms = self.idle_timeout_s * 1000
        return max(1, math.ceil(wait_ms / 1000))

    async def run(self) -> None:
        """Until cancelled: keep this replica's in-flight sessions seen, end the idle ones, forget ended ones."""
        period = min(1.0, self.idle_timeout_s / 4)
        while True:
            await asyncio.sleep(period)
            with contextlib.suppress(StateUnavailable):
                await self.reap()

    async def reap(self) -> int:
        """One round of ``run``; returns how many sessions this replica found idle and ended."""
        busy = [s.id for s in self.sessions.values() if s.in_flight > 0]
        if busy:
            await self._call("touch", ids=busy)
        expired, gone, states, rows = await self._call("reap", ids=list(self.sessions))
        self._rows(rows, *states)
        for session_id, state in zip(expired, states, strict=True):
            self.sessions.pop(session_id, None)  # in flight here yet idle: this replica stalled past the timeout
            self.on_end(self._ghost(session_id, state), "idle")
        for session_id in gone:
            session = self.sessions.get(session_id)
            if session is not None and session.in_flight == 0:
                del self.sessions[session_id]
                self.on_end(session, FORGOTTEN)
        if expired:
            self.waiting.poll_soon()
        return len(expired)

    def local(self) -> Iterable[Session]:
        """Nothing to flush at a stop: what the sessions carry (their pending record rows) stays in Redis, for the
        replica that serves or ends them next."""
        return ()

    async def salt(self) -> str:
        """The recorder's salt, made once by the first replica to ask and kept in Redis."""
        import secrets

        try:
            await self.redis.set(self.salt_key, secrets.token_hex(16), nx=True)
            return str(await self.redis.get(self.salt_key))
        except Exception as exc:  # redis's errors and OSError alike: one line at start-up
            raise StateUnavailable(f"session state in Redis unavailable: {type(exc).__name__}: {exc}") from None

    async def close(self) -> None:
        await self.waiting.close()
        await self.redis.aclose()
