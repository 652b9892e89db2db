"""Sessions for the simulator: generated from a ``Workload``, or replayed from trace records.

``generate_sessions`` is lazy and in arrival order. Arrivals come from one generator seeded by
``seed`` (Poisson: exponential gaps of mean 1/rate, drawn ``BLOCK`` at a time) or from a trace's
session starts. Session content is drawn a block of ``BLOCK`` sessions at a time, vectorised
(numpy, draws.py): block *b* (sessions ``b * BLOCK`` to ``(b + 1) * BLOCK - 1``) has its own
generator seeded by ``(seed, b)`` and draws every step count, prompt, append, output and pause of
its sessions in one call per quantity. So session *i*'s steps depend only on ``(seed, i)``: never
on how far other sessions were consumed, on ``count`` or on ``duration_s``. A block is drawn when
its first session is yielded; memory is bounded by the live sessions' steps plus one block.

``replay_sessions`` turns per-step trace records into sessions; it must see a whole trace before
it knows every session's steps, so it holds the records (memory: the trace's size).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import count as counter

from kvbudget.errors import InputError
from kvbudget.workload.draws import draw, draw_int, generator
from kvbudget.workload.model import Arrival, Workload
from kvbudget.workload.record import SessionPlan, Step, StepRecord, StepRows

BLOCK = 1024  # sessions drawn together; part of the stream's definition (changing it changes every session)


def block_label(seed: int, block: int) -> str:
    """The seed label of block ``block``'s generator (hashed with SHA-256, draws.generator)."""
    return f"kvbudget/sessions/{seed}/{block}"


@dataclass(frozen=True, slots=True)
class _Block:
    """One block's steps as flat columns; session ``k`` of the block owns ``[starts[k], ends[k])``."""

    appends: list[int]
    outputs: list[int]
    pauses: list[float]
    starts: list[int]
    ends: list[int]

    def steps(self, k: int) -> StepRows:
        a, b = self.starts[k], self.ends[k]
        return StepRows(self.appends[a:b], self.outputs[a:b], self.pauses[a:b])


def _draw_block(workload: Workload, seed: int, block: int) -> _Block:
    """Every step of the block's ``BLOCK`` sessions, one vectorised draw per quantity.

    Step 0 appends the first prompt (after the shared prefix); later steps append ``append_tokens``.
    Every step but the last pauses for tool latency + think time."""
    import numpy as np

    w = workload
    rng = generator(block_label(seed, block))
    counts = draw_int(w.steps, rng, BLOCK)
    total = int(counts.sum())
    first = draw_int(w.first_prompt_tokens, rng, BLOCK)
    appends = draw_int(w.append_tokens, rng, total)
    outputs = draw_int(w.output_tokens, rng, total)
    pauses = draw(w.tool_latency_s, rng, total) + draw(w.think_time_s, rng, total)
    ends = np.cumsum(counts)
    starts = ends - counts
    appends[starts] = first
    pauses[ends - 1] = 0.0
    return _Block(appends.tolist(), outputs.tolist(), pauses.tolist(), starts.tolist(), ends.tolist())


_last_block: list[tuple[Workload, int, int, _Block]] = []  # session_steps' one-block memo


def session_steps(workload: Workload, seed: int, index: int) -> StepRows:
    """The steps of session ``index`` under ``seed`` alone: the same steps ``generate_sessions``
    gives that session. Its block is drawn (and the last block drawn kept, so a caller asking for
    sessions one by one, as the load test does, draws each block once)."""
    block = index // BLOCK
    last = _last_block[0] if _last_block else None
    if last is None or last[0] is not workload or last[1:3] != (seed, block):
        last = (workload, seed, block, _draw_block(workload, seed, block))
        _last_block[:] = [last]
    return last[3].steps(index % BLOCK)


def _poisson_arrivals(rate_per_s: float, seed: int) -> Iterator[float]:
    # A Poisson process: independent exponential gaps of mean 1/rate, summed in order.
    import numpy as np

    rng = generator(f"kvbudget/arrivals/{seed}")
    t = 0.0
    while True:
        times = np.cumsum(rng.exponential(1.0 / rate_per_s, BLOCK))
        times += t
        yield from times.tolist()
        t = float(times[-1])


def replay_arrival_times(arrival: Arrival) -> list[float]:
    """Session start times of the trace named in ``[arrival].replay``, sorted, shifted to start at 0.

    Every session counts, sub-agents included (each holds a cache of its own)."""
    if arrival.replay is None:
        raise InputError("the workload's arrivals are Poisson, not replayed from a trace")
    from kvbudget.workload.traces import read_records

    starts: dict[str, float] = {}
    for rec in read_records([arrival.replay], fmt=arrival.format):
        if rec.session not in starts or rec.start_s < starts[rec.session]:
            starts[rec.session] = rec.start_s
    if not starts:
        raise InputError(f"{arrival.replay}: the trace has no sessions to replay arrivals from")
    times = sorted(starts.values())
    return [t - times[0] for t in times]


