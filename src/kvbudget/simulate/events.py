"""The event clock: a heap of (time, sequence number, kind, session) with deterministic tie-breaks.

Two events at the same time run in the order they were scheduled (the sequence number), never by
comparing sessions, so a run is a pure function of its inputs. Decode completions are not heap
events: each replica's ``DecodeBatch`` says when its next one falls (see batch.py).
"""

from __future__ import annotations

import heapq
import itertools

from kvbudget.simulate.session import Session

ARRIVAL, PAUSE_END, SWAP_DONE = range(3)

Event = tuple[float, int, int, Session | None, int]


class EventQueue:
    __slots__ = ("heap", "seq")

    def __init__(self) -> None:
        self.heap: list[Event] = []
        self.seq = itertools.count()

    def push(self, t: float, kind: int, session: Session | None, version: int = 0) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), kind, session, version))

    def pop(self) -> Event:
        return heapq.heappop(self.heap)

    def __len__(self) -> int:
        return len(self.heap)
