"""Concurrency levels: the ramp (or one held level), the closed loop, and the sustained-sessions verdict.

**Closed loop.** At level N, N sessions run at once; when one ends (completed, capped at the cap,
or failed) a new one starts, so N stay in flight. Raising the level starts the extra sessions at
once; the ones running carry on (their contexts keep growing).

**Ramp** (default): levels ``--start``, ``--start + --step``, ... up to ``--max-sessions``, each
held for ``--level-time`` seconds and then, when it has completed fewer requests than it has
sessions, until it has (at most ``STRETCH`` times ``--level-time``): a level is judged only on
evidence from as many requests as sessions. A level fails at its first refused, failed, deferred or
preempted request (``record``), or at its end when its p99 time to first token is above
``--target-ttft``; the ramp stops there. ``sessions_sustained`` is the largest level that passed
(0 when level 1 failed; unknown when a ``--start`` above 1 failed). **Hold** (``--sessions N``):
one level of N for ``--duration`` (default ``--level-time``); sustained is N when it passed.

Every run is bounded: ``--duration``, ``--max-requests``, and ``CEILING_S`` when neither is given.
A level cut short by a bound or by Ctrl-C is not judged (``passed`` null).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from kvbudget.measure.loadtest.metrics import Snapshot
from kvbudget.measure.loadtest.record import Level, Recorder, percentile
from kvbudget.measure.loadtest.session import Drive, run_session

CEILING_S = 1800.0  # the bound of a run given neither --duration nor --max-requests
STRETCH = 4  # a level short of one completed request per session runs on, to this many --level-times
TOO_BIG_STREAK = 50  # sessions in a row whose first step passes the cap: the run cannot measure anything


@dataclass(frozen=True)
class Schedule:
    levels: tuple[int, ...]
    hold: bool
    level_time_s: float
    target_ttft_s: float
    deadline_s: float | None  # seconds from the start of the load
    deadline_name: str  # "duration" or "ceiling"


def make_schedule(
    *,
    hold: int | None,
    start: int,
    step: int,
    max_sessions: int,
    level_time_s: float,
    target_ttft_s: float,
    duration_s: float | None,
    max_requests: int | None,
) -> Schedule:
    if hold is not None:
        levels: tuple[int, ...] = (hold,)
        level_time_s = duration_s or level_time_s
    else:
        levels = tuple(range(start, max_sessions + 1, step))
    name = "duration" if duration_s is not None else "ceiling"
    deadline = duration_s if duration_s is not None else (None if max_requests is not None else CEILING_S)
    if hold is not None:
        deadline = None  # one level, bounded by its own time (--duration, else --level-time)
    return Schedule(levels, hold is not None, level_time_s, target_ttft_s, deadline, name)


Scrape = Callable[[], Awaitable[Snapshot | None]]
Tick = Callable[[Recorder, int], None]


class Ramp:
    """Runs the schedule. ``interrupt()`` (Ctrl-C) stops it cleanly; ``run`` returns what stopped it."""

    def __init__(self, drive: Drive, schedule: Schedule, scrape: Scrape, interval_s: float, tick: Tick) -> None:
        self.drive = drive
        self.rec = drive.recorder
        self.schedule = schedule
        self.scrape = scrape
        self.interval_s = interval_s
        self.tick = tick
        self.target = 0
        self.active: set[asyncio.Task[str]] = set()
        self.next_index = 0
        self.stopping = False
        self.interrupted = False
        self.crash: str | None = None
        self.too_big = 0
        self.started = 0.0

    def interrupt(self) -> None:
        self.interrupted = True
        self.rec.wake.set()

    async def run(self) -> str:
        scraper = asyncio.create_task(self._scrape_loop())
        self.started = time.monotonic()
        try:
            await self._scrape_once()  # the counters' baseline, before any load
            for n in self.schedule.levels:
                level = self.rec.begin_level(n, time.monotonic())
                stopped = await self._hold(level, n)
                self._judge(level, stopped)
                if stopped:
                    return stopped
                if not self.schedule.hold and not level.passed:
                    return "criterion"
            return "hold" if self.schedule.hold else "max-sessions"
        finally:
            await self._stop_sessions()
            scraper.cancel()
            await asyncio.gather(scraper, return_exceptions=True)
            if not self.interrupted:
                await self._scrape_once()

    # -- the closed loop --------------------------------------------------------------------------

    def _fill(self) -> None:
        while not self.stopping and len(self.active) < self.target:
            task = asyncio.create_task(run_session(self.drive, self.next_index))
            self.next_index += 1
            self.active.add(task)
            task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[str]) -> None:
        self.active.discard(task)
        if not task.cancelled():
            exc = task.exception()
            if exc is not None and self.crash is None:
                self.crash = f"a session stopped on {type(exc).__name__}: {exc}"
            elif exc is None and task.result().startswith("too big"):
                self.too_big += 1
                if self.too_big >= TOO_BIG_STREAK and self.crash is None:
                    self.crash = (
                        f"{self.too_big} sessions in a row could not send a step: the last was {task.result()}; "
                        "raise --context or use sessions that fit"
                    )
            else:
                self.too_big = 0
        self.rec.wake.set()
        if self.crash is None:
            self._fill()

    async def _stop_sessions(self) -> None:
        self.stopping = True
        tasks = list(self.active)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.rec.aborted = max(0, self.rec.sent - self.rec.requests)

    async def _hold(self, level: Level, n: int) -> str | None:
        """Hold level ``n`` until its time is up or it fails; a bound's name when the run must stop."""
        rec, schedule = self.rec, self.schedule
        start = self.started
        self.target = n
        self._fill()
        self.tick(self.rec, n)
        level_end = level.started_s + schedule.level_time_s
        # A held level keeps to its --duration: every run is bounded by the time it was given.
        stretch_end = level_end if schedule.hold else level.started_s + STRETCH * schedule.level_time_s
        deadline = start + schedule.deadline_s if schedule.deadline_s is not None else None
        while True:
            now = time.monotonic()
            if self.interrupted:
                return "interrupted"
            if self.crash is not None:
                rec.fatal = rec.fatal or self.crash
            if rec.fatal is not None:
                return "error"
            if rec.budget_spent:
                return "max-requests"
            if level.failure is not None and not schedule.hold:
                return None
            if now >= level_end and (level.requests >= n or now >= stretch_end):
                return None
            if deadline is not None and now >= deadline:
                return schedule.deadline_name
            rec.wake.clear()
            end = level_end if now < level_end else stretch_end
            until = min(end, deadline) if deadline is not None else end
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(rec.wake.wait(), timeout=max(0.0, until - now))

    def _judge(self, level: Level, stopped: str | None) -> None:
        level.ended_s = time.monotonic()
        schedule = self.schedule
        complete = stopped is None or (schedule.hold and stopped in ("duration", "max-requests"))
        reasons = [level.failure] if level.failure else []
        p99 = percentile(level.ttfts, 99)
        if p99 is not None and p99 > schedule.target_ttft_s:
            reasons.append(f"p99 TTFT {p99:.3f} s is over the {schedule.target_ttft_s:g} s target")
        if complete and not reasons and level.requests < level.sessions:
            took = level.ended_s - level.started_s
            lever = "--duration" if schedule.hold else "--level-time"
            done = "no request" if level.requests == 0 else f"only {level.requests} requests"
            reasons.append(f"{done} completed for {level.sessions} sessions in {took:.0f} s (lengthen {lever})")
        if reasons:
            level.passed, level.reasons = False, reasons
        elif complete:
            level.passed = True
        else:
            level.passed, level.reasons = None, [f"cut short ({stopped}): not judged"]

    # -- the server's metrics ------------------------------------------------------------------

    async def _scrape_once(self) -> None:
        try:
            snap = await self.scrape()
        except Exception:  # a failed scrape is counted, never fatal to the run
            self.rec.scrape_errors += 1
            return
        if snap is not None:
            self.rec.observe(snap)

    async def _scrape_loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self._scrape_once()
            self.tick(self.rec, self.target)


def sustained(levels: list[Level], schedule: Schedule, stopped_by: str) -> tuple[int | None, str]:
    """(sessions sustained, why): the largest level that passed (the ramp stops at the first failure)."""
    judged = [lv for lv in levels if lv.passed is not None]
    passed = [lv.sessions for lv in judged if lv.passed]
    failed = next((lv for lv in judged if not lv.passed), None)
    target = f"no refusal, deferral or preemption and p99 TTFT <= {schedule.target_ttft_s:g} s"
    if schedule.hold:
        if not judged:
            return None, "the held level was cut short before it could be judged"
        lv = judged[0]
        if lv.passed:
            return lv.sessions, f"{lv.sessions} sessions held with {target}"
        return None, f"{lv.sessions} sessions held: {'; '.join(lv.reasons)}"
    if failed is not None:
        why = "; ".join(failed.reasons)
        if passed:
            return max(passed), f"largest level with {target}; {failed.sessions} sessions failed: {why}"
        if failed.sessions == 1:
            return 0, f"even one session failed: {why}"
        return None, f"the first level ({failed.sessions} sessions) already failed: {why}; lower --start"
    if passed and stopped_by == "max-sessions":
        return max(passed), f"every level passed ({target}); at least {max(passed)}: raise --max-sessions"
    if passed:
        return max(passed), f"levels up to {max(passed)} passed ({target}); the run stopped ({stopped_by}) after"
    return None, "no level completed: the run stopped before the first level could be judged"
