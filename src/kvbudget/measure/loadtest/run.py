"""One load test from start to end: probe the server, size the text, run the levels, predict, reconcile.

``run_loadtest`` never raises for what the server does: it returns an ``Outcome`` holding what was
measured so far, with ``error`` set when the run could not go on (unreachable server, not
OpenAI-compatible, a streak of failures). Ctrl-C (SIGINT) and SIGTERM stop the run cleanly: every
session is cancelled, every connection closed, and the partial outcome returned. Input errors
(a bad ``--context``, a plan that cannot be made) raise before any load is sent.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from kvbudget.errors import InputError
from kvbudget.measure.loadtest.client import Api, Client, ServerError
from kvbudget.measure.loadtest.metrics import Snapshot, parse_values, slot_occupancy, snapshot
from kvbudget.measure.loadtest.predict import predict, reconcile
from kvbudget.measure.loadtest.progress import Progress
from kvbudget.measure.loadtest.prompts import calibrate, check_api
from kvbudget.measure.loadtest.ramp import Ramp, Scrape, make_schedule, sustained
from kvbudget.measure.loadtest.record import Recorder, percentile
from kvbudget.measure.loadtest.result import Outcome
from kvbudget.measure.loadtest.server import ServerInfo, detect
from kvbudget.measure.loadtest.session import Drive, Source
from kvbudget.measure.loadtest.verdict import judge

if TYPE_CHECKING:
    from kvbudget.plan.plan import PlanInputs

PlanFactory = Callable[[ServerInfo, int], "PlanInputs | None"]
DEADLINE_GRACE_S = 5.0  # past --duration, the levels' own ending (a request in flight) before the run is cut


@dataclass(frozen=True)
class Settings:
    url: str
    api: Api = "completions"
    history: str = "output"
    context: int | None = None
    hold: int | None = None
    start: int = 1
    step: int = 1
    max_sessions: int = 64
    level_time_s: float = 30.0
    target_ttft_s: float = 2.0
    max_requests: int | None = None
    duration_s: float | None = None
    time_scale: float = 1.0
    seed: int = 0
    scrape_interval_s: float = 0.25
    request_timeout_s: float = 300.0
    kv_unified: bool = False
    served_model: str | None = None

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def scraper(client: Client, info: ServerInfo) -> Scrape:
    async def scrape() -> Snapshot | None:
        if not info.has_metrics and not info.has_slots:
            return None
        values: dict[str, float] = {}
        if info.has_metrics:
            status, body = await client.get("/metrics", timeout_s=5.0)
            if status != 200:
                raise ServerError(f"GET /metrics answered HTTP {status}")
            values = parse_values(body, info.engine)
        held = None
        if info.has_slots:
            status, body = await client.get("/slots", timeout_s=5.0)
            if status == 200:
                held = slot_occupancy(json.loads(body))
        return snapshot(time.monotonic(), values, info.engine, held)

    return scrape


class _Signals:
    """SIGINT / SIGTERM: interrupt the ramp once it runs, else cancel the start-up."""

    def __init__(self) -> None:
        self.ramp: Ramp | None = None
        self.task = asyncio.current_task()
        self.fired = False
        self.installed: list[int] = []
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self.fire)
                self.installed.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread / platform
                pass

    def fire(self) -> None:
        self.fired = True
        if self.ramp is not None:
            self.ramp.interrupt()
        elif self.task is not None:
            self.task.cancel()

    def remove(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in self.installed:
            loop.remove_signal_handler(sig)


async def _drive(settings: Settings, source: Source, plans: PlanFactory, progress: Progress, o: Outcome) -> None:
    signals = _Signals()
    try:
        async with Client(settings.url, api=settings.api, timeout_s=settings.request_timeout_s) as client:
            o.server = info = await detect(client)
            o.warnings += info.notes
            client.model = settings.served_model or info.model
            cap = settings.context or info.context_limit
            if cap is None:
                raise InputError("--context: the server does not state its per-session limit; give --context CAP")
            o.settings["context"] = cap
            if info.slot_n_ctx is not None and cap > info.slot_n_ctx and not settings.kv_unified:
                o.warnings.append(f"the {cap:,}-token cap is above llama-server's {info.slot_n_ctx:,} cells per slot")
            elif info.max_model_len is not None and cap > info.max_model_len:
                o.warnings.append(f"the {cap:,}-token cap is above the server's max_model_len {info.max_model_len:,}")
            plans(info, cap)  # checks the plan options (model, GPU) before any load is sent
            await check_api(client)
            if not client.extras:
                o.warnings.append("the server rejects ignore_eos/min_tokens: outputs may end before max_tokens")
            o.units = units = await calibrate(client, info.engine, info.context_limit or cap, source.prefix_tokens > 0)
            if not units.exact:
                o.warnings.append(f"no one-token text unit on this tokenizer: prompt sizes approximate ({units.name})")
            o.recorder = rec = Recorder(info.engine, settings.max_requests)
            prefix = units.text(random.Random(f"kvbudget/loadtest/{settings.seed}/prefix"), source.prefix_tokens)
            drive = Drive(client, units, prefix, source, cap, settings.history, settings.time_scale, settings.seed, rec)
            schedule = make_schedule(
                hold=settings.hold,
                start=settings.start,
                step=settings.step,
                max_sessions=settings.max_sessions,
                level_time_s=settings.level_time_s,
                target_ttft_s=settings.target_ttft_s,
                duration_s=settings.duration_s,
                max_requests=settings.max_requests,
            )
            scrape = scraper(client, info)
            signals.ramp = ramp = Ramp(drive, schedule, scrape, settings.scrape_interval_s, progress.tick)
            began = time.monotonic()
            try:
                o.stopped_by = await ramp.run()
            finally:
                o.duration_s = time.monotonic() - began
            if o.stopped_by == "error":
                o.error = rec.fatal
            o.sustained, o.sustained_basis = sustained(rec.levels, schedule, o.stopped_by)
            if client.retries:
                o.warnings.append(
                    f"{client.retries:,} requests sent again: they never reached the server (a kept-alive "
                    "connection it had closed, or a refused connection); none counted as failed"
                )
            judge(o, client.unreadable)
    except ServerError as exc:
        o.stopped_by, o.error = "error", str(exc)
    except asyncio.CancelledError:
        if not signals.fired:
            raise
        o.stopped_by = "interrupted"
    finally:
        signals.remove()
        progress.close()


async def _bounded(settings: Settings, drive: Coroutine[Any, Any, None], o: Outcome) -> None:
    """``--duration`` bounds the whole run: the probe, a server that never answers, a body that never ends."""
    if settings.duration_s is None:
        await drive
        return
    began = time.monotonic()
    try:
        await asyncio.wait_for(drive, settings.duration_s + DEADLINE_GRACE_S)
    except asyncio.TimeoutError:
        o.stopped_by = "duration"
        o.duration_s = time.monotonic() - began
        if o.error is None and (o.recorder is None or not o.recorder.levels):
            o.error = (
                f"--duration {settings.duration_s:g} s passed before the server gave a level to measure "
                "(it did not answer, or its answers never ended)"
            )


def run_loadtest(settings: Settings, source: Source, plans: PlanFactory, progress: Progress) -> Outcome:
    """The whole run (blocking). Input errors raise; what the server does is in the Outcome."""
    outcome = Outcome(url=settings.url, settings={**settings.to_json(), "source": source.describe})
    asyncio.run(_bounded(settings, _drive(settings, source, plans, progress, outcome), outcome))
    if outcome.server is None or outcome.recorder is None:
        return outcome
    rec = outcome.recorder
    cap = int(str(outcome.settings["context"]))
    inputs = plans(outcome.server, cap)
    outcome.prediction = prediction = predict(
        outcome.server,
        source,
        cap,
        settings.time_scale,
        unified=settings.kv_unified,
        inputs=inputs,
        decode_rate=percentile(rec.decode_rates, 50),
        prefill_rate=percentile(rec.prefill_rates, 50),
    )
    outcome.reconciliation = reconcile(outcome.sustained, prediction, outcome.sustained_basis)
    return outcome
