"""Independent figures from the raw shipped traces, with plain json/csv code (no kvbudget reader).

Each function follows the documented semantics (tests/data/traces/README.md and the format's
own docs) directly on the files, so the readers and statistics are checked against a second,
separate reading of the same data.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from datetime import datetime, timezone
from itertools import pairwise
from pathlib import Path
from typing import Any

TRACES = Path(__file__).parents[1] / "data" / "traces"
WEKA = sorted((TRACES / "weka_kv_cache_tester").glob("trace_*.json"))
MOONCAKE = sorted((TRACES / "mooncake_fast25").glob("*.jsonl"))
AZURE = sorted((TRACES / "azure_llm_2023").glob("*.csv"))
TRACELAB = TRACES / "tracelab_example" / "round_trace.sanitized.jsonl"
OTEL = sorted((TRACES / "inference_perf_otel_examples").glob("*.json"))


def nearest_rank(values: Sequence[float], p: float) -> float:
    """The value at rank ceil(p/100 * n) of the sorted values."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p * len(ordered) / 100)) - 1]


def summary(values: Sequence[float]) -> dict[str, float]:
    return {
        "p50": nearest_rank(values, 50),
        "p90": nearest_rank(values, 90),
        "p99": nearest_rank(values, 99),
        "max": max(values),
    }


def weka_sessions(path: Path) -> dict[str, list[dict[str, Any]]]:
    """Session name -> its requests, sub-agents (type "subagent", nested requests) as sessions of their own."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    out: dict[str, list[dict[str, Any]]] = {}

    def walk(requests: list[dict[str, Any]], name: str) -> None:
        out.setdefault(name, [])
        for request in requests:
            if request.get("type") == "subagent":
                walk(request["requests"], f"{name}/{request['agent_id']}")
            else:
                out[name].append(request)

    walk(doc["requests"], doc["id"])
    return out


def weka_pauses(requests: list[dict[str, Any]]) -> list[float]:
    """Gap between a response (t + api_time) and the next request's t, never negative."""
    return [max(0.0, b["t"] - a["t"] - a.get("api_time", 0.0)) for a, b in pairwise(requests)]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def azure_rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def iso(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).replace(tzinfo=timezone.utc).timestamp()


def tracelab_rounds() -> dict[str, list[tuple[float, float, dict[str, Any]]]]:
    """Session -> (start, end, row): start at the last user_message/tool_result event, end at the last
    other event (the round's own output)."""
    out: dict[str, list[tuple[float, float, dict[str, Any]]]] = {}
    for row in jsonl(TRACELAB):
        events = row["timing_events"]
        received = [iso(e["timestamp"]) for e in events if e["event_type"] in ("user_message", "tool_result")]
        emitted = [iso(e["timestamp"]) for e in events if e["event_type"] not in ("user_message", "tool_result")]
        start = max(received) if received else min(iso(e["timestamp"]) for e in events)
        out.setdefault(row["session_id"], []).append((start, max(emitted), row))
    return out
