"""Agent sessions as a client runs them: where they come from, and the multi-step loop.

**Source.** Sessions are generated from a workload file (``kvbudget.workload.generate.
session_steps``: session *i* under seed *s* has the same steps in the load test, the simulator and
``kvbudget simulate``) or replayed from trace files (``replay_sessions``; cycled when the run needs
more sessions than the trace has). The load test is a closed loop, so the workload's arrival
process is not used: concurrency is what the ramp sets. The shared prefix is the workload's
(``--prefix`` overrides it; for a trace it is the first ``--prefix`` tokens of each first prompt).

**Loop.** Step 0 sends the shared prefix and the first prompt; step *k* sends the previous prompt,
the previous output and the step's appended tokens, asks for the step's output tokens, then pauses
(tool latency + think time) x ``time_scale``. Before each step the client checks the cap with the
server's own counts: when the held context (the last ``prompt_tokens + completion_tokens``) plus
the appended tokens and the output would pass the cap, the workload's cap policy applies, as in
the simulator (``simulate.scheduler``): ``refuse`` ends the session there; ``compact`` /
``summarize`` cut the history to the target (the prefix kept; new text, prefilled again;
``summarize`` also generates its summary tokens in that step), or end the session when even that
does not fit.
"""

from __future__ import annotations

import asyncio
import random
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from kvbudget.errors import InputError
from kvbudget.measure.loadtest.client import Client
from kvbudget.measure.loadtest.prompts import Conversation, TextUnits
from kvbudget.measure.loadtest.record import Recorder
from kvbudget.simulate.policies import CapPolicy
from kvbudget.units import counted
from kvbudget.workload.record import SessionPlan, Step


@dataclass(frozen=True)
class Source:
    """Sessions by index: ``steps(i)`` is deterministic, so a prediction can replay the same ones."""

    describe: str
    prefix_tokens: int
    _cap: Callable[[int], CapPolicy]  # the cap policy at a serving cap, as the simulator applies it
    _steps: Callable[[int], Iterator[Step]]

    def cap(self, serving_cap: int) -> CapPolicy:
        return self._cap(serving_cap)

    def steps(self, index: int) -> Iterator[Step]:
        return self._steps(index)

    def plan(self, index: int, time_scale: float) -> SessionPlan:
        """Session ``index`` as the simulator sees it: arriving at 0, pauses scaled as in the run."""
        steps = (replace(s, pause_s=s.pause_s * time_scale) for s in self.steps(index))
        return SessionPlan(f"s{index}", 0.0, steps, prefix_tokens=self.prefix_tokens)


def from_workload(path: str, seed: int, prefix: int | None) -> Source:
    from kvbudget.simulate.build import cap_from_workload
    from kvbudget.workload.generate import session_steps
    from kvbudget.workload.loader import load_workload

    workload = load_workload(path)
    shared = workload.prefix_tokens if prefix is None else prefix

    def steps(index: int) -> Iterator[Step]:
        return session_steps(workload, seed, index)

    def cap(serving: int) -> CapPolicy:
        return cap_from_workload(workload.cap, serving)

    return Source(f"workload {path}", shared, cap, steps)


def from_trace(paths: Sequence[str], fmt: str | None, strict: bool, prefix: int | None) -> Source:
    from kvbudget.workload.generate import replay_sessions
    from kvbudget.workload.record import BadRow
    from kvbudget.workload.traces import read_records

    bad: list[BadRow] = []
    records = list(read_records(list(paths), fmt=fmt, strict=strict, bad_rows=bad))
    sessions = [list(plan.steps) for plan in replay_sessions(records)]
    sessions = [s for s in sessions if s]
    if not sessions:
        raise InputError(f"--trace: no usable step records in {', '.join(paths)}")
    shared = prefix or 0

    def steps(index: int) -> Iterator[Step]:
        rows = sessions[index % len(sessions)]
        if shared:  # the shared prefix is the start of the first prompt
            rows = [replace(rows[0], append_tokens=max(0, rows[0].append_tokens - shared)), *rows[1:]]
        return iter(rows)

    more = f" + {counted(len(paths) - 1, 'more file')}" if len(paths) > 1 else ""
    skipped = f", {counted(len(bad), 'bad row')} skipped" if bad else ""
    return Source(f"trace {paths[0]}{more} ({len(sessions)} sessions{skipped})", shared, _refuse, steps)


