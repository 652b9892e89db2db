"""The speeds a serving engine prints in its own log, while it serves (``--speed-from LOG``).

Each engine prints what it did as it goes; this reads those lines into samples, each naming its line:

* **vLLM** (V0 ``engine/metrics.py`` LoggingStatLogger, V1 ``v1/metrics/loggers.py``): every 5-10 s
  ``Avg prompt throughput: P tokens/s, Avg generation throughput: G tokens/s, Running: N reqs, [Swapped: S reqs,]
  Pending|Waiting: W reqs, ...``: P and G are tokens over the interval's wall time since the last line, N the
  requests running when it was printed. P counts each prompt whole when its first token comes out, cached tokens
  included (V1 ``IterationStats.update_from_output``: ``num_prompt_tokens += prompt_len``), so a V1 line's
  ``Prefix cache hit rate`` is taken off it. An interval is **clean decode** when it prefilled nothing (P = 0),
  swapped nothing, and the line before it (same engine) had the same N running: then the same N sessions decoded
  through all of it (a request that ended would lower N, and none could start without a prefill), and G / N is
  each one's decode tokens/s. An interval with P > 0 and requests running at both ends is **mixed**.
* **SGLang** (``srt/managers/scheduler_metrics_mixin.py``): ``Decode batch[.,] #running-req: N, ..., gen
  throughput (token/s): G`` every ``decode_log_interval`` (ServerArgs, default 40) decode iterations, G being the
  tokens generated over the wall time since the last decode line; ``Prefill batch[.,] #new-seq: .., #new-token: T,
  #cached-token: C, ..., #running-req: R`` for every prefill batch (T: the tokens computed). A decode line is clean
  when no prefill batch ran since the decode line before it, which had the same N; mixed when prefill batches ran
  in between with requests decoding (R > 0: the server was never idle in between).
* **llama-server** (``tools/server/server-context.cpp``, ``print_timings``): per request ``prompt eval time = A ms
  /  T tokens`` (the T tokens it computed, none cached) and ``eval time = B ms / M tokens``; ``launch_slot_ ...
  processing task`` and ``release ... stop processing`` bracket each request in its slot. A request is clean when
  no other request was launched or released between its launch and its timings: the slots busy at its launch
  decoded alongside it throughout, and (M - 1) / B is its decode tokens/s at that count (B runs from its first
  token); a clean request that ran alone gives T / A, its prompt's tokens/s (when others decode with it, its
  prompt time holds their tokens too).

Bounded like the start-up readers: lines longer than MAX_LINE are skipped, at most MAX_SAMPLES samples of each
kind are kept (the rest counted), and a running count above MAX_RUNNING is no figure an engine prints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from kvbudget.errors import InputError
from kvbudget.measure.logs.text import MAX_LOG_BYTES, clean, rank_of

MAX_LINE = 4096  # characters: every stats line is well under one
MAX_SAMPLES = 100_000  # samples of each kind kept (a month of vLLM's 10-s lines is 260,000)
MAX_RUNNING = 10**6
SGLANG_DECODE_LOG_INTERVAL = 40  # sglang srt/server_args.py ServerArgs.decode_log_interval default
NEEDLES = ("Avg prompt throughput", "Decode batch", "Prefill batch", "decode_log_interval", "eval time", "slot")

_VLLM = re.compile(
    r"Avg prompt throughput: (?P<p>\d+(?:\.\d+)?) tokens/s, Avg generation throughput: (?P<g>\d+(?:\.\d+)?) "
    r"tokens/s, Running: (?P<r>\d+) reqs,(?: Swapped: (?P<s>\d+) reqs,)? (?:Pending|Waiting): (?P<w>\d+) reqs"
    r"(?:.*?Prefix cache hit rate: (?P<hit>\d+(?:\.\d+)?)%)?"
)
_VLLM_ENGINE = re.compile(r"Engine (\d+):")
_SG_DECODE = re.compile(
    r"Decode batch(?: \[\d+\])?[.,] #running-req: (?P<r>\d+),.*?gen throughput \(token/s\): (?P<g>\d+(?:\.\d+)?)"
)
_SG_PREFILL = re.compile(
    r"Prefill batch(?: \[\d+\])?[.,] #new-seq: \d+, #new-token: (?P<t>\d+), #cached-token: \d+,.*?"
    r"#running-req: (?P<r>\d+)"
)
_SG_INTERVAL = re.compile(r"decode_log_interval=(?P<k>\d+)")
_LL_TASK = re.compile(r"id_slot=(?P<s>\d+) id_task=(?P<t>\d+)|id +(?P<s2>\d+) \| task (?P<t2>-?\d+)")
_LL_TIME = re.compile(
    r"(?P<what>prompt eval time|generation eval time|eval time) *= *(?P<ms>\d+(?:\.\d+)?) ms / *(?P<n>\d+) "
    r"(?:tokens|runs)"
)


@dataclass(frozen=True)
class Decode:
    """A clean stretch: ``running`` sessions decoding at ``tokens_per_s`` each, and nothing else."""

    running: int
    tokens_per_s: float
    line: int


@dataclass(frozen=True)
class Mixed:
    """An interval of prefill and decode together: prompt and generated tokens over its wall time."""

    running: int  # sessions decoding through it (the mean of both ends)
    prompt_tokens_per_s: float  # tokens computed (cached ones taken off)
    generation_tokens_per_s: float
    line: int


@dataclass(frozen=True)
class Prompt:
    """One llama-server request's prompt: ``tokens`` computed in ``seconds``; ``alone``: no other slot busy."""

    tokens: int
    seconds: float
    alone: bool
    line: int


