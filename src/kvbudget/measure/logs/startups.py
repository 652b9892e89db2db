"""One start-up per log: a file that holds two runs is refused, never merged into one measurement.

Two signs, each from the engines' own logging:

* **A line each start-up prints once, printed twice** by the same process. Per engine: vLLM's
  version line (api_server.py, ``LLMEngine``/``EngineCore`` config line), ``GPU KV cache size``,
  ``# GPU blocks`` and ``Maximum concurrency`` (once per engine core: v1/core/kv_cache_utils.py,
  V0 executor_base.py); SGLang's ``ServerArgs(`` and version line; llama.cpp's ``build``; Ollama's
  ``starting llama server`` and ``Listening on``. Lines printed once per GPU (vLLM ``Available KV
  cache memory`` and model loading, SGLang ``KV Cache is allocated``) count only with their worker
  prefix (``(VllmWorker rank=1 ..)``, ``[.. TP1]``): without it several GPUs look alike.
  vLLM's weights line names its release: ``Loading model weights took`` before 0.8
  (worker/model_runner.py), ``Model loading took`` after; a file with both is two runs.
* **Time going back**: vLLM (``INFO 08-20 18:03:31``), SGLang (``[2025-10-16 09:06:09``) and Ollama
  (``time=2025-06-05T12:36:11``) date each line; one start-up's lines go forward (workers interleave
  by at most a few seconds), so a line dated more than a minute before an earlier one starts another
  run appended out of order.

The refusal names both lines and the fix: cut the file to one start-up, or take one with ``--startup N``
(``begins`` finds where each start-up begins; ``window`` the lines of the one taken, read again alone).
Start-up k (k > 1) begins after the last once-per-start-up line of start-up k - 1 (the KV cache lines
close a start-up: the engine allocates its cache last), or at the line dated back.
"""

from __future__ import annotations

import re

from kvbudget.errors import InputError
from kvbudget.measure.logs.record import EngineLog
from kvbudget.measure.logs.rules import MAX_STARTUPS

SLACK_S = 60  # workers write out of order by seconds; a minute back is another run
_STAMPS = (
    # vLLM: "INFO 08-20 18:03:31" (no year); SGLang "[2025-10-16 09:06:09"; Ollama "time=2025-06-05T12:36:11"
    re.compile(
        r"\b(?:INFO|WARNING|DEBUG|ERROR|CRITICAL) (?P<mo>\d\d)-(?P<d>\d\d) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"
    ),
    re.compile(r"\[(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"),
    re.compile(r"\btime=(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)T(?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"),
)
_OLD_NEW = ("Loading model weights took", "Model loading took")  # vLLM before 0.8 / from 0.8


def _seconds(m: re.Match[str]) -> int:
    """Seconds since an epoch good for comparing lines of one file (months as 31 days: order is what counts)."""
    g = m.groupdict()
    year = int(g["y"]) if g.get("y") else 0
    days = (year * 12 + int(g["mo"])) * 31 + int(g["d"])
    return ((days * 24 + int(g["h"])) * 60 + int(g["mi"])) * 60 + int(g["s"])


