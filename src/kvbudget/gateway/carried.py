"""What a session carries between its steps (``Session.state``), as JSON for the shared state in Redis.

The compaction summary (``compact.KEY``: a ``compact.Memory``): with ``--state redis://`` it is written with each
request's end and read back with the next request's entry, on whichever replica serves it, so a summary is reused
across replicas and a gateway restart. Anything else in the state is not carried; a value that does not read back
is dropped (the session then summarises again), never an error.

The recorder's place in the session (its step number, context and the row waiting for its pause) was carried here
too until a session's steps were ordered in Redis itself (ledger.py); ``old_pending`` reads that row from a state a
previous version wrote (the step number and context are read by the script: ledger.py ``fresh``).
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
    return state


def old_pending(text: str) -> tuple[dict[str, object], float] | None:
    """The row a previous version's carried record kept waiting for the next step's start, and its end."""
    try:
        doc = json.loads(text) if text else {}
    except (ValueError, RecursionError):
        return None
    record = doc.get(RECORD) if isinstance(doc, dict) else None
    pending = record.get("pending") if isinstance(record, dict) else None
    if not (isinstance(pending, list) and len(pending) == 2 and isinstance(pending[0], dict)):
        return None
    ended = pending[1]
    return (pending[0], float(ended)) if isinstance(ended, (int, float)) and not isinstance(ended, bool) else None


def rows(text: str) -> list[dict[str, Any]]:
    """The rows a script call made writable (ledger.py), as JSON objects; anything else is none."""
    try:
        items = json.loads(text) if text else []
    except (ValueError, RecursionError):
        return []
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []
