"""``--record FILE``: one row per step in kvbudget's trace JSONL (docs/traces.md), never prompt text.

A session's rows are in the order its requests arrived, whatever order they finish in: kvbudget's trace reader
requires a session's ``step`` to increase and its ``start_s`` (when the step's request was sent) never to go back
(workload/traces/kvbudget_jsonl.py), and ``new_tokens`` is this step's prompt minus the previous step's context, so
the previous step must be the one that started before it. A request takes its place in its session when it is
admitted (``begin``, ordered by its arrival) and fills it when it completes (``finish``) or gives it up (``drop``:
an upstream failure, an error before the answer: no row). A row is written once every step that started before it
has been written or given up and the session's next step has started: its ``pause_s`` is then known, the next
step's start minus this step's end, 0 where the two requests overlapped (the client sent the next one before this
one was answered). The last step's row waits for the next request or the session's end (no pause then; and for
every resident session when the gateway stops). With ``--state redis`` (``shared``) the same rule runs in Redis,
in the admission script, for the requests of every replica (ledger.py): a request's place is taken there at its
admission and marked at its end, and each replica writes the rows its script calls made writable (``write``), so a
session's rows are spread over the replicas' files with distinct steps in start order.

Rows carry the session id hashed with a salt of this gateway process (with ``--state redis``, one salt kept in
Redis for every replica and restart; one id, one hash, within a recording; ids cannot be recovered), ``start_s`` on
the Unix clock, ``prompt_tokens`` (as the engine reported them, else as counted), ``output_tokens``,
``cached_tokens`` (the engine's prefix-cache hits), ``new_tokens``, and, where the cap acted, ``cap`` ("refused",
"truncated" or "compacted") with ``dropped_tokens``; ``kvbudget trace stats`` reads the file unchanged (it
ignores the two extra keys). A refused step is recorded too (0 output tokens): it is the demand the cap turned away.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kvbudget.gateway.admission import Session

KEY = "record"  # in Session.state: step, context, pending (gateway/carried.py carries it through Redis)
OPEN = "record-open"  # in Session.state: this replica's steps not yet written, in start order (not carried)


@dataclass(eq=False)
class Place:
    """A step's place in its session's record: its start, then its end and counts once its request completes."""

    start_s: float
    end_s: float | None = None
    counts: dict[str, Any] = field(default_factory=dict)
    id: int | None = None  # with --state redis: its place in Redis (ledger.py), taken at admission

    def __lt__(self, other: Place) -> bool:  # bisect orders the places by start
        return self.start_s < other.start_s


class Recorder:
    def __init__(self, path: Path, salt: str | None = None) -> None:
        self.path = path
        self.salt = salt or secrets.token_hex(16)  # with --state redis: one salt kept in Redis for every replica
        self._file: IO[str] = path.open("a", encoding="utf-8")
        self.shared = False  # --state redis: the sessions' places are kept in Redis (ledger.py), not here

    def hashed(self, session_id: str) -> str:
        return hashlib.sha256((self.salt + session_id).encode()).hexdigest()[:16]

    def begin(self, session: Session, start_s: float) -> Place:
        """A request of ``session`` admitted: its place, in start order; the previous step's pause is now known."""
        place = Place(start_s)
        self.enter(session, place)
        return place

    def enter(self, session: Session, place: Place) -> None:
        """A request of ``session`` admitted with ``place`` (its arrival): in memory, its place among the session's
        open steps; with ``shared``, the shared state placed it at admission (or could not: no row)."""
        if self.shared:
            return
        state = _state(session)
        # a request that waited in admission past a whole later request of its session starts no earlier than the
        # row numbered before it, so a session's times never go back
        place.start_s = max(place.start_s, state.get("start_s", place.start_s))
        pending = state["pending"]
        if pending is not None:  # the row waiting for the next start: this is it (no other step is open)
            row, ended = pending
            row["pause_s"] = round(max(0.0, place.start_s - ended), 6)
            self._write(row)
            state["pending"] = None
        bisect.insort_right(_open(session), place)

    def finish(
        self,
        session: Session,
        place: Place,
        *,
        end_s: float,
        prompt_tokens: int,
        output_tokens: int,
        cached_tokens: int | None,
        cap: str | None = None,
        dropped_tokens: int = 0,
    ) -> None:
        """The request completed: its row is written once the steps before it are and the next has started."""
        place.end_s = end_s
        place.counts = {"prompt_tokens": prompt_tokens, "output_tokens": output_tokens, "cached_tokens": cached_tokens,
                        "cap": cap, "dropped_tokens": dropped_tokens}  # fmt: skip
        if not self.shared:  # shared: the replica's release marks it in Redis (shared.py)
            self._advance(session)

    def drop(self, session: Session, place: Place) -> None:
        """The request gave up its place (no row: it failed, or was answered with an error); idempotent."""
        places = session.state.get(OPEN)
        if not self.shared and place.end_s is None and isinstance(places, list) and place in places:
            places.remove(place)
            self._advance(session)

    def step(self, session: Session, *, start_s: float, end_s: float, **counts: Any) -> None:
        """A step begun and finished at once (a session with one request at a time)."""
        self.finish(session, self.begin(session, start_s), end_s=end_s, **counts)

    def end(self, session: Session) -> None:
        """The session ended (or the gateway stops): its completed rows are written, the last without a pause."""
        places = _open(session)
        places[:] = [place for place in places if place.end_s is not None]  # any still running never will here
        self._advance(session)
        state = session.state.get(KEY)
        if isinstance(state, dict) and state["pending"] is not None:
            self._write(state["pending"][0])
            state["pending"] = None

    def _advance(self, session: Session) -> None:
        """Number the completed steps at the head, in start order; write each that has a next step started."""
        state, places = _state(session), _open(session)
        while places and places[0].end_s is not None:
            place = places.pop(0)
            row = self._row(session, state, place)
            if places:  # the next step by start has begun: the pause is known
                row["pause_s"] = round(max(0.0, places[0].start_s - (place.end_s or 0.0)), 6)
                self._write(row)
            else:
                state["pending"] = [row, place.end_s]  # a list: it reads back the same from JSON (carried.py)
        if not places:
            session.state.pop(OPEN, None)  # nothing open: a resident session between its steps holds no list

    def _row(self, session: Session, state: dict[str, Any], place: Place) -> dict[str, object]:
        counts = place.counts
        prompt, output, cached = counts["prompt_tokens"], counts["output_tokens"], counts["cached_tokens"]
        row: dict[str, object] = {
            "session": self.hashed(session.id),
            "step": state["step"],
            "start_s": round(place.start_s, 6),
            "prompt_tokens": prompt,
            "output_tokens": output,
            "new_tokens": prompt if state["context"] is None else prompt - state["context"],
        }
        if cached is not None:
            row["cached_tokens"] = min(cached, prompt)
        if counts["cap"] is not None:
            row["cap"] = counts["cap"]
            row["dropped_tokens"] = counts["dropped_tokens"]
        state["step"] += 1
        state["context"] = prompt + output
        state["start_s"] = row["start_s"]
        return row

    def write(self, items: list[dict[str, Any]]) -> None:
        """Rows the shared state made writable (ledger.py): a session's step with its neighbours' start (``next``:
        the pause is known) or without, or a previous version's carried row (``row``)."""
        for item in items:
            if isinstance(item.get("row"), dict):
                row = dict(item["row"])
            else:
                prompt, extras = int(item["p"]), json.loads(item["x"])
                row = {"session": self.hashed(str(item["sid"])), "step": int(item["step"]),
                       "start_s": round(float(item["s"]), 6), "prompt_tokens": prompt,
                       "output_tokens": int(item["o"]), "new_tokens": int(item["new"])}  # fmt: skip
                if extras["cached"] is not None:
                    row["cached_tokens"] = min(int(extras["cached"]), prompt)
                if extras["cap"] is not None:
                    row["cap"] = extras["cap"]
                    row["dropped_tokens"] = extras["dropped"]
            if "next" in item:
                row["pause_s"] = round(max(0.0, float(item["next"]) - float(item["e"])), 6)
            self._write(row)

    def _write(self, row: dict[str, object]) -> None:
        self._file.write(json.dumps(row, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _state(session: Session) -> dict[str, Any]:
    state = session.state.setdefault(KEY, {"step": 0, "context": None, "pending": None})
    assert isinstance(state, dict)
    return state


def _open(session: Session) -> list[Place]:
    places = session.state.setdefault(OPEN, [])
    assert isinstance(places, list)
    return places