class Clock:
    """The latest time seen; ``see`` notes each line dated more than SLACK_S before it (``backs``: where a run
    appended out of order begins, with the message that refuses it when no start-up is chosen)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.latest: tuple[int, int, str] | None = None  # (seconds, line, stamp as printed)
        self.backs: list[tuple[int, str]] = []  # (line, why) of each line dated back

    def see(self, line: int, text: str) -> None:
        for pattern in _STAMPS:
            m = pattern.search(text)
            if m is None:
                continue
            t = _seconds(m)
            latest = self.latest
            if latest is not None and t < latest[0] - SLACK_S:
                new_year = m.groupdict().get("y") is None and m.group("mo") == "01" and latest[2].startswith("12-")
                if not new_year and len(self.backs) < MAX_STARTUPS:  # vLLM prints no year: 12-31, 01-01 is forward
                    why = (
                        f"{self.path}: line {line:,} is dated {_printed(m)}, before line {latest[1]:,} "
                        f"({latest[2]}): the file joins logs of several runs"
                    )
                    self.backs.append((line, why))
                    self.latest = None  # the next run's clock starts here
                    latest = None
            if latest is None or t >= latest[0]:
                self.latest = (t, line, _printed(m))
            return


def _printed(m: re.Match[str]) -> str:
    g = m.groupdict()
    date = f"{g['y']}-{g['mo']}-{g['d']}" if g.get("y") else f"{g['mo']}-{g['d']}"
    return f"{date} {g['h']}:{g['mi']}:{g['s']}"


def check(log: EngineLog, path: str, clock: Clock) -> None:
    """InputError when the log holds more than one start-up (module docstring), saying how to take one."""
    starts = begins(log, clock)
    repeated = [
        (lines[-1], needle, rank, lines[0], lines[1])
        for (needle, rank), lines in log.once.items()
        if len(lines) > 2 and rank != "?"  # "?": a per-GPU line without its worker prefix (rules.seen)
    ]
    if repeated:
        times, needle, rank, first, second = max(repeated, key=lambda r: (r[0], -r[4]))
        who = f" by {rank}" if rank else ""
        raise InputError(
            f"{path}: holds {times:,} start-ups ('{needle}' printed{who} at line {first:,} and again at line "
            f"{second:,}); {take(starts)}, or cut the file before line {second:,} or keep what follows it"
        )
    if clock.backs:
        raise InputError(f"{clock.backs[0][1]}; {take(starts)}, or give the log of one start-up")
    for (needle, rank), lines in log.once.items():
        if rank is None:  # an engine's line without a prefix, and the same line with one: two runs' formats
            other = next((ls[0] for (n, r), ls in log.once.items() if n == needle and r not in (None, "?")), None)
            if other is not None:
                first, second = sorted((lines[0], other))
                raise InputError(
                    f"{path}: holds 2 start-ups ('{needle}' printed at line {first:,} and again at line {second:,}, "
                    f"one with a worker prefix, one without); give one start-up: cut the file before line "
                    f"{second:,} or keep what follows it"
                )
    old = next((lines[0] for (needle, _), lines in log.once.items() if needle == _OLD_NEW[0]), None)
    new = next((lines[0] for (needle, _), lines in log.once.items() if needle == _OLD_NEW[1]), None)
    if log.engine == "vllm" and old is not None and new is not None:
        raise InputError(
            f"{path}: holds two vLLM runs of different releases ('{_OLD_NEW[0]}' at line {old:,}, before vLLM 0.8; "
            f"'{_OLD_NEW[1]}' at line {new:,}, from 0.8); give the log of one start-up"
        )


def begins(log: EngineLog, clock: Clock) -> list[int]:
    """The first line of each start-up of the file: [1] when it holds one."""
    repeated = {key: lines[:-1] for key, lines in log.once.items() if lines[-1] > 1 and key[1] != "?"}
    if repeated:
        n = max(len(lines) for lines in repeated.values())
        every = [lines for lines in repeated.values() if len(lines) == n]  # the lines each start-up printed
        out = [1]
        for k in range(1, n):
            after_last = max(lines[k - 1] for lines in every) + 1
            out.append(min(after_last, *(lines[k] for lines in every)))
        return out
    return [1] + [line for line, _ in clock.backs]


def serving(log: EngineLog, clock: Clock, startup: int | str) -> tuple[int, int]:
    """The lines [first, past last) where start-up ``startup`` (valid: ``window`` checked it) served: from its first
    once-per-start-up line to the next start-up's first one. ``begins`` starts start-up k + 1 right after start-up
    k's last such line, which suits its start-up lines but would hand it start-up k's serving lines (the stats
    lines a server prints after its KV cache lines); a run dated back begins at that line, as ``begins`` says."""
    starts = begins(log, clock)
    k = len(starts) if startup == "last" else int(startup)
    repeated = [lines[:-1] for (_, rank), lines in log.once.items() if lines[-1] > 1 and rank != "?"]
    n = max((len(lines) for lines in repeated), default=0)
    every = [lines for lines in repeated if len(lines) == n]
    if n < 2 or len(starts) != n:
        return starts[k - 1], (starts[k] if k < len(starts) else 2**63)
    first = 1 if k == 1 else min(lines[k - 1] for lines in every)
    return first, (min(lines[k] for lines in every) if k < n else 2**63)


def window(starts: list[int], startup: int | str, path: str) -> tuple[int, int]:
    """The lines [first, past last) of start-up ``startup`` (1-based, or "last") of a file starting at ``starts``."""
    count = len(starts)
    k = count if startup == "last" else int(startup)
    if not 1 <= k <= count:
        held = f"{count:,} start-ups (lines {_lines(starts)})" if count > 1 else "one start-up"
        raise InputError(f"--startup {startup}: {path} holds {held}; give --startup 1..{count:,} or last")
    return starts[k - 1], (starts[k] if k < count else 2**63)


def take(starts: list[int]) -> str:
    """How a refusal of a file of several start-ups says to take one."""
    n = len(starts)
    return f"give --startup 1..{n:,} (or last) to take one (they begin at lines {_lines(starts)})"


def _lines(starts: list[int]) -> str:
    shown = ", ".join(f"{s:,}" for s in starts[:8])
    return shown + (f", … ({len(starts):,} in all)" if len(starts) > 8 else "")
