"""TraceLab round traces (uw-syfi/TraceLab; JSONL, one row per LLM round of a real coding agent).

Fields (tests/data/traces/README.md; TraceLab docs/prompt_cache_accounting.md): ``session_id``,
``round_index``, ``input_tokens_total = prefix_tokens + newly_append_tokens`` (the whole prompt as the
engine reported it; ``prefix_tokens`` is the cache read), ``output_tokens``, ``tools[]`` with
``tool_wall_latency_ms``, and ``timing_events[]`` with ISO ``timestamp`` and ``event_type``: the round
receives ``user_message`` / ``tool_result`` and emits ``reasoning``, ``text``, ``tool_call`` and
(Codex) ``usage_report``. Without an event type, a Claude Code ``source`` of ``user.*`` marks an input.

Mapping to StepRecord:

* session = ``session_id``; steps are the rows of a session in file order, which must follow
  ``round_index`` (a row that goes backwards is a bad row); ``step`` counts 0, 1, 2 ... even where
  round indexes skip;
* ``cached_tokens`` = ``prefix_tokens``; ``new_tokens`` = prompt[t] - prompt[t-1] - output[t-1]
  (the kvbudget meaning, tokens appended since the previous call; it differs from
  ``newly_append_tokens``, which counts cache misses);
* the round starts at its last input event (the request leaves when the last tool result or user
  message is in; AIPerf's TraceLab loader also derives a submission time from ``timing_events``) or
  at its first event when it has no input event; it ends at its last emitted event;
* ``pause_s`` = next start - this end (tool time and user think time), clipped at 0; when the round
  has no output event the longest ``tool_wall_latency_ms`` stands in (tools may run in parallel).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from kvbudget.workload.record import BadRow, StepRecord
from kvbudget.workload.traces._common import (
    BadSink,
    PauseBuffer,
    Pending,
    RowError,
    check_not_earlier,
    gap,
    json_lines,
    optional_number,
    optional_whole,
    parse_time,
    text,
    whole,
)

_INPUT_EVENTS = {
    "user_message",
    "tool_result",
}  # what a round receives; reasoning, text, tool_call, usage_report it emits


def read(path: Path, bad: BadSink) -> Iterator[StepRecord]:
    source = f"tracelab:{path.name}"
    buffer = PauseBuffer()
    for line, row, _ in json_lines(path, bad):
        try:
            session = text(row, "session_id")
            order = whole(row, "round_index")
            prompt = _prompt(row)
            output = whole(row, "output_tokens")
            cached = optional_whole(row, "prefix_tokens")
            start, end = _times(row)
            latency = _tool_latency(row)
            previous = buffer.last(session)
            if previous is not None and order <= previous.order:
                raise RowError(
                    f"round_index {order} comes after round {previous.order} of session {session}; "
                    "rows of a session must be in round order"
                )
            if previous is not None:
                check_not_earlier(start, previous.record.start_s, session)
        except RowError as exc:
            bad(BadRow(str(path), line, str(exc)))
            continue
        pause = None
        if previous is None:
            step, new = 0, prompt
        else:
            last = previous.record
            step, new = last.step + 1, prompt - last.prompt_tokens - last.output_tokens
            pause = gap(start, previous.end_s) if previous.end_s is not None else previous.fallback_pause
        record = StepRecord(
            session=session,
            step=step,
            start_s=start,
            prompt_tokens=prompt,
            output_tokens=output,
            new_tokens=new,
            cached_tokens=cached,
            source=source,
        )
        done = buffer.push(Pending(record, end_s=end, fallback_pause=latency, order=order), pause)
        if done is not None:
            yield done
    yield from buffer.flush()


def _prompt(row: dict[str, object]) -> int:
    total = optional_whole(row, "input_tokens_total")
    if total is not None:
        return total
    prefix, appended = optional_whole(row, "prefix_tokens"), optional_whole(row, "newly_append_tokens")
    if prefix is None or appended is None:
        raise RowError("'input_tokens_total' is missing (and not both of 'prefix_tokens', 'newly_append_tokens')")
    return prefix + appended


def _times(row: dict[str, object]) -> tuple[float, float | None]:
    """(start, end) of the round in Unix seconds; a round without any timestamp is a bad row."""
    events = row.get("timing_events")
    if not isinstance(events, list):
        raise RowError("'timing_events' must be a list of events with timestamps")
    inputs: list[float] = []
    outputs: list[float] = []
    every: list[float] = []
    for i, event in enumerate(events):
        if not isinstance(event, dict) or event.get("timestamp") is None:
            continue
        moment = parse_time(event["timestamp"], f"timing_events[{i}].timestamp")
        every.append(moment)
        kind, origin = event.get("event_type"), event.get("source")
        if isinstance(kind, str) and kind:
            (inputs if kind in _INPUT_EVENTS else outputs).append(moment)
        else:  # no event type: Claude Code sources say who wrote the event (user.* / assistant.*)
            (inputs if isinstance(origin, str) and origin.startswith("user.") else outputs).append(moment)
    if not every:
        raise RowError("no timestamp in 'timing_events'; the round cannot be placed in time")
    start = max(inputs) if inputs else min(every)
    return start, (max(outputs) if outputs else None)


def _tool_latency(row: dict[str, object]) -> float | None:
    tools = row.get("tools")
    if not isinstance(tools, list):
        return None
    latencies = [optional_number(tool, "tool_wall_latency_ms") for tool in tools if isinstance(tool, dict)]
    known = [ms for ms in latencies if ms is not None]
    return max(known) / 1000 if known else None