@dataclass
class ServingLog:
    """The serving lines of one log (module doc)."""

    path: str
    engine: str | None = None
    decode: list[Decode] = field(default_factory=list)
    mixed: list[Mixed] = field(default_factory=list)
    prompts: list[Prompt] = field(default_factory=list)
    stats_lines: int = 0  # stats / timing lines read, clean or not
    dropped: int = 0  # samples past MAX_SAMPLES, counted not kept
    first_line: int = 0
    last_line: int = 0

    def keep(self, into: list[Decode] | list[Mixed] | list[Prompt], sample: Decode | Mixed | Prompt) -> None:
        if len(into) >= MAX_SAMPLES:
            self.dropped += 1
            return
        into.append(sample)  # type: ignore[arg-type]  # each list takes its own kind (callers pair them)

    def seen(self, engine: str, line: int) -> None:
        self.engine = self.engine or engine
        self.stats_lines += 1
        self.first_line = self.first_line or line
        self.last_line = line


@dataclass
class _State:
    """What the readers carry from line to line."""

    vllm_last: dict[str | None, tuple[int, int]] = field(default_factory=dict)  # engine -> (running, swapped)
    sg_last: dict[str | None, int] = field(default_factory=dict)  # rank -> running at the last decode line
    sg_prefill: dict[str | None, tuple[int, bool]] = field(default_factory=dict)  # rank -> (tokens, any idle)
    sg_interval: int = SGLANG_DECODE_LOG_INTERVAL
    ll_busy: set[int] = field(default_factory=set)  # slots processing a task
    ll_events: int = 0  # launches and releases so far
    ll_launch: dict[int, tuple[int, int]] = field(default_factory=dict)  # task -> (events at launch, busy then)
    ll_task: int | None = None  # the task whose timings are being printed
    ll_prompt: tuple[int, float] | None = None


_ANSI_HINT = re.compile(r"\[[0-9;]")  # how every colour code text.ANSI matches begins, past its optional ESC


def _clean(raw: str) -> str:
    """text.clean, without its substitution on a line that cannot hold a colour code (most stats lines): the same
    text, for a tenth of the time (text.ANSI's optional leading ESC leaves its regex no literal prefix to scan for)."""
    return clean(raw) if "\x1b" in raw or _ANSI_HINT.search(raw) else raw.rstrip("\r\n")


def _count(text: str) -> int:
    value = int(text)
    if value > MAX_RUNNING:
        raise InputError(f"a running count of {value:,} is no figure an engine prints (at most {MAX_RUNNING:,})")
    return value


def _vllm(log: ServingLog, s: _State, m: re.Match[str], text: str, n: int) -> None:
    prompt, gen, running = float(m.group("p")), float(m.group("g")), _count(m.group("r"))
    swapped = int(m.group("s") or 0)
    key_m = _VLLM_ENGINE.search(text)
    key = key_m.group(1) if key_m else rank_of(text)
    before = s.vllm_last.get(key)
    s.vllm_last[key] = (running, swapped)
    log.seen("vllm", n)
    if before is None:
        return
    if prompt == 0 and gen > 0 and running > 0 and swapped == 0 and before == (running, 0):
        log.keep(log.decode, Decode(running, gen / running, n))
    elif prompt > 0 and running > 0 and before[0] > 0:
        hit = float(m.group("hit") or 0) / 100
        computed = prompt * (1 - min(hit, 1.0))
        if computed > 0:
            log.keep(log.mixed, Mixed(round((running + before[0]) / 2), computed, gen, n))