def _refuse(serving: int) -> CapPolicy:
    return CapPolicy("refuse")


@dataclass
class Drive:
    """What every session of a run shares."""

    client: Client
    units: TextUnits
    prefix_text: str
    source: Source
    cap: int  # the enforced cap (tokens per session)
    history: str  # "output": resend the reply's text; "filler": the same number of tokens of new text
    time_scale: float
    seed: int
    recorder: Recorder

    run_id: str = field(default_factory=lambda: secrets.token_hex(4))  # sessions of two runs never share an id
    learned: int = -1  # the most a later step's prompt has grown beyond the planned text (server counts)

    @property
    def turn_tokens(self) -> int:
        """Tokens a later step adds beyond its planned text: the chat template's turn (calibrated), or
        more once the server's counts show more (an output that tokenizes longer when resent)."""
        return max(self.learned, self.units.turn_tokens)


async def run_session(drive: Drive, index: int) -> str:
    """Run session ``index`` to its end; returns how it ended: completed, capped, failed, stopped, or
    ``too big: ...`` when even its first step passes the cap (it sent nothing). Each request names its session
    (``x-session-id``); through a kvbudget gateway the session is ended there when it ends here."""
    session = f"kvbudget-loadtest-{drive.run_id}-{index}"
    try:
        return await _run_session(drive, index, session)
    finally:
        await drive.client.end_session(session)


async def _run_session(drive: Drive, index: int, session: str) -> str:
    rec, units, source = drive.recorder, drive.units, drive.source
    rng = random.Random(f"kvbudget/loadtest/{drive.seed}/{index}")
    conv = Conversation(drive.client.api, drive.prefix_text)
    cap = source.cap(drive.cap)
    limit = cap.limit(drive.cap)
    prefix = source.prefix_tokens
    held = units.base_tokens + prefix  # tokens the server holds for this session (its own counts)
    planned = held  # the same, as the workload plans it
    level = rec.level
    level.sessions_started += 1
    rec.sessions["started"] += 1
    for k, step in enumerate(source.steps(index)):
        append, output = step.append_tokens, step.output_tokens
        turn = drive.turn_tokens if k else 0
        if step.compact_to is not None and step.compact_to < held:  # the trace's client compacted
            target = max(prefix, step.compact_to)
            conv.reset(drive.prefix_text, units.text(rng, target - prefix))
            held = planned = units.base_tokens + target
            rec.sessions["compactions"] += 1
        if held + turn + append + output > limit:
            target = max(prefix, min(cap.target(drive.cap), held - units.base_tokens))
            if cap.mode == "refuse" or units.base_tokens + target + append + output + cap.summary_tokens > limit:
                rec.sessions["capped"] += 1
                rec.level.sessions_completed += 1
                if k == 0:
                    need = held + append + output
                    return f"too big: its first step needs {need:,} tokens, over the {limit:,}-token cap"
                return "capped"
            conv.reset(drive.prefix_text, units.text(rng, target - prefix))
            held = planned = units.base_tokens + target
            output += cap.summary_tokens
            rec.sessions["compactions"] += 1
        conv.add_user(units.text(rng, append))
        planned += append
        if not rec.permit():
            return "stopped"
        level = rec.level
        keep = drive.history == "output"
        reply = await drive.client.complete(
            conv.prompt(), output, keep_text=keep, session=session, prompt_tokens=held + turn + append
        )
        rec.request_done(level, reply, planned, output)
        if not reply.ok:
            rec.sessions["failed"] += 1
            return "failed"
        got = reply.completion_tokens if reply.completion_tokens is not None else output
        if reply.prompt_tokens is not None and k:
            drive.learned = max(drive.learned, reply.prompt_tokens - held - append)
        held = (reply.prompt_tokens if reply.prompt_tokens is not None else held + turn + append) + got
        planned += output
        text = reply.text if drive.history == "output" and reply.text else units.text(rng, got)
        conv.add_output(text)
        if step.pause_s > 0 and drive.time_scale > 0:
            await asyncio.sleep(step.pause_s * drive.time_scale)
    rec.sessions["completed"] += 1
    rec.level.sessions_completed += 1
    return "completed"
