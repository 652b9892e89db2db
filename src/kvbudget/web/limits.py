"""The budget of one web request: how many heavy answers run at once, how long a client waits for one, and
how large a question the web API takes.

Heavy work (every command but ``gpus``, and reading an upload) runs in a worker thread, at most
``HEAVY_AT_ONCE`` at a time: a request that finds them all busy for ``QUEUE_SECONDS`` is answered 503 with the
reason, so a client sending many large compares delays no one else past that, and ``/api/gpus`` or the page
never waits behind them. A client is answered within ``answer_s``; past it, 503 (the thread finishes its work and
only then frees its place, so the number of threads doing work stays bounded). ``kvbudget serve`` runs each answer
in a process of its own that is killed at its budget (web/isolate.py), so there the gate's time is a backstop.
``MAX_CELLS`` bounds the product of a request's lists (a table or compare's size) before any of it is computed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from starlette.concurrency import run_in_threadpool

from kvbudget.errors import KvBudgetError

T = TypeVar("T")

HEAVY_AT_ONCE = 2
QUEUE_SECONDS = 5.0
ANSWER_SECONDS = 30.0
MAX_CELLS = 500  # rows of a compare (each a full plan, ~10 ms) or cells of a table, per web request


class Busy(KvBudgetError):
    """Over budget: the reason is the 503's message."""


class Gate:
    """At most ``slots`` heavy answers at once, each answered within ``answer_s`` or refused. Waiting for a place
    takes no thread (an asyncio semaphore), so waiting clients never hold the thread pool the others need."""

    def __init__(self, slots: int = HEAVY_AT_ONCE, queue_s: float = QUEUE_SECONDS, answer_s: float = ANSWER_SECONDS):
        self.slots = slots
        self.queue_s = queue_s
        self.answer_s = answer_s
        self._free: asyncio.Semaphore | None = None  # made in the server's event loop, on first use

    async def run(self, work: Callable[[], T], late: str | None = None) -> T:
        """``work()`` in a worker thread once a place is free; past ``answer_s``, Busy with ``late`` (the message
        that says what would answer in time) or the general one."""
        if self._free is None:
            self._free = asyncio.Semaphore(self.slots)
        free = self._free
        try:
            await asyncio.wait_for(free.acquire(), self.queue_s)
        except TimeoutError:
            raise Busy(
                f"the server is answering {self.slots} large requests already and none finished within "
                f"{self.queue_s:g} s; try again in a moment"
            ) from None
        loop = asyncio.get_running_loop()

        def bounded() -> T:
            try:
                return work()
            finally:  # the place is free when the work ends, not when the client stops waiting
                loop.call_soon_threadsafe(free.release)

        task = asyncio.ensure_future(run_in_threadpool(bounded))
        done, _ = await asyncio.wait({task}, timeout=self.answer_s)
        if task in done:
            return task.result()
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # its outcome is nobody's now
        raise Busy(
            late
            or f"the answer took longer than {self.answer_s:g} s, this server's budget per request; ask a smaller "
            "question (fewer models, GPUs, engines or contexts) or run the command line"
        )
