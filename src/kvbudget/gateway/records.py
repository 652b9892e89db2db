"""``--record FILE``: one row per step in kvbudget's trace JSONL (docs/traces.md), never prompt text.

A row is written when the session's next step starts (its ``pause_s`` is known then: the next request's
arrival minus this step's end) or when the session ends (no pause). Rows carry the session id hashed with a
salt of this gateway process (with ``--state redis``, one salt kept in Redis for every replica and restart; one
id, one hash, within a recording; ids cannot be recovered), ``start_s`` on
the Unix clock, ``prompt_tokens`` (as the engine reported them, else as counted), ``output_tokens``,
``cached_tokens`` (the engine's prefix-cache hits), ``new_tokens``, and, where the cap acted, ``cap`` ("refused",
"truncated" or "compacted") with ``dropped_tokens``; ``kvbudget trace stats`` reads the file unchanged (it
ignores the two extra keys). A refused step is recorded too (0 output tokens): it is the demand the cap turned away.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from pathlib import Path
from typing import IO

from kvbudget.gateway.admission import Session

KEY = "record"  # in Session.state (gateway/carried.py carries it through Redis)


class Recorder:
    def __init__(self, path: Path, salt: str | None = None) -> None:
        self.path = path
        self.salt = salt or secrets.token_hex(16)  # with --state redis: one salt kept in Redis for every replica
        self._file: IO[str] = path.open("a", encoding="utf-8")

    def hashed(self, session_id: str) -> str:
        return hashlib.sha256((self.salt + session_id).encode()).hexdigest()[:16]

    def step(
        self,
        session: Session,
        *,
        start_s: float,
        end_s: float,
        prompt_tokens: int,
        output_tokens: int,
        cached_tokens: int | None,
        cap: str | None = None,
        dropped_tokens: int = 0,
    ) -> None:
        state = session.state.setdefault(KEY, {"step": 0, "context": None, "pending": None})
        assert isinstance(state, dict)
        pending = state["pending"]
        if pending is not None:
            row, ended = pending
            row["pause_s"] = round(max(0.0, start_s - ended), 6)
            self._write(row)
        row = {
            "session": self.hashed(session.id),
            "step": state["step"],
            "start_s": round(start_s, 6),
            "prompt_tokens": prompt_tokens,
            "output_tokens": output_tokens,
            "new_tokens": prompt_tokens if state["context"] is None else prompt_tokens - state["context"],
        }
        if cached_tokens is not None:
            row["cached_tokens"] = min(cached_tokens, prompt_tokens)
        if cap is not None:
            row["cap"] = cap
            row["dropped_tokens"] = dropped_tokens
        state["step"] += 1
        state["context"] = prompt_tokens + output_tokens
        state["pending"] = [row, end_s]  # a list: it reads back the same from JSON (carried.py)

    def end(self, session: Session) -> None:
        """The session ended: its last step has no pause after it."""
        state = session.state.get(KEY)
        if isinstance(state, dict) and state["pending"] is not None:
            self._write(state["pending"][0])
            state["pending"] = None

    def _write(self, row: dict[str, object]) -> None:
        self._file.write(json.dumps(row, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()