def generate_sessions(
    workload: Workload, *, seed: int, count: int | None = None, duration_s: float | None = None
) -> Iterator[SessionPlan]:
    """Sessions of ``workload`` in arrival order, deterministic for ``seed``.

    Stops after ``count`` sessions or at the first arrival after ``duration_s`` seconds, whichever
    comes first; with neither, Poisson arrivals never stop (the caller stops consuming) and replayed
    arrivals stop at the trace's last session. Session ids are ``s0``, ``s1``, ..."""
    if count is not None and count < 0:
        raise InputError(f"count must not be negative, got {count}")
    if duration_s is not None and not duration_s > 0:
        raise InputError(f"duration_s must be positive, got {duration_s}")
    if workload.arrival.rate_per_s is not None:
        times: Iterable[float] = _poisson_arrivals(workload.arrival.rate_per_s, seed)
    else:
        times = replay_arrival_times(workload.arrival)
    return _sessions(workload, seed, count, duration_s, times)  # checked now, generated lazily


def _sessions(
    workload: Workload, seed: int, count: int | None, duration_s: float | None, times: Iterable[float]
) -> Iterator[SessionPlan]:
    prefix = workload.prefix_tokens
    block: _Block | None = None
    for index, t in zip(counter(), times):
        if (count is not None and index >= count) or (duration_s is not None and t > duration_s):
            return
        k = index % BLOCK
        if k == 0 or block is None:
            block = _draw_block(workload, seed, index // BLOCK)
        yield SessionPlan(session_id=f"s{index}", arrival_s=t, steps=block.steps(k), prefix_tokens=prefix)


@dataclass(frozen=True, slots=True)
class _Replayed:
    arrival_s: float
    session: str
    parent: str | None
    records: tuple[StepRecord, ...]


def replay_steps(records: Iterable[StepRecord]) -> Iterator[Step]:
    """One session's records (in step order) as simulator steps.

    The prompt is authoritative for the context the engine must hold. Step 0 appends its whole
    prompt. Step t appends ``new_tokens`` when the trace gives it, else the growth of the prompt
    over the previous context (previous prompt + previous output). What the new prompt keeps of
    the old context is ``kept = prompt - appended``; when that is less than the previous context:

    * ``kept`` below the previous *prompt*: the client rewrote its history (compaction, summary,
      dropped turns). The step carries ``compact_to = kept`` and the simulator cuts the context
      there (re-prefilling it) before appending. Without ``new_tokens`` a shrinking prompt is a
      compaction to the whole new prompt with nothing appended.
    * ``kept`` between the previous prompt and the previous context: the new prompt extends the
      old one but drops part of the previous output (clients strip thinking blocks from history;
      most WEKA steps with a negative growth are this, by tens to hundreds of tokens). That is not
      a compaction: the replayed context runs ahead of the trace's by the dropped tokens, and the
      following appends are reduced by that amount until it is absorbed, so the context keeps
      tracking the trace's prompts without re-prefilling anything.

    A ``new_tokens`` smaller than the prompt's own growth cannot be right for the context size; the
    prompt's growth wins. Pauses are the trace's ``pause_s``; without one, the gap to the next
    step's start (an upper bound: it includes the original service time); 0 after the last step.
    """
    rows = list(records)
    ahead = 0  # tokens the replayed context holds beyond the trace's (dropped output not yet absorbed)
    for i, rec in enumerate(rows):
        compact_to: int | None = None
        if i == 0:
            appended = rec.prompt_tokens
        else:
            prev = rows[i - 1]
            context = prev.prompt_tokens + prev.output_tokens
            growth = rec.prompt_tokens - context
            appended = rec.new_tokens if rec.new_tokens is not None else max(0, growth)
            appended = max(0, min(appended, rec.prompt_tokens))
            kept = rec.prompt_tokens - appended
            if kept < prev.prompt_tokens:  # history rewritten: a compaction
                compact_to, ahead = kept, 0
            elif kept < context:  # part of the previous output dropped
                ahead += context - kept
            elif kept > context:  # new_tokens undercounts the prompt's growth
                appended = growth
            if ahead and compact_to is None:
                absorbed = min(ahead, appended)
                appended -= absorbed
                ahead -= absorbed
        if i + 1 < len(rows):
            pause = rec.pause_s if rec.pause_s is not None else max(0.0, rows[i + 1].start_s - rec.start_s)
        else:
            pause = 0.0
        yield Step(append_tokens=appended, output_tokens=rec.output_tokens, pause_s=pause, compact_to=compact_to)


def replay_sessions(records: Iterable[StepRecord]) -> Iterator[SessionPlan]:
    """Trace records grouped into sessions, sorted by arrival (the first step's start; ties by id).

    ``arrival_s`` counts from the trace's first session start (traces with epoch timestamps replay
    from 0); the steps' pauses keep the trace's own spacing.

    Sub-agents are sessions of their own with ``parent`` set. ``prefix_tokens`` is 0: a trace
    does not say which prefix is shared across sessions (block hashes, when present, do)."""
    groups: dict[str, list[StepRecord]] = {}
    for rec in records:
        groups.setdefault(rec.session, []).append(rec)
    sessions = []
    for sid, rows in groups.items():
        if len(rows) == 1:  # a one-call session (every row of an Azure trace): nothing to order or search
            first = rows[0]
            sessions.append(_Replayed(first.start_s, sid, first.parent, (first,)))
            continue
        rows.sort(key=lambda r: (r.step, r.start_s))
        parent = next((r.parent for r in rows if r.parent is not None), None)
        sessions.append(_Replayed(min(r.start_s for r in rows), sid, parent, tuple(rows)))
    groups.clear()
    sessions.sort(key=lambda s: (s.arrival_s, s.session))
    origin = sessions[0].arrival_s if sessions else 0.0
    for s in sessions:
        yield SessionPlan(
            session_id=s.session, arrival_s=s.arrival_s - origin, steps=replay_steps(s.records), parent=s.parent
        )
