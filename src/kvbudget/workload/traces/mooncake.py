"""Mooncake FAST'25 request traces and AIPerf's ``mooncake_trace`` session extension (JSONL).

Plain Mooncake rows (kvcache-ai/Mooncake FAST25-release/traces; tests/data/traces/README.md):
``timestamp`` (ms), ``input_length`` (the **whole prompt**), ``output_length``, ``hash_ids`` (one id
per 512-token block of the whole prompt, the last block partial: len == ceil(input_length / 512)).
There is no session id, so **each row is its own one-step session** ``<file>:<line>``. Sessions are
not rebuilt from shared hash prefixes: a shared prefix is also what different conversations with one
system prompt or document look like, so the guess cannot be checked, and every replay tool
(AIPerf, GuideLLM, SGLang bench_serving) sends these rows as independent requests. The hash ids are
kept, so a prefix cache still sees the reuse across requests. They are comparable only within one file.

AIPerf session rows (ai-dynamo/aiperf docs/benchmark-modes/trace-replay.md; README "Semantics"):
rows with ``session_id`` form a session in file order. The first turn carries ``timestamp`` (ms);
later turns carry ``delay`` (ms of think time after the previous response) and an **incremental**
``input_length`` / ``hash_ids`` covering only the new tokens. AIPerf replays them with the live
response threaded into the history (context mode ``deltas_without_responses``), so
prompt[k] = prompt[k-1] + output[k-1] + input_length[k] and ``new_tokens`` = input_length[k].
A later turn's start is the previous start + delay (its own ``timestamp`` when given): the trace
has no service times, so these start times assume zero service time. Later turns' hash ids cover
only the new tokens, not the whole prompt, so they are not kept (``block_hashes`` is the whole
prompt's blocks or nothing).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from kvbudget.workload.record import BadRow, StepRecord
from kvbudget.workload.traces._common import (
    MAX_COUNT,
    BadSink,
    PauseBuffer,
    Pending,
    RowError,
    bool_free,
    hashes,
    int_list,
    json_lines,
    optional_number,
    text,
    whole,
)

BLOCK = 512  # Mooncake FAST'25 hash block size (README "Semantics"; aiperf analyze-trace --block-size default)


def read(path: Path, bad: BadSink) -> Iterator[StepRecord]:
    source = f"mooncake:{path.name}"
    name = path.name
    buffer = PauseBuffer()
    for line, row, raw in json_lines(path, bad):
        if "session_id" not in row:
            # The common plain row, checked at once (every other shape takes the checked path below):
            # whole-number counts in range, an integer timestamp >= 0, a list of integer ids or none
            # (checked in bulk where the line holds no JSON true/false: a plain row has no 'r' or 'f').
            prompt, output = row.get("input_length"), row.get("output_length")
            stamp, ids = row.get("timestamp"), row.get("hash_ids")
            if (
                type(prompt) is int
                and type(output) is int
                and type(stamp) is int
                and 0 <= prompt <= MAX_COUNT
                and 0 <= output <= MAX_COUNT
                and stamp >= 0
                and (ids is None or (type(ids) is list and int_list(ids, bools=not bool_free(raw))))
            ):
                blocks = tuple(ids) if ids else ()
                yield StepRecord(  # positional, in field order: a keyword call costs 2.5 times as much
                    f"{name}:{line}",  # session
                    0,  # step
                    stamp / 1000,  # start_s
                    prompt,  # prompt_tokens
                    output,  # output_tokens
                    None,  # parent
                    prompt,  # new_tokens
                    None,  # cached_tokens
                    None,  # pause_s
                    blocks,  # block_hashes
                    BLOCK if blocks else None,  # block_size
                    source,
                    True,  # final: its own one-step session
                )
                continue
        try:
            if "session_id" in row:
                done = _session_turn(row, buffer, source)
                if done is not None:
                    yield done
                continue
            yield _request(row, f"{path.name}:{line}", source, bools=not bool_free(raw))
        except RowError as exc:
            bad(BadRow(str(path), line, str(exc)))
    yield from buffer.flush()


def _request(row: dict[str, object], session: str, source: str, *, bools: bool) -> StepRecord:
    if "input_length" not in row and "messages" in row:
        raise RowError("a 'messages' row has no token counts ('input_length'); kvbudget does not tokenize")
    prompt = whole(row, "input_length")
    start = optional_number(row, "timestamp")
    if start is None:
        raise RowError("'timestamp' is missing (a row without 'session_id' is a one-step session at its timestamp)")
    blocks = hashes(row, bools=bools)
    return StepRecord(
        session=session,
        step=0,
        start_s=start / 1000,
        prompt_tokens=prompt,
        output_tokens=whole(row, "output_length"),
        new_tokens=prompt,
        block_hashes=blocks,
        block_size=BLOCK if blocks else None,
        source=source,
        final=True,  # its own one-step session: nothing follows it
    )


def _session_turn(row: dict[str, object], buffer: PauseBuffer, source: str) -> StepRecord | None:
    session = text(row, "session_id")
    if "input_length" not in row and "messages" in row:
        raise RowError("a 'messages' row has no token counts ('input_length'); kvbudget does not tokenize")
    appended = whole(row, "input_length")
    output = whole(row, "output_length")
    stamp = optional_number(row, "timestamp")
    delay = optional_number(row, "delay")
    blocks = hashes(row)
    previous = buffer.last(session)
    if previous is None:  # turn 0: the whole prompt, at its timestamp
        record = StepRecord(
            session=session,
            step=0,
            start_s=(stamp or 0.0) / 1000,
            prompt_tokens=appended,
            output_tokens=output,
            new_tokens=appended,
            block_hashes=blocks,
            block_size=BLOCK if blocks else None,
            source=source,
        )
        return buffer.push(Pending(record), None)
    last = previous.record
    start = stamp / 1000 if stamp is not None else last.start_s + (delay or 0.0) / 1000
    if start < last.start_s:
        raise RowError(
            f"turn starts at {start:g} s, before the previous turn of session {session} ({last.start_s:g} s)"
        )
    pause = (delay / 1000) if delay is not None else round(start - last.start_s, 6)
    record = StepRecord(
        session=session,
        step=last.step + 1,
        start_s=start,
        prompt_tokens=last.prompt_tokens + last.output_tokens + appended,
        output_tokens=output,
        new_tokens=appended,
        source=source,
    )
    return buffer.push(Pending(record), pause)
