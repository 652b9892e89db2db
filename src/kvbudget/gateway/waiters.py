"""The new sessions one gateway replica has waiting in the shared queue (``--state redis``, gateway/shared.py): the
replica polls Redis for them every ``POLL_S`` (at once after a local slot frees), grants each the upstream the poll
found with the requests the poll counted in flight, and returns the count of those that gave up meanwhile. Each
waiter's heartbeat is the poll itself: a waiter not polled for (its replica died) leaves the queue (atomic.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from kvbudget.gateway.admission import Session, Waiter
from kvbudget.gateway.redis_link import StateUnavailable

POLL_S = 0.05  # a replica with waiting sessions asks for free slots this often (and at once when one frees)

Call = Callable[..., Awaitable[Any]]  # SharedAdmission._call: one script call (op, session id, ids)
Take = Callable[[str, str, int], Session]  # SharedAdmission._take: a granted session, its requests in flight here


class Waiters:
    """This replica's waiters (session id -> Waiter), its poll task and the background calls it leaves running."""

    def __init__(self, call: Call, take: Take) -> None:
        self._call, self._take = call, take
        self.waiters: dict[str, Waiter] = {}
        self.poller: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    def background(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def give_up(self, session_id: str, waiter: Waiter) -> None:
        waiter.requests -= 1
        if waiter.requests == 0 and self.waiters.get(session_id) is waiter and not waiter.future.done():
            del self.waiters[session_id]
            waiter.future.cancel()
            self.background(self._call("give_up", session_id))

    async def close(self) -> None:
        if self.poller is not None:
            self.poller.cancel()
        await asyncio.gather(*self._tasks, *([self.poller] if self.poller else []), return_exceptions=True)

    async def drop(self, session_id: str, requests: int) -> None:
        """Requests counted in flight by a poll that no longer run (their clients gave up meanwhile); a session
        granted to requests that all gave up leaves its slot (nothing of it ran)."""
        with contextlib.suppress(StateUnavailable):
            await self._call("drop", session_id, ids=[str(requests)])
        self.poll_soon()

    def poll_soon(self) -> None:
        if self._wake is not None:
            self._wake.set()
        if self.waiters and (self.poller is None or self.poller.done()):
            self._wake = asyncio.Event()
            self.poller = asyncio.ensure_future(self._poll())

    async def _poll(self) -> None:
        assert self._wake is not None
        while self.waiters:
            self._wake.clear()
            ids = list(self.waiters)
            sent = {session_id: self.waiters[session_id].requests for session_id in ids}
            try:
                found = await self._call("poll", ids=[str(x) for pair in sent.items() for x in pair])
            except StateUnavailable as exc:
                for waiter in self.waiters.values():
                    if not waiter.future.done():
                        waiter.future.set_exception(exc)
                self.waiters.clear()
                return
            for session_id, upstream in zip(ids, found, strict=True):
                granted = self.waiters.get(session_id)
                if not upstream:
                    continue
                counted = sent[session_id]  # the poll counted these requests in flight
                if granted is None:  # all its requests gave up while the poll ran: they return their count
                    self.background(self.drop(session_id, counted))
                    continue
                del self.waiters[session_id]
                if granted.requests < counted:  # some gave up while the poll ran
                    self.background(self.drop(session_id, counted - granted.requests))
                    counted = granted.requests
                granted.counted = counted  # a request that joined during the poll enters by itself (wait)
                granted.future.set_result(self._take(session_id, upstream, counted))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL_S)