def _sg_decode(log: ServingLog, s: _State, m: re.Match[str], text: str, n: int) -> None:
    running, gen = _count(m.group("r")), float(m.group("g"))
    key = rank_of(text)
    before = s.sg_last.get(key)
    prefilled, idle = s.sg_prefill.pop(key, (0, False))
    s.sg_last[key] = running
    log.seen("sglang", n)
    if before is None or running == 0 or gen <= 0:
        return
    if prefilled == 0 and before == running:
        log.keep(log.decode, Decode(running, gen / running, n))
    elif prefilled > 0 and not idle and before > 0:
        mean = (running + before) / 2
        seconds = s.sg_interval * mean / gen  # the window's wall time: its iterations' tokens over G
        log.keep(log.mixed, Mixed(round(mean), prefilled / seconds, gen, n))


def _sg_prefill(log: ServingLog, s: _State, m: re.Match[str], text: str, n: int) -> None:
    key = rank_of(text)
    tokens, idle = s.sg_prefill.get(key, (0, False))
    s.sg_prefill[key] = (tokens + int(m.group("t")), idle or int(m.group("r")) == 0)
    log.seen("sglang", n)


def _llama(log: ServingLog, s: _State, text: str, n: int) -> None:
    task_m = _LL_TASK.search(text)
    slot = task = None
    if task_m:
        slot = int(task_m.group("s") or task_m.group("s2"))
        task = int(task_m.group("t") or task_m.group("t2"))
    if task is not None and "processing task" in text:
        if len(s.ll_busy) < MAX_RUNNING:  # slots a server has: a log naming more is bounded, not trusted
            s.ll_busy.add(slot or 0)
        s.ll_events += 1
        if len(s.ll_launch) < MAX_SAMPLES:
            s.ll_launch[task] = (s.ll_events, len(s.ll_busy))
        return
    if slot is not None and ("stop processing" in text or "slot released" in text):
        s.ll_busy.discard(slot)
        s.ll_events += 1
        s.ll_launch.pop(task if task is not None else -1, None)
        return
    if task is not None and ("print_timing" in text or "print_timings" in text):
        s.ll_task = task
    t = _LL_TIME.search(text)
    if t is None or s.ll_task is None:
        return
    log.seen("llamacpp", n)
    tokens, seconds = int(t.group("n")), float(t.group("ms")) / 1000
    launched = s.ll_launch.get(s.ll_task)
    steady = launched is not None and launched[0] == s.ll_events
    if t.group("what") == "prompt eval time":
        s.ll_prompt = (tokens, seconds)
        if tokens > 0 and seconds > 0 and launched is not None:
            log.keep(log.prompts, Prompt(tokens, seconds, steady and launched[1] == 1, n))
    elif tokens > 1 and seconds > 0 and steady and launched is not None:
        # the clock starts at the first token, which the prompt's batch gave (server-context.cpp: t_start_generation
        # is set when n_decoded becomes 1), so B holds M - 1 decode iterations
        log.keep(log.decode, Decode(launched[1], (tokens - 1) / seconds, n))


def read_serving(path: str | Path, window: tuple[int, int] = (1, 2**63)) -> ServingLog:
    """The serving samples of the log at ``path`` (module doc); no engine's stats lines is an empty record.
    ``window``: only lines [first, past last) (``calibrate --startup N``: the serving lines of that start-up; the
    blocks outside it are counted, not searched)."""
    from kvbudget.measure.logs import candidate_lines
    from kvbudget.safeio import regular_file

    p = Path(path)
    log = ServingLog(str(p))
    state = _State()
    try:
        regular_file(p, "engine log")
        if p.stat().st_size > MAX_LOG_BYTES:
            raise InputError(f"--speed-from {p}: larger than 2 GiB; give a log of the serving stretch measured")
        with p.open("r", encoding="utf-8-sig", errors="replace", newline="") as f:
            for n, raw in candidate_lines(
                f, NEEDLES, window
            ):  # block scans with str.find: only these lines reach Python
                if not raw:
                    break
                if len(raw) > MAX_LINE:
                    continue
                text = _clean(raw)
                if (m := _VLLM.search(text)) is not None:
                    _vllm(log, state, m, text, n)
                elif (m := _SG_DECODE.search(text)) is not None:
                    _sg_decode(log, state, m, text, n)
                elif (m := _SG_PREFILL.search(text)) is not None:
                    _sg_prefill(log, state, m, text, n)
                elif (m := _SG_INTERVAL.search(text)) is not None:
                    state.sg_interval = max(1, min(int(m.group("k")), 10**6))
                else:
                    _llama(log, state, text, n)
    except OSError as e:
        raise InputError(f"--speed-from {p}: cannot read the log ({e.strerror or e})") from None
    return log
