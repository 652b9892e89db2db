"""What a session carries between its steps (``Session.state``), as JSON for the shared state in Redis.

Two things: the compaction summary (``compact.KEY``: a ``compact.Memory``) and the recorder's place in the session
(``records`` state: the step number, the context so far and the row waiting for its ``pause_s``). With
``--state redis://`` they are written with each request's end and read back with the next request's entry, on
whichever replica serves it, so a summary is reused and a recorded session keeps its step numbers across replicas
and a gateway restart. Anything else in the state is not carried; a value that does not read back is dropped
(the session then summarises again, or starts its record afresh), never an error.
"""

from __future__ import annotations

import json
from typing import Any

from kvbudget.gateway import compact
from kvbudget.gateway.records import KEY as RECORD


def encode(state: dict[str, object]) -> str:
    """The carried part of ``state`` as compact JSON ("{}" when there is none)."""
    out: dict[str, Any] = {}
    memory = state.get(compact.KEY)
    if isinstance(memory, compact.Memory):
        out[compact.KEY] = {"covered": memory.covered, "digest": memory.digest, "summary": memory.summary}
    record = state.get(RECORD)
    if isinstance(record, dict):
        out[RECORD] = record
    return json.dumps(out, separators=(",", ":"))


def decode(text: str) -> dict[str, object]:
    """The state ``encode`` wrote; an empty or unreadable text is an empty state."""
    try:
        doc = json.loads(text) if text else {}
    except (ValueError, RecursionError):
        return {}
    state: dict[str, object] = {}
    if not isinstance(doc, dict):
        return state
    memory = doc.get(compact.KEY)
    if isinstance(memory, dict):
        covered, digest, summary = memory.get("covered"), memory.get("digest"), memory.get("summary")
        if isinstance(covered, int) and isinstance(digest, str) and isinstance(summary, str):
            state[compact.KEY] = compact.Memory(covered, digest, summary)
    record = doc.get(RECORD)
    if isinstance(record, dict) and isinstance(record.get("step"), int):
        pending = record.get("pending")
        if pending is None or (isinstance(pending, list) and len(pending) == 2 and isinstance(pending[0], dict)):
            kept: dict[str, object] = {"step": record["step"], "context": record.get("context"), "pending": pending}
            if isinstance(record.get("start_s"), (int, float)):  # the last numbered row's start (records.py)
                kept["start_s"] = record["start_s"]
            state[RECORD] = kept
    return state
